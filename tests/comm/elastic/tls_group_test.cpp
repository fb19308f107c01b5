// An elastic group over TLS, coordinator connection included: a coordinator and two members with
// the job secret as PSK, and with certificates, give the plaintext group's allreduce bits. TLS in
// the coordinator only or in the member only, another PSK, an untrusted certificate (either side's)
// are refused with a weft::error in the member and a logged drop in the coordinator, both naming
// TLS, and the coordinator then admits a good member as if nothing happened. An observer between a
// member and a TLS coordinator sees no membership line, a peer that claims TLS but speaks
// plaintext never gets one, and one that stalls in its TLS handshake delays nobody.
#include "../job_secret.hpp"
#include "in_process_member.hpp"
#include "test_certificates.hpp"

#include <weft/comm/detail/handshake.hpp>
#include <weft/comm/detail/handshake_io.hpp>
#include <weft/comm/elastic.hpp>
#include <weft/comm/tls.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace wc = weft::comm;
namespace we = weft::comm::elastic;
using namespace std::chrono_literals;
using security = std::shared_ptr<const wc::stream_security>;

namespace {

const std::string other_secret = "another job's secret, 9876543210";

// Two members each run three allreduce steps through coordinator security `sc`; returns each
// member's final weights (empty when a member failed, with its error in `errors`).
std::vector<std::vector<float>> run_group(const security& sc, const security& sa, const security& sb,
                                          std::vector<std::string>& errors) {
  we::coordinator_options co;
  co.min_members = 2;
  co.secret = weft_test::test_job_secret;
  co.tls = sc;
  we::coordinator coord(co);
  coord.start();
  std::vector<std::vector<float>> out(2);
  errors.assign(2, "");
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] {
      try {
        weft_test::elastic_model m;
        auto o = weft_test::member_options(coord, i == 0 ? "a" : "b", 3s, 5s, 10s);
        o.tls = i == 0 ? sa : sb;
        we::elastic_group g(m.state, o);
        for (int step = 0; step < 3; ++step) {
          g.sync();
          std::vector<float> grad(m.w.size());
          for (std::size_t e = 0; e < grad.size(); ++e)
            grad[e] =
                0.1f * static_cast<float>((e * 7 + static_cast<std::size_t>(step) + static_cast<std::size_t>(i)) % 13) -
                0.3f;
          g.allreduce(std::span<float>(grad));
          for (std::size_t e = 0; e < grad.size(); ++e) m.w[e] += grad[e];
          m.state.advance();
        }
        out[static_cast<std::size_t>(i)] = m.w;
      } catch (const weft::error& e) {
        errors[static_cast<std::size_t>(i)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  coord.stop();
  return out;
}

// The coordinator's events joined by newlines, once one of them contains `word` (or after 5 s).
std::string events_naming(const we::coordinator& c, const std::string& word) {
  std::string all;
  for (const auto until = wc::clock_type::now() + 5s; wc::clock_type::now() < until;) {
    all.clear();
    for (const auto& e : c.events()) all += e + "\n";
    if (all.find(word) != std::string::npos) break;
    std::this_thread::sleep_for(5ms);
  }
  return all;
}

// A TCP relay from its own port to the coordinator's that records every byte both ways: what an
// observer on the path sees. Serves one connection.
class recording_relay {
 public:
  explicit recording_relay(int target_port) {
    listen_fd_ = we::detail::listen_on("127.0.0.1", port_, "recording_relay");
    thread_ = std::thread([this, target_port] { run(target_port); });
  }
  recording_relay(const recording_relay&) = delete;
  recording_relay& operator=(const recording_relay&) = delete;
  ~recording_relay() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }
  int port() const { return port_; }
  std::string seen() const {
    std::lock_guard lock(m_);
    return seen_;
  }

 private:
  void run(int target_port) {
    int a = -1;
    while (!stop_ && a < 0) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0) a = ::accept(listen_fd_, nullptr, nullptr);
    }
    if (a < 0) return;
    const int b = we::detail::connect_to("127.0.0.1", target_port, wc::clock_type::now() + 5s, "recording_relay",
                                         "the coordinator");
    const int fds[2] = {a, b};
    bool open = true;
    while (!stop_ && open) {
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (::poll(p, 2, 20) <= 0) continue;
      for (int i = 0; i < 2 && open; ++i) {
        if (p[i].revents == 0) continue;
        char buf[4096];
        const ssize_t r = ::recv(fds[i], buf, sizeof buf, MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (r <= 0) {
          open = false;
          break;
        }
        {
          std::lock_guard lock(m_);
          seen_.append(buf, static_cast<std::size_t>(r));
        }
        open = we::detail::write_all(fds[1 - i], buf, static_cast<std::size_t>(r), wc::clock_type::now() + 5s);
      }
    }
    ::close(a);
    ::close(b);
  }

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex m_;
  std::string seen_;
};

bool contains_a_line(const std::string& bytes) {
  for (const char* word : {"HELLO", "WELCOME", "READY", "EPOCH", "REFUSED"})
    if (bytes.find(word) != std::string::npos) return true;
  return false;
}

// Connects to the coordinator and passes weft's handshake (the job secret) as `name`, saying it
// uses TLS; then the connection is the caller's (the fd). Fails the test if the handshake fails.
int connect_claiming_tls(const we::coordinator& coord, const std::string& name, wc::clock_type::time_point until) {
  const int fd = we::detail::connect_to("127.0.0.1", coord.port(), until, "test", "the coordinator");
  wc::detail::peer_identity id;
  id.name = name;
  id.instance = 7;
  id.tls = true;
  wc::detail::handshake hs(wc::detail::handshake::role::client, wc::detail::conn_kind::coordinator, id,
                           wc::detail::job_secret(weft_test::test_job_secret), nullptr);
  wc::detail::drive(fd, hs, until);
  REQUIRE(hs.state() == wc::detail::handshake::status::done);
  return fd;
}

}  // namespace

TEST_CASE("an elastic group over tls, coordinator included, gives the plaintext group's bits", "[comm][elastic][tls]") {
  std::vector<std::string> errors;
  const auto plain = run_group(nullptr, nullptr, nullptr, errors);
  REQUIRE(errors == std::vector<std::string>(2));
  REQUIRE(plain[0].size() == 64);
  REQUIRE(plain[1] == plain[0]);
  auto same_bits = [&](const std::vector<std::vector<float>>& got) {
    REQUIRE(got[0].size() == plain[0].size());
    REQUIRE(got[1].size() == plain[0].size());
    CHECK(std::memcmp(got[0].data(), plain[0].data(), plain[0].size() * sizeof(float)) == 0);
    CHECK(std::memcmp(got[1].data(), plain[0].data(), plain[0].size() * sizeof(float)) == 0);
  };
  SECTION("the job secret as PSK") {
    const auto psk = wc::tls_security::with_psk(weft_test::test_job_secret);
    const auto got = run_group(psk, psk, psk, errors);
    INFO("a: " << errors[0] << "\nb: " << errors[1]);
    REQUIRE(errors == std::vector<std::string>(2));
    same_bits(got);
  }
  SECTION("certificates signed by the job's CA") {
    const auto& c = weft_test::certs();
    const auto got =
        run_group(wc::tls_security::with_certificates(c.files("b")), wc::tls_security::with_certificates(c.files("a")),
                  wc::tls_security::with_certificates(c.files("b")), errors);
    INFO("a: " << errors[0] << "\nb: " << errors[1]);
    REQUIRE(errors == std::vector<std::string>(2));
    same_bits(got);
  }
}

TEST_CASE("a coordinator and a member whose tls differs refuse each other, and nothing changes",
          "[comm][elastic][tls][errors]") {
  const auto psk = wc::tls_security::with_psk(weft_test::test_job_secret);
  const auto& c = weft_test::certs();
  security coord_tls, member_tls;
  std::string coord_says = "TLS";  // what the coordinator's logged drop names
  bool trusted = true;             // a member with the coordinator's TLS can join it afterwards
  SECTION("TLS in the coordinator only") { coord_tls = psk; }
  SECTION("TLS in the member only") { member_tls = psk; }
  SECTION("TLS keyed by another secret") {
    coord_tls = psk;
    member_tls = wc::tls_security::with_psk(other_secret);
    coord_says = "TLS handshake";
  }
  SECTION("a self-signed member certificate") {
    coord_tls = wc::tls_security::with_certificates(c.files("b"));
    member_tls = wc::tls_security::with_certificates(c.files("stranger"));
    coord_says = "TLS handshake";
  }
  SECTION("a member certificate from another CA") {
    coord_tls = wc::tls_security::with_certificates(c.files("b"));
    member_tls = wc::tls_security::with_certificates(c.files("other"));
    coord_says = "TLS handshake";
  }
  SECTION("a coordinator certificate the member does not trust") {
    coord_tls = wc::tls_security::with_certificates(c.files("stranger"));
    member_tls = wc::tls_security::with_certificates(c.files("a"));
    coord_says = "TLS handshake";
    trusted = false;  // no member trusts it
  }
  we::coordinator_options co;
  co.secret = weft_test::test_job_secret;
  co.tls = coord_tls;
  we::coordinator coord(co);
  coord.start();
  weft_test::elastic_model m;
  auto o = weft_test::member_options(coord, "x", 2s, 2s, 5s);
  o.tls = member_tls;
  std::string error;
  try {
    we::elastic_group g(m.state, o);
  } catch (const weft::error& e) {
    error = e.what();
    CHECK(e.code() == weft::errc::mismatch);
  }
  INFO("member: " << error);
  CHECK(error.find("TLS") != std::string::npos);
  const std::string events = events_naming(coord, coord_says);
  INFO("coordinator: " << events);
  CHECK(events.find(coord_says) != std::string::npos);
  CHECK(events.find("hello from x") == std::string::npos);
  CHECK(coord.members().empty());
  CHECK(coord.epoch() == 0);
  // The coordinator goes on: a member with its TLS joins and forms epoch 1 alone.
  if (!trusted) return;
  weft_test::elastic_model good;
  auto go = weft_test::member_options(coord, "y", 2s, 2s, 5s);
  go.tls = coord_tls;
  we::elastic_group g(good.state, go);
  const auto info = g.sync();
  CHECK(info.epoch == 1);
  CHECK(info.members == std::vector<std::string>{"y"});
}

TEST_CASE("no membership line travels in the clear to or from a tls coordinator", "[comm][elastic][tls]") {
  // The member reaches the coordinator through a relay that records everything; two rounds.
  auto observe = [](const security& tls) {
    we::coordinator_options co;
    co.secret = weft_test::test_job_secret;
    co.tls = tls;
    we::coordinator coord(co);
    coord.start();
    recording_relay relay(coord.port());
    {
      weft_test::elastic_model m;
      auto o = weft_test::member_options(coord, "x", 2s, 2s, 5s);
      o.coordinator_port = relay.port();
      o.tls = tls;
      we::elastic_group g(m.state, o);
      CHECK(g.sync().epoch == 1);
      m.state.advance();
      CHECK(g.sync().epoch == 1);
    }
    coord.stop();
    return relay.seen();
  };
  SECTION("plaintext: the observer reads the lines (so the check below can fail)") {
    CHECK(contains_a_line(observe(nullptr)));
  }
  SECTION("TLS: the observer reads none") {
    const std::string seen = observe(wc::tls_security::with_psk(weft_test::test_job_secret));
    CHECK(seen.size() > 200);  // weft's handshake and the TLS records went through
    CHECK_FALSE(contains_a_line(seen));
  }
  SECTION("a peer that claims TLS but sends HELLO in plaintext gets no line and is dropped") {
    we::coordinator_options co;
    co.secret = weft_test::test_job_secret;
    co.tls = wc::tls_security::with_psk(weft_test::test_job_secret);
    we::coordinator coord(co);
    coord.start();
    const auto until = wc::clock_type::now() + 5s;
    const int fd = connect_claiming_tls(coord, "liar", until);  // passes weft's handshake...
    // ...then speaks plaintext where the TLS ClientHello belongs.
    const std::string hello = "HELLO liar 127.0.0.1 4000 f32:64 7\n";
    REQUIRE(we::detail::write_all(fd, hello.data(), hello.size(), until));
    std::string got;
    for (;;) {  // until the coordinator closes the connection
      pollfd p{fd, POLLIN, 0};
      REQUIRE(::poll(&p, 1, we::detail::remaining_ms(until)) > 0);
      char buf[4096];
      const ssize_t r = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (r <= 0) break;
      got.append(buf, static_cast<std::size_t>(r));
    }
    ::close(fd);
    CHECK_FALSE(contains_a_line(got));
    const std::string events = events_naming(coord, "TLS");
    INFO("coordinator: " << events);
    CHECK(events.find("TLS") != std::string::npos);
    CHECK(events.find("hello from liar") == std::string::npos);
    coord.stop();
  }
}

TEST_CASE("a tls coordinator keeps serving while a peer stalls in its tls handshake", "[comm][elastic][tls]") {
  const auto psk = wc::tls_security::with_psk(weft_test::test_job_secret);
  we::coordinator_options co;
  co.secret = weft_test::test_job_secret;
  co.tls = psk;
  co.handshake_timeout = 300ms;
  we::coordinator coord(co);
  coord.start();
  // A peer passes weft's handshake claiming TLS, then never sends its ClientHello.
  const auto until = wc::clock_type::now() + 5s;
  const int fd = connect_claiming_tls(coord, "staller", until);
  // Meanwhile a member joins over TLS and completes rounds: the coordinator's thread never waits (a
  // coordinator that blocked in the staller's handshake would serve nobody, its timer included).
  {
    weft_test::elastic_model m;
    auto o = weft_test::member_options(coord, "x", 2s, 2s, 5s);
    o.tls = psk;
    we::elastic_group g(m.state, o);
    CHECK(g.sync().epoch == 1);
    m.state.advance();
    CHECK(g.sync().epoch == 1);
  }
  const std::string events = events_naming(coord, "no handshake and HELLO within 300 ms");
  INFO("coordinator: " << events);
  CHECK(events.find("no handshake and HELLO within 300 ms") != std::string::npos);
  char byte = 0;  // the staller's connection was closed
  pollfd p{fd, POLLIN, 0};
  REQUIRE(::poll(&p, 1, 2000) == 1);
  CHECK(::recv(fd, &byte, 1, MSG_DONTWAIT) <= 0);
  ::close(fd);
  coord.stop();
}

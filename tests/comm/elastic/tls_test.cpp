// TLS 1.3 on elastic groups (weft/comm/tls.hpp): tls_stream over socket pairs with the job secret as
// PSK and with certificates (made here by OpenSSL: a CA, members it signs, a stranger it does not);
// a different PSK, an untrusted certificate and a plaintext peer refused on both sides with a
// weft::error; meshes over TLS giving the plaintext allreduce's bits; bad options refused. The
// whole elastic group over TLS is tls_group_test.cpp (its coordinator keeps it out of TSan).
#include "../job_secret.hpp"
#include "test_certificates.hpp"

#include <weft/comm/collectives.hpp>
#include <weft/comm/elastic/mesh_transport.hpp>
#include <weft/comm/tls.hpp>

#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace wc = weft::comm;
namespace we = weft::comm::elastic;
using weft_test::certs;
using namespace std::chrono_literals;

namespace {

const std::string secret_a = "the first job's secret, 0123456789";
const std::string secret_b = "the other job's secret, 9876543210";

// ---- two tls_streams over a socket pair ----------------------------------------------------------

struct stream_pair {
  int sv[2] = {-1, -1};
  std::unique_ptr<wc::secure_stream> s[2];
  stream_pair(const wc::stream_security& client, const wc::stream_security& server) {
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    s[0] = client.open(sv[0], true, "the server");
    s[1] = server.open(sv[1], false, "the client");
  }
  ~stream_pair() {
    s[0].reset();
    s[1].reset();
    ::close(sv[0]);
    ::close(sv[1]);
  }
  // Drives both handshakes (one thread, interleaved). The errors each side raised, "" if none.
  std::array<std::string, 2> handshake() {
    std::array<std::string, 2> err;
    std::array<bool, 2> done{false, false};
    const auto until = wc::clock_type::now() + 5s;
    while ((!done[0] || !done[1]) && wc::clock_type::now() < until) {
      for (int i : {0, 1}) {
        if (done[i]) continue;
        try {
          short ev = 0;
          done[i] = s[i]->handshake(ev);
        } catch (const weft::error& e) {
          err[static_cast<std::size_t>(i)] = e.what();
          done[i] = true;
          ::shutdown(sv[i], SHUT_RDWR);  // a failed side closes (after its alert, if it sent one)
        }
      }
      ::poll(nullptr, 0, 1);
    }
    REQUIRE(done[0]);
    REQUIRE(done[1]);
    return err;
  }
};

std::vector<std::byte> pattern(std::size_t n, int salt) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + static_cast<std::size_t>(salt)) & 0xff);
  return v;
}

// Sends `n` bytes each way at once through a handshaken pair (one thread, non-blocking): both
// arrive whole and in order.
bool exchange_both_ways(stream_pair& p, std::size_t n) {
  const std::vector<std::byte> out[2] = {pattern(n, 1), pattern(n, 2)};
  std::vector<std::byte> in[2] = {std::vector<std::byte>(n), std::vector<std::byte>(n)};
  std::size_t sent[2] = {0, 0}, got[2] = {0, 0};
  const auto until = wc::clock_type::now() + 10s;
  while ((sent[0] < n || sent[1] < n || got[0] < n || got[1] < n) && wc::clock_type::now() < until) {
    for (int i : {0, 1}) {
      // Offer the rest in two parts, as the engine offers a header and a payload.
      const std::size_t half = (n - sent[i]) / 2;
      const std::span<const std::byte> parts[2] = {{out[i].data() + sent[i], half},
                                                   {out[i].data() + sent[i] + half, n - sent[i] - half}};
      if (sent[i] < n) sent[i] += p.s[i]->write_some(parts, 2);
      if (got[i] < n) got[i] += p.s[i]->read_some(in[i].data() + got[i], n - got[i]);
    }
  }
  return got[0] == n && got[1] == n && in[0] == out[1] && in[1] == out[0];
}

// ---- meshes --------------------------------------------------------------------------------------

// n members joined by socket pairs (K connections each), every one secured by sec[i] (null: none).
std::vector<std::unique_ptr<we::mesh_transport>> socketpair_meshes(
    int n, int K, const std::vector<std::shared_ptr<const wc::stream_security>>& sec) {
  std::vector<we::peer_address> members;
  for (int i = 0; i < n; ++i)
    members.push_back({"m" + std::to_string(i), "127.0.0.1", 5000 + i, static_cast<std::uint64_t>(i + 1)});
  std::vector<std::vector<int>> fds(static_cast<std::size_t>(n), std::vector<int>(static_cast<std::size_t>(n * K), -1));
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j)
      for (int k = 0; k < K; ++k) {
        int sv[2];
        REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
        fds[static_cast<std::size_t>(i)][static_cast<std::size_t>(j * K + k)] = sv[0];
        fds[static_cast<std::size_t>(j)][static_cast<std::size_t>(i * K + k)] = sv[1];
      }
  // The TLS handshakes of all members run at once: build every mesh on its own thread.
  std::vector<std::unique_ptr<we::mesh_transport>> meshes(static_cast<std::size_t>(n));
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      we::mesh_options opt{K, std::size_t{1} << 16, {}, sec[static_cast<std::size_t>(i)]};
      try {
        meshes[static_cast<std::size_t>(i)] = std::make_unique<we::mesh_transport>(
            members, i, 1, fds[static_cast<std::size_t>(i)], wc::detail::wire_limits{}, opt);
      } catch (const weft::error& e) {
        errors[static_cast<std::size_t>(i)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    INFO(e);
    REQUIRE(e.empty());
  }
  return meshes;
}

// Each member's input: `count` floats of a seeded distribution (sums that depend on the order).
std::vector<std::vector<float>> inputs(int n, std::size_t count) {
  std::vector<std::vector<float>> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    std::mt19937 rng(static_cast<unsigned>(17 + i));
    std::uniform_real_distribution<float> d(-1000.0f, 1000.0f);
    for (std::size_t e = 0; e < count; ++e) v[static_cast<std::size_t>(i)].push_back(d(rng));
  }
  return v;
}

std::vector<std::vector<float>> allreduce_on(std::vector<std::unique_ptr<we::mesh_transport>>& meshes,
                                             std::vector<std::vector<float>> data) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors(meshes.size());
  for (std::size_t i = 0; i < meshes.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        wc::options o;
        o.timeout = 20s;
        wc::allreduce(*meshes[i], std::span<float>(data[i]), weft::op::sum{}, o);
      } catch (const weft::error& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    INFO(e);
    CHECK(e.empty());
  }
  return data;
}

}  // namespace

TEST_CASE("tls streams carry bytes both ways, keyed by the job secret or by certificates", "[comm][elastic][tls]") {
  SECTION("job secret as PSK") {
    const auto sec = wc::tls_security::with_psk(secret_a);
    CHECK(sec->describe().find("PSK") != std::string::npos);
    stream_pair p(*sec, *sec);
    const auto err = p.handshake();
    CHECK(err[0].empty());
    CHECK(err[1].empty());
    CHECK(exchange_both_ways(p, (std::size_t{1} << 20) + 13));
  }
  SECTION("certificates signed by the same CA") {
    const auto a = wc::tls_security::with_certificates(certs().files("a"));
    const auto b = wc::tls_security::with_certificates(certs().files("b"));
    stream_pair p(*a, *b);
    const auto err = p.handshake();
    CHECK(err[0].empty());
    CHECK(err[1].empty());
    CHECK(exchange_both_ways(p, 300'001));
  }
}

TEST_CASE("tls refuses a different secret, an untrusted certificate and a plaintext peer on both sides",
          "[comm][elastic][tls][errors]") {
  auto both_refuse = [](const wc::stream_security& client, const wc::stream_security& server) {
    stream_pair p(client, server);
    const auto err = p.handshake();
    INFO("client: " << err[0] << "\nserver: " << err[1]);
    CHECK(err[0].find("TLS handshake") != std::string::npos);
    CHECK(err[1].find("TLS handshake") != std::string::npos);
  };
  SECTION("a different job secret") {
    both_refuse(*wc::tls_security::with_psk(secret_a), *wc::tls_security::with_psk(secret_b));
  }
  SECTION("a self-signed certificate, and one from another CA") {
    const auto a = wc::tls_security::with_certificates(certs().files("a"));
    both_refuse(*a, *wc::tls_security::with_certificates(certs().files("stranger")));
    both_refuse(*wc::tls_security::with_certificates(certs().files("other")), *a);
  }
  SECTION("a PSK side and a certificate side") {
    both_refuse(*wc::tls_security::with_psk(secret_a), *wc::tls_security::with_certificates(certs().files("a")));
  }
  SECTION("a peer that speaks plaintext") {
    const auto sec = wc::tls_security::with_psk(secret_a);
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    const char plain[] = "WEFT plaintext frame bytes, not a TLS record";
    REQUIRE(::send(sv[1], plain, sizeof plain, 0) == static_cast<ssize_t>(sizeof plain));
    auto s = sec->open(sv[0], false, "the plaintext peer");
    std::string err;
    for (int i = 0; i < 1000 && err.empty(); ++i) {
      try {
        short ev = 0;
        if (s->handshake(ev)) break;
      } catch (const weft::error& e) {
        err = e.what();
      }
      ::poll(nullptr, 0, 1);
    }
    CHECK(err.find("TLS handshake with the plaintext peer failed") != std::string::npos);
    s.reset();
    ::close(sv[0]);
    ::close(sv[1]);
  }
}

TEST_CASE("tls on a mesh gives the plaintext mesh's allreduce bits", "[comm][elastic][tls]") {
  const int n = 3;
  const auto data = inputs(n, 100'003);  // striped (>= 64 KiB) over K = 2 connections
  std::vector<std::shared_ptr<const wc::stream_security>> none(n), psk(n, wc::tls_security::with_psk(secret_a));
  auto plain_meshes = socketpair_meshes(n, 2, none);
  const auto plain = allreduce_on(plain_meshes, data);
  auto tls_meshes = socketpair_meshes(n, 2, psk);
  const auto secured = allreduce_on(tls_meshes, data);
  for (int i = 0; i < n; ++i) {
    INFO("member " << i);
    CHECK(std::memcmp(plain[static_cast<std::size_t>(i)].data(), secured[static_cast<std::size_t>(i)].data(),
                      plain[0].size() * sizeof(float)) == 0);
    CHECK(secured[static_cast<std::size_t>(i)] != data[static_cast<std::size_t>(i)]);
  }
}

TEST_CASE("tls options: bad input is refused with a clear error", "[comm][elastic][tls][errors]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(wc::tls_security::with_psk("too short"), Contains("between 16 and 1024"));
  CHECK_THROWS_WITH(wc::tls_security::with_psk(std::string(1025, 'x')), Contains("between 16 and 1024"));
  CHECK_THROWS_WITH(wc::tls_security::with_certificates({}), Contains("must all be given"));
  auto f = certs().files("a");
  f.ca_file += ".missing";
  CHECK_THROWS_WITH(wc::tls_security::with_certificates(f),
                    Contains("cannot load the CA file") && Contains(".missing"));
  f = certs().files("a");
  f.cert_file = f.key_file;  // a key is not a certificate
  CHECK_THROWS_WITH(wc::tls_security::with_certificates(f), Contains("cannot load the certificate file"));
  f = certs().files("a");
  f.key_file = certs().files("b").key_file;  // b's key with a's certificate
  CHECK_THROWS_WITH(wc::tls_security::with_certificates(f),
                    Contains("not the key of the certificate") && Contains("b.key") && Contains("mismatch"));
  try {
    wc::tls_security::with_psk("short");
  } catch (const weft::error& e) {
    CHECK(e.code() == weft::errc::invalid_argument);
  }
}

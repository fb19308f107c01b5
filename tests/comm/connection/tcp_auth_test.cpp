// tcp_transport's connection layer: jobs with a secret (option, WEFT_JOB_SECRET, the launcher's),
// jobs without one (refused unless opted in), ranks with the wrong secret, a stranger claiming a
// rank, stale file-store entries, host names.
#include <weft/comm/collectives.hpp>
#include <weft/comm/detail/handshake_io.hpp>
#include <weft/comm/launcher.hpp>
#include <weft/comm/tcp_transport.hpp>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace wc = weft::comm;
namespace wd = weft::comm::detail;

namespace {
std::uint16_t free_port() {
  auto fd = wd::listen_tcp(*wd::parse_ipv4("127.0.0.1"), 0, "test");
  return wd::local_port(fd.get());
}

// Every rank sums rank+1 over n ranks and checks the result; exit status says what happened.
void sum_and_check(wc::tcp_transport& t) {
  std::vector<float> v(50'000, static_cast<float>(t.rank() + 1));
  wc::allreduce(t, std::span<float>(v));
  const float want = static_cast<float>(t.size() * (t.size() + 1) / 2);
  for (float x : v)
    if (x != want) ::_exit(7);
}

int code_of(const weft::error& e) { return e.code().value(); }
}  // namespace

TEST_CASE("tcp: a job with a secret forms and computes, from the option or WEFT_JOB_SECRET", "[comm][tcp][auth]") {
  const auto port = free_port();
  auto res = wc::fork_ranks(3, [&](int r) {
    wc::tcp_options o;
    if (r == 1)
      ::setenv("WEFT_JOB_SECRET", "this is the job secret of the test", 1);  // the others pass it as an option
    else
      o.secret = "this is the job secret of the test";
    wc::tcp_transport t(r, 3, wc::tcp_rendezvous::rank0("localhost", port), o);  // a name, not an address
    sum_and_check(t);
  });
  CHECK(res.ok());

  const auto dir = std::filesystem::temp_directory_path() / ("weft-auth-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto res2 = wc::fork_ranks(3, [&](int r) {
    wc::tcp_options o;
    o.secret = "another secret, long enough";
    o.connections = 3;
    wc::tcp_transport t(r, 3, wc::tcp_rendezvous::file_store(dir.string()), o);
    sum_and_check(t);
  });
  std::filesystem::remove_all(dir);
  CHECK(res2.ok());
}

TEST_CASE("tcp: a rank with another secret or none is refused; the others time out naming it", "[comm][tcp][auth]") {
  for (const char* wrong : {"a different secret of the job", ""}) {
    const auto port = free_port();
    auto res = wc::fork_ranks(2, [&](int r) {
      wc::tcp_options o;
      o.secret = r == 1 ? wrong : "the right secret of the job";
      if (o.secret.empty()) {  // none at all: not the launcher's either, and the opt-in that takes
        ::unsetenv("WEFT_JOB_SECRET");
        o.allow_unauthenticated = true;
      }
      o.connect_timeout = std::chrono::milliseconds(1500);
      try {
        wc::tcp_transport t(r, 2, wc::tcp_rendezvous::rank0("127.0.0.1", port), o);
      } catch (const weft::error& e) {
        const std::string what = e.what();
        if (r == 1) ::_exit(code_of(e) == static_cast<int>(weft::errc::mismatch) ? 40 : 41);
        // Rank 0 never saw rank 1 register, and its error says a connection was dropped.
        ::_exit(code_of(e) == static_cast<int>(weft::errc::timeout) && what.find("dropped") != std::string::npos &&
                        what.find(" 1 did not register") != std::string::npos
                    ? 40
                    : 42);
      }
      ::_exit(3);
    });
    INFO("wrong secret '" << wrong << "'");
    CHECK(res.status == std::vector<int>{40, 40});
  }
  CHECK_THROWS_AS(wc::tcp_transport(0, 2, wc::tcp_rendezvous::rank0("127.0.0.1", 5),
                                    [] {
                                      wc::tcp_options o;
                                      o.secret = "too short";
                                      return o;
                                    }()),
                  weft::error);
}

TEST_CASE("tcp: with a secret, a stranger claiming rank 1 first is dropped and the job is right", "[comm][tcp][auth]") {
  const auto port = free_port();
  auto res = wc::fork_ranks(3, [&](int r) {
    wc::tcp_options o;
    o.secret = "the right secret of the job";
    if (r == 2) {  // the stranger: a well-formed hello claiming rank 1, without the secret
      const auto until = wc::clock_type::now() + std::chrono::seconds(10);
      auto fd =
          wd::connect_tcp(*wd::parse_ipv4("127.0.0.1"), port, in_addr{htonl(INADDR_ANY)}, until, "stranger", "rank 0");
      wd::peer_identity id;
      id.rank = 1;
      id.size = 2;
      id.count = 2;
      id.port = 9;
      id.instance = 5;
      wd::handshake hs(wd::handshake::role::client, wd::conn_kind::rendezvous, id, wd::job_secret{}, nullptr);
      wd::drive(fd.get(), hs, until);
      ::_exit(hs.state() == wd::handshake::status::failed ? 0 : 9);
    }
    if (r == 1) ::usleep(300'000);  // the stranger comes first
    wc::tcp_transport t(r, 2, wc::tcp_rendezvous::rank0("127.0.0.1", port), o);
    sum_and_check(t);
  });
  CHECK(res.status == std::vector<int>{0, 0, 0});
}

TEST_CASE("tcp: a stale file-store entry pointing at another listener is recognised and re-read", "[comm][tcp][file]") {
  const auto dir = std::filesystem::temp_directory_path() / ("weft-stale-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // A listener that accepts and says nothing, named by a stale rank-0 file of the same size.
  auto squatter = wd::listen_tcp(*wd::parse_ipv4("127.0.0.1"), 0, "test");
  { std::ofstream(dir / "rank-0") << "weft-tcp-rank 1 127.0.0.1 " << wd::local_port(squatter.get()) << " 2 77\n"; }
  auto res = wc::fork_ranks(2, [&](int r) {
    if (r == 0) ::usleep(300'000);  // rank 1 reads the stale file first
    wc::tcp_options o;
    o.handshake_timeout = std::chrono::milliseconds(300);
    wc::tcp_transport t(r, 2, wc::tcp_rendezvous::file_store(dir.string()), o);
    sum_and_check(t);
  });
  CHECK(res.ok());
  // A hand-written name instead of an address is malformed, never a foreign exception.
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / "rank-1") << "weft-tcp-rank 1 localhost 5000 2 77\n"; }
  wc::tcp_options quick;
  quick.connect_timeout = std::chrono::milliseconds(300);
  quick.secret = "the secret of a job that never forms";
  try {
    wc::tcp_transport t(0, 2, wc::tcp_rendezvous::file_store(dir.string()), quick);
    FAIL("formed a mesh with nobody");
  } catch (const weft::error& e) {
    CHECK(std::string(e.what()).find("not a numeric IPv4") != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

namespace {
// A stranger's attempt to join as rank 1 of `size` through rank 0's rendezvous port, without a
// secret: true when it was admitted. A port nobody listens on refuses it too.
bool stranger_admitted(std::uint16_t port, int size) {
  try {
    const auto until = wc::clock_type::now() + std::chrono::seconds(2);
    auto fd =
        wd::connect_tcp(*wd::parse_ipv4("127.0.0.1"), port, in_addr{htonl(INADDR_ANY)}, until, "stranger", "rank 0");
    wd::peer_identity id;
    id.rank = 1;
    id.size = size;
    id.count = 2;
    id.port = 9;
    id.instance = 5;
    wd::handshake hs(wd::handshake::role::client, wd::conn_kind::rendezvous, id, wd::job_secret{}, nullptr);
    wd::drive(fd.get(), hs, until);
    return hs.state() == wd::handshake::status::done;
  } catch (const weft::error&) {
    return false;  // nothing listens, or the connection was dropped
  }
}
}  // namespace

TEST_CASE("tcp: a job without a secret refuses to form unless it opts in; a stranger finds no port",
          "[comm][tcp][auth]") {
  // Secure by default: rank 0 with no secret (neither option, WEFT_JOB_SECRET nor the launcher's)
  // refuses at once, before it listens, so the stranger that comes as rank 1 finds nothing to join.
  const auto port = free_port();
  auto res = wc::fork_ranks(2, [&](int r) {
    ::unsetenv("WEFT_JOB_SECRET");
    if (r == 1) {
      ::usleep(200'000);
      ::_exit(stranger_admitted(port, 2) ? 9 : 0);
    }
    const auto start = wc::clock_type::now();
    try {
      wc::tcp_transport t(0, 2, wc::tcp_rendezvous::rank0("127.0.0.1", port));
    } catch (const weft::error& e) {
      const std::string what = e.what();
      const bool fast = wc::clock_type::now() - start < std::chrono::seconds(1);
      const bool says_how = what.find("no job secret") != std::string::npos &&
                            what.find("WEFT_JOB_SECRET") != std::string::npos &&
                            what.find("allow_unauthenticated") != std::string::npos;
      ::_exit(code_of(e) == static_cast<int>(weft::errc::invalid_argument) && fast && says_how ? 40 : 41);
    }
    ::_exit(3);
  });
  CHECK(res.status == std::vector<int>{40, 0});

  // The explicit opt-in (the option on one rank, the environment on the other) forms the job.
  const auto port2 = free_port();
  auto res2 = wc::fork_ranks(2, [&](int r) {
    ::unsetenv("WEFT_JOB_SECRET");
    wc::tcp_options o;
    if (r == 0)
      o.allow_unauthenticated = true;
    else
      ::setenv("WEFT_ALLOW_UNAUTHENTICATED", "1", 1);
    wc::tcp_transport t(r, 2, wc::tcp_rendezvous::rank0("127.0.0.1", port2), o);
    sum_and_check(t);
  });
  CHECK(res2.ok());
  // A single rank needs no secret: nobody can join it.
  wc::tcp_transport alone(0, 1, wc::tcp_rendezvous::rank0("127.0.0.1", free_port()));
  CHECK(alone.size() == 1);
}

TEST_CASE("tcp: ranks started by fork_ranks share a fresh secret; a stranger claiming rank 1 first is refused",
          "[comm][tcp][auth]") {
  // The job of the finding: no secret is configured anywhere, a stranger connects first as
  // rank 1. The launcher's per-job secret keeps it out, and rank 0's allreduce is right.
  REQUIRE(std::getenv("WEFT_JOB_SECRET") == nullptr);
  const auto port = free_port();
  auto res = wc::fork_ranks(3, [&](int r) {
    const char* s = std::getenv("WEFT_JOB_SECRET");
    if (s == nullptr || std::string(s).size() != 64) ::_exit(11);
    if (r == 2) ::_exit(stranger_admitted(port, 2) ? 9 : 0);
    if (r == 1) ::usleep(300'000);  // the stranger comes first
    wc::tcp_transport t(r, 2, wc::tcp_rendezvous::rank0("127.0.0.1", port));
    sum_and_check(t);
  });
  CHECK(res.status == std::vector<int>{0, 0, 0});
  CHECK(std::getenv("WEFT_JOB_SECRET") == nullptr);  // the launcher's own environment is unchanged

  // spawn_ranks gives the programs it starts one secret, the same for all of them.
  const auto dir = std::filesystem::temp_directory_path() / ("weft-spawn-secret-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto spawned =
      wc::spawn_ranks(3, "/bin/sh", {"-c", "printf %s \"$WEFT_JOB_SECRET\" > \"$0/$WEFT_RANK\"", dir.string()});
  CHECK(spawned.ok());
  std::vector<std::string> seen;
  for (int r = 0; r < 3; ++r) {
    std::ifstream in(dir / std::to_string(r));
    std::string line;
    std::getline(in, line);
    seen.push_back(line);
  }
  std::filesystem::remove_all(dir);
  CHECK(seen[0].size() == 64);
  CHECK(seen[1] == seen[0]);
  CHECK(seen[2] == seen[0]);
  CHECK(wc::make_job_secret() != wc::make_job_secret());
}

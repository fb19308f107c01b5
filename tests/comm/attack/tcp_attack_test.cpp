// Attack suite, tcp_transport: strangers at the rank-0 rendezvous (idle, random bytes, huge
// lengths, 500 held connections, a well-formed hello claiming a real rank) and at the data ports
// while an allreduce loop runs. The real job either completes with correct results or every real
// rank fails within its deadline naming the peer; no process outlives the launcher's deadline.
#include "attackers.hpp"

#include <weft/comm/collectives.hpp>
#include <weft/comm/launcher.hpp>
#include <weft/comm/tcp_transport.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace wc = weft::comm;
using namespace std::chrono_literals;

namespace {

constexpr const char* secret = "the attack suite's job secret";

// `steps` allreduces of 64 Ki floats, each checked element by element; exit 7 on a wrong result.
void allreduce_loop(wc::tcp_transport& t, int steps) {
  std::vector<float> v(1 << 16);
  for (int s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((t.rank() + 1) * ((i + s) % 5));
    wc::options o;
    o.timeout = 10s;
    wc::allreduce(t, std::span<float>(v), weft::op::sum{}, o);
    const float ranks = static_cast<float>(t.size() * (t.size() + 1) / 2);
    for (std::size_t i = 0; i < v.size(); ++i)
      if (v[i] != ranks * static_cast<float>((i + s) % 5)) ::_exit(7);
  }
}

// Options of a rank (in its own process): with the suite's secret, or with none at all (neither
// the launcher's WEFT_JOB_SECRET nor an option) and the explicit opt-in such a job needs.
wc::tcp_options quick(bool with_secret) {
  wc::tcp_options o;
  o.connect_timeout = 20s;
  o.handshake_timeout = 500ms;
  if (with_secret) {
    o.secret = secret;
  } else {
    ::unsetenv("WEFT_JOB_SECRET");
    o.allow_unauthenticated = true;
  }
  return o;
}

}  // namespace

TEST_CASE("attack: strangers at the rendezvous do not stall or kill the job", "[comm][attack]") {
  for (bool with_secret : {false, true}) {
    const auto port = attack::free_port();
    // Ranks 0-2 are the job; 3 and 4 are strangers that arrive first.
    auto res = wc::fork_ranks(
        5,
        [&](int r) {
          if (r == 3) return attack::nuisance(port, 500, 3s);
          if (r == 4) {
            if (!with_secret) return attack::nuisance(port, 0, 3s, 2);
            attack::wd::peer_identity id;  // a well-formed hello claiming rank 1, without the secret
            id.rank = 1;
            id.size = 3;
            id.count = 2;
            id.port = 9;
            id.instance = 5;
            if (attack::claim(port, attack::wd::conn_kind::rendezvous, id, {})) ::_exit(9);
            return;
          }
          if (r != 0) std::this_thread::sleep_for(500ms);
          wc::tcp_transport t(r, 3, wc::tcp_rendezvous::rank0("127.0.0.1", port), quick(with_secret));
          allreduce_loop(t, 20);
        },
        60s);
    INFO("with_secret " << with_secret);
    CHECK(res.status == std::vector<int>{0, 0, 0, 0, 0});
  }
}

TEST_CASE("attack: without a secret a stranger claiming rank 1 first fails the job cleanly and fast",
          "[comm][attack]") {
  const auto port = attack::free_port();
  auto res = wc::fork_ranks(
      4,
      [&](int r) {
        if (r == 3) {
          attack::wd::peer_identity id;
          id.rank = 1;
          id.size = 3;
          id.count = 2;
          id.port = 9;
          id.instance = 5;
          attack::wd::unique_fd keep;
          const bool in = attack::claim(port, attack::wd::conn_kind::rendezvous, id, {}, &keep);
          std::this_thread::sleep_for(4s);
          ::_exit(in ? 0 : 9);
        }
        if (r != 0) std::this_thread::sleep_for(500ms);
        auto o = quick(false);
        o.connect_timeout = 3s;
        const auto start = wc::clock_type::now();
        try {
          wc::tcp_transport t(r, 3, wc::tcp_rendezvous::rank0("127.0.0.1", port), o);
        } catch (const weft::error& e) {
          // Every real rank fails within its deadline, and the message names rank 1.
          const bool in_time = wc::clock_type::now() - start < o.connect_timeout + 5s;
          const bool names_1 = std::string(e.what()).find(" 1") != std::string::npos;
          ::_exit(in_time && names_1 ? 40 : 41);
        }
        ::_exit(42);
      },
      60s);
  CHECK(res.status == std::vector<int>{40, 40, 40, 0});
}

TEST_CASE("attack: forged mesh hellos and strangers during the loop cannot touch a job with a secret",
          "[comm][attack]") {
  const auto dir = std::filesystem::temp_directory_path() / ("weft-attack-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto res = wc::fork_ranks(
      4,
      [&](int r) {
        if (r == 3) {
          // Reads every rank file it can and claims, on every data port, to be each rank with the
          // instance the file names; then keeps knocking on the ports while the loop runs.
          const auto until = wc::clock_type::now() + 4s;
          while (wc::clock_type::now() < until) {
            for (int q = 0; q < 3; ++q) {
              std::ifstream in(dir / ("rank-" + std::to_string(q)));
              std::string tag, ver, host;
              int port = 0, size = 0;
              std::uint64_t instance = 0;
              if (!(in >> tag >> ver >> host >> port >> size >> instance)) continue;
              for (int claimed = 0; claimed < 3; ++claimed) {
                attack::wd::peer_identity id;
                id.rank = claimed;
                id.size = 3;
                id.count = 2;
                id.instance = instance;
                if (attack::claim(static_cast<std::uint16_t>(port), attack::wd::conn_kind::tcp_mesh, id, {}, nullptr,
                                  100ms))
                  ::_exit(9);
              }
              attack::nuisance(static_cast<std::uint16_t>(port), 0, 0ms, 3, 100ms);
            }
            std::this_thread::sleep_for(20ms);
          }
          return;
        }
        wc::tcp_transport t(r, 3, wc::tcp_rendezvous::file_store(dir.string()), quick(true));
        allreduce_loop(t, 200);
      },
      60s);
  std::filesystem::remove_all(dir);
  CHECK(res.status == std::vector<int>{0, 0, 0, 0});
}

// Attack suite, peer faults over tcp_transport: a rank stopped (SIGSTOP) for longer than the
// collective deadline and then resumed, and a rank killed (SIGKILL) mid-loop. Every survivor must
// fail within its deadline with an error naming the peer, and no process may hang. The stop lasts
// WEFT_ATTACK_STOP_SECONDS (3 by default with 1-second deadlines; the "attack_long" run sets it and
// WEFT_ATTACK_DEADLINE_MS to stop a rank for 40 s with 30-second deadlines, as the issue measured).
#include "member.hpp"
#include "../run_length.hpp"

#include <weft/comm/collectives.hpp>
#include <weft/comm/launcher.hpp>
#include <weft/comm/tcp_transport.hpp>

#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

namespace wc = weft::comm;
using namespace std::chrono_literals;

namespace {

// The long run (comm.attack_faults_long) sets 40 s and 30 s in the environment.
const std::chrono::seconds stop_for{weft_test::env_count("WEFT_ATTACK_STOP_SECONDS", 3)};
const std::chrono::milliseconds deadline{weft_test::env_count("WEFT_ATTACK_DEADLINE_MS", 1000)};
constexpr auto slack = 10s;  // sanitizers, a loaded machine: far below a hang, far above jitter

// The allreduce loop of a rank: until `steps` or a failure. On a failure the rank exits 40 when
// the error came within the deadline (+ slack) and names `blamed` as the peer, 41 otherwise; a
// rank that was itself stopped (blamed < 0) exits 40 on any weft::error (it only must not hang).
[[noreturn]] void loop_until_failure(wc::tcp_transport& t, int steps, int blamed) {
  std::vector<float> v(1 << 16, 1.0f);
  for (int s = 0; s < steps; ++s) {
    wc::options o;
    o.timeout = deadline;
    const auto start = wc::clock_type::now();
    try {
      wc::allreduce(t, std::span<float>(v), weft::op::sum{}, o);
    } catch (const weft::error& e) {
      const std::string what = e.what();
      const bool in_time = blamed < 0 || wc::clock_type::now() - start < deadline + slack;
      const bool names = blamed < 0 || what.find("peer " + std::to_string(blamed)) != std::string::npos;
      if (!(in_time && names)) std::fprintf(stderr, "rank %d: %s\n", t.rank(), what.c_str());
      ::_exit(in_time && names ? 40 : 41);
    }
    for (float& x : v) x = 1.0f;
  }
  ::_exit(0);
}

std::string pid_path(const char* what) {
  return (std::filesystem::temp_directory_path() / (std::string("weft-") + what + "-" + std::to_string(::getpid())))
      .string();
}

}  // namespace

TEST_CASE("attack: tcp rank stopped past the deadline, then resumed: the survivor fails in time naming it",
          "[comm][attack]") {
  const auto port = attack::free_port();
  const auto pid_file = pid_path("stop");
  std::filesystem::remove(pid_file);
  auto res = wc::fork_ranks(
      3,
      [&](int r) {
        if (r == 2) {  // the controller
          const pid_t victim = attack::wait_pid(pid_file);
          if (victim <= 0) ::_exit(3);
          std::this_thread::sleep_for(300ms);
          ::kill(victim, SIGSTOP);
          std::this_thread::sleep_for(stop_for);
          ::kill(victim, SIGCONT);
          ::_exit(0);
        }
        if (r == 1) {
          std::ofstream(pid_file + ".tmp") << ::getpid() << '\n';
          std::rename((pid_file + ".tmp").c_str(), pid_file.c_str());
        }
        wc::tcp_options o;
        o.connect_timeout = 20s;
        wc::tcp_transport t(r, 2, wc::tcp_rendezvous::rank0("127.0.0.1", port), o);
        loop_until_failure(t, 1'000'000, r == 0 ? 1 : -1);
      },
      stop_for + deadline + 60s);
  std::filesystem::remove(pid_file);
  // Rank 0 fails within its deadline naming peer 1; rank 1, resumed, finds the group aborted.
  CHECK(res.status == std::vector<int>{40, 40, 0});
}

TEST_CASE("attack: tcp rank killed mid-loop: every survivor fails in time naming it", "[comm][attack]") {
  const auto port = attack::free_port();
  const auto pid_file = pid_path("kill");
  std::filesystem::remove(pid_file);
  auto res = wc::fork_ranks(
      4,
      [&](int r) {
        if (r == 3) {
          const pid_t victim = attack::wait_pid(pid_file);
          if (victim <= 0) ::_exit(3);
          std::this_thread::sleep_for(300ms);
          ::kill(victim, SIGKILL);
          ::_exit(0);
        }
        if (r == 2) {
          std::ofstream(pid_file + ".tmp") << ::getpid() << '\n';
          std::rename((pid_file + ".tmp").c_str(), pid_file.c_str());
        }
        wc::tcp_transport t(r, 3, wc::tcp_rendezvous::rank0("127.0.0.1", port));
        loop_until_failure(t, 1'000'000, 2);
      },
      deadline + 60s);
  std::filesystem::remove(pid_file);
  CHECK(res.status == std::vector<int>{40, 40, -SIGKILL, 0});
}

TEST_CASE("attack (long): an elastic member stopped for 40 s, then resumed, is dropped; the rest go on",
          "[comm][attack]") {
  if (stop_for <= 10s) {
    SUCCEED("runs in comm.attack_faults_long only (WEFT_ATTACK_STOP_SECONDS > 10)");
    return;
  }
  attack::group_setup g;
  g.coordinator_port = attack::free_port();
  g.collective_timeout = deadline;
  g.heartbeat_timeout = 1500ms;
  g.round_timeout = 30s;
  const std::uint16_t mports[3] = {attack::free_port(), attack::free_port(), attack::free_port()};
  const auto pid_file = pid_path("estop");
  std::filesystem::remove(pid_file);
  auto res = wc::fork_ranks(
      5,
      [&](int r) {
        if (r == 0) return attack::run_coordinator(g, 120s);
        if (r <= 3)
          attack::run_member(g, std::string("m") + char('0' + r), mports[r - 1], 100, r == 3 ? 0 : 2, 110s,
                             r == 3 ? pid_file : std::string());
        const pid_t victim = attack::wait_pid(pid_file);
        if (victim <= 0) ::_exit(3);
        std::this_thread::sleep_for(1s);
        ::kill(victim, SIGSTOP);
        std::this_thread::sleep_for(stop_for);
        ::kill(victim, SIGCONT);
      },
      150s);
  std::filesystem::remove(pid_file);
  CHECK(res.status == std::vector<int>{0, 0, 0, 50, 0});
}

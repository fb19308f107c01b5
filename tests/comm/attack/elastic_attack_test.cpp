// Attack suite, elastic groups: strangers at the coordinator and at every member's mesh port while
// the group runs a checked allreduce loop, and peer faults (SIGSTOP then SIGCONT, SIGKILL) of a
// member mid-loop. The survivors must finish every step with correct results; no process may hang.
#include "member.hpp"

#include <weft/comm/launcher.hpp>

#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

namespace wc = weft::comm;
using namespace std::chrono_literals;

namespace {

struct ports {
  std::uint16_t coordinator = attack::free_port();
  std::uint16_t members[3] = {attack::free_port(), attack::free_port(), attack::free_port()};
};

// Sends text lines on a connection that skipped the handshake, and after a handshake without the
// job secret, a HELLO with an address nobody can use.
void bad_lines(std::uint16_t port) {
  if (auto fd = attack::reach(port, 2s)) {
    const std::string hello = "HELLO mallory 127.0.0.1 4000 w:f32[4096] 1\nREADY 18446744073709551615 1 1 1\n";
    attack::send_all(fd.get(), hello.data(), hello.size());
  }
  attack::wd::peer_identity id;
  id.name = "mallory";
  attack::wd::unique_fd fd;
  if (attack::claim(port, attack::wd::conn_kind::coordinator, id, {}, &fd, 2s)) {
    const std::string hello = "HELLO mallory 999.0.0.1 0 w:f32[4096] 1\n";
    attack::send_all(fd.get(), hello.data(), hello.size());
  }
}

}  // namespace

TEST_CASE("attack: strangers at the coordinator and the mesh ports during a running loop", "[comm][attack]") {
  for (const char* secret : {"", "the attack suite's job secret"}) {
    const ports p;
    attack::group_setup g;
    g.coordinator_port = p.coordinator;
    g.secret = secret;
    auto res = wc::fork_ranks(
        5,
        [&](int r) {
          if (r == 0) return attack::run_coordinator(g);
          if (r <= 3) attack::run_member(g, std::string("m") + char('0' + r), p.members[r - 1], 400, 3);
          // The stranger: garbage lines, then the nuisance mix on every port of the group, again and
          // again until the group is done (the coordinator's port closes).
          bad_lines(p.coordinator);
          const auto give_up = std::chrono::steady_clock::now() + 30s;
          while (std::chrono::steady_clock::now() < give_up && attack::reach(p.coordinator, 300ms)) {
            attack::nuisance(p.coordinator, 300, 1s, 1, 300ms);
            for (auto port : p.members) attack::nuisance(port, 20, 300ms, 2, 300ms);
          }
        },
        90s);
    INFO("secret '" << secret << "'");
    CHECK(res.status == std::vector<int>{0, 0, 0, 0, 0});
  }
}

TEST_CASE("attack: a member stopped (SIGSTOP) past the deadlines, then resumed, is dropped; the rest go on",
          "[comm][attack]") {
  for (int sig : {SIGSTOP, SIGKILL}) {
    const ports p;
    attack::group_setup g;
    g.coordinator_port = p.coordinator;
    const auto pid_file =
        (std::filesystem::temp_directory_path() / ("weft-attack-pid-" + std::to_string(::getpid()))).string();
    std::filesystem::remove(pid_file);
    auto res = wc::fork_ranks(
        5,
        [&](int r) {
          if (r == 0) return attack::run_coordinator(g);
          if (r <= 3)
            attack::run_member(g, std::string("m") + char('0' + r), p.members[r - 1], 100, r == 3 ? 0 : 2, 40s,
                               r == 3 ? pid_file : std::string());  // the survivors count steps without it
          const pid_t victim = attack::wait_pid(pid_file);
          if (victim <= 0) ::_exit(3);
          std::this_thread::sleep_for(1s);  // mid-loop
          ::kill(victim, sig);
          if (sig == SIGSTOP) {
            std::this_thread::sleep_for(4s);  // past the collective and heartbeat deadlines
            ::kill(victim, SIGCONT);
          }
        },
        90s);
    std::filesystem::remove(pid_file);
    INFO("signal " << sig);
    CHECK(res.status[0] == 0);
    CHECK(res.status[1] == 0);  // the survivors finish every step, with correct results
    CHECK(res.status[2] == 0);
    CHECK(res.status[3] == (sig == SIGSTOP ? 50 : -SIGKILL));  // resumed: it learns it was dropped
    CHECK(res.status[4] == 0);
  }
}

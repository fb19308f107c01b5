// The attack suite's elastic group: a coordinator process and member processes that run a checked
// allreduce loop, re-syncing after every failure, so a test can attack or signal them and then
// assert on exit codes: 0 = all steps done with correct results, 7 = a wrong result, 8 = gave up
// at the deadline, 50 = this member was dropped by the coordinator (it stopped answering).
#pragma once

#include "attackers.hpp"

#include <weft/comm/elastic.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace attack {

namespace we = weft::comm::elastic;

struct group_setup {
  std::uint16_t coordinator_port = 0;
  std::string secret;  // "" = none: no WEFT_JOB_SECRET either, and the unauthenticated opt-in
  std::chrono::milliseconds heartbeat_timeout{1000};
  std::chrono::milliseconds collective_timeout{1000};
  std::chrono::milliseconds round_timeout{10'000};
  int min_members = 3;
};

/// Runs a coordinator until every member has left (or `most`), then exits 0.
inline void run_coordinator(const group_setup& g, std::chrono::milliseconds most = 60s) {
  we::coordinator_options co;
  co.port = g.coordinator_port;
  co.min_members = g.min_members;
  co.heartbeat_timeout = g.heartbeat_timeout;
  co.secret = g.secret;
  if (g.secret.empty()) {
    ::unsetenv("WEFT_JOB_SECRET");  // not the launcher's either
    co.allow_unauthenticated = true;
  }
  co.handshake_timeout = 500ms;
  co.spec = "w:f32[4096]";
  we::coordinator c(co);
  c.start();
  const auto until = std::chrono::steady_clock::now() + most;
  while (std::chrono::steady_clock::now() < until && !(c.epoch() > 0 && c.members().empty()))
    std::this_thread::sleep_for(20ms);
  c.stop();
}

inline float contribution(const std::string& name, std::size_t i) {
  return static_cast<float>((name.back() % 5 + 1) * static_cast<int>(i % 3 + 1));
}

/// A member: `steps` checked allreduce steps on a 4096-float state in epochs of `group_size`
/// members (steps in epochs of another size do not count), re-syncing after failures, for at most
/// `most`. Writes its pid to `pid_file` first when given. Exits with the codes above.
[[noreturn]] inline void run_member(const group_setup& g, const std::string& name, std::uint16_t port, int steps,
                                    int group_size, std::chrono::milliseconds most = 40s,
                                    const std::string& pid_file = {}) {
  if (!pid_file.empty()) {
    std::ofstream(pid_file + ".tmp") << ::getpid() << '\n';
    std::rename((pid_file + ".tmp").c_str(), pid_file.c_str());
  }
  std::vector<float> w(4096, 0.0f);
  we::shared_state state;
  state.add("w", std::span<float>(w));
  we::group_options o;
  o.coordinator_port = g.coordinator_port;
  o.name = name;
  o.port = port;
  o.secret = g.secret;
  if (g.secret.empty()) {
    ::unsetenv("WEFT_JOB_SECRET");
    o.allow_unauthenticated = true;
  }
  o.heartbeat_interval = g.heartbeat_timeout / 5;
  o.collective_timeout = g.collective_timeout;
  o.connect_timeout = 2s;
  o.round_timeout = g.round_timeout;
  o.handshake_timeout = 500ms;
  const auto until = std::chrono::steady_clock::now() + most;
  int code = 8;
  try {
    we::elastic_group group(state, o);
    int done = 0;
    while (done < steps && std::chrono::steady_clock::now() < until) {
      try {
        const auto info = group.sync();
        std::vector<float> v(w.size());
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = contribution(name, i);
        group.allreduce(std::span<float>(v));
        for (std::size_t i = 0; i < v.size(); ++i) {
          float want = 0;
          for (const auto& m : info.members) want += contribution(m, i);
          if (v[i] != want) ::_exit(7);
        }
        for (std::size_t i = 0; i < w.size(); ++i) w[i] += v[i] * 1e-3f;
        state.advance();
        if (info.size == group_size) ++done;
      } catch (const weft::error& e) {
        if (std::getenv("WEFT_ATTACK_DEBUG")) std::fprintf(stderr, "%s step %d: %s\n", name.c_str(), done, e.what());
        if (!group.connected()) ::_exit(50);
      }
    }
    code = done == steps ? 0 : 8;
    if (code != 0) std::fprintf(stderr, "member %s: %d of %d steps\n", name.c_str(), done, steps);
  } catch (const weft::error& e) {
    std::fprintf(stderr, "member %s: %s\n", name.c_str(), e.what());
    code = 9;
  }
  std::fflush(nullptr);
  ::_exit(code);
}

/// The pid a member wrote to `pid_file`, waiting up to 20 s for it.
inline pid_t wait_pid(const std::string& pid_file) {
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < until) {
    std::ifstream in(pid_file);
    pid_t pid = 0;
    if (in >> pid && pid > 0) return pid;
    std::this_thread::sleep_for(10ms);
  }
  return 0;
}

}  // namespace attack

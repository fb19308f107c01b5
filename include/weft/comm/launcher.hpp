// Starting N local ranks: fork_ranks runs a function in N forked processes (tests, examples,
// single-binary jobs), spawn_ranks starts N copies of a program with WEFT_RANK / WEFT_SIZE set
// (what mpirun does, for one host). Both give the ranks a fresh per-job secret in WEFT_JOB_SECRET
// (unless one is set already), so the tcp and elastic jobs they form are authenticated, and both
// wait for all ranks and report each exit status.
#pragma once

#include <weft/comm/detail/env.hpp>
#include <weft/comm/detail/handshake.hpp>
#include <weft/core/error.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace weft::comm {

/// Exit status of every rank: 0 is success; 124 means killed at the launcher's timeout; a
/// negative value is minus the signal that ended the process. A plain value.
struct launch_result {
  std::vector<int> status;
  bool ok() const noexcept {
    for (int s : status)
      if (s != 0) return false;
    return true;
  }
};

/// A fresh job secret (32 random bytes as 64 hex characters) for WEFT_JOB_SECRET or a secret
/// option, for launchers other than fork_ranks and spawn_ranks. Thread-safe.
inline std::string make_job_secret() { return detail::make_job_secret(); }

namespace detail {
/// The secret the ranks of a launch get: "" when WEFT_JOB_SECRET is set already (they inherit it)
/// or the user opted out of authentication with WEFT_ALLOW_UNAUTHENTICATED=1, else a fresh one.
inline std::string secret_for_launch() {
  if (std::getenv("WEFT_JOB_SECRET") != nullptr) return {};
  const char* allow = std::getenv("WEFT_ALLOW_UNAUTHENTICATED");
  if (allow != nullptr && std::string_view(allow) == "1") return {};
  return make_job_secret();
}

inline launch_result wait_ranks(const std::vector<pid_t>& pids, std::chrono::milliseconds timeout) {
  launch_result res;
  res.status.assign(pids.size(), 124);
  std::vector<bool> done(pids.size(), false);
  const auto until = std::chrono::steady_clock::now() + timeout;
  std::size_t left = pids.size();
  while (left > 0) {
    bool any = false;
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int st = 0;
      const pid_t r = ::waitpid(pids[i], &st, WNOHANG);
      if (r == pids[i]) {
        done[i] = true;
        --left;
        any = true;
        res.status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : (WIFSIGNALED(st) ? -WTERMSIG(st) : 125);
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() >= until) {
      for (std::size_t i = 0; i < pids.size(); ++i)  // only the processes this launcher started
        if (!done[i]) ::kill(pids[i], SIGKILL);
      for (std::size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) ::waitpid(pids[i], nullptr, 0);
      break;
    }
    if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return res;
}
}  // namespace detail

/// Forks n processes; process r calls fn(r) and exits 0, or prints the exception and exits 1.
/// Unless WEFT_JOB_SECRET is set (or WEFT_ALLOW_UNAUTHENTICATED=1), every rank gets the same fresh
/// secret in WEFT_JOB_SECRET (this process's environment is left as it was). Kills the ranks still running at `timeout`
/// (status 124). Call it from a single-threaded process (fork copies only the calling thread). Throws
/// errc::invalid_argument for n < 1 and errc::io when fork fails. O(n) processes.
template <class Fn>
launch_result fork_ranks(int n, Fn&& fn, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  expects(n >= 1, errc::invalid_argument, "weft::comm::fork_ranks", "rank count ", n, " must be >= 1");
  const std::string secret = detail::secret_for_launch();
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
      for (pid_t p : pids) ::waitpid(p, nullptr, 0);
      weft::detail::raise(errc::io, "weft::comm::fork_ranks", "fork failed for rank ", r);
    }
    if (pid == 0) {
      int code = 0;
      try {
        if (!secret.empty()) ::setenv("WEFT_JOB_SECRET", secret.c_str(), 1);
        fn(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d failed: %s\n", r, e.what());
        code = 1;
      } catch (...) {
        std::fprintf(stderr, "rank %d failed with a non-standard exception\n", r);
        code = 1;
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  return detail::wait_ranks(pids, timeout);
}

/// Starts n copies of `program` with `args`, each with WEFT_RANK=r and WEFT_SIZE=n added to the
/// environment (and, unless WEFT_JOB_SECRET is set or WEFT_ALLOW_UNAUTHENTICATED=1, the same fresh
/// secret in it), and waits for
/// them (killing stragglers at `timeout`). Throws errc::io when a process cannot be started.
inline launch_result spawn_ranks(int n, const std::string& program, const std::vector<std::string>& args,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  expects(n >= 1, errc::invalid_argument, "weft::comm::spawn_ranks", "rank count ", n, " must be >= 1");
  const std::string secret = detail::secret_for_launch();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> env_store;
    for (char** e = environ; *e; ++e) {
      const std::string s(*e);
      if (s.rfind("WEFT_RANK=", 0) != 0 && s.rfind("WEFT_SIZE=", 0) != 0) env_store.push_back(s);
    }
    env_store.push_back("WEFT_RANK=" + std::to_string(r));
    env_store.push_back("WEFT_SIZE=" + std::to_string(n));
    if (!secret.empty()) env_store.push_back("WEFT_JOB_SECRET=" + secret);
    std::vector<char*> envp, argv;
    for (auto& s : env_store) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string prog = program;
    std::vector<std::string> arg_store(args);
    argv.push_back(prog.data());
    for (auto& a : arg_store) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = ::posix_spawn(&pid, program.c_str(), nullptr, nullptr, argv.data(), envp.data());
    if (rc != 0) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
      for (pid_t p : pids) ::waitpid(p, nullptr, 0);
      weft::detail::raise(errc::io, "weft::comm::spawn_ranks", "cannot start '", program, "' for rank ", r, ": error ",
                          rc);
    }
    pids.push_back(pid);
  }
  return detail::wait_ranks(pids, timeout);
}

/// This process's rank and group size from WEFT_RANK / WEFT_SIZE (set by spawn_ranks), or
/// {0, 1} when both are absent. Both are read strictly (detail/env.hpp): decimal digits only,
/// WEFT_SIZE in [1, 65536] and WEFT_RANK in [0, WEFT_SIZE); an empty value, a value out of range,
/// trailing characters or only one of the two set throw errc::parse.
struct rank_env {
  int rank = 0;
  int size = 1;
};
inline rank_env rank_from_env() {
  constexpr const char* where = "weft::comm::rank_from_env";
  const auto size = detail::env_integer("WEFT_SIZE", 1, 65536, where);
  const auto rank = detail::env_integer("WEFT_RANK", 0, size ? *size - 1 : 65535, where);
  expects(rank.has_value() == size.has_value(), errc::parse, where, "WEFT_RANK and WEFT_SIZE must be set together (",
          rank ? "WEFT_SIZE" : "WEFT_RANK", " is missing)");
  if (!rank) return {};
  return {static_cast<int>(*rank), static_cast<int>(*size)};
}

}  // namespace weft::comm

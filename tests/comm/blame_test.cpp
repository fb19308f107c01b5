// Blame the right rank: a rank stopped with SIGSTOP in the middle of an allreduce loop makes the
// others fail at their deadline, and every survivor's comm_error names the stopped rank (the one
// the others' "waiting on" reports lead to), not a neighbour that was itself waiting. Each rank of
// 4 in turn, over tcp and shm; ranks are forked processes, stopped by the parent.
#include "job_secret.hpp"

#include <weft/comm/allreduce.hpp>
#include <weft/comm/comm_error.hpp>
#include <weft/comm/shm_transport.hpp>
#include <weft/comm/tcp_transport.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace wc = weft::comm;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

std::uint16_t free_port() {
  auto fd = weft::comm::detail::listen_tcp(*weft::comm::detail::parse_ipv4("127.0.0.1"), 0, "free_port");
  return weft::comm::detail::local_port(fd.get());
}

template <class Tr>
[[noreturn]] void loop(Tr& t, const fs::path& dir, int r) {
  std::vector<float> v(16 * 1024, 1.0f);
  wc::options o;
  o.algo = wc::algorithm::ring;
  o.timeout = 1500ms;
  int code = 0, blamed = -2;
  std::string what;
  try {
    for (int i = 0;; ++i) {
      wc::allreduce(t, std::span<float>(v), weft::op::max{}, o);
      if (i == 20) std::ofstream(dir / ("ready-" + std::to_string(r))) << "1\n";
    }
  } catch (const wc::comm_error& e) {
    code = e.code().value();
    blamed = e.info().blamed;
    what = e.what();
  } catch (const std::exception& e) {
    code = 1000;
    what = e.what();
  }
  std::ofstream(dir / ("out-" + std::to_string(r))) << code << '\n' << blamed << '\n' << what << '\n';
  std::fflush(nullptr);
  ::_exit(0);
}

struct outcome {
  int code = -1, blamed = -3;
  std::string what;
};

// Starts 4 ranks, stops `stopped` once every rank has run 20 allreduces, returns the survivors'
// outcomes (the stopped rank's entry is left empty).
std::vector<outcome> run(const std::string& kind, int stopped) {
  constexpr int p = 4;
  const fs::path dir = fs::temp_directory_path() / ("weft-blame-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto port = free_port();
  const std::string shm_name = "/weft-blame-" + std::to_string(::getpid());
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < p; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        if (kind == "shm") {
          wc::shm_transport t(shm_name, r, p);
          loop(t, dir, r);
        } else {
          wc::tcp_transport t(r, p, wc::tcp_rendezvous::rank0("127.0.0.1", port));
          loop(t, dir, r);
        }
      } catch (...) {
        ::_exit(3);
      }
    }
    pids.push_back(pid);
  }
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  auto all_ready = [&] {
    for (int r = 0; r < p; ++r)
      if (!fs::exists(dir / ("ready-" + std::to_string(r)))) return false;
    return true;
  };
  while (!all_ready() && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(1ms);
  ::kill(pids[static_cast<std::size_t>(stopped)], SIGSTOP);
  for (int r = 0; r < p; ++r) {
    if (r == stopped) continue;
    int st = 0;
    while (::waitpid(pids[static_cast<std::size_t>(r)], &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > give_up) {
        ::kill(pids[static_cast<std::size_t>(r)], SIGKILL);  // only the processes this test started
        ::waitpid(pids[static_cast<std::size_t>(r)], &st, 0);
        break;
      }
      std::this_thread::sleep_for(2ms);
    }
  }
  ::kill(pids[static_cast<std::size_t>(stopped)], SIGKILL);
  ::waitpid(pids[static_cast<std::size_t>(stopped)], nullptr, 0);
  if (kind == "shm") ::shm_unlink(shm_name.c_str());
  std::vector<outcome> out(p);
  for (int r = 0; r < p; ++r) {
    if (r == stopped) continue;
    std::ifstream in(dir / ("out-" + std::to_string(r)));
    std::string line;
    auto& o = out[static_cast<std::size_t>(r)];
    if (std::getline(in, line)) o.code = std::stoi(line);
    if (std::getline(in, line)) o.blamed = std::stoi(line);
    std::getline(in, o.what);
  }
  fs::remove_all(dir);
  return out;
}

}  // namespace

TEST_CASE("SIGSTOP of each rank in turn: every survivor blames the stopped rank", "[comm][blame]") {
  for (const std::string kind : {"tcp", "shm"})
    for (int stopped = 0; stopped < 4; ++stopped) {
      const auto out = run(kind, stopped);
      for (int r = 0; r < 4; ++r) {
        if (r == stopped) continue;
        const auto& o = out[static_cast<std::size_t>(r)];
        INFO(kind << ": rank " << stopped << " stopped; rank " << r << " says: " << o.what);
        const auto code = static_cast<weft::errc>(o.code);
        CHECK((code == weft::errc::timeout || code == weft::errc::aborted));
        CHECK(o.blamed == stopped);
      }
    }
}

// Multi-process tests of elastic groups over tcp on loopback (weft's own mesh transport, see
// docs/comm-elastic.md): real kill -9 and SIGSTOP of a member process.
#include "../job_secret.hpp"

#include <weft/comm/elastic.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace we = weft::comm::elastic;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t target_revision = 60;

// Forwards to the mesh and, on its `after`-th send, delivers `sig` to this very process: a real
// SIGKILL / SIGSTOP that lands deterministically in the middle of a collective.
struct signal_after {
  we::mesh_transport* t;
  int after, sig;
  int sent = 0;
  int rank() const { return t->rank(); }
  int size() const { return t->size(); }
  void fire() {
    if (++sent == after) ::raise(sig);
  }
  void send(int p, weft::comm::msg_tag tag, std::span<const std::byte> b, weft::comm::deadline u) {
    t->send(p, tag, b, u);
    fire();
  }
  void recv(int p, weft::comm::msg_tag tag, std::span<std::byte> b, weft::comm::deadline u) { t->recv(p, tag, b, u); }
  void sendrecv(int d, std::span<const std::byte> o, int s, std::span<std::byte> i, weft::comm::msg_tag tag,
                weft::comm::deadline u) {
    t->sendrecv(d, o, s, i, tag, u);
    fire();
  }
  void abort(std::string_view why) { t->abort(why); }
};

// A member process: steps until the target revision, logging "rev hash" after every sync and
// "ERR <message>" for every failure it survived. Exits 3 when the group dropped it.
[[noreturn]] void worker(int port, const std::string& name, const std::string& dir, int signal_at_15 = 0) {
  int code = 0;
  {
    std::ofstream log(dir + "/" + name + ".log");
    std::vector<float> w(256, 0.0f);
    we::shared_state st;
    st.add("w", std::span<float>(w));
    we::group_options o;
    o.coordinator_port = port;
    o.name = name;
    o.heartbeat_interval = 100ms;
    o.collective_timeout = 2s;
    o.connect_timeout = 2s;
    o.round_timeout = 20s;
    try {
      we::elastic_group g(st, o);
      const auto give_up = std::chrono::steady_clock::now() + 60s;
      while (st.revision() < target_revision && std::chrono::steady_clock::now() < give_up) {
        try {
          const auto info = g.sync();
          log << st.revision() << ' ' << st.hash() << std::endl;
          for (const auto& d : info.departed) log << "DEPARTED " << d << std::endl;
          std::vector<float> grad(w.size());
          for (std::size_t i = 0; i < grad.size(); ++i)
            grad[i] = static_cast<float>((i + st.revision()) % 3) * 0.5f - w[i] * 0.01f;
          // The signal must land mid-collective on every member: halving-doubling sends 4 messages
          // per member at 4 members (the tuner would pick recursive doubling, 2 messages, here).
          weft::comm::options pinned;
          pinned.algo = weft::comm::algorithm::halving_doubling;
          if (signal_at_15 != 0 && st.revision() == 15) {
            signal_after sa{&g.transport(), 2, signal_at_15};
            weft::comm::options opt = pinned;
            opt.channel = g.next_channel();
            opt.timeout = 1s;
            g.run_collective(
                std::span<float>(grad),
                [&] { weft::comm::allreduce(sa, std::span<float>(grad), weft::op::sum{}, opt); }, opt.channel);
          } else {
            g.allreduce(std::span<float>(grad), weft::op::sum{}, pinned);
          }
          for (std::size_t i = 0; i < w.size(); ++i) w[i] += grad[i];
          st.advance();
          std::this_thread::sleep_for(10ms);
        } catch (const weft::error& e) {
          log << "ERR " << e.what() << std::endl;
          if (!g.connected()) {
            code = 3;
            break;
          }
        }
      }
      if (code == 0) {
        g.sync();  // the final state is the one every member agrees on
        log << "DONE " << st.revision() << ' ' << st.hash() << std::endl;
      }
    } catch (const std::exception& e) {
      log << "FATAL " << e.what() << std::endl;
      code = 2;
    }
  }
  std::fflush(nullptr);
  ::_exit(code);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct cluster {
  std::string dir;
  std::vector<pid_t> pids;
  std::vector<std::string> names;
};

cluster start(we::coordinator& coord, int n, int victim = -1, int sig = 0) {
  char tmpl[] = "/tmp/weft_elastic_XXXXXX";
  cluster c;
  c.dir = ::mkdtemp(tmpl);
  std::fflush(nullptr);
  for (int k = 0; k < n; ++k) {
    c.names.push_back("w" + std::to_string(k));
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) worker(coord.port(), c.names.back(), c.dir, k == victim ? sig : 0);
    c.pids.push_back(pid);
  }
  coord.start();  // after fork: the children must not inherit the coordinator's thread
  return c;
}

int wait_exit(pid_t pid, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG | WUNTRACED) == pid) {
      if (WIFSTOPPED(st)) return 1000 + WSTOPSIG(st);
      return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
    }
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      return 124;
    }
    std::this_thread::sleep_for(10ms);
  }
}

// Every revision any survivor reported after a sync has exactly one hash across survivors.
void check_agreement(const cluster& c, const std::vector<int>& survivors) {
  std::map<std::uint64_t, std::set<std::uint64_t>> seen;
  std::set<std::string> finals;
  for (int k : survivors) {
    std::istringstream in(slurp(c.dir + "/" + c.names[static_cast<std::size_t>(k)] + ".log"));
    std::string line;
    while (std::getline(in, line)) {
      std::uint64_t r = 0, h = 0;
      if (std::sscanf(line.c_str(), "%lu %lu", &r, &h) == 2) seen[r].insert(h);
      if (line.rfind("DONE", 0) == 0) finals.insert(line);
    }
  }
  for (const auto& [rev, hs] : seen) {
    INFO("revision " << rev);
    CHECK(hs.size() == 1);
  }
  CHECK(finals.size() == 1);  // the same final revision and hash everywhere
  CHECK(seen.rbegin()->first + 1 >= target_revision);
}

}  // namespace

TEST_CASE("kill -9 of a member mid-run: survivors get an error naming it, re-form, agree", "[comm][elastic][process]") {
  we::coordinator_options co;
  co.min_members = 4;
  co.heartbeat_timeout = 2s;  // generous: the suite may run on a loaded machine (ASan, -j)
  we::coordinator coord(co);
  auto c = start(coord, 4, 2, SIGKILL);  // w2 dies by SIGKILL inside the allreduce of revision 15
  const auto killed_at = std::chrono::steady_clock::now();
  CHECK(wait_exit(c.pids[2], 30s) == -SIGKILL);
  for (int k : {0, 1, 3}) {
    INFO(slurp(c.dir + "/w" + std::to_string(k) + ".log"));
    CHECK(wait_exit(c.pids[static_cast<std::size_t>(k)], 60s) == 0);
  }
  const auto took = std::chrono::steady_clock::now() - killed_at;
  check_agreement(c, {0, 1, 3});
  for (int k : {0, 1, 3}) {  // every survivor's error names the dead member
    const auto log = slurp(c.dir + "/w" + std::to_string(k) + ".log");
    INFO(log);
    CHECK(log.find("ERR") != std::string::npos);
    CHECK(log.find("(w2)") != std::string::npos);
  }
  bool dropped = false;
  for (const auto& e : coord.events()) dropped |= e.find("w2 dropped") != std::string::npos;
  CHECK(dropped);
  CHECK(coord.members() == std::vector<std::string>{});  // everyone finished and left
  CHECK(took < 40s);
  for (int k : {0, 1, 3})
    CHECK(slurp(c.dir + "/w" + std::to_string(k) + ".log").find("DEPARTED w2") != std::string::npos);
  coord.stop();
  std::filesystem::remove_all(c.dir);
}

TEST_CASE("SIGSTOP of a member: survivors time out, the coordinator drops it, it learns on SIGCONT",
          "[comm][elastic][process]") {
  we::coordinator_options co;
  co.min_members = 4;
  co.heartbeat_timeout = 2s;  // generous: the suite may run on a loaded machine (ASan, -j)
  we::coordinator coord(co);
  auto c = start(coord, 4, 1, SIGSTOP);  // w1 stops itself inside the allreduce of revision 15
  CHECK(wait_exit(c.pids[1], 30s) == 1000 + SIGSTOP);
  for (int k : {0, 2, 3}) {
    INFO(slurp(c.dir + "/w" + std::to_string(k) + ".log"));
    CHECK(wait_exit(c.pids[static_cast<std::size_t>(k)], 60s) == 0);
  }
  ::kill(c.pids[1], SIGCONT);
  const int stopped_exit = wait_exit(c.pids[1], 20s);
  INFO(slurp(c.dir + "/w1.log"));
  CHECK(stopped_exit == 3);  // it was told it is no longer a member, and did not corrupt anyone
  check_agreement(c, {0, 2, 3});
  bool missed = false;
  for (const auto& e : coord.events()) missed |= e.find("w1 dropped: missed heartbeats") != std::string::npos;
  CHECK(missed);
  for (int k : {0, 2, 3}) {  // the next round tells every survivor which member stalled
    const auto log = slurp(c.dir + "/w" + std::to_string(k) + ".log");
    INFO(log);
    CHECK(log.find("DEPARTED w1") != std::string::npos);
  }
  bool timed_out = false;
  for (int k : {0, 2, 3})
    timed_out |= slurp(c.dir + "/w" + std::to_string(k) + ".log").find("before the deadline") != std::string::npos;
  CHECK(timed_out);
  coord.stop();
  std::filesystem::remove_all(c.dir);
}

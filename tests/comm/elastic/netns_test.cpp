// An elastic group across two network namespaces joined by a veth pair (10.77.0.1 <-> 10.77.0.2):
// the coordinator and one member in namespace A, another member in namespace B, so the members
// talk through a real (virtual) link instead of loopback. Skipped, with a message, when this
// process may not create namespaces (needs CAP_NET_ADMIN / CAP_SYS_ADMIN).
#include "../job_secret.hpp"

#include <weft/comm/elastic.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace we = weft::comm::elastic;
using namespace std::chrono_literals;

namespace {

bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

bool enter(const std::string& ns) {
  const int fd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::setns(fd, CLONE_NEWNET) == 0;
  ::close(fd);
  return ok;
}

// Runs 20 steps as member `name` listening on `host`; writes the final hash to `out` (a pipe).
int member(const std::string& name, const std::string& host, const std::string& coord_host, int port, int out) {
  std::vector<float> w(1000, 0.0f);
  we::shared_state st;
  st.add("w", std::span<float>(w));
  we::group_options o;
  o.coordinator_host = coord_host;
  o.coordinator_port = port;
  o.name = name;
  o.host = host;
  o.round_timeout = 20s;
  we::elastic_group g(st, o);
  while (st.revision() < 20) {
    const auto info = g.sync();
    if (info.size != 2) continue;
    std::vector<float> grad(w.size(), name == "a" ? 1.0f : 2.0f);
    g.allreduce(std::span<float>(grad));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] += grad[i] * 0.5f;
    st.advance();
  }
  g.sync();
  const std::uint64_t h = st.hash();
  const bool right = w[0] == 30.0f;  // 20 steps of (1 + 2) / 2
  return ::write(out, &h, sizeof h) == sizeof h && right ? 0 : 1;
}

int wait_for(pid_t pid) {
  int st = 0;
  for (int i = 0; i < 6000; ++i) {
    if (::waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    std::this_thread::sleep_for(10ms);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return 124;
}

}  // namespace

TEST_CASE("an elastic group across two network namespaces joined by a veth pair", "[comm][elastic][netns]") {
  const std::string id = std::to_string(::getpid());
  const std::string a = "weft_a_" + id, b = "weft_b_" + id, va = "wva" + id, vb = "wvb" + id;
  const bool made = sh("ip netns add " + a) && sh("ip netns add " + b) &&
                    sh("ip link add " + va + " type veth peer name " + vb) && sh("ip link set " + va + " netns " + a) &&
                    sh("ip link set " + vb + " netns " + b) && sh("ip -n " + a + " addr add 10.77.0.1/24 dev " + va) &&
                    sh("ip -n " + b + " addr add 10.77.0.2/24 dev " + vb) &&
                    sh("ip -n " + a + " link set " + va + " up") && sh("ip -n " + b + " link set " + vb + " up") &&
                    sh("ip -n " + a + " link set lo up") && sh("ip -n " + b + " link set lo up");
  auto cleanup = [&] {
    sh("ip netns del " + a);
    sh("ip netns del " + b);
    sh("ip link del " + va);
  };
  if (!made) {
    cleanup();
    WARN(
        "SKIPPED: cannot create network namespaces and a veth pair here (needs root or CAP_NET_ADMIN and "
        "iproute2); the namespace test did not run");
    return;
  }
  int port_pipe[2], hash_pipe[2];
  REQUIRE(::pipe(port_pipe) == 0);
  REQUIRE(::pipe(hash_pipe) == 0);
  std::fflush(nullptr);
  const pid_t pa = ::fork();
  REQUIRE(pa >= 0);
  if (pa == 0) {  // namespace A: the coordinator and member "a"
    int code = 1;
    try {
      if (enter(a)) {
        we::coordinator_options co;
        co.host = "10.77.0.1";
        co.min_members = 2;
        we::coordinator coord(co);
        coord.start();
        const int port = coord.port();
        if (::write(port_pipe[1], &port, sizeof port) == sizeof port)
          code = member("a", "10.77.0.1", "10.77.0.1", port, hash_pipe[1]);
        coord.stop();
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "namespace A: %s\n", e.what());
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  int port = 0;
  const bool got_port = ::read(port_pipe[0], &port, sizeof port) == sizeof port;
  const pid_t pb = got_port ? ::fork() : -1;
  if (pb == 0) {  // namespace B: member "b", reaching A only over the veth link
    int code = 1;
    try {
      if (enter(b)) code = member("b", "10.77.0.2", "10.77.0.1", port, hash_pipe[1]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "namespace B: %s\n", e.what());
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  const int ra = wait_for(pa), rb = pb > 0 ? wait_for(pb) : -1;
  std::uint64_t h1 = 0, h2 = 0;
  const bool two = ra == 0 && rb == 0 && ::read(hash_pipe[0], &h1, sizeof h1) == sizeof h1 &&
                   ::read(hash_pipe[0], &h2, sizeof h2) == sizeof h2;
  for (int fd : {port_pipe[0], port_pipe[1], hash_pipe[0], hash_pipe[1]}) ::close(fd);
  cleanup();
  CHECK(got_port);
  CHECK(ra == 0);
  CHECK(rb == 0);
  REQUIRE(two);
  CHECK(h1 == h2);
}

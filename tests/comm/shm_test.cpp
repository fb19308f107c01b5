#include "process_check.hpp"

#include <weft/comm/launcher.hpp>
#include <weft/comm/shm_transport.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <span>
#include <string>
#include <vector>
#include <sched.h>
#include <unistd.h>

namespace wc = weft::comm;

namespace {
std::string unique_name(const char* what, int p) {
  return "/weft-test-" + std::string(what) + "-" + std::to_string(::getpid()) + "-" + std::to_string(p);
}
}  // namespace

TEST_CASE("shm transport: every algorithm in forked processes for every rank count", "[comm][shm]") {
  for (int p : {1, 2, 3, 4, 5, 7, 8}) {
    const std::string name = unique_name("all", p);
    const auto P = static_cast<std::size_t>(p);
    auto res = wc::fork_ranks(p, [&](int r) {
      wc::shm_options so;
      so.ring_bytes = 1 << 16;  // small rings: messages wrap around and fill them
      wc::shm_transport t(name, r, p, so);
      weft_test::check_all_collectives(t, {0, 1, P - 1, P + 1, 4 * P + 3, 70'001}, 4096);
    });
    INFO("p=" << p);
    CHECK(res.ok());
  }
}

TEST_CASE("shm transport: several MiB through 4 processes", "[comm][shm]") {
  const std::string name = unique_name("big", 4);
  auto res = wc::fork_ranks(4, [&](int r) {
    wc::shm_transport t(name, r, 4);
    weft_test::check_all_collectives(t, {(std::size_t{3} << 20) / 4 + 5}, std::size_t{1} << 19);
  });
  CHECK(res.ok());
}

TEST_CASE("shm transport: disagreeing ranks fail fast on every rank; a dead peer is noticed", "[comm][shm]") {
  const std::string name = unique_name("bad", 3);
  auto res = wc::fork_ranks(3, [&](int r) {
    wc::shm_transport t(name, r, 3);
    weft_test::disagreeing_allreduce(t, r);
  });
  CHECK(res.status == std::vector<int>{42, 42, 42});

  const std::string name2 = unique_name("dead", 2);
  auto res2 = wc::fork_ranks(2, [&](int r) {
    wc::shm_transport t(name2, r, 2);
    if (r == 1) ::_exit(0);  // leaves without a word
    std::vector<float> data(10, 1.0f);
    wc::options opt;
    opt.timeout = std::chrono::seconds(20);
    const auto start = wc::clock_type::now();
    try {
      wc::allreduce(t, std::span<float>(data), weft::op::sum{}, opt);
    } catch (const weft::error& e) {
      const bool fast = wc::clock_type::now() - start < std::chrono::seconds(5);
      if (!fast || static_cast<weft::errc>(e.code().value()) != weft::errc::peer_failure)
        std::fprintf(stderr, "unexpected outcome: %s\n", e.what());
      ::_exit(fast && static_cast<weft::errc>(e.code().value()) == weft::errc::peer_failure ? 42 : 2);
    }
    ::_exit(3);
  });
  CHECK(res2.status == std::vector<int>{42, 0});

  CHECK_THROWS_AS(wc::shm_transport("no-slash", 0, 1), weft::error);
  CHECK_THROWS_AS(wc::shm_transport("/x", 2, 2), weft::error);
  wc::shm_options odd;
  odd.ring_bytes = 5000;
  CHECK_THROWS_AS(wc::shm_transport("/x", 0, 1, odd), weft::error);
}

namespace {
// Bytes a message of `n` bytes from `from` carries (distinct per size and sender, so a frame read
// out of step or a pad read as payload shows).
std::vector<std::byte> pattern(std::size_t n, int from) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::byte>((i * 31 + n + static_cast<std::size_t>(from)) & 0xff);
  return v;
}
}  // namespace

TEST_CASE("shm transport: eager messages at and just over eager_max, and mixed with large ones in one collective",
          "[comm][shm]") {
  for (int p : {2, 3}) {
    const std::string name = unique_name("eager", p);
    const auto P = static_cast<std::size_t>(p);
    auto res = wc::fork_ranks(p, [&](int r) {
      wc::shm_options so;
      so.ring_bytes = 1 << 16;
      so.eager_max = 1024;
      wc::shm_transport t(name, r, p, so);
      // Point to point, both ways between ranks 0 and 1: sizes around the limit, an empty message
      // and a single-copy one, back to back on one channel (each frame's pad must be read past).
      const std::vector<std::size_t> sizes{1024, 1025, 0, 1023, 1, 200'000, 1024, 64, 1025};
      const auto until = wc::clock_type::now() + std::chrono::seconds(20);
      if (r < 2) {
        const int other = 1 - r;
        for (int round = 0; round < 2; ++round) {
          if ((round == 0) == (r == 0)) {
            for (std::size_t n : sizes) {
              const auto out = pattern(n, r);
              t.send(other, wc::msg_tag{3, 0}, std::span<const std::byte>(out), until);
            }
          } else {
            for (std::size_t n : sizes) {
              std::vector<std::byte> in(n, std::byte{0xee});
              t.recv(other, wc::msg_tag{3, 0}, std::span<std::byte>(in), until);
              if (in != pattern(n, other)) ::_exit(10);
            }
          }
        }
      }
      // Collectives whose segments are partly eager (1100 floats = a 4096-byte segment and a
      // 304-byte one), exactly at the limit (256 floats) and single-copy (70'001 floats).
      weft_test::check_all_collectives(t, {0, 1, 255, 256, 257, 1100, P * 256, 70'001}, 4096);
    });
    INFO("p=" << p);
    CHECK(res.ok());
  }
}

TEST_CASE("shm transport: eager_max is validated and must agree between ranks", "[comm][shm]") {
  wc::shm_options big;
  big.eager_max = (std::size_t{64} << 10) + 1;
  CHECK_THROWS_AS(wc::shm_transport("/weft-test-eager-big", 0, 1, big), weft::error);
  wc::shm_options half;
  half.ring_bytes = 4096;
  half.eager_max = 2049;  // more than half the ring: an eager frame might never fit
  CHECK_THROWS_AS(wc::shm_transport("/weft-test-eager-half", 0, 1, half), weft::error);
  half.eager_max = 2048;
  CHECK_NOTHROW(wc::shm_transport(unique_name("eager-ok", 1), 0, 1, half));

  const std::string name = unique_name("eager-differ", 2);
  auto res = wc::fork_ranks(2, [&](int r) {
    wc::shm_options so;
    so.connect_timeout = std::chrono::milliseconds(1500);
    so.eager_max = r == 0 ? 1024 : 512;
    try {
      wc::shm_transport t(name, r, 2, so);
    } catch (const weft::error& e) {
      const auto code = static_cast<weft::errc>(e.code().value());
      ::_exit(code == (r == 1 ? weft::errc::mismatch : weft::errc::timeout) ? 42 : 2);
    }
    ::_exit(3);
  });
  CHECK(res.status == std::vector<int>{42, 42});
}

TEST_CASE("shm transport: automatic waiting counts the cores of every rank's affinity together", "[comm][shm]") {
  namespace wd = weft::comm::detail;
  CHECK(wd::resolve_wait_mode(wc::wait_mode::automatic, 2, 2) == wc::wait_mode::spin);
  CHECK(wd::resolve_wait_mode(wc::wait_mode::automatic, 4, 2) == wc::wait_mode::yield);
  CHECK(wd::resolve_wait_mode(wc::wait_mode::yield, 1, 8) == wc::wait_mode::yield);
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(::sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE && cores.size() < 2; ++c)
    if (CPU_ISSET(c, &allowed)) cores.push_back(c);
  // Each rank bound to a core of its own (as mpirun binds ranks): they fit, so they spin; both
  // bound to one core: they do not, so they yield.
  for (bool same : {false, true}) {
    if (!same && cores.size() < 2) continue;
    const std::string name = unique_name(same ? "bound-same" : "bound-own", 2);
    auto res = wc::fork_ranks(2, [&](int r) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cores[same ? 0 : static_cast<std::size_t>(r)], &one);
      if (::sched_setaffinity(0, sizeof one, &one) != 0) ::_exit(5);
      wc::shm_transport t(name, r, 2);
      ::_exit(t.waiting() == (same ? wc::wait_mode::yield : wc::wait_mode::spin) ? 0 : 6);
    });
    INFO("same core: " << same);
    CHECK(res.status == std::vector<int>{0, 0});
  }
}

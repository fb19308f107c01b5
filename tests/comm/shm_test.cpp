#include "process_check.hpp"

#include <weft/comm/launcher.hpp>
#include <weft/comm/shm_transport.hpp>

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
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

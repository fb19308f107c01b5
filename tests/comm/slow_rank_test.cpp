#include <weft/comm/allreduce.hpp>
#include <weft/comm/fault/slow_rank_detector.hpp>
#include <weft/core/random.hpp>

#include <catch2/catch.hpp>

#include "rank_threads.hpp"

#include <chrono>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

using weft::comm::fault::collective_monitor;
using weft::comm::fault::slow_rank_detector;
using weft::comm::fault::slow_rank_evidence;
using weft::comm::fault::slow_rank_options;

namespace {
// Durations of one synchronising step: every rank waits for the last arrival, except `late`
// which arrives `delay` after the others; jitter is uniform in [0, jitter).
std::vector<double> step(weft::rng& g, int p, int late, double delay, double jitter) {
  std::vector<double> d(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) d[static_cast<std::size_t>(r)] = 0.010 + (r == late ? 0.0 : delay) + g.uniform(0, jitter);
  return d;
}
}  // namespace

TEST_CASE("slow_rank_detector flags the rank the others wait for, with evidence", "[comm][fault][c4]") {
  weft::rng g(7);
  slow_rank_detector det(8);
  for (int s = 0; s < 15; ++s) det.observe(step(g, 8, 5, 0.020, 0.002));
  CHECK_FALSE(det.suspect().has_value());  // fewer steps than the window: no verdict yet
  det.observe(step(g, 8, 5, 0.020, 0.002));
  const std::optional<slow_rank_evidence> e = det.suspect();
  REQUIRE(e.has_value());
  CHECK(e->rank == 5);
  CHECK(e->steps_late == 16);
  CHECK(e->steps_observed == 16);
  CHECK(e->median_lateness_s == Approx(0.020).margin(0.003));
  CHECK(e->describe().find("rank 5 arrived late in 16 of 16 collectives") == 0);
}

TEST_CASE("slow_rank_detector stays quiet on noise and on a rank that is only sometimes late", "[comm][fault][c4]") {
  weft::rng g(11);
  slow_rank_detector det(4);
  for (int s = 0; s < 200; ++s) {
    det.observe(step(g, 4, -1, 0.0, 0.004));  // nobody late; 4 ms of jitter
    CHECK_FALSE(det.suspect().has_value());
  }
  slow_rank_detector sometimes(4);
  for (int s = 0; s < 64; ++s) {
    sometimes.observe(step(g, 4, s % 3 == 0 ? 1 : -1, 0.050, 0.001));  // late one step in three
    CHECK_FALSE(sometimes.suspect().has_value());
  }
}

TEST_CASE("slow_rank_detector rejects bad input and changes nothing", "[comm][fault][c4][errors]") {
  CHECK_THROWS_WITH(slow_rank_detector(1), Catch::Contains("needs at least 2 ranks, got 1"));
  CHECK_THROWS_AS(slow_rank_detector(4, {.window = 1}), weft::error);
  CHECK_THROWS_AS(slow_rank_detector(4, {.min_fraction = 0}), weft::error);
  CHECK_THROWS_AS(slow_rank_detector(4, {.robust_z = -1}), weft::error);
  slow_rank_detector det(3);
  const std::vector<double> two{0.1, 0.1};
  CHECK_THROWS_WITH(det.observe(two), Catch::Contains("got 2 durations for 3 ranks"));
  const std::vector<double> nan{0.1, std::nan(""), 0.1};
  CHECK_THROWS_WITH(det.observe(nan), Catch::Contains("rank 1's duration must be finite"));
  CHECK(det.steps() == 0);
}

TEST_CASE("collective_monitor: every rank names the delayed rank before any timeout", "[comm][fault][c4]") {
  constexpr int p = 4, slow = 2, steps = 24;
  std::mutex m;
  std::vector<std::optional<slow_rank_evidence>> verdicts(p);
  const auto errors = weft_test::run_ranks(p, [&](auto& t) {
    collective_monitor monitor(t, /*exchange_every=*/8,
                               slow_rank_options{.window = 8, .min_fraction = 0.5, .robust_z = 3});
    std::vector<float> grad(1024);
    for (int s = 0; s < steps; ++s) {
      std::fill(grad.begin(), grad.end(), static_cast<float>(t.rank() + 1));
      if (t.rank() == slow) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a slow GPU, a noisy host
      monitor.run([&] { weft::comm::allreduce(t, std::span<float>(grad)); });
      if (grad[7] != 10.0f) throw std::runtime_error("wrong allreduce result");  // no Catch in rank threads
    }
    std::lock_guard lock(m);
    verdicts[static_cast<std::size_t>(t.rank())] = monitor.suspect();
  });
  REQUIRE(weft_test::all_ok(errors));
  for (const auto& v : verdicts) {
    REQUIRE(v.has_value());
    CHECK(v->rank == slow);
    CHECK(v->steps_observed == 8);
    CHECK(v->median_lateness_s > 0.025);
  }
  // Every rank saw the same durations, so every rank holds the same evidence.
  for (const auto& v : verdicts) CHECK(v->steps_late == verdicts[0]->steps_late);
}

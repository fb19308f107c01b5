// The tuner: autotune() measures every candidate and gives every rank the same table; the table's
// choice wins over the model for its rank count; choose() takes the nearest measured size.
#include "rank_threads.hpp"

#include <weft/comm/calibrate.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <vector>

namespace wc = weft::comm;

TEST_CASE("autotune gives every rank the same table, and automatic then follows it", "[comm][tuner]") {
  constexpr int p = 3;
  std::vector<wc::tuning_table> tables(p);
  const std::array<std::size_t, 2> sizes{4096, 1024};  // any order; the table is sorted
  const std::array<wc::algorithm, 2> cands{wc::algorithm::ring, wc::algorithm::recursive_doubling};
  auto errors = weft_test::run_ranks(p, [&](wc::inproc_transport& t) {
    auto table = wc::autotune(t, std::span<const std::size_t>(sizes), 2, std::span<const wc::algorithm>(cands));
    // Automatic with the table runs the table's pick on every rank (a different pick on some
    // rank would fail the descriptor check), and computes the right sum.
    std::vector<float> v(1024, 1.0f);
    wc::options o;
    o.table = &table;
    wc::allreduce(t, std::span<float>(v), weft::op::sum{}, o);
    for (float x : v)
      if (x != static_cast<float>(p)) throw std::runtime_error("wrong sum with the tuned choice");
    tables[static_cast<std::size_t>(t.rank())] = std::move(table);
  });
  REQUIRE(weft_test::all_ok(errors));
  const auto& t0 = tables[0];
  CHECK(t0.ranks == p);
  REQUIRE(t0.entries.size() == 2);
  CHECK(t0.entries[0].bytes == 1024);
  CHECK(t0.entries[1].bytes == 4096);
  for (const auto& e : t0.entries) {
    REQUIRE(e.seconds.size() == 2);
    CHECK((e.best == wc::algorithm::ring || e.best == wc::algorithm::recursive_doubling));
    for (const auto& [a, s] : e.seconds) CHECK(s > 0);
  }
  for (const auto& t : tables) {  // bit-identical on every rank
    REQUIRE(t.entries.size() == t0.entries.size());
    for (std::size_t i = 0; i < t.entries.size(); ++i) {
      CHECK(t.entries[i].best == t0.entries[i].best);
      for (std::size_t j = 0; j < t.entries[i].seconds.size(); ++j)
        CHECK(t.entries[i].seconds[j].second == t0.entries[i].seconds[j].second);
    }
  }
}

TEST_CASE("a tuning table picks the nearest measured size and applies only to its rank count", "[comm][tuner]") {
  wc::tuning_table t;
  t.ranks = 4;
  t.entries.push_back({1024, wc::algorithm::recursive_doubling, {}});
  t.entries.push_back({std::size_t{1} << 20, wc::algorithm::halving_doubling, {}});
  t.entries.push_back({std::size_t{64} << 20, wc::algorithm::ring, {}});
  CHECK(t.choose(1) == wc::algorithm::recursive_doubling);
  CHECK(t.choose(16 * 1024) == wc::algorithm::recursive_doubling);  // 2^14: 4 octaves from 2^10, 6 from 2^20
  CHECK(t.choose(std::size_t{1} << 17) == wc::algorithm::halving_doubling);
  CHECK(t.choose(std::size_t{1} << 30) == wc::algorithm::ring);
  wc::options o;
  o.table = &t;
  CHECK(wc::resolve_automatic(std::size_t{1} << 20, 4, o) == wc::algorithm::halving_doubling);
  // Another rank count: the model decides.
  CHECK(wc::resolve_automatic(std::size_t{1} << 20, 2, o) ==
        wc::choose_allreduce(std::size_t{1} << 20, 2, o.segment_bytes));
  CHECK_THROWS_AS(wc::tuning_table{}.choose(1), weft::error);
}

TEST_CASE("autotune rejects arguments it cannot measure", "[comm][tuner]") {
  auto errors = weft_test::run_ranks(1, [&](wc::inproc_transport& t) {
    const std::array<std::size_t, 1> ok{1024};
    const std::array<std::size_t, 1> tiny{2};
    const std::array<wc::algorithm, 1> bad{wc::algorithm::automatic};
    auto expect_error = [](auto&& fn) {
      try {
        fn();
      } catch (const weft::error&) {
        return;
      }
      throw std::runtime_error("no error");
    };
    expect_error([&] { wc::autotune(t, std::span<const std::size_t>()); });
    expect_error([&] { wc::autotune(t, std::span<const std::size_t>(tiny)); });
    expect_error([&] { wc::autotune(t, std::span<const std::size_t>(ok), 0); });
    expect_error([&] { wc::autotune(t, std::span<const std::size_t>(ok), 1, std::span<const wc::algorithm>(bad)); });
    wc::release_scratch();  // harmless when nothing is kept
  });
  REQUIRE(weft_test::all_ok(errors));
}

TEST_CASE("the tuner's rule keeps the model's choice only inside the noise, and re-times when unsure",
          "[comm][tuner]") {
  // Medians and fastest batches of three candidates (seconds per call); candidate 1 is fastest
  // unless a case says otherwise. `none`: the model's choice was not measured.
  using table = std::array<double, 3>;
  const table medians{1.00, 0.80, 0.90};
  const std::size_t none = 3;
  struct rule_case {
    const char* what;
    table medians, fastest;
    std::size_t prior;
    std::size_t winner, pick;
    bool retime;
  };
  const rule_case cases[] = {
      {"the fastest median wins without a prior", medians, {0.95, 0.75, 0.85}, none, 1, 1, false},
      {"or when the prior is the winner", medians, {0.95, 0.75, 0.85}, 1, 1, 1, false},
      {"a prior within 3 % of the winner is kept at once", {1.00, 0.80, 0.82}, {0.95, 0.75, 0.81}, 2, 1, 2, false},
      {"a prior clearly slower, its batches never as fast as the winner's median, loses",
       medians,
       {0.95, 0.75, 0.85},
       0,
       1,
       1,
       false},
      {"a prior kept only by one fast batch (its best beat the winner's median) is kept for now, and the two "
       "are timed again",
       medians,
       {0.79, 0.75, 0.85},
       0,
       1,
       0,
       true},
      {"equal medians go to the first", {0.80, 0.80, 0.90}, {0.79, 0.79, 0.85}, none, 0, 0, false},
  };
  for (const rule_case& c : cases) {
    INFO(c.what);
    const auto v = wc::detail::tuner_rule(c.medians, c.fastest, c.prior);
    CHECK(v.winner == c.winner);
    CHECK(v.pick == c.pick);
    CHECK(v.retime == c.retime);
  }
}

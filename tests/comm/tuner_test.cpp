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

TEST_CASE(
    "the tuner's rule re-times the close candidates, then keeps the model's choice only within 3 % paired "
    "by round",
    "[comm][tuner]") {
  // Candidates' batches (seconds per call) over five rounds; round k of each ran back to back.
  // Round 3 is a slow spell that stretches every candidate. `none`: the model's choice was not
  // measured. `last`: the decision after the re-timing (no more contenders).
  using rounds = std::vector<double>;
  const rounds fast{0.80, 0.81, 1.60, 0.79, 0.80};  // the winner unless a case says otherwise
  const rounds slower_by_12{0.90, 0.91, 1.80, 0.89, 0.90};
  const rounds slower_by_30{1.04, 1.05, 2.08, 1.03, 1.04};
  const std::size_t none = 9;
  using indices = std::vector<std::size_t>;
  struct rule_case {
    const char* what;
    std::vector<rounds> batches;
    std::size_t prior;
    bool last;
    std::size_t winner, pick;
    indices contenders;
  };
  const rule_case cases[] = {
      {"the fastest median wins without a prior", {slower_by_30, fast}, none, true, 1, 1, {}},
      {"or when the prior is the winner", {slower_by_30, fast}, 1, true, 1, 1, {}},
      {"a prior within 3 % round by round is kept, though its median is 12 % above the winner's (a slow spell "
       "in rounds 3-4 hit both, one in round 2 the prior only)",
       {{0.81, 0.90, 1.62, 1.62, 0.81}, {0.80, 0.80, 1.60, 1.60, 0.80}},
       0,
       true,
       1,
       0,
       {}},
      {"a prior 25 % slower in every round loses, though its fastest batch beats the winner's median",
       {{1.00, 1.01, 2.00, 0.75, 1.00}, fast},
       0,
       true,
       1,
       1,
       {}},
      {"a prior 6 % slower round by round loses", {{0.85, 0.86, 1.70, 0.84, 0.85}, fast}, 0, true, 1, 1, {}},
      {"only the rounds both were timed in are paired", {{0.82, 0.83, 1.64}, fast}, 0, true, 1, 0, {}},
      {"before the re-timing, the winner and the candidates within 15 % of it are contenders",
       {{0.85, 0.86, 1.70, 0.84, 0.85}, slower_by_30, fast, slower_by_12},
       0,
       false,
       2,
       2,
       {0, 2, 3}},
      {"a clear winner has no contenders", {slower_by_30, fast}, 0, false, 1, 1, {}},
      {"equal medians go to the first", {fast, fast}, none, true, 0, 0, {}},
  };
  for (const rule_case& c : cases) {
    INFO(c.what);
    const auto v = wc::detail::tuner_rule(c.batches, c.prior, c.last);
    CHECK(v.winner == c.winner);
    CHECK(v.pick == c.pick);
    CHECK(v.contenders == c.contenders);
  }
}

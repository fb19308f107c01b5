#include <weft/coding/cyclic_repetition.hpp>
#include <weft/coding/sequential.hpp>

#include <catch2/catch.hpp>

#include <vector>

using namespace weft::coding;

namespace {
std::vector<std::size_t> all_but(std::size_t n, std::vector<std::size_t> slow) {
  std::vector<std::size_t> out;
  for (std::size_t w = 0; w < n; ++w)
    if (std::find(slow.begin(), slow.end(), w) == slow.end()) out.push_back(w);
  return out;
}
}  // namespace

TEST_CASE("T = 0 is classic gradient coding: a job decodes in its round or is missed", "[coding][sequential]") {
  sequential_coder<linear_code> seq({cyclic_repetition(5, 1)}, 0);
  seq.begin_round();
  auto r0 = seq.end_round(all_but(5, {3}));
  CHECK(r0.decoded == std::vector<std::uint64_t>{0});
  const auto& plan = seq.begin_round();
  CHECK(plan[0].size() == 1);
  auto r1 = seq.end_round(all_but(5, {1, 2}));
  CHECK(r1.missed == std::vector<std::uint64_t>{1});
  CHECK(seq.pending() == 0);
}

TEST_CASE("T = 1 carries a straggler's task into the next round", "[coding][sequential]") {
  // Code for s = 0 (no redundancy): a job needs every worker; a straggler repeats its task later.
  sequential_coder<linear_code> seq({cyclic_repetition(4, 0)}, 1);
  seq.begin_round();
  auto r0 = seq.end_round(all_but(4, {2}));
  CHECK(r0.decoded.empty());
  CHECK(seq.pending() == 1);
  const auto& plan = seq.begin_round();
  REQUIRE(plan[2].size() == 2);  // its new task and the reattempt of job 0
  CHECK(plan[2][1].job == 0);
  CHECK(plan[2][1].reattempt);
  CHECK(plan[1].size() == 1);
  auto r1 = seq.end_round(all_but(4, {}));
  CHECK(r1.decoded == std::vector<std::uint64_t>({0, 1}));
  CHECK_THROWS_WITH(seq.end_round(all_but(4, {})), Catch::Matchers::Contains("no round is open"));
}

TEST_CASE("the code is chosen adaptively from the replayed straggler pattern", "[coding][sequential]") {
  std::vector<linear_code> family{cyclic_repetition(6, 0), cyclic_repetition(6, 1), cyclic_repetition(6, 2)};
  sequential_coder<linear_code> seq(family, 0, 8);
  CHECK(seq.choose_code() == 2);  // no history: the most robust
  for (int r = 0; r < 8; ++r) {
    seq.begin_round();
    (void)seq.end_round(all_but(6, {static_cast<std::size_t>(r % 6)}));  // one straggler per round
  }
  CHECK(seq.choose_code() == 1);  // s = 1 suffices
  for (int r = 0; r < 8; ++r) {
    seq.begin_round();
    (void)seq.end_round(all_but(6, {}));
  }
  CHECK(seq.choose_code() == 0);
  // With a deadline of one round, the s = 0 code suffices for a single straggler that recovers.
  sequential_coder<linear_code> patient(family, 1, 8);
  for (int r = 0; r < 8; ++r) {
    patient.begin_round();
    (void)patient.end_round(all_but(6, {static_cast<std::size_t>(r % 6)}));
  }
  CHECK(patient.choose_code() == 0);
  CHECK_THROWS_WITH(sequential_coder<linear_code>({}, 1), Catch::Matchers::Contains("empty"));
}

TEST_CASE("the adaptive choice replays the max_reattempts cap", "[coding][sequential]") {
  // Two workers, T = 2. Worker 0 straggles in rounds 0, 1 and 3. Jobs 0 and 1 both owe worker 0
  // after round 1; with one reattempt per round it redoes job 0 in round 2 and job 1 would need
  // round 3, where it straggles again: the s = 0 code misses job 1. With two reattempts per round
  // both jobs are redone in round 2 and the s = 0 code suffices.
  const std::vector<linear_code> family{cyclic_repetition(2, 0), cyclic_repetition(2, 1)};
  const std::vector<std::vector<std::size_t>> finished{{1}, {1}, {0, 1}, {1}, {0, 1}, {0, 1}};
  for (std::size_t cap : {1, 2}) {
    sequential_coder<linear_code> seq(family, 2, 8, cap);
    for (const auto& f : finished) {
      seq.begin_round();
      (void)seq.end_round(f);
    }
    INFO("max_reattempts = " << cap);
    CHECK(seq.choose_code() == (cap == 1 ? 1u : 0u));
  }
  // The scheduler itself agrees: with one reattempt per round and the s = 0 code, job 1 is missed.
  sequential_coder<linear_code> only_s0({cyclic_repetition(2, 0)}, 2, 8, 1);
  std::vector<std::uint64_t> missed;
  for (const auto& f : finished) {
    only_s0.begin_round();
    for (auto m : only_s0.end_round(f).missed) missed.push_back(m);
  }
  CHECK(std::find(missed.begin(), missed.end(), 1u) != missed.end());
}

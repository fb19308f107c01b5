#include <weft/core/error.hpp>
#include <weft/core/random.hpp>
#include <weft/kv/similar_prompt_index.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <vector>

using namespace weft::kv;

namespace {

// The reference: a full (n+1) x (m+1) Levenshtein DP over (edits, -matches), no band.
struct brute_result {
  std::size_t edits;
  std::size_t matches;
};
brute_result brute_align(const std::vector<token_id>& a, const std::vector<token_id>& b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> d(
      n + 1, std::vector<std::pair<std::size_t, std::size_t>>(m + 1));
  auto better = [](std::pair<std::size_t, std::size_t> x, std::pair<std::size_t, std::size_t> y) {
    return x.first != y.first ? x.first < y.first : x.second > y.second;
  };
  for (std::size_t i = 0; i <= n; ++i)
    for (std::size_t j = 0; j <= m; ++j) {
      if (i == 0 && j == 0) {
        d[i][j] = {0, 0};
        continue;
      }
      std::pair<std::size_t, std::size_t> best{SIZE_MAX, 0};
      if (i > 0 && j > 0) {
        auto c = d[i - 1][j - 1];
        if (a[i - 1] == b[j - 1])
          ++c.second;
        else
          ++c.first;
        if (better(c, best)) best = c;
      }
      if (i > 0) {
        auto c = d[i - 1][j];
        ++c.first;
        if (better(c, best)) best = c;
      }
      if (j > 0) {
        auto c = d[i][j - 1];
        ++c.first;
        if (better(c, best)) best = c;
      }
      d[i][j] = best;
    }
  return {d[n][m].first, d[n][m].second};
}

std::vector<token_id> random_tokens(weft::rng& g, std::size_t n, std::uint64_t alphabet) {
  std::vector<token_id> t(n);
  for (auto& x : t) x = static_cast<token_id>(g.below(alphabet));
  return t;
}

// b = a with a few random edits (substitute, insert, delete).
std::vector<token_id> mutate(weft::rng& g, std::vector<token_id> a, std::size_t edits, std::uint64_t alphabet) {
  for (std::size_t e = 0; e < edits; ++e) {
    const std::uint64_t kind = g.below(3);
    if (kind == 0 && !a.empty())
      a[g.below(a.size())] = static_cast<token_id>(g.below(alphabet));
    else if (kind == 1)
      a.insert(a.begin() + static_cast<std::ptrdiff_t>(g.below(a.size() + 1)),
               static_cast<token_id>(g.below(alphabet)));
    else if (a.size() > 1)
      a.erase(a.begin() + static_cast<std::ptrdiff_t>(g.below(a.size())));
  }
  return a;
}

void check_plan_valid(const alignment_plan& p, const std::vector<token_id>& a, const std::vector<token_id>& b) {
  REQUIRE(p.source_position.size() == a.size());
  std::size_t reused = 0, same = 0;
  std::int64_t last = -1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::int64_t s = p.source_position[i];
    if (s == recompute_position) continue;
    REQUIRE(s > last);
    REQUIRE(s < static_cast<std::int64_t>(b.size()));
    REQUIRE(a[i] == b[static_cast<std::size_t>(s)]);
    last = s;
    ++reused;
    same += s == static_cast<std::int64_t>(i) ? 1 : 0;
  }
  REQUIRE(p.reused == reused);
  REQUIRE(p.same_position == same);
}

}  // namespace

TEST_CASE("similar prompt index: banded alignment equals a brute-force edit distance", "[kv][similar]") {
  weft::rng g(20250317);
  for (int trial = 0; trial < 600; ++trial) {
    const std::uint64_t alphabet = 2 + g.below(6);
    const auto a0 = random_tokens(g, 1 + g.below(40), alphabet);
    // Half the trials are similar pairs, half unrelated ones.
    const auto b = trial % 2 == 0 ? mutate(g, a0, g.below(12), alphabet) : random_tokens(g, 1 + g.below(40), alphabet);
    const std::size_t band = 1 + g.below(20);
    const brute_result want = brute_align(a0, b);
    const auto got = similar_prompt_index::align(a0, b, band);
    INFO("trial " << trial << " n " << a0.size() << " m " << b.size() << " band " << band << " brute edits "
                  << want.edits);
    if (want.edits <= band) {
      REQUIRE(got.has_value());
      CHECK(got->edit_distance == want.edits);
      CHECK(got->reused == want.matches);
      check_plan_valid(*got, a0, b);
    } else {
      CHECK_FALSE(got.has_value());
    }
  }
}

TEST_CASE("similar prompt index: identical prompts reuse everything at the same positions", "[kv][similar]") {
  std::vector<token_id> a(100);
  std::iota(a.begin(), a.end(), 7);
  const auto p = similar_prompt_index::align(a, a, 1);
  REQUIRE(p);
  CHECK(p->edit_distance == 0);
  CHECK(p->reused == 100);
  CHECK(p->same_position == 100);
  CHECK(p->reuse_fraction() == 1.0);
}

TEST_CASE("similar prompt index: lookup finds the similar prompt and plans its reuse", "[kv][similar]") {
  weft::rng g(5);
  similar_prompt_index idx(similar_prompt_options{.max_prompts = 16, .band = 16, .min_reuse_fraction = 0.5});
  std::vector<std::vector<token_id>> prompts;
  for (std::uint64_t k = 0; k < 8; ++k) {
    prompts.push_back(random_tokens(g, 200, 30000));
    CHECK(idx.insert(k + 100, prompts.back()).empty());
  }
  auto q = prompts[3];
  q[50] = 1;
  q[120] = 2;
  q.insert(q.begin() + 10, 3);
  const auto p = idx.lookup(q);
  REQUIRE(p);
  CHECK(p->source_key == 103);
  CHECK(p->edit_distance == 3);
  CHECK(p->reused == q.size() - 3);
  check_plan_valid(*p, q, prompts[3]);
  // An unrelated prompt reuses too little.
  CHECK_FALSE(idx.lookup(random_tokens(g, 200, 30000)).has_value());
}

TEST_CASE("similar prompt index: LRU eviction by count and by tokens; lookup refreshes", "[kv][similar]") {
  weft::rng g(9);
  similar_prompt_index idx(similar_prompt_options{.max_prompts = 3, .max_prompt_tokens = 100, .max_total_tokens = 250});
  const auto a = random_tokens(g, 80, 1000), b = random_tokens(g, 80, 1000), c = random_tokens(g, 80, 1000);
  CHECK(idx.insert(1, a).empty());
  CHECK(idx.insert(2, b).empty());
  CHECK(idx.insert(3, c).empty());
  CHECK(idx.total_tokens() == 240);
  REQUIRE(idx.lookup(a));  // 1 becomes the most recent: 2 is now the oldest
  const auto d = random_tokens(g, 20, 1000);
  CHECK(idx.insert(4, d) == std::vector<std::uint64_t>{2});  // count bound
  CHECK(idx.size() == 3);
  CHECK_FALSE(idx.contains(2));
  const auto e = random_tokens(g, 100, 1000);
  // 3 + 1 + 4 + e = 80 + 80 + 20 + 100 = 280 tokens > 250 and 4 prompts > 3: drop 3, then stop.
  CHECK(idx.insert(5, e) == std::vector<std::uint64_t>{3});
  CHECK(idx.total_tokens() == 200);
  CHECK(idx.erase(1));
  CHECK_FALSE(idx.erase(1));
  CHECK(idx.size() == 2);
  CHECK(idx.tokens(5).size() == 100);
  CHECK(idx.tokens(99).empty());
}

TEST_CASE("similar prompt index: bad input is rejected and changes nothing", "[kv][similar]") {
  similar_prompt_index idx(similar_prompt_options{.max_prompts = 4, .max_prompt_tokens = 10, .max_total_tokens = 40});
  const std::vector<token_id> ok{1, 2, 3, 4, 5}, too_long(11, 1), empty;
  CHECK(idx.insert(1, ok).empty());
  CHECK_THROWS_AS(idx.insert(2, empty), weft::error);
  CHECK_THROWS_AS(idx.insert(2, too_long), weft::error);
  CHECK_THROWS_AS(idx.insert(1, ok), weft::error);  // duplicate key
  CHECK_THROWS_AS(idx.lookup(empty), weft::error);
  CHECK_THROWS_AS(idx.lookup(too_long), weft::error);
  CHECK(idx.size() == 1);
  CHECK(idx.total_tokens() == 5);
  CHECK(idx.contains(1));
  CHECK_THROWS_AS(similar_prompt_index::align(ok, ok, 0), weft::error);
  CHECK_THROWS_AS(similar_prompt_index(similar_prompt_options{.max_prompts = 0}), weft::error);
  CHECK_THROWS_AS(similar_prompt_index(similar_prompt_options{.ngram = 0}), weft::error);
  CHECK_THROWS_AS(similar_prompt_index(similar_prompt_options{.sketch_size = 257}), weft::error);
  CHECK_THROWS_AS(similar_prompt_index(similar_prompt_options{.band = 0}), weft::error);
  CHECK_THROWS_AS(similar_prompt_index(similar_prompt_options{.min_reuse_fraction = 1.5}), weft::error);
  CHECK_THROWS_AS(similar_prompt_index(similar_prompt_options{.max_prompt_tokens = 100, .max_total_tokens = 50}),
                  weft::error);
}

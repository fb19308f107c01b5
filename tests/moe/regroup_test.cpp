#include <weft/moe/regroup.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

using namespace weft::moe;

namespace {
// Minimum summed distinct experts over all splits into batches of batch_size (last may be short).
std::uint64_t brute_force(const std::vector<std::uint32_t>& experts, std::uint32_t k, std::uint32_t ids,
                          std::uint32_t batch_size) {
  const std::uint32_t n = static_cast<std::uint32_t>(experts.size() / k);
  std::vector<std::uint32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0u);
  std::uint64_t best = UINT64_MAX;
  do {
    std::vector<std::vector<std::uint32_t>> batches;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (i % batch_size == 0) batches.emplace_back();
      batches.back().push_back(perm[i]);
    }
    best = std::min(best, distinct_experts(experts, k, ids, batches));
  } while (std::next_permutation(perm.begin(), perm.end()));
  return best;
}
}  // namespace

TEST_CASE("regrouping against brute force on small inputs", "[moe][regroup]") {
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    const std::uint32_t n = 6 + seed % 2, k = 2, ids = 6, batch = 2 + seed % 2;
    std::vector<std::uint32_t> experts;
    for (std::uint32_t t = 0; t < n; ++t) {
      const std::uint32_t a = rng() % ids;
      std::uint32_t b = rng() % ids;
      if (b == a) b = (a + 1) % ids;
      experts.push_back(a);
      experts.push_back(b);
    }
    const regrouping g = regroup_tokens(experts, k, ids, batch);
    const std::uint64_t opt = brute_force(experts, k, ids, batch);
    std::vector<std::vector<std::uint32_t>> in_order;
    for (std::uint32_t t = 0; t < n; ++t) {
      if (t % batch == 0) in_order.emplace_back();
      in_order.back().push_back(t);
    }
    INFO("seed " << seed);
    CHECK(g.distinct_experts == distinct_experts(experts, k, ids, g.batches));
    CHECK(g.distinct_experts >= opt);
    CHECK(g.distinct_experts <= distinct_experts(experts, k, ids, in_order));
    CHECK(g.batches.size() == (n + batch - 1) / batch);
    std::vector<std::uint32_t> all;
    for (const auto& b : g.batches) {
      CHECK(b.size() <= batch);
      all.insert(all.end(), b.begin(), b.end());
    }
    std::sort(all.begin(), all.end());
    for (std::uint32_t t = 0; t < n; ++t) CHECK(all[t] == t);
  }
}

TEST_CASE("regrouping recovers interleaved clusters", "[moe][regroup]") {
  // Tokens alternate between two disjoint expert groups; in-order batches mix them.
  std::vector<std::uint32_t> experts;
  for (int t = 0; t < 16; ++t) {
    const std::uint32_t base = t % 2 == 0 ? 0 : 4;
    experts.push_back(base + static_cast<std::uint32_t>(t % 4) / 2);
    experts.push_back(base + 2 + static_cast<std::uint32_t>(t % 3 == 0));
  }
  const regrouping g = regroup_tokens(experts, 2, 8, 4);
  for (const auto& b : g.batches) {
    const bool low = experts[b[0] * 2] < 4;
    for (auto t : b) CHECK((experts[t * 2] < 4) == low);  // each batch draws from one cluster
  }
  std::vector<std::vector<std::uint32_t>> in_order{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}};
  CHECK(g.distinct_experts < distinct_experts(experts, 2, 8, in_order));
}

TEST_CASE("regrouping bad input", "[moe][regroup][errors]") {
  const std::vector<std::uint32_t> e{0, 1, 2};
  CHECK_THROWS_AS(regroup_tokens(e, 2, 4, 2), weft::error);  // not whole tokens
  CHECK_THROWS_AS(regroup_tokens(e, 1, 2, 2), weft::error);  // id 2 >= 2
  CHECK_THROWS_AS(regroup_tokens(e, 1, 4, 0), weft::error);
  CHECK_THROWS_AS(distinct_experts(e, 1, 4, {{5}}), weft::error);
  CHECK(regroup_tokens(std::vector<std::uint32_t>{}, 1, 4, 2).batches.empty());
}

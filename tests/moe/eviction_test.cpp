// Each eviction policy against a brute-force reference: a naive simulator that recomputes every
// score from the full access history and scans all residents, with the documented tie-breaks.
// Belady against an exhaustive search for the minimum number of misses.
#include <weft/moe/eviction.hpp>
#include <weft/moe/expert_cache.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

using namespace weft::moe;

namespace {

enum class rule { lru, lfu, lfu_decay, activation, least_stale };

struct acc {
  expert_key key;
  std::uint64_t request;
};
struct outcome {
  bool hit;
  std::vector<expert_key> evicted;
  friend bool operator==(const outcome&, const outcome&) = default;
};

std::vector<outcome> reference(rule r, const model_shape& s, std::size_t capacity, capacity_scope scope,
                               const std::vector<acc>& seq, double decay) {
  std::map<std::uint32_t, std::set<std::size_t>> resident;
  std::vector<std::vector<std::uint64_t>> ticks(s.num_keys());
  std::vector<std::vector<std::uint64_t>> requests(s.num_keys());
  std::vector<std::uint64_t> last_event(s.num_keys(), 0);
  std::uint64_t events = 0;
  std::vector<outcome> out;
  for (std::size_t t = 1; t <= seq.size(); ++t) {
    const acc& a = seq[t - 1];
    const std::size_t i = s.index(a.key);
    ticks[i].push_back(t);
    requests[i].push_back(a.request);
    auto& pool = resident[scope == capacity_scope::global ? 0 : a.key.layer];
    if (pool.count(i)) {
      last_event[i] = ++events;
      out.push_back({true, {}});
      continue;
    }
    outcome o{false, {}};
    if (pool.size() == capacity) {
      auto score = [&](std::size_t j) -> double {
        const expert_key k = s.key(j);
        const double dist = forward_distance(a.key.layer, k.layer, s.num_layers);
        switch (r) {
          case rule::lru:
            return 0;
          case rule::lfu:
            return static_cast<double>(ticks[j].size());
          case rule::lfu_decay: {
            double v = 0;
            for (std::uint64_t u : ticks[j]) v += std::pow(decay, static_cast<double>(t - u));
            return v;
          }
          case rule::activation: {
            double eam = 0;
            for (std::uint64_t q : requests[j]) eam += q == a.request ? 1 : 0;
            return (1 + eam) * (1 + static_cast<double>(ticks[j].size())) / (1 + dist);
          }
          case rule::least_stale:
            return -dist;
        }
        return 0;
      };
      std::size_t best = *pool.begin();
      for (std::size_t j : pool) {
        const double sj = score(j), sb = score(best);
        if (sj < sb ||
            (sj == sb && (last_event[j] < last_event[best] || (last_event[j] == last_event[best] && j < best))))
          best = j;
      }
      pool.erase(best);
      o.evicted.push_back(s.key(best));
    }
    pool.insert(i);
    last_event[i] = ++events;
    out.push_back(o);
  }
  return out;
}

template <class P>
std::vector<outcome> run_cache(P policy, const model_shape& s, std::size_t capacity, capacity_scope scope,
                               const std::vector<acc>& seq) {
  expert_cache<P> c(cache_config::in_slots(s, capacity, scope), std::move(policy));
  std::vector<outcome> out;
  for (const acc& a : seq) {
    c.begin_request(a.request);
    if (c.lookup(a.key).status == lookup_status::hit) {
      out.push_back({true, {}});
      continue;
    }
    const auto order = c.start_load(a.key);
    REQUIRE(order);
    out.push_back({false, {c.last_evicted().begin(), c.last_evicted().end()}});
    c.complete(*order);
  }
  return out;
}

std::vector<acc> random_sequence(std::mt19937& rng, const model_shape& s, std::size_t n) {
  std::vector<acc> seq;
  std::uint64_t request = 0;
  // Skewed keys so that frequencies differ; requests change every few accesses.
  for (std::size_t i = 0; i < n; ++i) {
    if (rng() % 8 == 0) ++request;
    const std::uint32_t layer = rng() % s.num_layers;
    const std::uint32_t e = std::min<std::uint32_t>(rng() % s.num_experts, rng() % s.num_experts);
    seq.push_back({{layer, e}, request});
  }
  return seq;
}

template <class P>
void check_against_reference(P policy, rule r, double decay = 0.5) {
  const model_shape s{3, 5, 1};
  for (std::uint32_t seed = 1; seed <= 150; ++seed) {
    std::mt19937 rng(seed);
    const auto seq = random_sequence(rng, s, 40);
    for (const capacity_scope scope : {capacity_scope::per_layer, capacity_scope::global})
      for (std::size_t cap : {1u, 2u, 3u}) {
        INFO("seed " << seed << " capacity " << cap << " global " << (scope == capacity_scope::global));
        REQUIRE(run_cache(policy, s, cap, scope, seq) == reference(r, s, cap, scope, seq, decay));
      }
  }
}

// Minimum misses for demand caching of `seq` in one pool of `capacity`, by exhaustive search.
std::size_t optimal_misses(const std::vector<std::size_t>& seq, std::size_t capacity) {
  std::map<std::pair<std::size_t, std::uint32_t>, std::size_t> memo;
  auto go = [&](auto&& self, std::size_t i, std::uint32_t mask) -> std::size_t {
    if (i == seq.size()) return 0;
    const auto key = std::make_pair(i, mask);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
    const std::uint32_t bit = 1u << seq[i];
    std::size_t best;
    if (mask & bit) {
      best = self(self, i + 1, mask);
    } else if (static_cast<std::size_t>(__builtin_popcount(mask)) < capacity) {
      best = 1 + self(self, i + 1, mask | bit);
    } else {
      best = SIZE_MAX;
      for (std::uint32_t v = mask; v; v &= v - 1) {
        const std::uint32_t low = v & (~v + 1);
        best = std::min(best, 1 + self(self, i + 1, (mask & ~low) | bit));
      }
    }
    return memo[key] = best;
  };
  return go(go, 0, 0);
}

}  // namespace

TEST_CASE("LRU matches the brute-force reference", "[moe][policy]") {
  check_against_reference(lru_policy{}, rule::lru);
}
TEST_CASE("LFU matches the brute-force reference", "[moe][policy]") {
  check_against_reference(lfu_policy{}, rule::lfu);
}
TEST_CASE("LFU with decay matches the brute-force reference", "[moe][policy]") {
  // decay 0.5 keeps every score an exact binary fraction, so the comparison is exact.
  check_against_reference(lfu_decay_policy{0.5}, rule::lfu_decay, 0.5);
  check_against_reference(lfu_decay_policy{1.0}, rule::lfu);  // no decay is plain LFU
}
TEST_CASE("activation-aware matches the brute-force reference", "[moe][policy]") {
  check_against_reference(activation_aware_policy{}, rule::activation);
}
TEST_CASE("least-stale matches the brute-force reference", "[moe][policy]") {
  check_against_reference(least_stale_policy{}, rule::least_stale);
}

TEST_CASE("Belady's misses equal the exhaustive optimum", "[moe][policy][belady]") {
  const model_shape s{1, 6, 1};
  for (std::uint32_t seed = 1; seed <= 120; ++seed) {
    std::mt19937 rng(seed);
    std::vector<expert_key> keys;
    std::vector<std::size_t> ids;
    for (int i = 0; i < 16; ++i) {
      const std::uint32_t e = std::min<std::uint32_t>(rng() % 6, rng() % 6 + rng() % 2);
      keys.push_back({0, e});
      ids.push_back(e);
    }
    auto future = std::make_shared<const belady_future>(s, keys);
    for (std::size_t cap : {1u, 2u, 3u, 4u}) {
      std::vector<acc> seq;
      for (const auto& k : keys) seq.push_back({k, 0});
      const auto belady = run_cache(belady_policy(future), s, cap, capacity_scope::global, seq);
      std::size_t misses = 0;
      for (const auto& o : belady) misses += o.hit ? 0 : 1;
      const std::size_t opt = optimal_misses(ids, cap);
      INFO("seed " << seed << " capacity " << cap);
      REQUIRE(misses == opt);
      // and no online policy beats it
      for (const auto& other : {run_cache(lru_policy{}, s, cap, capacity_scope::global, seq),
                                run_cache(lfu_policy{}, s, cap, capacity_scope::global, seq)}) {
        std::size_t m = 0;
        for (const auto& o : other) m += o.hit ? 0 : 1;
        CHECK(m >= misses);
      }
    }
  }
}

TEST_CASE("Belady refuses a lookup sequence that differs from its future", "[moe][policy][belady][errors]") {
  const model_shape s{1, 4, 1};
  const std::vector<expert_key> keys{{0, 1}, {0, 2}};
  expert_cache<belady_policy> c(cache_config::in_slots(s, 1),
                                belady_policy(std::make_shared<const belady_future>(s, keys)));
  (void)c.lookup({0, 1});
  CHECK_THROWS_WITH(c.lookup({0, 3}), Catch::Contains("not what the future"));
  CHECK_THROWS_AS(belady_policy(nullptr), weft::error);
  CHECK_THROWS_AS(belady_future(s, std::vector<expert_key>{{0, 4}}), weft::error);
  expert_cache<belady_policy>* none = nullptr;
  (void)none;
  CHECK_THROWS_AS(expert_cache<belady_policy>(cache_config::in_slots({2, 4, 1}, 1),
                                              belady_policy(std::make_shared<const belady_future>(s, keys))),
                  weft::error);
  CHECK_THROWS_AS(lfu_decay_policy(0.0), weft::error);
  CHECK_THROWS_AS(lfu_decay_policy(1.5), weft::error);
}

// Archetypes: the weakest types that satisfy eviction_policy and prefetcher. Instantiating the cache
// and the replay with them proves those components use nothing beyond the concepts.
#include <weft/moe/concepts.hpp>
#include <weft/moe/expert_cache.hpp>
#include <weft/moe/replay.hpp>
#include <weft/moe/trace.hpp>

#include <catch2/catch.hpp>

#include <optional>
#include <vector>

using namespace weft::moe;

namespace {

// No default constructor, no assignment, no comparison, no extra members: only the concept.
class policy_archetype {
 public:
  explicit policy_archetype(int) {}
  policy_archetype(const policy_archetype&) = default;
  policy_archetype& operator=(const policy_archetype&) = delete;

  void bind(const model_shape&) { keys_.clear(); }
  void on_access(expert_key, const access_info&) {}
  void on_insert(expert_key k, const access_info&) { keys_.push_back(k); }  // FIFO
  void on_remove(expert_key k) {
    for (std::size_t i = 0; i < keys_.size(); ++i)
      if (keys_[i] == k) {
        keys_.erase(keys_.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
  }
  std::optional<expert_key> victim(const access_info&) const {
    if (keys_.empty()) return std::nullopt;
    return keys_.front();
  }

 private:
  std::vector<expert_key> keys_;
};

struct prefetcher_archetype {
  explicit prefetcher_archetype(int) {}
  void bind(const model_shape& s) { shape = s; }
  void begin_request(std::uint64_t) {}
  void observe(std::uint32_t layer, std::span<const std::uint32_t> experts) {
    last_layer = layer;
    last.assign(experts.begin(), experts.end());
  }
  // Predicts the next layer uses the same expert ids.
  void predict(std::uint32_t layer, std::uint32_t, std::vector<expert_key>& out) {
    if (layer + 1 < shape.num_layers)
      for (std::uint32_t e : last) out.push_back({layer + 1, e});
  }
  model_shape shape{};
  std::uint32_t last_layer = 0;
  std::vector<std::uint32_t> last;
};

}  // namespace

static_assert(eviction_policy<policy_archetype>);
static_assert(!std::default_initializable<policy_archetype>);
static_assert(prefetcher<prefetcher_archetype>);

TEST_CASE("the cache runs with the weakest eviction policy (FIFO archetype)", "[moe][archetype]") {
  expert_cache<policy_archetype> c(cache_config::in_slots({1, 4, 1}, 2), policy_archetype(0));
  for (std::uint32_t e : {0u, 1u, 0u, 2u, 3u}) {
    if (c.lookup({0, e}).status == lookup_status::miss) {
      const auto order = c.start_load({0, e});
      REQUIRE(order);
      c.complete(*order);
    }
  }
  // FIFO: 0 and 1 in; 2 evicts 0 (first in, though 0 was just used); 3 evicts 1.
  CHECK(c.state({0, 0}) == entry_state::absent);
  CHECK(c.state({0, 1}) == entry_state::absent);
  CHECK(c.state({0, 2}) == entry_state::resident);
  CHECK(c.state({0, 3}) == entry_state::resident);
}

TEST_CASE("replay runs with the archetype policy and prefetcher", "[moe][archetype]") {
  trace_params p;
  p.shape = {4, 8, 2};
  p.num_requests = 3;
  p.tokens_per_request = 10;
  const routing_trace trace = generate_trace(p);
  expert_cache<policy_archetype> c(cache_config::in_slots(p.shape, 4), policy_archetype(0));
  const replay_report r = replay(trace, c, prefetcher_archetype(0));
  CHECK(r.lookups == trace.num_tokens() * 4 * 2);
  CHECK(r.hits + r.in_flight_hits + r.misses == r.lookups);
  CHECK(r.prefetch_loads > 0);
}

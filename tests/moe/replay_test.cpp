#include <weft/moe/any_expert_eviction_policy.hpp>
#include <weft/moe/eviction.hpp>
#include <weft/moe/prefetch.hpp>
#include <weft/moe/replay.hpp>

#include <catch2/catch.hpp>

#include <memory>
#include <vector>

using namespace weft::moe;

namespace {
routing_trace small_trace(std::uint64_t seed) {
  trace_params p;
  p.shape = {6, 16, 2};
  p.num_requests = 6;
  p.tokens_per_request = 16;
  p.seed = seed;
  return generate_trace(p);
}

std::vector<any_expert_eviction_policy> online_policies() {
  return {lru_policy{}, lfu_policy{}, lfu_decay_policy{0.99}, activation_aware_policy{}, least_stale_policy{}};
}
}  // namespace

TEST_CASE("Belady is never beaten on generated traces", "[moe][replay][belady]") {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const routing_trace trace = small_trace(seed);
    const auto future = std::make_shared<const belady_future>(trace.shape(), trace.lookups());
    for (const capacity_scope scope : {capacity_scope::per_layer, capacity_scope::global})
      for (std::uint64_t mult = 1; mult <= 4; ++mult) {
        const std::uint64_t slots = mult * 2 * (scope == capacity_scope::global ? 6 : 1);
        expert_cache<belady_policy> best(cache_config::in_slots(trace.shape(), slots, scope), belady_policy(future));
        const replay_report opt = replay(trace, best);
        CHECK(opt.in_flight_hits == 0);
        for (const any_expert_eviction_policy& p : online_policies()) {
          expert_cache<any_expert_eviction_policy> c(cache_config::in_slots(trace.shape(), slots, scope), p);
          const replay_report r = replay(trace, c);
          INFO("seed " << seed << " slots " << slots);
          CHECK(r.hits <= opt.hits);
          CHECK(r.lookups == opt.lookups);
        }
      }
  }
}

TEST_CASE("replay accounts bytes, stalls and time", "[moe][replay]") {
  const routing_trace trace = small_trace(3);
  expert_cache<> c(cache_config::in_slots(trace.shape(), 4, capacity_scope::per_layer, 1000));
  replay_options o;
  o.bandwidth_bytes_per_s = 1e6;  // 1 ms per expert
  o.compute_s_per_layer = 0.5e-3;
  const replay_report r = replay(trace, c, no_prefetch{}, o);
  CHECK(r.hits + r.in_flight_hits + r.misses == r.lookups);
  CHECK(r.bytes_moved == r.misses * 1000);
  // Without prefetch every miss stalls its full transfer (1 ms), serialised on the link per layer.
  CHECK(r.stall_s == Approx(static_cast<double>(r.misses) * 1e-3).epsilon(1e-9));
  const double layers = static_cast<double>(trace.num_tokens() * trace.shape().num_layers);
  CHECK(r.total_s == Approx(r.stall_s + layers * 0.5e-3).epsilon(1e-9));
  CHECK_THROWS_AS(replay(trace, c, no_prefetch{}, replay_options{0.0, 0.0, 1}), weft::error);
  expert_cache<> other(cache_config::in_slots({2, 4, 1}, 2));
  CHECK_THROWS_AS(replay(trace, other), weft::error);
  expert_cache<> too_small(cache_config::in_slots(trace.shape(), 1));
  CHECK_THROWS_AS(replay(trace, too_small), weft::error);
}

TEST_CASE("prefetching raises the hit rate and hides transfer time", "[moe][replay][prefetch]") {
  trace_params p;  // benchmark defaults
  p.num_requests = 10;
  const routing_trace trace = generate_trace(p);
  replay_options o;
  o.bandwidth_bytes_per_s = 1e9;
  o.compute_s_per_layer = 0.2e-3;
  const std::uint64_t bytes = 100'000;  // 0.1 ms per expert
  expert_cache<> plain(cache_config::in_slots(p.shape, 4, capacity_scope::per_layer, bytes));
  const replay_report base = replay(trace, plain, no_prefetch{}, o);
  expert_cache<> fetched(cache_config::in_slots(p.shape, 4, capacity_scope::per_layer, bytes));
  eam_prefetcher eam;
  const replay_report with = replay(trace, fetched, eam, o);
  CHECK(with.prefetch_loads > 0);
  CHECK(with.prefetch_used > with.prefetch_loads / 4);
  CHECK(with.hit_rate() > base.hit_rate() + 0.05);
  CHECK(with.stall_s < base.stall_s);
}

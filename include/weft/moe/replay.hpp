// Replays a routing trace through an expert_cache (and optionally a prefetcher) under a simple
// cost model: one host-to-device link of fixed bandwidth serving loads first come first served,
// and a fixed compute time per layer during which loads proceed. Reports hit rate, bytes moved and
// the time the engine stalls waiting for experts (the metrics of MoE-Infinity §7 and SpecMD §4).
#pragma once

#include <weft/core/error.hpp>
#include <weft/moe/concepts.hpp>
#include <weft/moe/expert_cache.hpp>
#include <weft/moe/trace.hpp>
#include <weft/moe/types.hpp>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

namespace weft::moe {

/// Cost model and prefetch settings of a replay.
struct replay_options {
  double bandwidth_bytes_per_s = 25e9;  ///< host-to-device link (PCIe 4 x16 is about 25 GB/s)
  double compute_s_per_layer = 200e-6;  ///< time one MoE layer computes, overlapping loads
  std::uint32_t prefetch_depth = 1;     ///< layers ahead the prefetcher predicts (0 = none)
};

/// What a replay measured. A lookup is a hit when it found its expert resident or already being
/// loaded (no new load started); in_flight_hits and stall_s say how late those loads were.
struct replay_report {
  std::uint64_t lookups = 0, hits = 0, in_flight_hits = 0, misses = 0;
  std::uint64_t bytes_moved = 0;
  std::uint64_t prefetch_loads = 0, prefetch_used = 0;
  double stall_s = 0;  ///< time spent waiting for loads to finish
  double total_s = 0;  ///< simulated wall time of the whole trace

  double hit_rate() const noexcept {
    return lookups ? static_cast<double>(hits + in_flight_hits) / static_cast<double>(lookups) : 0.0;
  }
  /// Hits that found the expert fully resident.
  double resident_hit_rate() const noexcept {
    return lookups ? static_cast<double>(hits) / static_cast<double>(lookups) : 0.0;
  }
};

/// A prefetcher that predicts nothing: replay without prefetching.
struct no_prefetch {
  void bind(const model_shape&) {}
  void begin_request(std::uint64_t) {}
  void observe(std::uint32_t, std::span<const std::uint32_t>) {}
  void predict(std::uint32_t, std::uint32_t, std::vector<expert_key>&) {}
};
static_assert(prefetcher<no_prefetch>);

namespace detail {

/// The replay's clock and its one host-to-device link: loads are served first come first served,
/// so finish times in `link_` are non-decreasing and the oldest load lands first.
template <expert_eviction_policy P>
class replay_link {
 public:
  replay_link(expert_cache<P>& cache, const replay_options& options, replay_report& report)
      : cache_(cache), options_(options), report_(report) {}

  double now() const noexcept { return now_; }
  /// Queues a load behind the ones in flight; returns when it will have landed.
  double schedule(const load_order& order) {
    const double start = std::max(now_, link_free_);
    link_free_ = start + static_cast<double>(order.bytes) / options_.bandwidth_bytes_per_s;
    link_.push_back({order, link_free_});
    return link_free_;
  }
  /// Completes the loads that have landed by now.
  void drain() {
    while (!link_.empty() && link_.front().finish <= now_) {
      cache_.complete(link_.front().order);
      link_.pop_front();
    }
  }
  /// Stalls the engine until t (counted in the report), then drains.
  void wait_until(double t) {
    if (t > now_) {
      report_.stall_s += t - now_;
      now_ = t;
    }
    drain();
  }
  /// Waits for the oldest load in flight; false when nothing is in flight.
  bool wait_for_oldest() {
    if (link_.empty()) return false;
    wait_until(link_.front().finish);
    return true;
  }
  /// When the load of k in flight lands (now if none is).
  double finish_of(expert_key k) const {
    for (const pending& p : link_)
      if (p.order.key == k) return p.finish;
    return now_;
  }
  void compute(double seconds) noexcept { now_ += seconds; }
  /// Lets every outstanding load land (without counting a stall) so the cache ends consistent.
  void settle() {
    while (!link_.empty()) {
      now_ = std::max(now_, link_.front().finish);
      drain();
    }
  }

 private:
  struct pending {
    load_order order;
    double finish;
  };
  expert_cache<P>& cache_;
  const replay_options& options_;
  replay_report& report_;
  std::deque<pending> link_;
  double now_ = 0, link_free_ = 0;
};

/// Looks up one layer's experts, starting demand loads for misses and pinning each; returns when
/// the last of them will be resident.
template <expert_eviction_policy P>
double demand_layer(expert_cache<P>& cache, replay_link<P>& link, replay_report& r, std::uint32_t layer,
                    std::span<const std::uint32_t> experts) {
  double ready = link.now();
  for (const std::uint32_t e : experts) {
    const expert_key k{layer, e};
    const lookup_result found = cache.lookup(k);
    ++r.lookups;
    if (found.status == lookup_status::hit) {
      ++r.hits;
    } else if (found.status == lookup_status::in_flight) {
      ++r.in_flight_hits;
      ready = std::max(ready, link.finish_of(k));
    } else {
      ++r.misses;
      std::optional<load_order> order = cache.start_load(k);
      // No room: every entry of the pool is pinned or loading. Wait for the oldest load.
      while (!order) {
        expects(link.wait_for_oldest(), errc::precondition, "weft::moe::replay", "no room for ", k,
                " and nothing in flight");
        order = cache.start_load(k);
      }
      ready = std::max(ready, link.schedule(*order));
    }
    cache.pin(k);
  }
  return ready;
}

/// Starts prefetches for `predicted`. A prefetch must not evict another predicted expert, so the
/// predicted ones already present are held (pinned) while the others load; `held` is scratch.
template <expert_eviction_policy P>
void prefetch_predicted(expert_cache<P>& cache, replay_link<P>& link, std::span<const expert_key> predicted,
                        std::vector<expert_key>& held) {
  held.clear();
  for (const expert_key k : predicted)
    if (cache.peek(k).status != lookup_status::miss) {
      cache.pin(k);
      held.push_back(k);
    }
  for (const expert_key k : predicted)
    if (const auto order = cache.prefetch(k)) {
      link.schedule(*order);
      cache.pin(k);
      held.push_back(k);
    }
  for (const expert_key k : held) cache.unpin(k);
}

}  // namespace detail

/// Replays `trace` through `cache` (which should be fresh; its shape must match the trace's).
/// Per token and layer: complete the loads that finished; look up the layer's experts, starting
/// demand loads for misses and pinning them all; let the prefetcher observe the routing and
/// start prefetches for its predictions; wait for the layer's experts (stall); compute; unpin.
/// The prefetcher is bound to the trace's shape here. Deterministic. Not thread-safe.
/// Complexity: O(lookups * cost of a cache call + predictions).
template <expert_eviction_policy P, prefetcher F = no_prefetch>
replay_report replay(const routing_trace& trace, expert_cache<P>& cache, F&& prefetch = F{},
                     const replay_options& options = {}) {
  constexpr const char* where = "weft::moe::replay";
  const model_shape& s = trace.shape();
  expects(s == cache.shape(), errc::mismatch, where, "the trace's model shape differs from the cache's");
  expects(options.bandwidth_bytes_per_s > 0, errc::invalid_argument, where, "bandwidth is ",
          options.bandwidth_bytes_per_s, "; it must be > 0");
  expects(options.compute_s_per_layer >= 0, errc::invalid_argument, where, "compute time is ",
          options.compute_s_per_layer, "; it must be >= 0");
  for (std::uint32_t p = 0; p < cache.num_pools(); ++p)
    expects(cache.slot_capacity(p) >= s.top_k, errc::invalid_argument, where, "pool ", p, " holds ",
            cache.slot_capacity(p), " experts; a layer needs top_k = ", s.top_k, " at once");
  prefetch.bind(s);

  replay_report r;
  const cache_stats before = cache.stats();
  detail::replay_link<P> link(cache, options, r);
  std::vector<expert_key> predicted, held;
  std::uint64_t request = 0;
  for (std::size_t t = 0; t < trace.num_tokens(); ++t) {
    if (t == 0 || trace.request(t) != request) {
      request = trace.request(t);
      cache.begin_request(request);
      prefetch.begin_request(request);
    }
    for (std::uint32_t l = 0; l < s.num_layers; ++l) {
      link.drain();
      const auto experts = trace.experts(t, l);
      const double ready = detail::demand_layer(cache, link, r, l, experts);
      prefetch.observe(l, experts);
      if (options.prefetch_depth > 0) {
        predicted.clear();
        prefetch.predict(l, options.prefetch_depth, predicted);
        detail::prefetch_predicted(cache, link, predicted, held);
      }
      link.wait_until(ready);
      link.compute(options.compute_s_per_layer);
      for (const std::uint32_t e : experts) cache.unpin({l, e});
    }
  }
  link.settle();
  r.total_s = link.now();
  r.bytes_moved = cache.stats().bytes_loaded - before.bytes_loaded;
  r.prefetch_loads = cache.stats().prefetch_loads - before.prefetch_loads;
  r.prefetch_used = cache.stats().prefetch_used - before.prefetch_used;
  return r;
}

}  // namespace weft::moe

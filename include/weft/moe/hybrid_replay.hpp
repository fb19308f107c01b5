// Replays a routing trace on a simulated CPU-GPU machine with three tiers of expert memory (device,
// host, storage), as HybriMoE (Zhong et al., DAC 2025, arXiv 2504.05897) and tiered systems such as
// SN40L and ElasticMoE run MoE models larger than the device: every layer pass is planned by
// plan_hybrid_layer (device-resident experts, loads over the link, CPU compute), experts missing
// from host memory are first read from storage, and the device cache evolves through its policy.
// A simulator: its cost model is hybrid_costs plus a storage bandwidth; docs/moe.md gives the
// presets' sources.
#pragma once

#include <weft/core/error.hpp>
#include <weft/moe/concepts.hpp>
#include <weft/moe/eviction.hpp>
#include <weft/moe/expert_cache.hpp>
#include <weft/moe/hybrid_schedule.hpp>
#include <weft/moe/trace.hpp>
#include <weft/moe/types.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

namespace weft::moe {

struct hybrid_replay_options {
  hybrid_costs costs;
  hybrid_mode mode = hybrid_mode::dynamic;
  /// The first prompt_tokens tokens of each request form its prefill: one pass per layer with
  /// every expert's routed tokens batched. The rest decode one token per pass. 0: all decode.
  std::uint32_t prompt_tokens = 0;
  /// Experts host memory holds per layer (LRU); 0 = the whole model (two tiers only).
  std::uint32_t host_experts_per_layer = 0;
  double storage_bytes_per_s = 6e9;  ///< storage-to-host reads (a PCIe 4 NVMe drive)
  /// Fill the device cache before the replay with each layer's most used experts in the trace, as
  /// a static placement (kTransformers' configured GPU experts) would; fair to every mode.
  bool warm_start = true;
};

struct hybrid_replay_report {
  double prefill_s = 0, decode_s = 0;  ///< simulated MoE-layer time of prefill and decode passes
  std::uint64_t prefill_passes = 0, decode_passes = 0;
  std::uint64_t device_resident = 0, device_loaded = 0, on_cpu = 0;  ///< expert executions by placement
  std::uint64_t storage_reads = 0;
  double decode_s_per_token() const noexcept {
    return decode_passes ? decode_s / static_cast<double>(decode_passes) : 0;
  }
};

/// Replays `trace` (its shape must equal the device cache's) and reports the simulated time. The
/// device cache should be fresh; its policy decides which loaded expert stays (a loaded expert is
/// computed from a staging buffer even when the cache has no slot to keep it). Deterministic; not
/// thread-safe. O(passes * layers * (k log k + cache calls)).
template <eviction_policy P>
hybrid_replay_report hybrid_replay(const routing_trace& trace, expert_cache<P>& device,
                                   const hybrid_replay_options& options) {
  constexpr const char* where = "weft::moe::hybrid_replay";
  const model_shape& s = trace.shape();
  expects(s == device.shape(), errc::mismatch, where, "the trace's model shape differs from the cache's");
  options.costs.validate(where);
  expects(std::isfinite(options.storage_bytes_per_s) && options.storage_bytes_per_s > 0, errc::invalid_argument, where,
          "storage_bytes_per_s must be finite and > 0, got ", options.storage_bytes_per_s);
  const std::uint32_t host_slots = options.host_experts_per_layer;
  expects(host_slots == 0 || host_slots >= s.top_k, errc::invalid_argument, where, "host_experts_per_layer ",
          host_slots, " cannot hold one token's top_k = ", s.top_k, " experts");
  std::optional<expert_cache<lru_policy>> host;
  if (host_slots > 0) host.emplace(cache_config::in_slots(s, host_slots));

  if (options.warm_start) {
    std::vector<std::uint64_t> uses(s.num_keys(), 0);
    for (std::size_t t = 0; t < trace.num_tokens(); ++t)
      for (std::uint32_t l = 0; l < s.num_layers; ++l)
        for (const std::uint32_t e : trace.experts(t, l)) ++uses[s.index({l, e})];
    for (std::uint32_t l = 0; l < s.num_layers; ++l) {
      std::vector<std::uint32_t> by_use(s.num_experts);
      for (std::uint32_t e = 0; e < s.num_experts; ++e) by_use[e] = e;
      std::stable_sort(by_use.begin(), by_use.end(), [&](std::uint32_t a, std::uint32_t b) {
        return uses[s.index({l, a})] > uses[s.index({l, b})];
      });
      for (const std::uint32_t e : by_use) {
        const expert_key k{l, e};
        if (uses[s.index(k)] == 0 || device.used_slots(device.pool_of(k)) >= device.slot_capacity(device.pool_of(k)))
          break;
        if (auto o = device.start_load(k)) device.complete(*o);
      }
    }
    device.reset_stats();
  }

  hybrid_replay_report r;
  std::vector<expert_work> work;
  std::vector<expert_key> pinned;
  std::vector<std::uint32_t> tokens_of(s.num_experts, 0);
  auto run_pass = [&](std::size_t first, std::size_t last, bool prefill) {
    double pass_s = 0;
    for (std::uint32_t l = 0; l < s.num_layers; ++l) {
      work.clear();
      for (std::size_t t = first; t < last; ++t)
        for (const std::uint32_t e : trace.experts(t, l)) {
          if (tokens_of[e]++ == 0) work.push_back({e, 0, false});
        }
      double storage_s = 0;
      for (expert_work& w : work) {
        w.tokens = tokens_of[w.expert];
        tokens_of[w.expert] = 0;
        const expert_key k{l, w.expert};
        w.on_device = device.lookup(k).status == lookup_status::hit;
        if (w.on_device) {  // nothing this layer loads may evict what it computes with
          device.pin(k);
          pinned.push_back(k);
        }
        if (host && !w.on_device) {
          if (host->lookup(k).status != lookup_status::hit) {
            if (auto o = host->start_load(k)) host->complete(*o);
            storage_s += options.costs.expert_bytes / options.storage_bytes_per_s;
            ++r.storage_reads;
          }
        }
      }
      const layer_plan plan = plan_hybrid_layer(work, options.costs, options.mode);
      // A loaded expert is computed from a staging buffer whether or not the cache keeps it; the
      // cache admits it when its policy can free a slot (the layer's own experts are pinned).
      for (std::size_t i = 0; i < work.size(); ++i) {
        switch (plan.where[i]) {
          case placement::device_resident:
            ++r.device_resident;
            break;
          case placement::device_loaded:
            ++r.device_loaded;
            break;
          case placement::cpu:
            ++r.on_cpu;
            break;
        }
        const expert_key k{l, work[i].expert};
        if (plan.where[i] == placement::device_loaded) {
          if (auto o = device.start_load(k)) {
            device.complete(*o);
            device.pin(k);
            pinned.push_back(k);
          }
        }
      }
      for (const expert_key k : pinned) device.unpin(k);
      pinned.clear();
      pass_s += storage_s + plan.makespan_s();
    }
    (prefill ? r.prefill_s : r.decode_s) += pass_s;
    ++(prefill ? r.prefill_passes : r.decode_passes);
  };

  std::size_t t = 0;
  while (t < trace.num_tokens()) {
    std::size_t end = t;
    while (end < trace.num_tokens() && trace.request(end) == trace.request(t)) ++end;
    device.begin_request(trace.request(t));
    std::size_t next = t;
    if (options.prompt_tokens > 0) {
      next = std::min(end, t + options.prompt_tokens);
      run_pass(t, next, true);
    }
    for (; next < end; ++next) run_pass(next, next + 1, false);
    t = end;
  }
  return r;
}

}  // namespace weft::moe

// CPU-GPU hybrid execution of one MoE layer when the device holds only some experts: each expert the
// device lacks is either loaded over the host link and computed on the device, or computed on the
// CPU from host memory. Fixed mappings decide this once (always load: MoE-Infinity; always compute
// misses on the CPU: kTransformers, Fiddler); HybriMoE (Zhong et al., DAC 2025, arXiv 2504.05897,
// §4.1 "dynamic intra-layer scheduling") decides per layer by simulating the three queues (device
// compute, transfer, CPU compute) and sending each expert where it finishes first.
#pragma once

#include <weft/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

namespace weft::moe {

/// Timing of one expert on each resource: a fixed part plus a part per routed token. A plain
/// value; every field finite and >= 0. Units are seconds and bytes per second.
struct hybrid_costs {
  double device_s_per_expert = 0;  ///< device compute of one expert, independent of tokens (weight reads)
  double device_s_per_token = 0;   ///< device compute per routed token
  double cpu_s_per_expert = 0;     ///< CPU compute of one expert, independent of tokens (weight reads)
  double cpu_s_per_token = 0;      ///< CPU compute per routed token
  double link_bytes_per_s = 25e9;  ///< host-to-device link (PCIe 4 x16)
  double expert_bytes = 0;         ///< bytes one load moves

  double device_s(std::uint32_t tokens) const noexcept { return device_s_per_expert + device_s_per_token * tokens; }
  double cpu_s(std::uint32_t tokens) const noexcept { return cpu_s_per_expert + cpu_s_per_token * tokens; }
  double load_s() const noexcept { return expert_bytes / link_bytes_per_s; }

  /// Throws weft::error naming the field unless every field is finite and >= 0 and the link > 0.
  void validate(const char* where) const {
    const double fields[] = {device_s_per_expert, device_s_per_token, cpu_s_per_expert, cpu_s_per_token, expert_bytes};
    for (const double f : fields)
      expects(std::isfinite(f) && f >= 0, errc::invalid_argument, where, "every cost must be finite and >= 0, got ", f);
    expects(std::isfinite(link_bytes_per_s) && link_bytes_per_s > 0, errc::invalid_argument, where,
            "link_bytes_per_s must be finite and > 0, got ", link_bytes_per_s);
  }
};

/// How a layer's missing experts are placed.
enum class hybrid_mode : std::uint8_t {
  always_load,     ///< every missing expert is loaded and computed on the device (MoE-Infinity)
  cpu_for_misses,  ///< every missing expert is computed on the CPU (kTransformers, Fiddler)
  dynamic,         ///< per expert, where it finishes first (HybriMoE §4.1)
};

/// One routed expert of the layer: its id, the tokens routed to it, and whether the device holds it.
struct expert_work {
  std::uint32_t expert = 0;
  std::uint32_t tokens = 1;
  bool on_device = false;
};

enum class placement : std::uint8_t { device_resident, device_loaded, cpu };

/// The plan: where each input expert runs (same order as the input) and when the layer ends.
struct layer_plan {
  std::vector<placement> where;
  double device_done_s = 0;  ///< the device finishes its last expert
  double cpu_done_s = 0;     ///< the CPU finishes its last expert
  double link_busy_s = 0;    ///< transfer time of the loads
  double makespan_s() const noexcept { return std::max(device_done_s, cpu_done_s); }
};

/// Plans one layer. The device first computes the experts it holds (largest first) while the link
/// loads missing experts in the order chosen; a loaded expert computes on the device once both its
/// load and the device are free. In `dynamic` mode the missing experts are taken largest workload
/// first and each goes to whichever of "load + device" and "CPU" would finish it earlier given the
/// queues so far (ties to the device, which then caches it). Throws weft::error for invalid costs
/// or a work item with 0 tokens. Deterministic. Thread-safe. O(n log n) for n experts.
inline layer_plan plan_hybrid_layer(std::span<const expert_work> work, const hybrid_costs& costs, hybrid_mode mode) {
  constexpr const char* where = "weft::moe::plan_hybrid_layer";
  costs.validate(where);
  for (const expert_work& w : work)
    expects(w.tokens >= 1, errc::invalid_argument, where, "expert ", w.expert, " has 0 routed tokens");
  layer_plan plan;
  plan.where.assign(work.size(), placement::cpu);
  std::vector<std::size_t> order(work.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return work[a].tokens > work[b].tokens; });
  double device = 0, link = 0, cpu = 0;
  for (const std::size_t i : order) {
    if (!work[i].on_device) continue;
    device += costs.device_s(work[i].tokens);
    plan.where[i] = placement::device_resident;
  }
  for (const std::size_t i : order) {
    if (work[i].on_device) continue;
    const double loaded = link + costs.load_s();
    const double on_device = std::max(device, loaded) + costs.device_s(work[i].tokens);
    const double on_cpu = cpu + costs.cpu_s(work[i].tokens);
    const bool to_device = mode == hybrid_mode::always_load || (mode == hybrid_mode::dynamic && on_device <= on_cpu);
    if (to_device) {
      link = loaded;
      device = on_device;
      plan.where[i] = placement::device_loaded;
    } else {
      cpu = on_cpu;
    }
  }
  plan.device_done_s = device;
  plan.cpu_done_s = cpu;
  plan.link_busy_s = link;
  return plan;
}

}  // namespace weft::moe

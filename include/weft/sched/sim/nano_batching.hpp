// NanoFlow's intra-device parallelism as a cost-model option (Zhu et al., "NanoFlow: Towards Optimal
// Large Language Model Serving Throughput", arXiv 2408.12757, OSDI 2025, §3-4): an iteration's batch is
// split into nano-batches so that the compute-, memory- and network-bound operations of different
// nano-batches overlap on one device. Here: an iteration's per-resource times and how they combine.
#pragma once

#include <weft/core/error.hpp>

#include <algorithm>
#include <cmath>

namespace weft::sched::sim {

/// One iteration's time by the resource that bounds each operation (cost_model::resource_s).
/// A plain value: thread-safe to copy.
struct resource_times {
  double engine_s = 0.0;   ///< CPU: scheduling, input preparation, sampling (not on the device)
  double compute_s = 0.0;  ///< SM-bound: GEMMs above the ridge point, prefill attention, the LM head
  double memory_s = 0.0;   ///< HBM-bound: decode attention, GEMMs below the ridge point (weight reads)
  double network_s = 0.0;  ///< interconnect: tensor-parallel all-reduces, pipeline-stage sends
  int layers = 1;          ///< repetitions of the per-layer pipeline (its fill is paid once per iteration)

  /// The device's time with every operation run one after another. O(1).
  double device_s() const noexcept { return compute_s + memory_s + network_s; }
  /// The slowest resource's total: no schedule of these operations is shorter. O(1).
  double bound_s() const noexcept { return std::max({compute_s, memory_s, network_s}); }
};

/// How an iteration's operations are overlapped. The default (one nano-batch) is the sequential
/// engine every other weft cost model assumes. A plain value: thread-safe to copy.
struct nano_batching {
  /// Nano-batches per iteration (NanoFlow's auto-search picks 2-4 for its models, §4.2); 1: none.
  int nano_batches = 1;
  /// Slowdown of operations that run concurrently, in [0, 1]: the overlapped part of the time is
  /// bound + interference * (everything else). 0: perfect overlap; 1: no gain at all. NanoFlow measures
  /// it per kernel pair and SM share (§4.1); weft has no such profile, so this is an assumption (0.3).
  double interference = 0.3;
  /// NanoFlow's asynchronous CPU scheduling (§4.3): batch formation and sampling of one iteration run
  /// while the device computes the previous one, so the iteration takes max(engine, device).
  bool overlap_engine = false;
};

/// Throws weft::error(invalid_argument) naming the field when o is out of range. O(1). Thread-safe.
inline void validate(const nano_batching& o, const char* where) {
  expects(o.nano_batches >= 1 && o.nano_batches <= 64, errc::invalid_argument, where,
          "nano_batches must be in [1, 64], got ", o.nano_batches);
  expects(o.interference >= 0.0 && o.interference <= 1.0, errc::invalid_argument, where,
          "interference must be in [0, 1], got ", o.interference);
}

/// The device time of an iteration whose resource totals r were priced for o.nano_batches
/// nano-batches (so they already include what splitting costs: each nano-batch re-reads the weights
/// and runs smaller, less efficient kernels). One nano-batch: the sequential sum. Several: the
/// steady state, bound + interference * (sum - bound), plus the pipeline's fill and drain — the first
/// nano-batch's pass through one layer's non-bottleneck operations before the bottleneck has work,
/// (sum - bound) / (nano_batches * layers). Never below the bound. O(1). Thread-safe.
inline double overlapped_device_s(const resource_times& r, const nano_batching& o) noexcept {
  const double sum = r.device_s();
  if (o.nano_batches <= 1) return sum;
  const double bound = r.bound_s(), rest = sum - bound;
  const double fill = rest / (static_cast<double>(o.nano_batches) * std::max(1, r.layers));
  return std::min(sum, bound + o.interference * rest + fill);
}

/// The whole iteration: the engine's CPU time after the device's (sequential), or beside it when
/// o.overlap_engine. O(1). Thread-safe.
inline double overlapped_iteration_s(const resource_times& r, const nano_batching& o) noexcept {
  const double device = overlapped_device_s(r, o);
  return o.overlap_engine ? std::max(r.engine_s, device) : r.engine_s + device;
}

}  // namespace weft::sched::sim

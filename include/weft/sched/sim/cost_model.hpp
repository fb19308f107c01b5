// Roofline cost model of one engine iteration: the time is the larger of the compute time (linear
// layers 2 * params FLOPs per token plus attention) and the memory time (weights once per iteration
// plus every KV byte attention reads), plus a fixed overhead. The model of Yuan et al., "LLM Inference
// Unveiled: Survey and Roofline Model Insights" (2024, §2) and of DistServe's latency model (OSDI 2024, §3).
#pragma once

#include <weft/sched/batch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

namespace weft::sched::sim {

/// A transformer's size. kv_bytes_per_token = 2 (K and V) * layers * kv_heads * head_dim * kv_dtype_bytes.
struct model_spec {
  std::string name;
  double parameters = 0.0;  ///< weights (count)
  int layers = 0;
  int hidden = 0;    ///< model width (query heads * head_dim)
  int kv_heads = 0;  ///< KV heads (grouped-query attention shares them)
  int head_dim = 0;
  int weight_bytes = 2;  ///< fp16/bf16
  int kv_dtype_bytes = 2;

  double kv_bytes_per_token() const noexcept {
    return 2.0 * layers * static_cast<double>(kv_heads) * head_dim * kv_dtype_bytes;
  }
};

/// One accelerator (dense fp16/bf16 tensor-core peak, HBM bandwidth and size, host link).
struct gpu_spec {
  std::string name;
  double peak_flops = 0.0;
  double hbm_bytes_per_s = 0.0;
  double hbm_bytes = 0.0;
  double host_link_bytes_per_s = 0.0;  ///< PCIe, for swapping KV to host memory
};

/// Llama-2-7B (Touvron et al., "Llama 2", 2023, Table 1 and the released config: 32 layers, width
/// 4096, 32 heads of 128, no GQA): 6.74e9 parameters, 512 KiB of fp16 KV per token.
inline model_spec llama2_7b() { return {"llama2-7b", 6.74e9, 32, 4096, 32, 128, 2, 2}; }
/// Llama-2-70B (same source: 80 layers, width 8192, GQA with 8 KV heads of 128): 68.98e9 parameters,
/// 320 KiB of fp16 KV per token.
inline model_spec llama2_70b() { return {"llama2-70b", 68.98e9, 80, 8192, 8, 128, 2, 2}; }
/// NVIDIA A100 SXM4 80GB (A100 datasheet, 2021): 312 TFLOPS dense bf16, 2.039 TB/s HBM2e, 80 GB;
/// PCIe 4.0 x16 (32 GB/s per direction, ~25 GB/s achieved).
inline gpu_spec a100_80g() { return {"A100-80G", 312e12, 2.039e12, 80e9, 25e9}; }
/// NVIDIA H100 SXM5 80GB (H100 datasheet, 2023): 989 TFLOPS dense bf16, 3.35 TB/s HBM3, 80 GB;
/// PCIe 5.0 x16 (64 GB/s per direction, ~50 GB/s achieved).
inline gpu_spec h100_80g() { return {"H100-80G", 989e12, 3.35e12, 80e9, 50e9}; }

/// Everything the cost model needs. The efficiencies and overheads are assumptions, stated in
/// docs/sched.md: calibrate them against a profile of the real engine before trusting absolute numbers.
struct cost_params {
  model_spec model = llama2_7b();
  gpu_spec gpu = a100_80g();
  int tensor_parallel = 1;                 ///< GPUs per instance; compute, bandwidth and memory scale with it
  double compute_efficiency = 0.5;         ///< achieved share of peak FLOPs (MFU) in large prefills
  double memory_efficiency = 0.8;          ///< achieved share of HBM bandwidth in decode
  double iteration_overhead_s = 2e-3;      ///< scheduling, sampling, kernel launches per iteration
  double tp_overhead_s_per_layer = 0.0;    ///< all-reduce latency per layer when tensor_parallel > 1
  double memory_utilization = 0.9;         ///< share of HBM the engine may use (vLLM's gpu_memory_utilization)
  double copy_unit_overhead_s = 10e-6;     ///< fixed cost per separate copy (one cudaMemcpyAsync)
  double interconnect_bytes_per_s = 25e9;  ///< instance-to-instance link (200 Gb/s NIC) for KV transfer
};

/// Parameter sets named in the docs.
inline cost_params llama2_7b_a100() { return {}; }
inline cost_params llama2_7b_h100() {
  cost_params p;
  p.gpu = h100_80g();
  return p;
}
/// 70B on 4 GPUs with tensor parallelism (the weights, 138 GB, do not fit one 80 GB GPU).
inline cost_params llama2_70b_a100_tp4() {
  cost_params p;
  p.model = llama2_70b();
  p.tensor_parallel = 4;
  p.tp_overhead_s_per_layer = 2 * 15e-6;  // two all-reduces per layer, ~15 us each on NVLink
  return p;
}
inline cost_params llama2_70b_h100_tp4() {
  cost_params p = llama2_70b_a100_tp4();
  p.gpu = h100_80g();
  p.tp_overhead_s_per_layer = 2 * 10e-6;
  return p;
}

/// Iteration and transfer times. Thread-safe (immutable). iteration_s is O(batch entries).
class cost_model {
 public:
  explicit cost_model(cost_params p = {}) : p_(std::move(p)) {
    const char* where = "weft::sched::sim::cost_model";
    expects(p_.model.parameters > 0 && p_.model.layers > 0 && p_.model.hidden > 0 && p_.model.kv_heads > 0 &&
                p_.model.head_dim > 0,
            errc::invalid_argument, where, "model '", p_.model.name, "' needs positive sizes");
    expects(
        p_.gpu.peak_flops > 0 && p_.gpu.hbm_bytes_per_s > 0 && p_.gpu.hbm_bytes > 0 && p_.gpu.host_link_bytes_per_s > 0,
        errc::invalid_argument, where, "gpu '", p_.gpu.name, "' needs positive rates and memory");
    expects(p_.tensor_parallel >= 1, errc::invalid_argument, where, "tensor_parallel must be >= 1, got ",
            p_.tensor_parallel);
    expects(p_.compute_efficiency > 0 && p_.compute_efficiency <= 1 && p_.memory_efficiency > 0 &&
                p_.memory_efficiency <= 1 && p_.memory_utilization > 0 && p_.memory_utilization <= 1,
            errc::invalid_argument, where, "efficiencies and memory_utilization must be in (0, 1]");
    expects(p_.iteration_overhead_s >= 0 && p_.copy_unit_overhead_s >= 0 && p_.tp_overhead_s_per_layer >= 0 &&
                p_.interconnect_bytes_per_s > 0,
            errc::invalid_argument, where, "overheads must be >= 0 and the interconnect rate > 0");
    expects(kv_bytes_available() > 0, errc::invalid_argument, where, "model '", p_.model.name,
            "' weights do not fit in ", p_.tensor_parallel, " x ", p_.gpu.name);
  }

  const cost_params& params() const noexcept { return p_; }

  /// Seconds for a batch given as token counts: `tokens` computed (prefill + decode), attention over
  /// `attention_pairs` (sum over new tokens of the context they attend to) and `kv_read_tokens` of KV read.
  double iteration_s(double tokens, double attention_pairs, double kv_read_tokens) const noexcept {
    if (tokens <= 0) return 0.0;
    const double tp = p_.tensor_parallel;
    const double flops = 2.0 * p_.model.parameters * tokens + 4.0 * p_.model.layers * p_.model.hidden * attention_pairs;
    const double bytes = p_.model.parameters * p_.model.weight_bytes + kv_read_tokens * p_.model.kv_bytes_per_token();
    const double compute = flops / (tp * p_.gpu.peak_flops * p_.compute_efficiency);
    const double memory = bytes / (tp * p_.gpu.hbm_bytes_per_s * p_.memory_efficiency);
    const double comm = tp > 1 ? p_.tp_overhead_s_per_layer * p_.model.layers : 0.0;
    return p_.iteration_overhead_s + std::max(compute, memory) + comm;
  }

  /// Seconds for a scheduler batch (swap copies not included; see transfer_s).
  double iteration_s(const batch& b) const noexcept {
    double tokens = 0, pairs = 0, kv = 0;
    for (const auto& e : b.entries) {
      const double n = static_cast<double>(e.prefill_tokens + e.decode_tokens);
      const double ctx = static_cast<double>(e.context_tokens);
      tokens += n;
      pairs += n * (ctx - (n - 1.0) / 2.0);  // token i of the chunk attends to ctx - n + i + 1 tokens
      kv += ctx;
    }
    return iteration_s(tokens, pairs, kv);
  }

  /// Seconds to copy t over the host link (swap): one overhead per copy unit plus bytes / bandwidth.
  double transfer_s(const kv_transfer& t) const noexcept {
    return static_cast<double>(t.copy_units) * p_.copy_unit_overhead_s +
           static_cast<double>(t.bytes) / p_.gpu.host_link_bytes_per_s;
  }
  /// Seconds to send `tokens` tokens of KV to another instance (disaggregation, migration).
  double kv_network_s(std::int64_t tokens) const noexcept {
    return static_cast<double>(tokens) * p_.model.kv_bytes_per_token() / p_.interconnect_bytes_per_s;
  }

  /// HBM left for KV after the weights, over all tensor-parallel GPUs.
  double kv_bytes_available() const noexcept {
    return p_.tensor_parallel * p_.gpu.hbm_bytes * p_.memory_utilization - p_.model.parameters * p_.model.weight_bytes;
  }
  /// KV blocks of block_tokens tokens that fit (>= 0).
  std::int64_t kv_blocks(std::int64_t block_tokens) const {
    expects(block_tokens >= 1, errc::invalid_argument, "weft::sched::sim::cost_model::kv_blocks",
            "block_tokens must be >= 1, got ", block_tokens);
    return static_cast<std::int64_t>(kv_bytes_available() /
                                     (p_.model.kv_bytes_per_token() * static_cast<double>(block_tokens)));
  }
  /// KV bytes per token of the model (per instance, all TP shards together).
  std::int64_t kv_bytes_per_token() const noexcept { return static_cast<std::int64_t>(p_.model.kv_bytes_per_token()); }

 private:
  cost_params p_;
};

/// Sarathi-Serve's rule (§4.3): the largest per-iteration token budget whose iteration, holding
/// `decodes` decodes over `mean_context` tokens each plus prefill tokens up to the budget, stays within
/// the TBT target. Returns at least `decodes` (decodes are never dropped) — compare with the target to see
/// whether it is reachable at all. O(log budget).
inline std::int64_t token_budget_for_tbt(const cost_model& m, double tbt_target_s, std::int64_t decodes,
                                         double mean_context) {
  expects(tbt_target_s > 0.0 && std::isfinite(tbt_target_s), errc::invalid_argument,
          "weft::sched::sim::token_budget_for_tbt", "tbt_target_s must be finite and > 0, got ", tbt_target_s);
  expects(decodes >= 0 && mean_context >= 0.0, errc::invalid_argument, "weft::sched::sim::token_budget_for_tbt",
          "decodes and mean_context must be >= 0, got ", decodes, " and ", mean_context);
  auto time_at = [&](std::int64_t budget) {
    const double d = static_cast<double>(decodes);
    const double p = static_cast<double>(budget - decodes);
    // Prefill tokens as one chunk at the start of a prompt (the cheapest attention: a lower bound).
    return m.iteration_s(static_cast<double>(budget), d * mean_context + p * (p + 1.0) / 2.0, d * mean_context + p);
  };
  std::int64_t lo = std::max<std::int64_t>(decodes, 1), hi = std::max<std::int64_t>(lo, 1) * 2;
  if (time_at(lo) > tbt_target_s) return lo;
  while (time_at(hi) <= tbt_target_s && hi < (std::int64_t{1} << 24)) hi *= 2;
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (time_at(mid) <= tbt_target_s ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace weft::sched::sim

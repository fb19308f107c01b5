// Time of one engine iteration from its composition: per layer, the non-attention operators (from a
// measured Vidur operator profile, Agrawal et al., MLSys 2024, or a roofline fallback: Yuan et al.,
// "LLM Inference Unveiled", 2024, §2), attention modelled explicitly (prefill FLOPs of QK^T and PV,
// decode KV bytes read; Dao, FlashAttention-2, 2023), two tensor-parallel all-reduces (measured
// profile or latency + ring bytes), plus the engine's CPU work per iteration and per request.
#pragma once

#include <weft/core/checked.hpp>
#include <weft/kv/kv_manager.hpp>
#include <weft/sched/batch.hpp>
#include <weft/sched/sim/moe_cost.hpp>
#include <weft/sched/sim/nano_batching.hpp>
#include <weft/sched/sim/vidur_profile.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
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
  int intermediate = 0;  ///< MLP width (gated MLP: gate and up each this wide); 0: unknown. MoE: one expert's
  int vocab = 0;         ///< vocabulary (the LM head); 0: unknown
  moe_spec moe{};        ///< Mixture-of-Experts MLPs (moe_cost.hpp); default: dense

  int heads() const noexcept { return head_dim > 0 ? hidden / head_dim : 0; }
  double kv_bytes_per_token() const noexcept {
    return 2.0 * layers * static_cast<double>(kv_heads) * head_dim * kv_dtype_bytes;
  }
  /// The shape a layer profile is matched (or rescaled) against.
  layer_shape shape() const noexcept { return {heads(), kv_heads, hidden, intermediate}; }
  /// Weights of one layer's linear operators (QKV, output projection, gated MLP): what every token
  /// multiplies. Without `intermediate`, the parameters less the embeddings, per layer.
  /// An MoE model counts the weights one token multiplies: attention, router, top_k routed experts and
  /// the shared experts.
  double linear_params_per_layer() const noexcept {
    const double h = hidden, kv = static_cast<double>(kv_heads) * head_dim;
    if (moe.enabled())
      return attention_params_per_layer() + h * moe.experts + moe.top_k * expert_params() + shared_expert_params();
    if (intermediate > 0) return h * (h + 2.0 * kv) + h * h + 3.0 * h * intermediate;
    return (parameters - 2.0 * vocab * h) / layers;
  }
  /// The QKV and output projections of one layer.
  double attention_params_per_layer() const noexcept {
    const double h = hidden, kv = static_cast<double>(kv_heads) * head_dim;
    return h * (h + 2.0 * kv) + h * h;
  }
  /// One routed expert's weights (a gated MLP: gate, up and down projections); 0 for a dense model.
  double expert_params() const noexcept { return 3.0 * hidden * static_cast<double>(moe.expert_intermediate); }
  /// All shared experts' weights of one layer.
  double shared_expert_params() const noexcept {
    return 3.0 * hidden * static_cast<double>(moe.shared_intermediate) * moe.shared_experts;
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
/// 4096, 32 heads of 128, no GQA, MLP 11008, vocabulary 32000): 6.74e9 parameters, 512 KiB KV/token.
inline model_spec llama2_7b() { return {"llama2-7b", 6.74e9, 32, 4096, 32, 128, 2, 2, 11008, 32000}; }
/// Llama-2-70B (same source: 80 layers, width 8192, GQA with 8 KV heads of 128, MLP 28672): 68.98e9
/// parameters, 320 KiB of fp16 KV per token.
inline model_spec llama2_70b() { return {"llama2-70b", 68.98e9, 80, 8192, 8, 128, 2, 2, 28672, 32000}; }
/// Mistral-7B (Jiang et al., "Mistral 7B", 2023, Table 1: 32 layers, width 4096, 32 heads, GQA with 8
/// KV heads of 128, MLP 14336, vocabulary 32000): 7.24e9 parameters, 128 KiB of fp16 KV per token.
inline model_spec mistral_7b() { return {"mistral-7b", 7.24e9, 32, 4096, 8, 128, 2, 2, 14336, 32000}; }
/// Llama-3-8B (Meta's released config: Mistral-7B's layer shape, vocabulary 128256): 8.03e9 parameters.
inline model_spec llama3_8b() { return {"llama3-8b", 8.03e9, 32, 4096, 8, 128, 2, 2, 14336, 128256}; }
/// Llama-3-70B (released config: 80 layers, width 8192, 64 heads, GQA 8, MLP 28672, vocabulary
/// 128256): 70.6e9 parameters, 320 KiB of fp16 KV per token.
inline model_spec llama3_70b() { return {"llama3-70b", 70.6e9, 80, 8192, 8, 128, 2, 2, 28672, 128256}; }
/// Yi-34B (01.AI's released config: 60 layers, width 7168, 56 heads, GQA 8, MLP 20480, vocabulary
/// 64000): 34.39e9 parameters. Sarathi-Serve's artifact measured its iterations (docs/sched.md).
inline model_spec yi_34b() { return {"yi-34b", 34.39e9, 60, 7168, 8, 128, 2, 2, 20480, 64000}; }

/// NVIDIA A100 SXM4 80GB (A100 datasheet, 2021): 312 TFLOPS dense bf16, 2.039 TB/s HBM2e, 80 GB;
/// PCIe 4.0 x16 (32 GB/s per direction, ~25 GB/s achieved).
inline gpu_spec a100_80g() { return {"A100-SXM4-80G", 312e12, 2.039e12, 80e9, 25e9}; }
/// The same GPU by its form factor's name.
inline gpu_spec a100_sxm_80g() { return a100_80g(); }
/// NVIDIA A100 80GB PCIe (same datasheet): 312 TFLOPS, 1.935 TB/s; the GPU of Sarathi-Serve's
/// Mistral-7B and Yi-34B runs (Azure NC96ads v4, pairwise NVLink).
inline gpu_spec a100_pcie_80g() { return {"A100-PCIe-80G", 312e12, 1.935e12, 80e9, 25e9}; }
/// NVIDIA H100 SXM5 80GB (H100 datasheet, 2023): 989 TFLOPS dense bf16, 3.35 TB/s HBM3, 80 GB;
/// PCIe 5.0 x16 (64 GB/s per direction, ~50 GB/s achieved).
inline gpu_spec h100_80g() { return {"H100-80G", 989e12, 3.35e12, 80e9, 50e9}; }

/// Everything the cost model needs. Where each default comes from is in docs/sched.md ("Cost model"):
/// the roofline efficiencies are fitted to Vidur's measured profiles, the engine overheads to
/// Sarathi-Serve's measured iterations; calibrate them against your engine.
struct cost_params {
  model_spec model = llama2_7b();
  gpu_spec gpu = a100_80g();
  int tensor_parallel = 1;  ///< GPUs per instance; compute, bandwidth and memory scale with it
  // Roofline of the non-attention operators (used when no measured profile is given).
  double compute_efficiency = 0.64;  ///< achieved share of peak FLOPs in large GEMMs
  double memory_efficiency = 0.95;   ///< achieved share of HBM bandwidth reading weights
  double layer_overhead_s = 70e-6;   ///< per layer and iteration: launching ~9 operators
  // Attention, always modelled (profiles of it are not shipped).
  double attention_compute_efficiency = 0.3;  ///< FlashAttention prefill, share of peak
  double attention_memory_efficiency = 0.7;   ///< paged decode attention, share of HBM bandwidth
  double attention_overhead_s = 10e-6;        ///< per layer and iteration
  // The engine around the GPU.
  double iteration_overhead_s = 21e-3;     ///< CPU per iteration: scheduling, input preparation, sampling launch
  double per_request_overhead_s = 1.2e-3;  ///< CPU per scheduled request: sampling, detokenising, bookkeeping
  // Tensor parallelism without an all-reduce profile: two all-reduces per layer.
  double tp_overhead_s_per_layer = 0.0;    ///< their latency, per layer
  double tp_link_bytes_per_s = 150e9;      ///< ring bus bandwidth of the GPU link (NVLink)
  double memory_utilization = 0.9;         ///< share of HBM the engine may use (vLLM's gpu_memory_utilization)
  double copy_unit_overhead_s = 10e-6;     ///< fixed cost per separate copy (one cudaMemcpyAsync)
  double interconnect_bytes_per_s = 25e9;  ///< instance-to-instance link (200 Gb/s NIC) for KV transfer
  /// Pipeline stages per instance (tensor_parallel GPUs each): an iteration's batch passes every stage,
  /// so its time is the whole model's on tensor_parallel GPUs plus (stages - 1) activation sends over
  /// tp_link_bytes_per_s; the weights and KV spread over tensor_parallel * pipeline_parallel GPUs.
  /// Several batches in flight at once (micro-batches filling the pipeline) are not modelled.
  int pipeline_parallel = 1;
  /// NanoFlow-style overlap of the iteration's operations (nano_batching.hpp); the default is sequential.
  nano_batching nano{};
  // Mixture-of-Experts models (model.moe set; moe_cost.hpp).
  /// Which experts tokens activate, per layer; empty: uniform over model.moe.experts.
  routing_model routing{};
  /// Per MoE layer and iteration: the router's top-k and the permutation of tokens to experts and back
  /// (a few kernel launches). Assumed, not measured.
  double moe_layer_overhead_s = 30e-6;
  /// Achieved share of peak FLOPs in the experts' grouped GEMMs; 0: compute_efficiency. Fused MoE
  /// kernels with tens to hundreds of tokens per expert run below the dense GEMMs' efficiency (padding
  /// to tiles, token permutation), which moves the experts' ridge to more tokens.
  double expert_compute_efficiency = 0.0;
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
  p.tp_overhead_s_per_layer = 2 * 15e-6;  // two all-reduces per layer, ~15 us latency each on NVLink
  return p;
}
inline cost_params llama2_70b_h100_tp4() {
  cost_params p = llama2_70b_a100_tp4();
  p.gpu = h100_80g();
  p.tp_overhead_s_per_layer = 2 * 10e-6;
  return p;
}
/// Sarathi-Serve's Mistral-7B deployment: one A100 80GB PCIe (OSDI 2024, §5, and its artifact).
inline cost_params mistral_7b_a100() {
  cost_params p;
  p.model = mistral_7b();
  p.gpu = a100_pcie_80g();
  return p;
}
inline cost_params llama3_8b_a100() {
  cost_params p;
  p.model = llama3_8b();
  return p;
}
inline cost_params llama3_70b_a100_tp4() {
  cost_params p = llama2_70b_a100_tp4();
  p.model = llama3_70b();
  return p;
}

/// Mixtral-8x7B (Jiang et al., "Mixtral of Experts", 2024, Table 1, and its released config: 32 layers,
/// width 4096, 32 heads, GQA with 8 KV heads of 128, 8 experts of width 14336, top-2, vocabulary
/// 32000): 46.7e9 parameters (12.9e9 active per token), 128 KiB of fp16 KV per token. Its attention
/// and each expert have Mistral-7B's layer shape.
inline model_spec mixtral_8x7b() {
  model_spec m{"mixtral-8x7b", 46.7e9, 32, 4096, 8, 128, 2, 2, 14336, 32000};
  m.moe = {8, 2, 14336, 0, 0};
  return m;
}
/// Qwen1.5-MoE-A2.7B (Qwen team, released config `qwen2_moe`: 24 layers, width 2048, 16 heads of 128
/// without GQA, 60 routed experts of width 1408, top-4, one shared expert of width 5632, vocabulary
/// 151936): 14.3e9 parameters (2.7e9 active), 192 KiB of fp16 KV per token.
inline model_spec qwen15_moe_a27b() {
  model_spec m{"qwen1.5-moe-a2.7b", 14.3e9, 24, 2048, 16, 128, 2, 2, 1408, 151936};
  m.moe = {60, 4, 1408, 1, 5632};
  return m;
}
/// Mixtral-8x7B in fp16 (93 GB) on two H100 80GB with tensor parallelism (each expert split over both).
inline cost_params mixtral_8x7b_h100_tp2() {
  cost_params p;
  p.model = mixtral_8x7b();
  p.gpu = h100_80g();
  p.tensor_parallel = 2;
  p.tp_overhead_s_per_layer = 2 * 10e-6;
  return p;
}
/// Qwen1.5-MoE-A2.7B on one A100 80GB.
inline cost_params qwen15_moe_a27b_a100() {
  cost_params p;
  p.model = qwen15_moe_a27b();
  return p;
}

/// What one iteration holds, for the cost model: tokens computed, attention work and requests.
struct iteration_shape {
  double tokens = 0.0;           ///< prefill + decode tokens computed
  double attention_pairs = 0.0;  ///< sum over new tokens of the context each attends to
  double kv_read_tokens = 0.0;   ///< tokens of KV attention reads (each entry's context)
  double requests = 0.0;         ///< requests in the batch (per-request CPU work; LM-head rows)
};

/// Iteration and transfer times. Thread-safe (immutable). iteration_s is O(batch entries + log points).
class cost_model {
 public:
  /// The roofline model. Throws weft::error(invalid_argument) for sizes, rates or efficiencies out of range.
  explicit cost_model(cost_params p = {}) : p_(std::move(p)) {
    validate_params();
    build_moe();
  }

  /// The measured-profile model: non-attention operators and (TP > 1) all-reduces from `profile`.
  /// Throws weft::error(invalid_argument) when the profile's tensor-parallel degree, layer shape or
  /// all-reduce worker count does not match p (rescale a profile with layer_profile::rescaled), or
  /// when TP > 1 and the profile has no all-reduce.
  cost_model(cost_params p, measured_profile profile) : p_(std::move(p)), profile_(std::move(profile)) {
    validate_params();
    const char* where = "weft::sched::sim::cost_model";
    const layer_profile& l = profile_->layer;
    expects(l.tensor_parallel() == p_.tensor_parallel, errc::invalid_argument, where, "profile ", l.source(),
            " is for tensor-parallel degree ", l.tensor_parallel(), ", the deployment has ", p_.tensor_parallel);
    expects(p_.model.intermediate == 0 || l.shape() == p_.model.shape(), errc::invalid_argument, where, "profile ",
            l.source(), " is for layer shape ", detail::shape_text(l.shape()), ", model '", p_.model.name, "' has ",
            detail::shape_text(p_.model.shape()), " (rescale the profile with layer_profile::rescaled)");
    expects(p_.tensor_parallel == 1 || (profile_->all_reduce && profile_->all_reduce->workers() == p_.tensor_parallel),
            errc::invalid_argument, where, "a tensor-parallel deployment of ", p_.tensor_parallel,
            " GPUs needs an all-reduce profile of that many workers");
    build_moe();
  }

  const cost_params& params() const noexcept { return p_; }
  /// The measured profile, or nullptr for the roofline model.
  const measured_profile* profile() const noexcept { return profile_ ? &*profile_ : nullptr; }

  /// Seconds of one iteration of the given shape (swap copies not included; see transfer_s):
  /// iteration_overhead + per_request * requests + layers * (linear + attention + all-reduces) + LM head.
  /// With params().nano set, the operations of nano-batches overlap (overlapped_iteration_s of resource_s).
  double iteration_s(const iteration_shape& it) const noexcept {
    if (it.tokens <= 0) return 0.0;
    if (p_.nano.nano_batches > 1 || p_.nano.overlap_engine)
      return overlapped_iteration_s(resource_s(it, p_.nano.nano_batches), p_.nano);
    if (moe_) {  // per layer: attention and all-reduces as below; the experts from the routing table
      const double layers = p_.model.layers;
      return p_.iteration_overhead_s + p_.per_request_overhead_s * it.requests +
             layers * (attention_layer_s(it.attention_pairs, it.kv_read_tokens) + tp_layer_s(it.tokens)) +
             linear_layers_s(it.tokens, 0.0, layers) + head_s(it.requests) + pipeline_send_s(it.tokens);
    }
    const double per_layer =
        linear_layer_s(it.tokens) + attention_layer_s(it.attention_pairs, it.kv_read_tokens) + tp_layer_s(it.tokens);
    return p_.iteration_overhead_s + p_.per_request_overhead_s * it.requests + p_.model.layers * per_layer +
           head_s(it.requests) + pipeline_send_s(it.tokens);
  }

  /// The iteration's time by bounding resource, its batch split into `nano_batches` equal parts (at
  /// most one per token): each part runs every layer's linear operators on its tokens (compute-bound
  /// at or above gemm_ridge_tokens() per part, weight-read-bound below), its share of the attention
  /// (compute or memory, whichever binds) and its all-reduces (network); the LM head and stage sends
  /// once. With one part the four add up to iteration_s. NanoFlow, §3 (the resource classes) and §4.
  /// O(log points).
  resource_times resource_s(const iteration_shape& it, int nano_batches = 1) const noexcept {
    resource_times r;
    r.layers = p_.model.layers;
    if (it.tokens <= 0) return r;
    const double n = std::clamp(std::floor(it.tokens), 1.0, static_cast<double>(std::max(1, nano_batches)));
    const double part = it.tokens / n, layers = p_.model.layers;
    const double linear = n * linear_layer_s(part) * layers;
    (part >= gemm_ridge_tokens() ? r.compute_s : r.memory_s) += linear;
    const double tp = p_.tensor_parallel;
    const double flops = 4.0 * p_.model.hidden * (it.attention_pairs / n) / tp;
    const double bytes = (it.kv_read_tokens / n) * p_.model.kv_bytes_per_token() / p_.model.layers / tp;
    const double attention = n * attention_layer_s(it.attention_pairs / n, it.kv_read_tokens / n) * layers;
    (flops / (p_.gpu.peak_flops * p_.attention_compute_efficiency) >=
             bytes / (p_.gpu.hbm_bytes_per_s * p_.attention_memory_efficiency)
         ? r.compute_s
         : r.memory_s) += attention;
    r.network_s = n * tp_layer_s(part) * layers + pipeline_send_s(it.tokens);
    r.compute_s += head_s(it.requests);
    r.engine_s = p_.iteration_overhead_s + p_.per_request_overhead_s * it.requests;
    return r;
  }

  /// Tokens per GEMM at which the layer's linear operators turn from weight-read-bound to
  /// compute-bound on the roofline: weight_bytes * peak * compute_eff / (2 * HBM * memory_eff)
  /// (Williams et al., "Roofline", CACM 2009; ~103 tokens on an A100 with the default efficiencies). O(1).
  double gemm_ridge_tokens() const noexcept {
    return p_.model.weight_bytes * p_.gpu.peak_flops * p_.compute_efficiency /
           (2.0 * p_.gpu.hbm_bytes_per_s * p_.memory_efficiency);
  }
  /// One request's iteration of `tokens` tokens with the given attention work.
  double iteration_s(double tokens, double attention_pairs, double kv_read_tokens) const noexcept {
    return iteration_s(iteration_shape{tokens, attention_pairs, kv_read_tokens, 1.0});
  }
  /// Seconds for a scheduler batch (swap copies not included; see transfer_s). A batch whose entries
  /// all run every layer is iteration_s(shape_of(b)); one with layer-group entries (layered prefill)
  /// is priced per stretch of layers, see layered_iteration_s.
  double iteration_s(const batch& b) const noexcept {
    if (std::all_of(b.entries.begin(), b.entries.end(), [](const batch_entry& e) { return e.layers.all(); }))
      return iteration_s(shape_of(b));
    return layered_iteration_s(b);
  }

  /// A batch with layer-group entries (layered prefill, sched/layered_prefill.hpp): the model's layers
  /// are cut where any entry's range begins or ends (ranges scale to model.layers by their fraction),
  /// and each stretch of layers costs what a layer costs for the entries that run it (linear operators
  /// of their tokens — each layer's weights read once per iteration however many entries pass it —,
  /// their attention, their all-reduces) times its layer count; plus the iteration and per-request
  /// overheads, the LM head for the entries that reach the last layer, and the stage sends of the
  /// layer-weighted tokens. With params().nano set it falls back to the overlap model over shape_of(b),
  /// whose entries count by their fraction of the layers. O(E * S) (S stretches, at most 2E + 1).
  double layered_iteration_s(const batch& b) const noexcept {
    if (p_.nano.nano_batches > 1 || p_.nano.overlap_engine) return iteration_s(shape_of(b));
    double total = 0.0, heads = 0.0;
    for (const auto& e : b.entries) heads += e.layers.reaches_output() ? 1.0 : 0.0;
    for_each_stretch(b, [&](double x, double y, const iteration_shape& s) {
      if (moe_) {  // the experts of these layers for the tokens that pass them, each read once
        const double a = x * p_.model.layers, z = y * p_.model.layers;
        total += (z - a) * (attention_layer_s(s.attention_pairs, s.kv_read_tokens) + tp_layer_s(s.tokens)) +
                 linear_layers_s(s.tokens, a, z);
        return;
      }
      const double per_layer =
          linear_layer_s(s.tokens) + attention_layer_s(s.attention_pairs, s.kv_read_tokens) + tp_layer_s(s.tokens);
      total += (y - x) * p_.model.layers * per_layer;
    });
    const iteration_shape whole = shape_of(b);
    return p_.iteration_overhead_s + p_.per_request_overhead_s * whole.requests + total + head_s(heads) +
           pipeline_send_s(whole.tokens);
  }

  /// The iteration shape of a batch: token i of a chunk of n attends to ctx - n + i + 1 tokens. An
  /// entry over part of the layers (batch_entry::layers) counts by its fraction of them.
  static iteration_shape shape_of(const batch& b) noexcept {
    iteration_shape s;
    for (const auto& e : b.entries) {
      const double n = static_cast<double>(e.prefill_tokens + e.decode_tokens);
      const double ctx = static_cast<double>(e.context_tokens);
      const double f = e.layers.fraction();  // 1 for a whole-model entry: the products are exact
      s.tokens += n * f;
      s.attention_pairs += n * (ctx - (n - 1.0) / 2.0) * f;
      s.kv_read_tokens += ctx * f;
    }
    s.requests = static_cast<double>(b.entries.size());
    return s;
  }

  /// One layer's non-attention operators for a batch of `tokens` tokens: the measured profile when
  /// there is one, else the roofline. An MoE model: the mean over its layers of linear_layers_s.
  double linear_layer_s(double tokens) const noexcept {
    if (moe_) return linear_layers_s(tokens, 0.0, p_.model.layers) / p_.model.layers;
    return profile_ ? profile_->layer.layer_s(tokens) : roofline_linear_layer_s(tokens);
  }

  /// The non-attention operators of layers [first, end) (real positions, a part of a layer counting by
  /// its part) for `tokens` tokens passing them. Dense: (end - first) * linear_layer_s. MoE, per layer:
  /// the projections, norms and router (the measured profile's non-MLP operators, else their roofline
  /// with layer_overhead_s), moe_layer_overhead_s, and the experts' roofline with each expert the
  /// tokens activate read once (moe_cost.hpp). O(1) after the cost model is built. Thread-safe.
  double linear_layers_s(double tokens, double first, double end) const noexcept {
    if (!moe_) return (end - first) * linear_layer_s(tokens);
    if (!(tokens > 0.0) || !(end > first)) return 0.0;
    double dense;
    if (profile_) {
      static constexpr std::array<layer_op, 6> non_mlp{layer_op::input_layernorm,
                                                       layer_op::attn_pre_proj,
                                                       layer_op::attn_rope,
                                                       layer_op::attn_post_proj,
                                                       layer_op::post_attention_layernorm,
                                                       layer_op::add};
      dense = profile_->layer.ops_s(non_mlp, tokens);
    } else {
      const double w =
          (p_.model.attention_params_per_layer() + 1.0 * p_.model.hidden * p_.model.moe.experts) / p_.tensor_parallel;
      dense =
          p_.layer_overhead_s + std::max(2.0 * w * tokens / (p_.gpu.peak_flops * p_.compute_efficiency),
                                         w * p_.model.weight_bytes / (p_.gpu.hbm_bytes_per_s * p_.memory_efficiency));
    }
    return (end - first) * (dense + p_.moe_layer_overhead_s) + moe_->time_s(tokens, first, end);
  }

  /// Expected expert weight bytes (routed and shared, all GPUs of the instance) an iteration of this
  /// shape reads: each layer reads every expert its tokens activate once. 0 for a dense model. O(1).
  double expert_bytes(const iteration_shape& it) const noexcept {
    return moe_ ? moe_->bytes(it.tokens, 0.0, p_.model.layers) * p_.tensor_parallel : 0.0;
  }
  /// The same for a scheduler batch; a layer-group entry adds its tokens only to its group's layers
  /// (layered prefill). 0 for a dense model. O(E * S) like layered_iteration_s.
  double expert_bytes(const batch& b) const noexcept {
    if (!moe_ || b.entries.empty()) return 0.0;
    if (std::all_of(b.entries.begin(), b.entries.end(), [](const batch_entry& e) { return e.layers.all(); }))
      return expert_bytes(shape_of(b));
    double total = 0.0;
    for_each_stretch(b, [&](double x, double y, const iteration_shape& s) {
      total += moe_->bytes(s.tokens, x * p_.model.layers, y * p_.model.layers);
    });
    return total * p_.tensor_parallel;
  }
  /// The roofline of one layer's linear operators: launch overhead + max(2 * weights * tokens FLOPs
  /// at compute_efficiency, weight bytes at memory_efficiency), per GPU.
  double roofline_linear_layer_s(double tokens) const noexcept {
    const double w = p_.model.linear_params_per_layer() / p_.tensor_parallel;
    const double compute = 2.0 * w * tokens / (p_.gpu.peak_flops * p_.compute_efficiency);
    const double memory = w * p_.model.weight_bytes / (p_.gpu.hbm_bytes_per_s * p_.memory_efficiency);
    return p_.layer_overhead_s + std::max(compute, memory);
  }
  /// One layer's attention: overhead + max(4 * hidden * pairs FLOPs (QK^T and PV), KV bytes read),
  /// each at its efficiency, per GPU.
  double attention_layer_s(double attention_pairs, double kv_read_tokens) const noexcept {
    const double tp = p_.tensor_parallel;
    const double flops = 4.0 * p_.model.hidden * attention_pairs / tp;
    const double bytes = kv_read_tokens * p_.model.kv_bytes_per_token() / p_.model.layers / tp;
    return p_.attention_overhead_s + std::max(flops / (p_.gpu.peak_flops * p_.attention_compute_efficiency),
                                              bytes / (p_.gpu.hbm_bytes_per_s * p_.attention_memory_efficiency));
  }
  /// One layer's two tensor-parallel all-reduces of tokens * hidden fp16 elements (0 without TP):
  /// from the measured profile, else latency + ring bytes 2 (n - 1) / n * size / link bandwidth.
  double tp_layer_s(double tokens) const noexcept {
    if (p_.tensor_parallel == 1) return 0.0;
    const double elements = tokens * p_.model.hidden;
    if (profile_ && profile_->all_reduce) return 2.0 * profile_->all_reduce->seconds_for(elements);
    const double n = p_.tensor_parallel;
    return p_.tp_overhead_s_per_layer + 2.0 * 2.0 * (n - 1.0) / n * elements * 2.0 / p_.tp_link_bytes_per_s;
  }
  /// The LM head: its weights read once, 2 * vocab * hidden FLOPs per request's sampled row.
  double head_s(double requests) const noexcept {
    if (p_.model.vocab <= 0 || requests <= 0) return 0.0;
    const double w = static_cast<double>(p_.model.vocab) * p_.model.hidden / p_.tensor_parallel;
    return std::max(2.0 * w * requests / (p_.gpu.peak_flops * p_.compute_efficiency),
                    w * p_.model.weight_bytes / (p_.gpu.hbm_bytes_per_s * p_.memory_efficiency));
  }

  /// Activation sends between pipeline stages for a batch of `tokens` tokens: (stages - 1) * tokens *
  /// hidden fp16 values over tp_link_bytes_per_s (0 without pipeline parallelism). O(1).
  double pipeline_send_s(double tokens) const noexcept {
    if (p_.pipeline_parallel <= 1) return 0.0;
    return (p_.pipeline_parallel - 1) * tokens * p_.model.hidden * 2.0 / p_.tp_link_bytes_per_s;
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

  /// HBM left for KV after the weights, over all tensor- and pipeline-parallel GPUs.
  double kv_bytes_available() const noexcept {
    return (p_.tensor_parallel * p_.pipeline_parallel) * p_.gpu.hbm_bytes * p_.memory_utilization -
           p_.model.parameters * p_.model.weight_bytes;
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
  /// The configuration of one instance's weft::kv::kv_manager: as many device blocks of block_size
  /// tokens as fit (kv_blocks) plus kv's null block, the model's KV bytes per token, and host_blocks
  /// usable host-tier blocks (0: no host tier). Other fields keep kv_config's defaults. O(1).
  weft::kv::kv_config kv_manager_config(std::size_t block_size = 16, std::size_t host_blocks = 0) const {
    const char* where = "weft::sched::sim::cost_model::kv_manager_config";
    weft::kv::kv_config c;
    c.block_size = block_size;
    c.num_blocks =
        checked_add(checked_cast<std::size_t>(kv_blocks(checked_cast<std::int64_t>(block_size, where)), where),
                    std::size_t{1}, where);
    c.host_blocks = host_blocks == 0 ? 0 : checked_add(host_blocks, std::size_t{1}, where);
    c.bytes_per_token = checked_cast<std::size_t>(kv_bytes_per_token(), where);
    return c;
  }

 private:
  // Calls f(x, y, shape) for each stretch [x, y) of the layers (fractions of the model) that some entry
  // of b runs, in order, with the shape of the entries that run all of it: the layers are cut wherever
  // an entry's range begins or ends.
  template <class F>
  static void for_each_stretch(const batch& b, F&& f) {
    const auto begin_of = [](const batch_entry& e) {
      return e.layers.all() ? 0.0 : 1.0 * e.layers.begin / e.layers.of;
    };
    const auto end_of = [](const batch_entry& e) { return e.layers.all() ? 1.0 : 1.0 * e.layers.end / e.layers.of; };
    double x = 0.0;
    while (x < 1.0) {
      double y = 1.0;  // the next cut after x
      for (const auto& e : b.entries) {
        if (const double lo = begin_of(e); lo > x) y = std::min(y, lo);
        if (const double hi = end_of(e); hi > x) y = std::min(y, hi);
      }
      iteration_shape s;
      for (const auto& e : b.entries) {
        if (begin_of(e) > x || end_of(e) < y) continue;  // does not run this stretch
        const double n = static_cast<double>(e.prefill_tokens + e.decode_tokens);
        const double ctx = static_cast<double>(e.context_tokens);
        s.tokens += n;
        s.attention_pairs += n * (ctx - (n - 1.0) / 2.0);
        s.kv_read_tokens += ctx;
      }
      if (s.tokens > 0) f(x, y, s);
      x = y;
    }
  }

  // The routing table of an MoE model (validate_params checked the spec and the routing).
  void build_moe() {
    const model_spec& m = p_.model;
    if (!m.moe.enabled()) return;
    const routing_model r =
        p_.routing.empty() ? routing_model::uniform(m.layers, m.moe.experts, m.moe.top_k) : p_.routing;
    detail::moe_rates n;
    n.expert_params = m.expert_params() / p_.tensor_parallel;
    n.shared_params = m.shared_expert_params() / p_.tensor_parallel;
    n.weight_bytes = m.weight_bytes;
    n.flops_per_s =
        p_.gpu.peak_flops * (p_.expert_compute_efficiency > 0.0 ? p_.expert_compute_efficiency : p_.compute_efficiency);
    n.bytes_per_s = p_.gpu.hbm_bytes_per_s * p_.memory_efficiency;
    moe_ = std::make_shared<const detail::moe_table>(r, n);
  }

  void validate_params() const {
    const char* where = "weft::sched::sim::cost_model";
    const model_spec& m = p_.model;
    expects(m.parameters > 0 && m.layers > 0 && m.hidden > 0 && m.kv_heads > 0 && m.head_dim > 0 &&
                m.hidden % m.head_dim == 0 && m.intermediate >= 0 && m.vocab >= 0 && m.weight_bytes > 0 &&
                m.kv_dtype_bytes > 0 && m.linear_params_per_layer() > 0,
            errc::invalid_argument, where, "model '", m.name,
            "' needs positive sizes, head_dim dividing hidden and more parameters than embeddings");
    expects(
        p_.gpu.peak_flops > 0 && p_.gpu.hbm_bytes_per_s > 0 && p_.gpu.hbm_bytes > 0 && p_.gpu.host_link_bytes_per_s > 0,
        errc::invalid_argument, where, "gpu '", p_.gpu.name, "' needs positive rates and memory");
    expects(p_.tensor_parallel >= 1 && p_.tensor_parallel <= 4096, errc::invalid_argument, where,
            "tensor_parallel must be in [1, 4096], got ", p_.tensor_parallel);
    expects(p_.pipeline_parallel >= 1 && p_.pipeline_parallel <= 4096 && p_.pipeline_parallel <= p_.model.layers &&
                p_.tensor_parallel * p_.pipeline_parallel <= 4096,
            errc::invalid_argument, where, "pipeline_parallel must be in [1, min(4096, layers=", p_.model.layers,
            ")] with tensor_parallel * pipeline_parallel <= 4096, got ", p_.pipeline_parallel);
    validate(p_.nano, where);
    const moe_spec& x = m.moe;
    expects(x.experts >= 0 && x.experts <= routing_model::max_experts, errc::invalid_argument, where, "model '", m.name,
            "': moe.experts must be in [0, ", routing_model::max_experts, "], got ", x.experts);
    if (x.enabled()) {
      expects(x.top_k >= 1 && x.top_k <= x.experts && x.expert_intermediate >= 1 && x.shared_experts >= 0 &&
                  (x.shared_experts == 0 || x.shared_intermediate >= 1),
              errc::invalid_argument, where, "model '", m.name, "': an MoE model needs 1 <= top_k (", x.top_k,
              ") <= experts (", x.experts, "), expert_intermediate >= 1 (", x.expert_intermediate,
              ") and, with shared experts (", x.shared_experts, "), shared_intermediate >= 1 (", x.shared_intermediate,
              ")");
      expects(m.layers <= routing_model::max_layers, errc::invalid_argument, where, "model '", m.name,
              "': an MoE model may have at most ", routing_model::max_layers, " layers, got ", m.layers);
      expects(p_.nano.nano_batches <= 1 && !p_.nano.overlap_engine, errc::invalid_argument, where, "model '", m.name,
              "': nano-batching of an MoE model is not modelled; leave cost_params::nano at its default");
      expects(p_.routing.empty() || (p_.routing.layers() == m.layers && p_.routing.experts() == x.experts &&
                                     p_.routing.top_k() == x.top_k),
              errc::invalid_argument, where, "routing model of ", p_.routing.layers(), " layers, ",
              p_.routing.experts(), " experts, top-", p_.routing.top_k(), " does not fit model '", m.name, "' (",
              m.layers, " layers, ", x.experts, " experts, top-", x.top_k, ")");
    } else {
      expects(p_.routing.empty(), errc::invalid_argument, where, "a routing model was given for model '", m.name,
              "', which has no experts (model.moe.experts = 0)");
    }
    expects(std::isfinite(p_.moe_layer_overhead_s) && p_.moe_layer_overhead_s >= 0.0, errc::invalid_argument, where,
            "moe_layer_overhead_s must be finite and >= 0, got ", p_.moe_layer_overhead_s);
    expects(p_.expert_compute_efficiency >= 0.0 && p_.expert_compute_efficiency <= 1.0, errc::invalid_argument, where,
            "expert_compute_efficiency must be in [0, 1] (0: compute_efficiency), got ", p_.expert_compute_efficiency);
    const auto unit = [](double e) { return e > 0 && e <= 1; };
    expects(unit(p_.compute_efficiency) && unit(p_.memory_efficiency) && unit(p_.attention_compute_efficiency) &&
                unit(p_.attention_memory_efficiency) && unit(p_.memory_utilization),
            errc::invalid_argument, where, "efficiencies and memory_utilization must be in (0, 1]");
    const auto time = [](double t) { return t >= 0 && std::isfinite(t); };
    expects(time(p_.iteration_overhead_s) && time(p_.per_request_overhead_s) && time(p_.layer_overhead_s) &&
                time(p_.attention_overhead_s) && time(p_.copy_unit_overhead_s) && time(p_.tp_overhead_s_per_layer) &&
                p_.interconnect_bytes_per_s > 0 && p_.tp_link_bytes_per_s > 0,
            errc::invalid_argument, where, "overheads must be finite and >= 0, link rates > 0");
    expects(kv_bytes_available() > 0, errc::invalid_argument, where, "model '", m.name, "' weights do not fit in ",
            p_.tensor_parallel * p_.pipeline_parallel, " x ", p_.gpu.name);
  }

  cost_params p_;
  std::optional<measured_profile> profile_;
  std::shared_ptr<const detail::moe_table> moe_;  // MoE models only; shared by copies (immutable)
};

/// What token_budget_for_tbt prices: the iteration a Sarathi token budget must keep within the TBT target.
struct tbt_budget_query {
  double tbt_target_s = 0.1;
  std::int64_t decodes = 0;   ///< running decodes in the iteration
  double mean_context = 0.0;  ///< their mean context, tokens
  /// The prefill chunk is priced as the last chunk of a prompt this long (its attention reads the
  /// whole prompt: the worst position); 0 prices it at the start of a prompt.
  double prompt_tokens = 0.0;
  double headroom = 0.0;           ///< share of the target kept free (noise, effects not modelled), in [0, 1)
  std::int64_t block_tokens = 16;  ///< KV block size, for the capacity check
};

/// The budget, what it was priced at, and whether the target can be met at all.
struct tbt_budget {
  std::int64_t token_budget = 0;  ///< largest per-iteration budget whose iteration fits (>= decodes priced)
  double iteration_s = 0.0;       ///< predicted iteration time at that budget
  std::int64_t decodes = 0;       ///< decodes priced: the query's, or as many as the KV cache holds
  std::int64_t kv_capacity_tokens = 0;
  bool feasible = false;  ///< false: the target cannot be met as asked; `reason` says why
  std::string reason;
};

/// Sarathi-Serve's rule (OSDI 2024, §4.3): the largest per-iteration token budget (decodes plus one
/// prefill chunk) whose iteration, priced at the chunk's worst position (the end of a prompt of
/// q.prompt_tokens), stays within the TBT target less the headroom. Accounts for KV capacity: when the
/// decodes' KV (and the chunk's prompt) cannot be held, it prices the decodes that fit and says so.
/// Infeasible (feasible = false) when the KV cache cannot hold the decodes, or the decodes alone
/// exceed the target. O(log budget). Thread-safe.
inline tbt_budget token_budget_for_tbt(const cost_model& m, const tbt_budget_query& q) {
  const char* where = "weft::sched::sim::token_budget_for_tbt";
  expects(q.tbt_target_s > 0.0 && std::isfinite(q.tbt_target_s), errc::invalid_argument, where,
          "tbt_target_s must be finite and > 0, got ", q.tbt_target_s);
  expects(q.decodes >= 0 && q.decodes <= max_request_tokens && q.mean_context >= 0.0 &&
              q.mean_context <= max_request_tokens && q.prompt_tokens >= 0.0 && q.prompt_tokens <= max_request_tokens,
          errc::invalid_argument, where,
          "decodes, mean_context and prompt_tokens must be in [0, max_request_tokens], got ", q.decodes, ", ",
          q.mean_context, " and ", q.prompt_tokens);
  expects(q.headroom >= 0.0 && q.headroom < 1.0 && q.block_tokens >= 1 && q.block_tokens <= 1 << 20,
          errc::invalid_argument, where, "headroom must be in [0, 1) and block_tokens in [1, 2^20]");
  tbt_budget out;
  out.kv_capacity_tokens = m.kv_blocks(q.block_tokens) * q.block_tokens;
  const auto blocks_of = [&](double tokens) { return std::ceil(tokens / static_cast<double>(q.block_tokens)); };
  const double per_decode = blocks_of(q.mean_context + 1.0) * static_cast<double>(q.block_tokens);
  const double chunk_kv = blocks_of(q.prompt_tokens) * static_cast<double>(q.block_tokens);
  const double capacity = static_cast<double>(out.kv_capacity_tokens);
  out.decodes = q.decodes;
  out.feasible = true;
  if (static_cast<double>(q.decodes) * per_decode + chunk_kv > capacity) {
    out.decodes = static_cast<std::int64_t>(std::max(0.0, std::floor((capacity - chunk_kv) / per_decode)));
    out.feasible = false;
    out.reason = weft::detail::concat("the KV cache holds ", out.kv_capacity_tokens, " tokens: ", q.decodes,
                                      " decodes over ", q.mean_context, "-token contexts (plus a ", q.prompt_tokens,
                                      "-token prompt) need more; at most ", out.decodes, " fit");
  }
  const double d = static_cast<double>(out.decodes), ctx = q.mean_context;
  const double target = q.tbt_target_s * (1.0 - q.headroom);
  const auto time_at = [&](std::int64_t budget) {
    const double p = static_cast<double>(budget) - d;  // prefill chunk tokens
    const double prompt = std::max(q.prompt_tokens, p);
    iteration_shape s;
    s.tokens = static_cast<double>(budget);
    s.attention_pairs = d * ctx + p * (prompt - (p - 1.0) / 2.0);
    s.kv_read_tokens = d * ctx + (p > 0 ? prompt : 0.0);
    s.requests = d + (p > 0 ? 1.0 : 0.0);
    return m.iteration_s(s);
  };
  std::int64_t lo = std::max<std::int64_t>(out.decodes, 1);
  out.token_budget = lo;
  out.iteration_s = time_at(lo);
  if (out.iteration_s > target) {
    out.feasible = false;
    out.reason = weft::detail::concat(out.reason, out.reason.empty() ? "" : "; ", out.decodes, " decodes alone take ",
                                      out.iteration_s, " s, more than the target ", target, " s (", q.tbt_target_s,
                                      " s less ", q.headroom * 100, "% headroom)");
    return out;
  }
  // The chunk may use the KV the decodes leave (beyond the prompt it is priced in).
  const std::int64_t kv_limit =
      std::max<std::int64_t>(lo, out.decodes + static_cast<std::int64_t>(std::max(0.0, capacity - d * per_decode)));
  std::int64_t hi = std::min<std::int64_t>(kv_limit, max_request_tokens);
  if (time_at(hi) <= target) {
    lo = hi;
  } else {
    while (hi - lo > 1) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      (time_at(mid) <= target ? lo : hi) = mid;
    }
  }
  out.token_budget = lo;
  out.iteration_s = time_at(lo);
  return out;
}

/// The budget for `decodes` decodes over `mean_context`-token contexts, the chunk priced at the end
/// of a prompt of mean_context tokens (see the query form, which also says whether the target can be
/// met). Returns at least max(decodes, 1). O(log budget). Thread-safe.
inline std::int64_t token_budget_for_tbt(const cost_model& m, double tbt_target_s, std::int64_t decodes,
                                         double mean_context) {
  tbt_budget_query q;
  q.tbt_target_s = tbt_target_s;
  q.decodes = decodes;
  q.mean_context = mean_context;
  q.prompt_tokens = mean_context;
  return std::max(token_budget_for_tbt(m, q).token_budget, std::max<std::int64_t>(decodes, 1));
}

}  // namespace weft::sched::sim

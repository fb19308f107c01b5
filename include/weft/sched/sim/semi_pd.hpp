// Partial disaggregation in the simulator: semi-PD (Hong et al., "semi-PD: Towards Efficient LLM Serving
// via Phase-Wise Disaggregated Computation and Unified Storage", arXiv 2504.19867, 2025). Per GPU
// instance, a prefill worker and a decode worker run concurrently, each on a share of the SMs (MPS in
// the paper), over ONE KV pool (no KV transfer), with a controller that moves the share to meet TTFT and
// TPOT SLOs. Built on the one simulation driver (detail::event_loop); docs/sched.md ("semi-PD").
#pragma once

#include <weft/kv/kv_manager.hpp>
#include <weft/sched/sim/simulator.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace weft::sched::sim {

/// How a semi-PD deployment is arranged and controlled. Every field is checked by validate().
struct semi_pd_options {
  std::size_t instances = 1;  ///< GPUs (or TP groups): each runs a prefill and a decode worker
  /// Share of the instance's SMs the prefill worker starts with (the decode worker has the rest), in (0, 1).
  double prefill_share = 0.5;
  bool adaptive = true;  ///< false: the share stays at prefill_share
  /// How the adaptive controller moves the share: `feedback` (one step toward the phase over its SLO)
  /// or `model` (semi-PD's SLO-aware partitioning: predict both phases' latencies under every share
  /// from the cost model and take the best; share_controller::model_step).
  enum class control { feedback, model } controller = control::feedback;
  // The controller (adaptive): every control_interval_s it compares the window's mean TTFT and mean
  // TPOT (inter-token gap) to their SLOs and moves one step of share to the phase above its SLO when
  // the other is predicted to stay within its own (detail::share_controller::maybe_step).
  double min_share = 0.1;  ///< bounds of the prefill share, 0 < min_share <= prefill_share <= max_share < 1
  double max_share = 0.9;
  double share_step = 0.05;  ///< one move, in (0, 1)
  /// Long enough for a move to show in the latencies (shorter intervals oscillate on bursty traces).
  double control_interval_s = 5.0;
  double ttft_slo_s = 1.0;   ///< the controller's targets (> 0); goodput uses sim_options' SLOs
  double tpot_slo_s = 0.05;  ///< mean inter-token gap
  // The partition's cost (docs/sched.md, "semi-PD"): compute-bound terms scale by 1 / share.
  /// Share of the SMs that can draw the whole HBM bandwidth: with share s a worker reaches
  /// min(1, s / bandwidth_saturation_share) of it. In (0, 1].
  double bandwidth_saturation_share = 0.5;
  /// Slow-down of memory-bound terms from the other worker's HBM traffic running alongside, >= 0
  /// (memory-bound terms take (1 + memory_interference) times longer).
  double memory_interference = 0.1;
};

/// Throws weft::error(invalid_argument) naming the field and the rule. O(1). Thread-safe.
inline void validate(const semi_pd_options& o, const char* where) {
  const auto open_unit = [](double v) { return v > 0.0 && v < 1.0; };
  expects(o.instances >= 1 && o.instances <= 2048, errc::invalid_argument, where,
          "instances must be in [1, 2048], got ", o.instances);
  expects(open_unit(o.prefill_share) && open_unit(o.min_share) && open_unit(o.max_share), errc::invalid_argument, where,
          "prefill_share, min_share and max_share must be in (0, 1), got ", o.prefill_share, ", ", o.min_share, " and ",
          o.max_share);
  expects(o.min_share <= o.prefill_share && o.prefill_share <= o.max_share, errc::invalid_argument, where,
          "need min_share <= prefill_share <= max_share, got ", o.min_share, " <= ", o.prefill_share,
          " <= ", o.max_share);
  expects(open_unit(o.share_step), errc::invalid_argument, where, "share_step must be in (0, 1), got ", o.share_step);
  const auto positive = [](double v) { return v > 0.0 && std::isfinite(v); };
  expects(positive(o.control_interval_s) && positive(o.ttft_slo_s) && positive(o.tpot_slo_s), errc::invalid_argument,
          where, "control_interval_s, ttft_slo_s and tpot_slo_s must be finite and > 0, got ", o.control_interval_s,
          ", ", o.ttft_slo_s, " and ", o.tpot_slo_s);
  expects(o.bandwidth_saturation_share > 0.0 && o.bandwidth_saturation_share <= 1.0, errc::invalid_argument, where,
          "bandwidth_saturation_share must be in (0, 1], got ", o.bandwidth_saturation_share);
  expects(o.memory_interference >= 0.0 && std::isfinite(o.memory_interference), errc::invalid_argument, where,
          "memory_interference must be finite and >= 0, got ", o.memory_interference);
  expects(o.controller == semi_pd_options::control::feedback || o.controller == semi_pd_options::control::model,
          errc::invalid_argument, where, "controller must be control::feedback or control::model, got ",
          static_cast<int>(o.controller));
}

/// Seconds of one iteration of shape `it` on a worker holding `share` of the GPU's SMs, next to a
/// worker on the rest: the terms of cost_model::iteration_s, each compute-bound one (GEMMs at or above
/// the ridge, prefill attention, the LM head's FLOPs) divided by share, each memory-bound one (weight
/// reads, decode attention's KV reads) divided by min(1, share / bandwidth_saturation_share) /
/// (1 + memory_interference); launch overheads, all-reduces, stage sends and the engine's CPU work as
/// they are (each worker has its own CPU process). share = 1 with no interference is iteration_s
/// exactly. Throws weft::error for a share outside (0, 1] or a model with nano-batching (not modelled
/// under a partition) or an MoE model. O(log points). Thread-safe.
inline double partitioned_iteration_s(const cost_model& m, const iteration_shape& it, double share,
                                      const semi_pd_options& o) {
  const char* where = "weft::sched::sim::partitioned_iteration_s";
  expects(share > 0.0 && share <= 1.0, errc::invalid_argument, where, "share must be in (0, 1], got ", share);
  const cost_params& p = m.params();
  expects(p.nano.nano_batches <= 1 && !p.nano.overlap_engine, errc::invalid_argument, where,
          "nano-batching under an SM partition is not modelled; use a cost model without params().nano");
  expects(!p.model.moe.enabled(), errc::invalid_argument, where, "model '", p.model.name,
          "' has experts; an MoE layer under an SM partition is not modelled");
  if (it.tokens <= 0) return 0.0;
  const double compute = share;
  const double bandwidth =
      std::min(1.0, share / o.bandwidth_saturation_share) / (1.0 + o.memory_interference);  // share of HBM reached
  const double tp = p.tensor_parallel, layers = p.model.layers;
  double linear = 0.0;
  if (const measured_profile* profile = m.profile()) {  // a measured layer: bound by the roofline's side
    linear = profile->layer.layer_s(it.tokens) / (it.tokens >= m.gemm_ridge_tokens() ? compute : bandwidth);
  } else {
    const double w = p.model.linear_params_per_layer() / tp;
    const double flops_s = 2.0 * w * it.tokens / (p.gpu.peak_flops * p.compute_efficiency);
    const double bytes_s = w * p.model.weight_bytes / (p.gpu.hbm_bytes_per_s * p.memory_efficiency);
    linear = p.layer_overhead_s + std::max(flops_s / compute, bytes_s / bandwidth);
  }
  const double attention_flops_s =
      4.0 * p.model.hidden * it.attention_pairs / tp / (p.gpu.peak_flops * p.attention_compute_efficiency);
  const double attention_bytes_s = it.kv_read_tokens * p.model.kv_bytes_per_token() / layers / tp /
                                   (p.gpu.hbm_bytes_per_s * p.attention_memory_efficiency);
  const double attention =
      p.attention_overhead_s + std::max(attention_flops_s / compute, attention_bytes_s / bandwidth);
  double head = 0.0;
  if (p.model.vocab > 0 && it.requests > 0) {
    const double w = static_cast<double>(p.model.vocab) * p.model.hidden / tp;
    head = std::max(2.0 * w * it.requests / (p.gpu.peak_flops * p.compute_efficiency) / compute,
                    w * p.model.weight_bytes / (p.gpu.hbm_bytes_per_s * p.memory_efficiency) / bandwidth);
  }
  const double per_layer = linear + attention + m.tp_layer_s(it.tokens);
  return p.iteration_overhead_s + p.per_request_overhead_s * it.requests + p.model.layers * per_layer + head +
         m.pipeline_send_s(it.tokens);
}

/// A KV manager shared by reference: the prefill and decode workers of one semi-PD instance each hold
/// one over the instance's single pool, so both draw on (and free into) the same blocks. Models
/// sched::kv_manager by forwarding every call. Not thread-safe (the simulator calls the two workers
/// one at a time, and their transactions never overlap). O(1) plus the pool's cost per call.
template <class KV = weft::kv::kv_manager<>>
class shared_kv_pool {
 public:
  explicit shared_kv_pool(KV& pool) noexcept : kv_(&pool) {}

  std::size_t block_size() const noexcept { return kv_->block_size(); }
  std::size_t usable_blocks() const noexcept { return kv_->usable_blocks(); }
  std::size_t free_blocks() const noexcept { return kv_->free_blocks(); }
  std::size_t bytes_per_block() const noexcept { return kv_->bytes_per_block(); }
  std::size_t cached_prefix_tokens(std::span<const token_id> t, const weft::kv::request_options& o) const {
    return kv_->cached_prefix_tokens(t, o);
  }
  std::optional<weft::kv::prompt_allocation> allocate_prompt(request_id id, std::span<const token_id> t,
                                                             const weft::kv::request_options& o, std::size_t slots) {
    return kv_->allocate_prompt(id, t, o, slots);
  }
  std::optional<weft::kv::prompt_allocation> allocate_prompt(request_id id, std::size_t length,
                                                             const weft::kv::request_options& o, std::size_t slots) {
    return kv_->allocate_prompt(id, length, o, slots);
  }
  weft::kv::append_result grow(request_id id, std::size_t n) { return kv_->grow(id, n); }
  weft::kv::append_result append(request_id id, std::span<const token_id> t) { return kv_->append(id, t); }
  void computed(request_id id, std::size_t n) { kv_->computed(id, n); }
  bool fork(request_id parent, request_id child) { return kv_->fork(parent, child); }
  void free(request_id id) { kv_->free(id); }
  std::optional<weft::kv::swap_plan> swap_out(request_id id) { return kv_->swap_out(id); }
  std::optional<weft::kv::swap_plan> swap_in(request_id id) { return kv_->swap_in(id); }
  std::span<const weft::kv::block_id> blocks(request_id id) const { return kv_->blocks(id); }
  std::span<const token_id> tokens(request_id id) const { return kv_->tokens(id); }
  void begin_transaction() { kv_->begin_transaction(); }
  void commit_transaction() noexcept { kv_->commit_transaction(); }
  void rollback_transaction() noexcept { kv_->rollback_transaction(); }
  /// The pool itself (both workers' view).
  const KV& pool() const noexcept { return *kv_; }

 private:
  KV* kv_;
};

/// Which worker of an instance a scheduler is made for (simulate_semi_pd's make_worker).
enum class semi_pd_worker { prefill, decode };

/// One move of an instance's prefill share (the first sample of each instance is its start).
struct share_sample {
  double time_s = 0.0;
  std::size_t instance = 0;
  double prefill_share = 0.0;
};

/// A semi-PD run: the requests' results, the share over time and what stayed in the pools.
struct semi_pd_result {
  cluster_result cluster;                  ///< kv_transfers and kv_transfer_s stay 0: one pool per instance
  std::uint64_t handovers = 0;             ///< prefill -> decode worker hand-overs (no copy, no time)
  std::vector<share_sample> shares;        ///< the start of each instance, then every move
  double mean_prefill_share = 0.0;         ///< time-weighted over the run and the instances
  std::vector<std::size_t> free_blocks;    ///< per instance, at the end
  std::vector<std::size_t> usable_blocks;  ///< per instance
};

namespace detail {

// The controller's per-instance window and the share it sets. One per run; not thread-safe.
class share_controller {
 public:
  share_controller(const semi_pd_options& o, const cost_model& m, std::size_t requests, double start)
      : o_(o), m_(m), share_(o.instances, o.prefill_share), windows_(o.instances), last_token_(requests, -1.0) {
    next_ = start + o.control_interval_s;
    for (std::size_t k = 0; k < o.instances; ++k) shares_.push_back({start, k, o.prefill_share});
  }

  double share(std::size_t instance) const { return share_[instance]; }

  void token(std::size_t instance, std::size_t request, double arrival, double now) {
    window& w = windows_[instance];
    if (last_token_[request] < 0.0) {
      w.ttft_sum += now - arrival;
      ++w.ttft_n;
    } else {
      w.gap_sum += now - last_token_[request];
      ++w.gap_n;
    }
    last_token_[request] = now;
  }

  // At the first batch start at or after each interval's end, per instance: when one phase's mean
  // latency is above its SLO, one step of share goes to it, but only if the other phase, its latency
  // scaled by the share it keeps (old / new share: the compute-bound estimate), is predicted to stay
  // within its own SLO. Both above (overload: no split meets both) or both within: hold.
  // The model controller's record of the window: the batches each worker started (their shapes).
  void batch_started(std::size_t instance, bool prefill, const iteration_shape& shape) {
    if (!o_.adaptive || o_.controller != semi_pd_options::control::model) return;
    (prefill ? windows_[instance].prefill : windows_[instance].decode).push_back(shape);
  }

  void maybe_step(double now) {
    if (!o_.adaptive || now < next_) return;
    const double span = now - (next_ - o_.control_interval_s);  // the window's length
    next_ = now + o_.control_interval_s;
    for (std::size_t k = 0; k < windows_.size(); ++k) {
      window& w = windows_[k];
      const double ttft = w.ttft_n ? w.ttft_sum / static_cast<double>(w.ttft_n) / o_.ttft_slo_s : 0.0;
      const double tpot = w.gap_n ? w.gap_sum / static_cast<double>(w.gap_n) / o_.tpot_slo_s : 0.0;
      const double s = share_[k];
      double moved = s;
      if (o_.controller == semi_pd_options::control::model) {
        moved = model_step(w, s, ttft, tpot, span);
        w = {};
        if (moved == s) continue;
        share_[k] = moved;
        shares_.push_back({now, k, moved});
        continue;
      }
      w = {};
      if (ttft > 1.0 && tpot <= 1.0) {
        const double up = std::min(o_.max_share, s + o_.share_step);
        if (tpot * (1.0 - s) / (1.0 - up) <= 1.0) moved = up;
      } else if (tpot > 1.0 && ttft <= 1.0) {
        const double down = std::max(o_.min_share, s - o_.share_step);
        if (ttft * s / down <= 1.0) moved = down;
      }
      if (moved == s) continue;
      share_[k] = moved;
      shares_.push_back({now, k, moved});
    }
  }

  std::vector<share_sample> samples() && { return std::move(shares_); }

 private:
  struct window {
    double ttft_sum = 0.0, gap_sum = 0.0;
    std::uint64_t ttft_n = 0, gap_n = 0;
    std::vector<iteration_shape> prefill, decode;  // the model controller's record
  };

  // semi-PD's model-based partitioning (Hong et al. 2025, §5, as weft reads it): the window's batches
  // are priced again under every candidate share c (min_share to max_share by share_step) with
  // partitioned_iteration_s. Prefill busy time B_p(c) predicts TTFT as a queue does: the observed
  // mean TTFT scaled by B_p(c) / B_p(s) and by (1 - rho(s)) / (1 - rho(c)), rho = busy time / window
  // (infinite at rho >= 1); TPOT scales with the decode batches' time, B_d(1 - c) / B_d(1 - s). The
  // share with the least max(TTFT / SLO, TPOT / SLO) wins (ties: the one nearest the current share),
  // so a split meeting both SLOs is kept when there is one. Without tokens in the window: hold.
  // O(candidates * batches in the window).
  double model_step(const window& w, double s, double ttft, double tpot, double span) const {
    if ((w.ttft_n == 0 && w.gap_n == 0) || span <= 0.0) return s;
    const auto busy = [&](const std::vector<iteration_shape>& shapes, double share) {
      double t = 0.0;
      for (const auto& x : shapes) t += partitioned_iteration_s(m_, x, share, o_);
      return t;
    };
    const double bp = busy(w.prefill, s), bd = busy(w.decode, 1.0 - s);
    const double rho = std::min(bp / span, 0.999);
    double best = s, best_cost = std::numeric_limits<double>::infinity();
    const int steps = static_cast<int>(std::floor((o_.max_share - o_.min_share) / o_.share_step + 1e-9));
    for (int i = 0; i <= steps; ++i) {
      const double c = std::min(o_.max_share, o_.min_share + i * o_.share_step);
      const double bpc = busy(w.prefill, c), bdc = busy(w.decode, 1.0 - c);
      const double rho_c = bpc / span;
      const double t = w.ttft_n == 0  ? 0.0
                       : rho_c >= 1.0 ? std::numeric_limits<double>::infinity()
                                      : ttft * (bp > 0.0 ? bpc / bp : 1.0) * (1.0 - rho) / (1.0 - rho_c);
      const double g = w.gap_n == 0 ? 0.0 : tpot * (bd > 0.0 ? bdc / bd : 1.0);
      const double cost = std::max(t, g);
      if (cost < best_cost - 1e-12 || (std::abs(cost - best_cost) <= 1e-12 && std::abs(c - s) < std::abs(best - s))) {
        best_cost = cost;
        best = c;
      }
    }
    return best;
  }

  const semi_pd_options& o_;
  const cost_model& m_;
  std::vector<double> share_;
  std::vector<window> windows_;
  std::vector<double> last_token_;  // by workload index: the last token's time (-1: none yet)
  std::vector<share_sample> shares_;
  double next_ = 0.0;
};

inline double mean_share(const std::vector<share_sample>& s, std::size_t instances, double start, double end) {
  if (end <= start) return s.empty() ? 0.0 : s.front().prefill_share;
  double area = 0.0;
  for (std::size_t k = 0; k < instances; ++k) {
    double t = start, v = 0.0;
    for (const auto& x : s) {
      if (x.instance != k) continue;
      const double at = std::clamp(x.time_s, start, end);
      area += v * (at - t);
      t = at;
      v = x.prefill_share;
    }
    area += v * (end - t);
  }
  return area / ((end - start) * static_cast<double>(instances));
}

}  // namespace detail

/// semi-PD: o.instances GPUs, each with a decode worker (node 2k) and a prefill worker (node 2k + 1)
/// running concurrently on 1 - share and share of its SMs (partitioned_iteration_s) over one KV pool
/// made by make_pool(). make_worker(pool, role) returns a fresh scheduler over that pool (e.g.
/// iteration_scheduler<fcfs_queue, shared_kv_pool<>>). Each worker's scheduler sees the whole pool's free
/// blocks, not a share of them, and iteration_scheduler aborts a head that cannot grow with no victim
/// of its own (the other worker's blocks are not its to preempt): give the prefill worker whole-prompt
/// admission (continuous_batching, whose requests never grow before they leave it) and a pool that
/// holds the longest request beside a full prefill batch. Arrivals go to the prefill worker with the least
/// queued prompt tokens; after its first token a request moves to its instance's decode worker at once
/// (its KV stays in the pool: released and re-reserved there, nothing copied). With o.adaptive, the
/// controller moves each instance's share (share_controller above). Deterministic (sim_options::seed).
/// Throws weft::error(invalid_argument) for bad options, workload or sim_options before making
/// anything. Thread-safe if the factories are.
template <class S, class KV = weft::kv::kv_manager<>>
semi_pd_result simulate_semi_pd(
    const std::function<std::unique_ptr<KV>()>& make_pool,
    const std::function<std::unique_ptr<S>(shared_kv_pool<KV>, semi_pd_worker)>& make_worker, const workload& w,
    const cost_model& m, const semi_pd_options& o = {}, const sim_options& so = {}) {
  static_assert(detail::reports_free_kv<S>,
                "the simulator reads the pool through the workers: S needs kv().free_blocks() (iteration_scheduler "
                "has it)");
  const char* where = "weft::sched::sim::simulate_semi_pd";
  validate(o, where);
  detail::validate_run(w, so, where);            // the workload and sim_options, before anything is made
  (void)partitioned_iteration_s(m, {}, 1.0, o);  // rejects a nano-batched cost model up front
  expects(static_cast<bool>(make_pool) && static_cast<bool>(make_worker), errc::invalid_argument, where,
          "make_pool and make_worker must be callable");
  std::vector<std::unique_ptr<KV>> pools;
  std::vector<std::unique_ptr<S>> owned;
  std::vector<S*> nodes;
  std::vector<detail::instance_role> roles;
  detail::loop_hooks hooks;
  for (std::size_t k = 0; k < o.instances; ++k) {
    pools.push_back(make_pool());
    expects(pools.back() != nullptr, errc::invalid_argument, where, "make_pool returned no pool");
    for (const auto role : {semi_pd_worker::decode, semi_pd_worker::prefill}) {
      // Decode first: at equal times, a handed-over request is admitted before the prefill worker takes new blocks.
      owned.push_back(make_worker(shared_kv_pool<KV>(*pools.back()), role));
      expects(owned.back() != nullptr, errc::invalid_argument, where, "make_worker returned no scheduler");
      nodes.push_back(owned.back().get());
      roles.push_back(role == semi_pd_worker::decode ? detail::instance_role::decode : detail::instance_role::prefill);
      hooks.decoder_of.push_back(2 * k);
    }
  }
  const double start = w.empty() ? 0.0 : w.front().req.arrival_s;
  detail::share_controller control(o, m, w.size(), start);
  semi_pd_result out;
  hooks.on_token = [&](std::size_t j, std::size_t i, double now) {
    if (j % 2 == 1 && w[i].output_tokens > 1) ++out.handovers;  // a prefill worker emits first tokens only
    control.token(j / 2, i, w[i].req.arrival_s, now);
  };
  hooks.iteration_s = [&](std::size_t j, const batch& b, double now) {
    control.maybe_step(now);
    const double s = control.share(j / 2);
    const iteration_shape shape = cost_model::shape_of(b);
    control.batch_started(j / 2, j % 2 == 1, shape);
    return partitioned_iteration_s(m, shape, j % 2 == 1 ? s : 1.0 - s, o);
  };
  cluster_options c;
  c.prefill_instances = o.instances;
  c.decode_instances = o.instances;
  detail::event_loop<S> loop(std::move(nodes), std::move(roles), w, m, so, c, where, &hooks);
  out.cluster = loop.run();
  out.shares = std::move(control).samples();
  out.mean_prefill_share =
      detail::mean_share(out.shares, o.instances, start, start + out.cluster.result.stats.makespan_s);
  for (const auto& p : pools) {
    out.free_blocks.push_back(p->free_blocks());
    out.usable_blocks.push_back(p->usable_blocks());
  }
  return out;
}

}  // namespace weft::sched::sim

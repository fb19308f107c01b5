// KV borrowing between colocated instances in the simulator: Infinite-LLM's distributed KV cache and
// DistAttention (Lin et al., "Infinite-LLM", 2024, §4-5) over weft::kv::cluster_pool. Each instance's
// physical KV blocks go into one cluster pool; attention over borrowed blocks is charged as network
// messages of queries and partial results per layer, as DistAttention computes it where the KV lives.
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/kv/cluster_pool.hpp>
#include <weft/sched/batch.hpp>
#include <weft/sched/sim/cost_model.hpp>
#include <weft/sched/sim/workload.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace weft::sched::sim {

/// Infinite-LLM-style KV borrowing for colocated instances (cluster_options::borrowing). Each
/// instance owns local_blocks physical KV blocks; a request is admitted (in arrival order) when the
/// cluster pool can hold its whole KV (prompt + output tokens): its own instance's blocks first, the
/// rest borrowed from the instances with the most free blocks. Each scheduler's own KV manager must
/// then be sized to the cluster's total (the pool is what keeps the physical total honest).
struct kv_borrowing_options {
  bool enabled = false;
  std::int64_t local_blocks = 0;        ///< physical KV blocks per instance (> 0 when enabled)
  std::int64_t block_tokens = 16;       ///< tokens per block (the schedulers' block size)
  std::int64_t borrow_unit_blocks = 1;  ///< blocks per borrowed unit (Infinite-LLM's rBlock)
  /// Per layer of an iteration with remote KV: one round trip carrying the queries out and the
  /// partial attention results back (RDMA latency; the paper overlaps it, here it is added).
  double remote_round_trip_s = 10e-6;
};

namespace detail {

// The cluster pool plus each admitted request's blocks. Not thread-safe (one simulation owns it).
class kv_borrowing {
 public:
  kv_borrowing(const kv_borrowing_options& o, std::size_t instances, const workload& w, const char* where)
      : o_(o), w_(w) {
    if (!o.enabled) return;
    expects(o.local_blocks >= 1 && o.block_tokens >= 1 && o.borrow_unit_blocks >= 1, errc::invalid_argument, where,
            "KV borrowing needs local_blocks, block_tokens and borrow_unit_blocks >= 1, got ", o.local_blocks, ", ",
            o.block_tokens, " and ", o.borrow_unit_blocks);
    expects(o.block_tokens <= max_request_tokens, errc::invalid_argument, where,
            "block_tokens must be <= ", max_request_tokens, ", got ", o.block_tokens);
    expects(std::isfinite(o.remote_round_trip_s) && o.remote_round_trip_s >= 0.0, errc::invalid_argument, where,
            "remote_round_trip_s must be finite and >= 0, got ", o.remote_round_trip_s);
    const std::vector<std::size_t> caps(instances, checked_cast<std::size_t>(o.local_blocks, where));
    pool_.emplace_back(caps, checked_cast<std::size_t>(o.borrow_unit_blocks, where));
    held_.resize(w.size());
    debt_.assign(instances, 0.0);
  }

  bool enabled() const noexcept { return o_.enabled; }
  const kv::cluster_pool& pool() const { return pool_.front(); }

  // Blocks of request i's whole KV (prompt plus output tokens).
  std::size_t footprint(std::size_t i) const {
    const std::int64_t tokens = w_[i].req.prompt_tokens + w_[i].output_tokens;
    return static_cast<std::size_t>((tokens + o_.block_tokens - 1) / o_.block_tokens);
  }
  bool ever_fits(std::size_t i) const {
    return footprint(i) <= checked_product<std::size_t>("kv_borrowing", pool().instances(), pool().blocks(0).capacity);
  }

  // The instance a request goes to: of those with its footprint free locally, the least loaded;
  // else the one with the most free blocks of its own (it borrows the rest).
  template <class Load>
  std::size_t place(std::size_t i, Load&& load) const {
    const std::size_t need = footprint(i), n = pool().instances();
    std::size_t best = n;
    for (std::size_t j = 0; j < n; ++j)
      if (pool().blocks(j).free >= need && (best == n || load(j) < load(best))) best = j;
    if (best != n) return best;
    best = 0;
    for (std::size_t j = 1; j < n; ++j)
      if (pool().blocks(j).free > pool().blocks(best).free) best = j;
    return best;
  }

  // Reserves request i's whole KV for instance j; false (nothing changed) when the cluster is short.
  bool reserve(std::size_t i, std::size_t j) {
    held h;
    if (!pool_.front().allocate(j, footprint(i), h.blocks)) return false;
    h.instance = j;
    h.local = 0;
    while (h.local < h.blocks.size() && h.blocks[h.local].owner == j) ++h.local;  // local blocks come first
    if (h.local < h.blocks.size()) ++borrowing_requests_;
    borrowed_blocks_ += h.blocks.size() - h.local;
    held_[i] = std::move(h);
    peak_borrowed_ = std::max(peak_borrowed_, borrowed_now());
    return true;
  }

  void release(std::size_t i) {
    if (!o_.enabled) return;
    held& h = held_[i];
    for (const auto& b : h.blocks) pool_.front().release(h.instance, b);
    borrowed_blocks_ -= h.blocks.size() - h.local;
    h = held{};
  }

  // One iteration of a batch on `instance` with DistAttention (Infinite-LLM §4): each entry's attention
  // over its borrowed blocks runs on their creditors, split by the blocks each lent, in parallel with
  // the local attention; the iteration waits for the slowest part. Every token whose context reaches
  // borrowed blocks sends its query out and gets back a partial output plus the softmax max and sum
  // per head, at every layer: one round trip per layer plus those bytes on the interconnect. Each
  // creditor's part is owed as busy time on its own next iteration (take_debt). Without borrowed
  // blocks in the batch this is exactly cost_model::iteration_s(b).
  template <class IndexOf>
  double iteration_s(const batch& b, const cost_model& m, IndexOf&& index_of) {
    const model_spec& spec = m.params().model;
    iteration_shape local = cost_model::shape_of(b);
    double remote_tokens = 0.0;
    share_.assign(pool().instances(), {0.0, 0.0});
    for (const auto& e : b.entries) {
      const held& h = held_[index_of(e.id)];
      const auto local_tokens = static_cast<double>(h.local) * static_cast<double>(o_.block_tokens);
      const auto ctx = static_cast<double>(e.context_tokens);
      if (ctx <= local_tokens || h.blocks.size() == h.local) continue;
      const double n = static_cast<double>(e.prefill_tokens + e.decode_tokens);
      const double f = (ctx - local_tokens) / ctx;  // share of this entry's context in borrowed blocks
      const double pairs = n * (ctx - (n - 1.0) / 2.0) * f, kv = ctx * f;
      local.attention_pairs -= pairs;
      local.kv_read_tokens -= kv;
      remote_tokens += n;
      const double borrowed = static_cast<double>(h.blocks.size() - h.local);
      for (std::size_t k = h.local; k < h.blocks.size(); ++k) {
        auto& c = share_[h.blocks[k].owner];
        c.first += pairs / borrowed;
        c.second += kv / borrowed;
      }
    }
    if (remote_tokens == 0.0) return m.iteration_s(b);
    const double layers = spec.layers;
    const double local_attention = layers * m.attention_layer_s(local.attention_pairs, local.kv_read_tokens);
    double slowest = 0.0;
    for (std::size_t c = 0; c < share_.size(); ++c) {
      if (share_[c].second == 0.0) continue;
      const double t = layers * m.attention_layer_s(share_[c].first, share_[c].second);
      debt_[c] += t;
      slowest = std::max(slowest, t);
    }
    const double per_token_layer = 2.0 * spec.hidden * 2.0 + 2.0 * spec.heads() * 4.0;  // fp16 q, o; fp32 stats
    const double bytes = remote_tokens * per_token_layer * layers;
    const double network = layers * o_.remote_round_trip_s + bytes / m.params().interconnect_bytes_per_s;
    remote_bytes_ += bytes;
    remote_s_ += network;
    return m.iteration_s(local) + std::max(0.0, slowest - local_attention) + network;
  }

  // Creditor time owed by `instance` for other instances' attention since its last iteration (added
  // to its next one: an upper bound when it was idle meanwhile).
  double take_debt(std::size_t instance) noexcept { return std::exchange(debt_[instance], 0.0); }

  std::uint64_t borrowing_requests() const noexcept { return borrowing_requests_; }
  std::size_t peak_borrowed_blocks() const noexcept { return peak_borrowed_; }
  double remote_bytes() const noexcept { return remote_bytes_; }
  double remote_s() const noexcept { return remote_s_; }

 private:
  struct held {
    std::size_t instance = 0;
    std::vector<kv::cluster_block> blocks;  // the instance's own first, then borrowed units
    std::size_t local = 0;                  // leading blocks in its own memory
  };
  std::size_t borrowed_now() const noexcept { return borrowed_blocks_; }

  kv_borrowing_options o_;
  const workload& w_;
  std::vector<kv::cluster_pool> pool_;            // empty when disabled (cluster_pool has no empty state)
  std::vector<held> held_;                        // by workload index
  std::vector<double> debt_;                      // creditor seconds owed, by instance
  std::vector<std::pair<double, double>> share_;  // scratch: remote (pairs, kv tokens) by creditor
  std::size_t borrowed_blocks_ = 0, peak_borrowed_ = 0;
  std::uint64_t borrowing_requests_ = 0;
  double remote_bytes_ = 0.0, remote_s_ = 0.0;
};

}  // namespace detail
}  // namespace weft::sched::sim

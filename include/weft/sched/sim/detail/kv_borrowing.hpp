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
  /// false: a request reserves its whole KV (prompt + output) at admission. true (Infinite-LLM's
  /// rBlocks grown on demand): admission reserves the prompt and the first decoded token; a block is
  /// added each time a decoding request's context crosses a block boundary — from its instance's own
  /// memory, taking back blocks it lent when it has none free (kv::cluster_pool::reclaim: the borrower's
  /// KV is copied elsewhere over the interconnect, charged to the borrower), else borrowed; when the
  /// cluster has no block left, the latest arrival on that instance is preempted by recompute (its KV
  /// dropped, requeued first with prompt + output so far as its prompt).
  bool on_demand = false;
};

namespace detail {

// The cluster pool plus each admitted request's blocks. Not thread-safe (one simulation owns it).
class kv_borrowing {
 public:
  kv_borrowing(const kv_borrowing_options& o, std::size_t instances, const workload& w, const char* where)
      : o_(o), w_(w) {
    expects(o.enabled || !o.on_demand, errc::invalid_argument, where,
            "borrowing.on_demand is set but borrowing.enabled is not; enable borrowing or clear on_demand");
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

  bool on_demand() const noexcept { return o_.enabled && o_.on_demand; }
  // Blocks of request i's whole KV (prompt plus output tokens).
  std::size_t footprint(std::size_t i) const {
    const std::int64_t tokens = w_[i].req.prompt_tokens + w_[i].output_tokens;
    return blocks_for(tokens);
  }
  std::size_t blocks_for(std::int64_t tokens) const {
    return static_cast<std::size_t>((tokens + o_.block_tokens - 1) / o_.block_tokens);
  }
  std::size_t held_blocks(std::size_t i) const noexcept { return held_[i].blocks.size(); }
  bool holds(std::size_t i) const noexcept { return !held_[i].blocks.empty(); }
  std::size_t instance_of(std::size_t i) const noexcept { return held_[i].instance; }
  bool ever_fits(std::size_t i) const {
    return footprint(i) <= checked_product<std::size_t>("kv_borrowing", pool().instances(), pool().blocks(0).capacity);
  }

  // The instance a request goes to: of those with its footprint free locally, the least loaded;
  // else the one with the most free blocks of its own (it borrows the rest).
  template <class Load>
  std::size_t place(std::size_t i, Load&& load) const {
    return place_blocks(footprint(i), load);
  }
  template <class Load>
  std::size_t place_blocks(std::size_t need, Load&& load) const {
    const std::size_t n = pool().instances();
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
  bool reserve(std::size_t i, std::size_t j) { return reserve_blocks(i, j, footprint(i)); }
  // Reserves `n` blocks for request i on instance j (on demand: what its next iteration needs).
  bool reserve_blocks(std::size_t i, std::size_t j, std::size_t n) {
    held h;
    if (!pool_.front().allocate(j, n, h.blocks)) return false;
    h.instance = j;
    h.local = 0;
    while (h.local < h.blocks.size() && h.blocks[h.local].owner == j) ++h.local;  // local blocks come first
    if (h.local < h.blocks.size()) {
      ++borrowing_requests_;
      h.counted = true;
    }
    borrowed_blocks_ += h.blocks.size() - h.local;
    held_[i] = std::move(h);
    peak_borrowed_ = std::max(peak_borrowed_, borrowed_now());
    return true;
  }

  // On demand: request i (held) grows to `tokens` tokens of KV. Its instance's own free blocks first;
  // when it has none but lent some, it takes them back (reclaim: each borrower's block moves elsewhere,
  // one block of KV over the interconnect, owed by the borrower's instance as busy time); else it
  // borrows. False, changing nothing, when the cluster has too few free blocks. O(blocks moved *
  // requests held + instances).
  bool grow(std::size_t i, std::int64_t tokens, const cost_model& m) {
    held& h = held_[i];
    const std::size_t want = blocks_for(tokens);
    if (want <= h.blocks.size()) return true;
    std::size_t need = want - h.blocks.size();
    kv::cluster_pool& pool = pool_.front();
    if (pool.total_free() < need) return false;
    const std::size_t j = h.instance;
    const kv::instance_blocks& own = pool.blocks(j);
    if (own.free < need && own.lent > 0) {  // the owner's demand first: take lent blocks back
      const std::size_t back = std::min(need - own.free, own.lent);
      moves_.clear();
      if (pool.total_free() - own.free >= back && pool.reclaim(j, back, moves_)) {
        const double block_s = static_cast<double>(o_.block_tokens) * m.params().model.kv_bytes_per_token() /
                               m.params().interconnect_bytes_per_s;
        for (const auto& mv : moves_) {
          relocate(mv);
          debt_[mv.borrower] += block_s;
        }
        reclaimed_blocks_ += moves_.size();
        reclaim_s_ += block_s * static_cast<double>(moves_.size());
      }
    }
    const std::size_t before = h.blocks.size();
    if (!pool.allocate(j, need, h.blocks)) return false;
    // Keep the instance's own blocks first (DistAttention's split reads blocks[local..] remotely): which
    // token lives in which block does not change the split's cost, only how many are remote.
    std::stable_partition(h.blocks.begin(), h.blocks.end(), [j](const kv::cluster_block& b) { return b.owner == j; });
    const std::size_t local = static_cast<std::size_t>(
        std::count_if(h.blocks.begin(), h.blocks.end(), [j](const kv::cluster_block& b) { return b.owner == j; }));
    const std::size_t added_remote = (h.blocks.size() - local) - (before - h.local);
    h.local = local;
    borrowed_blocks_ += added_remote;
    if (added_remote > 0 && !h.counted) {
      ++borrowing_requests_;
      h.counted = true;
    }
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
  std::size_t reclaimed_blocks() const noexcept { return reclaimed_blocks_; }
  double reclaim_s() const noexcept { return reclaim_s_; }
  std::size_t peak_borrowed_blocks() const noexcept { return peak_borrowed_; }
  double remote_bytes() const noexcept { return remote_bytes_; }
  double remote_s() const noexcept { return remote_s_; }

 private:
  struct held {
    std::size_t instance = 0;
    std::vector<kv::cluster_block> blocks;  // the instance's own first, then borrowed units
    std::size_t local = 0;                  // blocks in its own memory (leading, unless grown on demand)
    bool counted = false;                   // counted in borrowing_requests_
  };
  std::size_t borrowed_now() const noexcept { return borrowed_blocks_; }

  // A reclaim moved a borrower's block: find the request holding it and point it at the new place
  // (which may be the borrower's own memory: one borrowed block fewer).
  void relocate(const kv::cluster_block_move& mv) {
    for (held& h : held_) {
      if (h.instance != mv.borrower || h.blocks.empty()) continue;
      const auto it = std::find(h.blocks.begin() + static_cast<std::ptrdiff_t>(std::min(h.local, h.blocks.size())),
                                h.blocks.end(), mv.from);
      if (it == h.blocks.end()) continue;
      *it = mv.to;
      if (mv.to.owner == mv.borrower) {  // back home: keep local blocks first
        std::iter_swap(it, h.blocks.begin() + static_cast<std::ptrdiff_t>(h.local));
        ++h.local;
        --borrowed_blocks_;
      }
      return;
    }
  }

  kv_borrowing_options o_;
  const workload& w_;
  std::vector<kv::cluster_pool> pool_;            // empty when disabled (cluster_pool has no empty state)
  std::vector<held> held_;                        // by workload index
  std::vector<double> debt_;                      // creditor seconds owed, by instance
  std::vector<std::pair<double, double>> share_;  // scratch: remote (pairs, kv tokens) by creditor
  std::vector<kv::cluster_block_move> moves_;     // scratch: a reclaim's moves
  std::size_t borrowed_blocks_ = 0, peak_borrowed_ = 0, reclaimed_blocks_ = 0;
  double reclaim_s_ = 0.0;
  std::uint64_t borrowing_requests_ = 0;
  double remote_bytes_ = 0.0, remote_s_ = 0.0;
};

}  // namespace detail
}  // namespace weft::sched::sim

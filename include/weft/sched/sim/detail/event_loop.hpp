// The one simulation driver: a discrete-event loop over one or more instances (each a batch
// scheduler), shared by sim::simulate (one instance), sim::simulate_colocated (with Llumnix-style
// migration), sim::simulate_disaggregated (DistServe's prefill and decode pools) and, through
// loop_hooks, sim::simulate_semi_pd (semi_pd.hpp). Events, in this order at equal times: batches
// ending (instance order), KV arriving, requests arriving, migration, idle instances starting batches.
// Deterministic. Requests that share a prefix carry synthetic token ids while they are in a scheduler
// (synthetic_tokens.hpp), so prefix caching works from content.
#pragma once

#include <weft/core/random.hpp>
#include <weft/sched/concepts.hpp>
#include <weft/sched/sim/cost_model.hpp>
#include <weft/sched/sim/detail/accounting.hpp>
#include <weft/sched/sim/detail/kv_borrowing.hpp>
#include <weft/sched/sim/detail/synthetic_tokens.hpp>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <queue>
#include <tuple>
#include <utility>
#include <vector>

namespace weft::sched::sim {

/// How instances are arranged.
struct cluster_options {
  std::size_t prefill_instances = 1;  ///< disaggregated: instances that only prefill
  std::size_t decode_instances = 1;   ///< disaggregated: instances that only decode
  std::size_t instances = 2;          ///< colocated: instances that do both
  /// Colocated: every interval, if the most and least loaded instances' free KV blocks differ by more
  /// than imbalance_blocks, one decoding request migrates from the former to the latter (0: never).
  double migration_interval_s = 0.0;
  std::int64_t imbalance_blocks = 512;
  /// Colocated: instances borrow KV blocks from each other (Infinite-LLM; kv_borrowing.hpp). Off by default.
  kv_borrowing_options borrowing{};
};

/// A cluster run: the requests' results plus the traffic between instances.
struct cluster_result {
  sim_result result;
  std::uint64_t kv_transfers = 0;  ///< prefill -> decode hand-overs
  double kv_transfer_s = 0.0;      ///< their total time on the interconnect
  std::uint64_t migrations = 0;
  double migration_s = 0.0;  ///< total migration downtime charged
  // With cluster_options::borrowing:
  std::uint64_t borrowing_requests = 0;  ///< requests that held blocks of another instance
  std::size_t peak_borrowed_blocks = 0;  ///< most blocks lent at once, cluster-wide
  double remote_attention_bytes = 0.0;   ///< DistAttention queries and partial results sent
  double remote_attention_s = 0.0;       ///< their time, added to the borrowers' iterations
  // With cluster_options::borrowing.on_demand:
  std::uint64_t borrow_preemptions = 0;  ///< requests preempted (recompute) when the cluster had no block left
  std::size_t reclaimed_blocks = 0;      ///< lent blocks taken back by their owner (each a KV block copied)
  double reclaim_s = 0.0;                ///< those copies' time, owed by the borrowers
};

namespace detail {

/// The seam between the driver and an instance's KV manager: the one thing routing and migration
/// read from it. A scheduler type used in a cluster provides kv().free_blocks().
template <class S>
concept reports_free_kv = requires(const S& s) {
  { s.kv().free_blocks() } -> std::convertible_to<std::int64_t>;
};
template <class S>
std::int64_t free_kv_blocks(const S& s) {
  if constexpr (reports_free_kv<S>)
    return s.kv().free_blocks();
  else
    return 0;  // one instance never routes by KV
}

/// What on-demand KV borrowing needs of a scheduler: taking a request back (iteration_scheduler::cancel)
/// to preempt it by recompute when the cluster is full.
template <class S>
concept cancels_requests = requires(S& s, request_id id) {
  { s.cancel(id) } -> std::convertible_to<bool>;
};

enum class instance_role { both, prefill, decode };

/// What a deployment built on the loop changes (semi_pd.hpp); a loop without hooks is the one above.
struct loop_hooks {
  /// Seconds of batch b on node j starting at `now` (empty: cost_model::iteration_s(b)).
  std::function<double(std::size_t j, const batch& b, double now)> iteration_s;
  /// Every token emitted, by node and workload index, after it is booked.
  std::function<void(std::size_t j, std::size_t request, double now)> on_token;
  /// Non-empty: prefill node j hands its requests to node decoder_of[j], which shares its KV pool: no
  /// transfer is charged or counted, the request joins that node at once.
  std::vector<std::size_t> decoder_of;
};

struct kv_arrival {
  double time;
  std::uint64_t seq;
  std::size_t request;  // workload index
  std::size_t node;
  friend bool operator>(const kv_arrival& a, const kv_arrival& b) {
    return std::tie(a.time, a.seq) > std::tie(b.time, b.seq);
  }
};

// One run over instances (the schedulers are the caller's; they must start idle).
template <batch_scheduler S>
class event_loop {
 public:
  event_loop(std::vector<S*> nodes, std::vector<instance_role> roles, const workload& w, const cost_model& m,
             const sim_options& o, const cluster_options& c, const char* where, const loop_hooks* hooks = nullptr)
      : w_(w),
        m_(m),
        o_(o),
        c_(c),
        where_(where),
        hooks_(hooks),
        acc_(w, o, where),
        noise_(o.seed),
        roles_(std::move(roles)),
        lend_(c.borrowing, nodes.size(), w, where) {
    expects(!c.borrowing.enabled ||
                (c.migration_interval_s == 0.0 &&
                 std::all_of(roles_.begin(), roles_.end(), [](instance_role r) { return r == instance_role::both; })),
            errc::invalid_argument, where, "KV borrowing is for colocated instances without migration");
    expects(!c.borrowing.on_demand || cancels_requests<S>, errc::invalid_argument, where,
            "on-demand KV borrowing preempts through the scheduler's cancel(request_id); this scheduler has none");
    expects(c.migration_interval_s >= 0.0 && std::isfinite(c.migration_interval_s) && c.imbalance_blocks >= 0,
            errc::invalid_argument, where, "migration_interval_s must be finite and >= 0, imbalance_blocks >= 0");
    for (S* s : nodes) {
      expects(s != nullptr && s->idle(), errc::precondition, where, "every scheduler must exist and start idle");
      nodes_.push_back({s});
    }
    if (c.migration_interval_s > 0.0) {
      expects(migrates_out<S>, errc::invalid_argument, where, "migration needs a scheduler with migrate_out()");
      next_migration_ = c.migration_interval_s;
    }
  }

  cluster_result run() {
    tokens_.resize(w_.size());
    if (lend_.on_demand()) {
      recompute_.assign(w_.size(), false);
      pending_prompt_.assign(w_.size(), 0);
    }
    for (;;) {
      const double t = next_event();
      if (t == inf) {
        for (const auto& n : nodes_)
          expects(n.s->idle(), errc::precondition, where_, "scheduler holds ", n.s->waiting(), " waiting and ",
                  n.s->running(), " running requests but scheduled nothing, and no event is left");
        expects(deferred_.empty(), errc::precondition, where_, deferred_.size(),
                " requests wait for KV blocks the cluster pool never freed");
        break;
      }
      now_ = std::max(now_, t);
      if (now_ >= o_.max_time_s) break;
      end_batches();
      deliver_kv();
      admit_arrivals();
      migrate();
      start_batches();
      acc_.close_windows(now_);
    }
    out_.result = acc_.finish(now_);
    if (lend_.enabled()) {
      out_.borrowing_requests = lend_.borrowing_requests();
      out_.peak_borrowed_blocks = lend_.peak_borrowed_blocks();
      out_.remote_attention_bytes = lend_.remote_bytes();
      out_.remote_attention_s = lend_.remote_s();
      out_.reclaimed_blocks = lend_.reclaimed_blocks();
      out_.reclaim_s = lend_.reclaim_s();
    }
    for (const auto& n : nodes_)
      if constexpr (reports_cached_prompt_tokens<S>)
        out_.result.stats.cached_prompt_tokens += n.s->stats().cached_prompt_tokens;
    return std::move(out_);
  }

 private:
  struct node {
    S* s;
    bool busy = false;
    const batch* running = nullptr;  // the batch in flight (valid until the next schedule)
    double start = 0.0, until = 0.0;
    std::int64_t queued_prompt = 0;  // router load signal
    bool stalled = false;            // holds work, scheduled nothing: waits for another event
  };
  static constexpr double inf = std::numeric_limits<double>::infinity();

  double next_event() const {
    double t = next_ < w_.size() ? w_[next_].req.arrival_s : inf;
    if (!kv_.empty()) t = std::min(t, kv_.top().time);
    for (const auto& n : nodes_) {
      if (n.busy) t = std::min(t, n.until);
      if (!n.busy && !n.s->idle() && !n.stalled) t = std::min(t, now_);  // ready to run now
    }
    return t;
  }

  // Batches that end now, in instance order: account each entry, complete, hand prefilled requests over.
  void end_batches() {
    for (std::size_t j = 0; j < nodes_.size(); ++j) {
      node& n = nodes_[j];
      if (!n.busy || n.until > now_) continue;
      n.busy = false;
      finished_.clear();
      decoded_.clear();
      leaving_.clear();
      const batch& b = *n.running;
      for (request_id id : b.aborted) {
        acc_.aborted(id, now_);
        release_tokens(acc_.index_of(id));  // the scheduler let it go at schedule()
        lend_.release(acc_.index_of(id));
      }
      for (const auto& e : b.entries) {
        const auto r = acc_.entry(e, n.start, now_);
        n.queued_prompt -= r.prompt_tokens;
        if (lend_.on_demand()) pending_prompt_[r.index] -= r.prompt_tokens;
        if (!r.emitted) continue;
        // The simulated engine samples the conversation's next token (any value for a counted request).
        decoded_.push_back(
            {e.id, !tokens_[r.index].empty() ? token_at(w_[r.index], e.context_tokens, o_.seed) : token_id{0}});
        if (hooks_ && hooks_->on_token) hooks_->on_token(j, r.index, now_);
        if (lend_.on_demand() && !r.last) growth_.push_back({r.index, e.context_tokens + 1});
        if (r.last) {
          finished_.push_back(e.id);
          leaving_.push_back(r.index);
        } else if (roles_[j] == instance_role::prefill) {
          finished_.push_back(e.id);  // this instance is done with it: its KV moves to a decode instance
          leaving_.push_back(r.index);
          hand_over(r.index, j);
        }
      }
      n.s->complete(finished_, decoded_);
      for (const std::size_t i : leaving_) {
        release_tokens(i);  // its ids were needed until complete()
        lend_.release(i);
      }
      if (lend_.on_demand()) grow_on_demand(j);
      for (auto& other : nodes_) other.stalled = false;  // KV was freed: others may fit now
    }
  }

  // On-demand borrowing: each decoding request of node j's finished batch holds the blocks its next
  // step needs (context + 1 tokens); when the cluster has none left, node j's latest arrival is
  // preempted by recompute until the growth fits (or the grower itself was the latest).
  void grow_on_demand(std::size_t j) {
    for (const auto& [i, tokens] : growth_) {
      while (lend_.holds(i) && !lend_.grow(i, tokens, m_)) {
        std::size_t victim = w_.size();
        for (std::size_t k = 0; k < w_.size(); ++k)
          if (lend_.holds(k) && lend_.instance_of(k) == j) victim = k;  // the latest arrival (w_ is in order)
        preempt_recompute(j, victim);
      }
    }
    growth_.clear();
  }

  void preempt_recompute(std::size_t j, std::size_t i) {
    if constexpr (cancels_requests<S>)
      expects(nodes_[j].s->cancel(w_[i].req.id), errc::precondition, where_, "request ", w_[i].req.id,
              " could not be taken back from instance ", j, " to free KV blocks");
    nodes_[j].queued_prompt -= pending_prompt_[i];  // what it has left to prefill goes with it
    release_tokens(i);
    lend_.release(i);
    recompute_[i] = true;
    deferred_.push_front(i);  // first in line: it arrived before everything still waiting
    ++out_.borrow_preemptions;
  }

  void hand_over(std::size_t i, std::size_t from) {
    if (hooks_ && !hooks_->decoder_of.empty()) {  // the same KV pool: nothing moves
      kv_.push({now_, seq_++, i, hooks_->decoder_of[from]});
      return;
    }
    const double dt = m_.kv_network_s(w_[i].req.prompt_tokens);
    out_.kv_transfer_s += dt;
    ++out_.kv_transfers;
    std::size_t best = nodes_.size();
    for (std::size_t j = 0; j < nodes_.size(); ++j)
      if (roles_[j] == instance_role::decode &&
          (best == nodes_.size() || free_kv_blocks(*nodes_[j].s) > free_kv_blocks(*nodes_[best].s)))
        best = j;
    kv_.push({now_ + dt, seq_++, i, best});
  }

  // KV that arrives now: the request joins its instance with the KV ready (prompt plus the tokens
  // produced, but the last one, which the next step computes).
  void deliver_kv() {
    while (!kv_.empty() && kv_.top().time <= now_) {
      const kv_arrival ev = kv_.top();
      kv_.pop();
      request r = w_[ev.request].req;
      r.prompt_tokens = w_[ev.request].req.prompt_tokens + acc_.record(ev.request).output_tokens - 1;
      r.kv_ready_tokens = r.prompt_tokens;
      r.prefix_id = 0;
      r.prefix_tokens = 0;
      r.prompt = {};  // counted here: its KV arrives ready, its ids stay behind
      r.media = {};
      r.counted_by_length = true;
      expects(nodes_[ev.node].s->submit(r, now_), errc::capacity, where_, "request ", r.id, " does not fit instance ",
              ev.node, "'s KV cache");
      nodes_[ev.node].stalled = false;
    }
  }

  // Arrivals go to the instance (of those that prefill) with the fewest queued prompt tokens.
  void admit_arrivals() {
    if (lend_.enabled()) return admit_borrowing();
    while (next_ < w_.size() && w_[next_].req.arrival_s <= now_) {
      std::size_t best = nodes_.size();
      for (std::size_t j = 0; j < nodes_.size(); ++j)
        if (roles_[j] != instance_role::decode &&
            (best == nodes_.size() || nodes_[j].queued_prompt < nodes_[best].queued_prompt))
          best = j;
      request r = w_[next_].req;
      if (o_.token_ids && shares_prefix(w_[next_])) {
        prompt_tokens(w_[next_], o_.seed, tokens_[next_]);
        r.prompt = tokens_[next_];
      }
      r.counted_by_length = r.prompt.empty();  // the simulator's default: lengths only, no prefix caching
      bool ok = false;
      try {
        ok = nodes_[best].s->submit(r, now_);
      } catch (...) {
        release_tokens(next_);
        throw;
      }
      if (ok)
        nodes_[best].queued_prompt += w_[next_].req.prompt_tokens;
      else
        release_tokens(next_);
      nodes_[best].stalled = false;
      acc_.submitted(next_, ok);
      ++next_;
    }
  }

  // With KV borrowing: arrivals queue in order; the head is submitted once the cluster pool holds its
  // whole KV (a request larger than the cluster is rejected at once).
  void admit_borrowing() {
    for (; next_ < w_.size() && w_[next_].req.arrival_s <= now_; ++next_) {
      if (lend_.ever_fits(next_))
        deferred_.push_back(next_);
      else
        acc_.submitted(next_, false);
    }
    while (!deferred_.empty()) {
      const std::size_t i = deferred_.front();
      const auto load = [&](std::size_t j) { return nodes_[j].queued_prompt; };
      // On demand, a request holds what its next iterations need: its prompt (plus, after a recompute
      // preemption, the output it had produced, computed again) and the first token's block.
      const std::int64_t recomputed = lend_.on_demand() && recompute_[i] ? acc_.record(i).output_tokens : 0;
      const std::int64_t prompt = w_[i].req.prompt_tokens + recomputed;
      const std::size_t need = lend_.on_demand() ? lend_.blocks_for(prompt + 1) : 0;
      const std::size_t best = lend_.on_demand() ? lend_.place_blocks(need, load) : lend_.place(i, load);
      if (!(lend_.on_demand() ? lend_.reserve_blocks(i, best, need) : lend_.reserve(i, best))) break;
      request r = w_[i].req;
      if (lend_.on_demand() && recompute_[i]) {
        r.prompt_tokens = prompt;  // counted by length: its ids, if any, stayed behind
        r.prefix_id = 0;
        r.prefix_tokens = 0;
        r.media = {};
      } else if (o_.token_ids && shares_prefix(w_[i])) {
        prompt_tokens(w_[i], o_.seed, tokens_[i]);
        r.prompt = tokens_[i];
      }
      r.counted_by_length = r.prompt.empty();
      bool ok = false;
      try {
        ok = nodes_[best].s->submit(r, now_);
      } catch (...) {
        release_tokens(i);
        lend_.release(i);
        throw;
      }
      const bool again = lend_.on_demand() && recompute_[i];
      if (ok && again) {
        nodes_[best].queued_prompt += pending_prompt_[i];
      } else if (ok) {
        nodes_[best].queued_prompt += w_[i].req.prompt_tokens;
        if (lend_.on_demand()) pending_prompt_[i] = w_[i].req.prompt_tokens;
      } else {
        release_tokens(i);
        lend_.release(i);
      }
      nodes_[best].stalled = false;
      if (!again) acc_.submitted(i, ok);  // a preempted request was counted when it first arrived
      expects(ok || !again, errc::precondition, where_, "instance ", best, " refused request ", r.id,
              " readmitted after a preemption");
      deferred_.pop_front();
    }
  }

  // Llumnix: at the first event after each interval, one decoding request moves from the fullest to
  // the emptiest instance. The copy is charged as downtime (Llumnix overlaps it with decoding: an
  // upper bound).
  void migrate() {
    if (now_ < next_migration_) return;
    next_migration_ = now_ + c_.migration_interval_s;
    if constexpr (migrates_out<S>) {
      std::size_t lo = 0, hi = 0;
      for (std::size_t j = 1; j < nodes_.size(); ++j) {
        if (free_kv_blocks(*nodes_[j].s) < free_kv_blocks(*nodes_[lo].s)) lo = j;
        if (free_kv_blocks(*nodes_[j].s) > free_kv_blocks(*nodes_[hi].s)) hi = j;
      }
      if (lo == hi || nodes_[lo].busy ||
          free_kv_blocks(*nodes_[hi].s) - free_kv_blocks(*nodes_[lo].s) <= c_.imbalance_blocks)
        return;
      if (auto mv = nodes_[lo].s->migrate_out()) {
        const double dt = m_.kv_network_s(mv->context_tokens);
        out_.migration_s += dt;
        ++out_.migrations;
        const std::size_t i = acc_.index_of(mv->req.id);
        release_tokens(i);  // it left with its KV; its ids stay behind
        kv_.push({now_ + dt, seq_++, i, hi});
        nodes_[lo].stalled = false;
      }
    }
  }

  // Idle instances with work start their next batch: cost model time (plus swaps, times noise).
  void start_batches() {
    for (std::size_t j = 0; j < nodes_.size(); ++j) {
      node& n = nodes_[j];
      if (n.busy || n.stalled || n.s->idle()) continue;
      const batch& b = n.s->schedule(now_);
      if (b.empty() && b.aborted.empty()) {  // waits for KV, a hand-over or an arrival
        n.stalled = true;
        acc_.idle_with_work();
        continue;
      }
      // semi-PD's hooks cost a worker's share; with KV borrowing, DistAttention's split of the attention
      // plus the creditor work owed by this instance.
      // A batch whose entries all run every layer is priced from its shape, which the MoE expert
      // traffic below needs too: computed once (cost_model::iteration_s(b) and expert_bytes(b) would
      // each build it).
      const bool plain = !(hooks_ && hooks_->iteration_s) && !lend_.enabled();
      const bool whole =
          plain && !b.entries.empty() &&
          std::all_of(b.entries.begin(), b.entries.end(), [](const batch_entry& e) { return e.layers.all(); });
      const iteration_shape shape = whole ? cost_model::shape_of(b) : iteration_shape{};
      double dt = hooks_ && hooks_->iteration_s ? hooks_->iteration_s(j, b, now_)
                  : whole                       ? m_.iteration_s(shape)
                  : !lend_.enabled()
                      ? m_.iteration_s(b)
                      : lend_.iteration_s(b, m_, [&](request_id id) { return acc_.index_of(id); }) + lend_.take_debt(j);
      for (const auto& t : b.swapped_out) dt += m_.transfer_s(t);
      for (const auto& t : b.swapped_in) dt += m_.transfer_s(t);
      if (o_.time_noise_cv > 0.0) dt *= noise_.lognormal(1.0, o_.time_noise_cv);
      n.busy = true;
      n.running = &b;
      n.start = now_;
      n.until = now_ + dt;
      acc_.iteration(b, whole ? m_.expert_bytes(shape) : m_.expert_bytes(b));
    }
  }

  // Frees request i's synthetic token ids (it left its scheduler, which no longer reads them).
  void release_tokens(std::size_t i) noexcept { std::vector<token_id>().swap(tokens_[i]); }

  const workload& w_;
  const cost_model& m_;
  const sim_options& o_;
  const cluster_options& c_;
  const char* where_;
  const loop_hooks* hooks_;
  accounting acc_;
  weft::rng noise_;
  std::vector<node> nodes_;
  std::vector<instance_role> roles_;
  std::priority_queue<kv_arrival, std::vector<kv_arrival>, std::greater<>> kv_;
  std::vector<request_id> finished_;
  std::vector<decoded_token> decoded_;
  std::vector<std::size_t> leaving_;
  // Synthetic token ids by workload index, non-empty while the request is in a scheduler with them.
  std::vector<std::vector<token_id>> tokens_;
  kv_borrowing lend_;                 // KV borrowing between instances (inert unless enabled)
  std::deque<std::size_t> deferred_;  // with borrowing: arrivals waiting for the pool, in order
  // On-demand borrowing, by workload index: preempted by recompute (readmitted with its output as
  // prompt); prompt tokens submitted and not yet computed (the router's load, taken back on preemption).
  std::vector<bool> recompute_;
  std::vector<std::pair<std::size_t, std::int64_t>> growth_;  // scratch: (request, tokens its next step needs)
  std::vector<std::int64_t> pending_prompt_;
  cluster_result out_;
  double now_ = 0.0, next_migration_ = inf;
  std::size_t next_ = 0;
  std::uint64_t seq_ = 0;
};

}  // namespace detail
}  // namespace weft::sched::sim

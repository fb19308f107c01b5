// vLLM's original (v0) iteration scheduler, the baseline Sarathi-Serve compares against (Kwon et al.,
// "PagedAttention", SOSP 2023, §4.5; Agrawal et al., "Sarathi-Serve", OSDI 2024, §2.4): prefills are
// prioritised — while a waiting prompt fits (KV above the watermark, the batched-token and sequence
// caps), an iteration runs only whole prompts; decodes run only in iterations with nothing to admit,
// so every admission stalls every running decode (the "generation stall" chunked prefill removes).
// It drives weft::kv (or any sched::kv_manager) the way iteration_scheduler does: real token ids,
// computed-KV reports after each step, one KV transaction per public call.
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/kv/kv_manager.hpp>
#include <weft/sched/batch.hpp>
#include <weft/sched/concepts.hpp>
#include <weft/sched/detail/completion.hpp>
#include <weft/sched/detail/recompute_slots.hpp>
#include <weft/sched/detail/reserve_more.hpp>
#include <weft/sched/detail/submission.hpp>
#include <weft/sched/detail/undo_log.hpp>
#include <weft/sched/fcfs_queue.hpp>
#include <weft/sched/iteration_scheduler.hpp>  // scheduler_stats
#include <weft/sched/request.hpp>
#include <weft/sched/victim_policy.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace weft::sched {

/// vLLM v0's scheduler settings (its max_num_seqs, max_num_batched_tokens and watermark).
struct prefill_first_options {
  std::size_t max_running = 256;  ///< sequences holding KV at once; >= 1
  /// Prompt tokens one prefill iteration may batch; a prompt longer than this can never run and is
  /// refused at submit (vLLM ignores it). Sarathi-Serve's artifact sets it to the longest sequence.
  std::int64_t max_batched_tokens = 8192;
  double watermark = 0.01;  ///< share of usable device blocks kept free when admitting, in [0, 1)
};

/// vLLM-style settings in one call: the Sarathi-Serve artifact's baseline is vllm_baseline(128, 8192).
inline prefill_first_options vllm_baseline(std::size_t max_running = 256, std::int64_t max_batched_tokens = 8192) {
  prefill_first_options o;
  o.max_running = max_running;
  o.max_batched_tokens = max_batched_tokens;
  return o;
}

/// Each schedule(now): (1) preempted, then queued requests are admitted in order while the next one's
/// whole prompt fits (batched tokens, running cap, KV above the watermark; a cached prefix is not
/// prefilled again); if any was, the batch is those prefills only. (2) Otherwise every running request
/// decodes one token, oldest first; when KV cannot grow, the latest arrival (Victim) is preempted by
/// recompute — its computed blocks published, its KV freed, it waits at the front of the queue to
/// prefill its prompt and output again (hitting its own blocks while they stay cached). Requests whose
/// KV arrives ready (request::kv_ready_tokens == prompt_tokens: disaggregation) join the running set
/// without a prefill.
///
/// The engine loop is iteration_scheduler's: run batch::copies, then the forward pass of the entries
/// (prefill ids are kv().tokens(id), a decode step's input is entry.token), then complete(finished,
/// decoded) with the {id, token} each emitting entry sampled; complete() reports the computed KV, which is
/// what publishes full blocks. Requests without token ids are counted by length (no prefix caching).
///
/// Every public call either succeeds or throws weft::error leaving the scheduler and its KV manager as
/// they were (one KV transaction per call plus an undo log of its own changes; a request a failed
/// schedule() had taken from the Queue waits at the front of the line). The Queue's hooks must not
/// throw for requests it handed out. Satisfies batch_scheduler; usable in every simulator deployment
/// (it has kv()). Not thread-safe (one engine loop owns it). schedule O(R + A log W) (R running, A
/// admitted, W waiting, plus the Queue's and KV manager's costs); complete O(E + F * E + R log R)
/// (E batch entries, F finished).
template <fair_queue Queue = fcfs_queue, kv_manager KV = weft::kv::kv_manager<>,
          victim_policy Victim = latest_arrival_victim>
class prefill_first_scheduler {
 public:
  using queue_type = Queue;
  using kv_type = KV;

  explicit prefill_first_scheduler(prefill_first_options o = {}, Queue q = Queue{}, KV kv = KV{}, Victim v = Victim{})
      : opt_(o), queue_(std::move(q)), kv_(std::move(kv)), victim_(std::move(v)) {
    const char* where = "weft::sched::prefill_first_scheduler";
    expects(o.max_running >= 1, errc::invalid_argument, where, "max_running must be >= 1, got ", o.max_running);
    expects(o.max_batched_tokens >= 1, errc::invalid_argument, where, "max_batched_tokens must be >= 1, got ",
            o.max_batched_tokens);
    expects(o.watermark >= 0.0 && o.watermark < 1.0, errc::invalid_argument, where, "watermark must be in [0, 1), got ",
            o.watermark);
  }
  prefill_first_scheduler(const prefill_first_scheduler&) = delete;
  prefill_first_scheduler& operator=(const prefill_first_scheduler&) = delete;

  /// Queues r. Returns false (counted in stats().rejected) when it can never run: its prompt exceeds
  /// max_batched_tokens, or its prompt and first output token exceed the whole device cache. Throws
  /// weft::error, changing nothing, for an invalid request (see validate()), an id already in this
  /// scheduler, or kv_ready_tokens on a request with token ids. O(queue push).
  bool submit(const request& r, double now) {
    constexpr const char* where = "weft::sched::prefill_first_scheduler::submit";
    validate(r, where);
    detail::check_new_request(held_, r, where, "waiting or running");
    const bool fits = detail::fits_device_cache(r, kv_, where);  // checked first: it may throw
    if (r.prompt_tokens - r.kv_ready_tokens > opt_.max_batched_tokens || !fits) {
      ++stats_.rejected;
      return false;
    }
    detail::enqueue_new(held_, queue_, r, now);
    return true;
  }

  /// The next iteration's batch: prefills only, or decodes only. Valid until the next schedule call.
  /// Throws weft::error (precondition) while the previous non-empty batch awaits complete(). On any
  /// throw, the scheduler and the KV manager are as before the call.
  const batch& schedule(double now) {
    constexpr const char* where = "weft::sched::prefill_first_scheduler::schedule";
    expects(batch_.entries.empty(), errc::precondition, where,
            "the last batch has not been completed; call complete() before scheduling again");
    compact();  // requests preempted in an empty batch, which is never completed
    std::swap(batch_, previous_);
    batch_.clear();
    entry_slot_.clear();
    undo_.clear();
    deferred_finish_.clear();
    const scheduler_stats stats_before = stats_;
    detail::in_transaction(
        kv_,
        [&] {
          admit(now);
          if (batch_.entries.empty()) {
            decode_all();
            // Everyone gave way (a request outgrew the free cache): admit again now, so a request that
            // can never fit is aborted and the others restart, instead of waiting for an event.
            if (batch_.entries.empty() && !requeued_.empty()) admit(now);
          }
          for (const auto& [req, generated] : deferred_finish_) queue_.on_finish(req, generated);
        },
        [&]() noexcept {
          roll_back();
          stats_ = stats_before;
          std::swap(batch_, previous_);
          entry_slot_.clear();
        });
    for (const request_id id : batch_.aborted) held_.release(id);
    return batch_;
  }

  /// The last batch ran: every entry advances, the computed KV is reported to the KV manager, each
  /// emitting entry's sampled token is kept as its request's next input, and `finished` end.
  /// finished: requests that ended (EOS or a length cap), each an entry of the last batch that emitted
  /// a token, listed once. decoded: the token each emitting entry sampled, as {request id, token},
  /// in any order (required for a request with token ids that does not end here; a token for a request
  /// that is not an emitting entry of the batch is an error). Throws weft::error naming the request and
  /// the rule, changing nothing, for any other input. O(E + F * E + D log D) (D decoded tokens; O(E + F
  /// * E) when they come in entry order), plus O(R log R) when the running order changed.
  void complete(std::span<const request_id> finished, std::span<const decoded_token> decoded = {}) {
    constexpr const char* where = "weft::sched::prefill_first_scheduler::complete";
    const std::size_t n = batch_.entries.size();
    if (detail::nothing_in_flight(n, finished, decoded, where)) return;
    detail::check_completion(batch_, finished, decoded, is_done_, token_at_, sorted_, where, "",
                             [&](std::size_t k) { return running_[entry_slot_[k]].with_ids; });
    // The KV manager first, in one transaction: computed KV (what publishes blocks), then frees.
    detail::report_and_free(kv_, batch_, entry_slot_, running_, is_done_, [](const batch_entry&) { return true; });
    // Then the scheduler's own state; nothing below throws.
    detail::apply_completion(
        batch_, entry_slot_, running_, dead_, is_done_, decoded, token_at_, queue_, held_,
        [](const batch_entry& e, slot& s) noexcept { s.done += e.prefill_tokens + e.decode_tokens; });
  }

  /// Ends request `id` wherever it is (a client that went away): waiting in the Queue or a line,
  /// preempted, or running — mid-prefill or decoding. A running request's computed blocks are published
  /// (they stay cached for others) and its KV freed; the Queue hears on_finish for a request it had
  /// handed out. Returns false, changing nothing, when `id` is not here (finished, aborted, migrated,
  /// never submitted, or cancelled already). Call it between complete() and schedule(): throws
  /// weft::error (precondition) while a batch is in flight, and on a KV failure throws leaving
  /// everything as it was. Its id may be submitted again at once, unless it was still inside the
  /// Queue: that copy is dropped when the Queue hands it out, and the id is free from then. O(R + W
  /// lines + KV free).
  bool cancel(request_id id) {
    expects(batch_.entries.empty(), errc::precondition, "weft::sched::prefill_first_scheduler::cancel",
            "a batch is in flight; call complete() first and cancel between iterations");
    return detail::cancel_request(id, running_, requeued_, front_, queue_, kv_, held_, stats_);
  }

  std::size_t waiting() const noexcept {
    return queue_.size() - held_.cancelled_in_queue() + front_.size() + requeued_.size();
  }
  std::size_t running() const noexcept { return live(); }
  bool idle() const noexcept { return live() == 0 && waiting() == 0; }
  /// Counters as iteration_scheduler's (no swaps: vLLM v0's default preemption is recompute).
  const scheduler_stats& stats() const noexcept { return stats_; }
  /// The batch of the last schedule() until complete() (its entries are cleared there).
  const batch& last_batch() const noexcept { return batch_; }
  const prefill_first_options& options() const noexcept { return opt_; }
  Queue& queue() noexcept { return queue_; }
  /// The KV manager: the engine reads token ids, block tables and slot mappings here.
  const KV& kv() const noexcept { return kv_; }

 private:
  struct slot {
    request req;
    std::int64_t target = 0;     // tokens to prefill: prompt (+ generated, after a preemption)
    std::int64_t done = 0;       // tokens whose KV is computed
    std::int64_t generated = 0;  // output tokens produced here
    std::int64_t room = 0;       // counted requests: tokens their blocks hold (decodes inside need no KV call)
    token_id pending = 0;        // with ids: the latest sampled token, the next decode step's input
    bool with_ids = false;       // the request carries token ids (the KV manager holds them)
    bool alive = true;
    std::vector<token_id> tokens;  // with ids, after a preemption: every id to prefill again
  };
  static bool by_arrival(const slot& a, const slot& b) noexcept { return detail::by_arrival(a, b); }

  // schedule()'s undo log (detail::undo_log: applied newest first on failure); callers reserve room
  // before pushing.
  using undo_kind = detail::recompute_undo;
  using undo_entry = detail::recompute_undo_entry<slot>;
  undo_entry& push_undo(undo_kind kind, std::size_t index, std::optional<slot> saved = std::nullopt) {
    return detail::push_undo(undo_, kind, index, std::move(saved));
  }

  std::size_t live() const noexcept { return running_.size() - dead_; }
  std::int64_t blocks_for(std::int64_t tokens) const noexcept { return detail::blocks_for(tokens, kv_.block_size()); }

  // (1) Prefill phase. Requests whose KV arrived ready join running without an entry.
  void admit(double now) {
    const std::size_t usable = kv_.usable_blocks();
    const auto watermark = static_cast<std::size_t>(std::ceil(opt_.watermark * static_cast<double>(usable)));
    const auto bs = static_cast<std::int64_t>(kv_.block_size());
    while (live() < opt_.max_running) {
      const auto [from, next] = detail::next_to_admit(requeued_, front_, queue_, held_, now);
      if (next == nullptr) return;
      slot s = from == detail::admit_source::requeued ? requeued_.front() : detail::fresh_slot<slot>(*next);
      if (from == detail::admit_source::requeued && live() == 0 && std::cmp_greater(blocks_for(s.target + 1), usable)) {
        // Prompt plus output outgrew the whole cache: end it (the only way a request ends unfinished).
        undo_.reserve(1);
        deferred_finish_.emplace_back(s.req, s.generated);
        batch_.aborted.push_back(s.req.id);
        push_undo(undo_kind::requeued_erased, 0, std::move(requeued_.front()));
        requeued_.erase(requeued_.begin());
        ++stats_.aborted;
        continue;
      }
      const std::span<const token_id> ids = !s.with_ids         ? std::span<const token_id>()
                                            : !s.tokens.empty() ? std::span<const token_id>(s.tokens)
                                                                : s.req.prompt;
      const weft::kv::request_options options = kv_request_options(s.req);
      std::int64_t cached = 0;
      if (!ids.empty() && s.done < s.target) cached = static_cast<std::int64_t>(kv_.cached_prefix_tokens(ids, options));
      const std::int64_t start = s.done < s.target ? std::max(s.done, std::min(cached, s.target - 1)) : s.done;
      if (s.target > start && batch_.prefill_tokens + (s.target - start) > opt_.max_batched_tokens) return;
      const std::size_t reserve = live() == 0 ? 0 : watermark;  // never idle an empty machine
      const std::int64_t need = blocks_for(s.target + 1) - cached / bs;
      if (std::cmp_greater(need, kv_.free_blocks()) || std::cmp_greater(reserve, kv_.free_blocks() - need)) return;
      const auto slots = static_cast<std::size_t>(s.target);
      auto alloc = ids.empty() ? kv_.allocate_prompt(s.req.id, slots, options, slots)
                               : kv_.allocate_prompt(s.req.id, ids, options, slots);
      if (!alloc) return;
      const auto hit = static_cast<std::int64_t>(alloc->cached_tokens);
      if (s.done < s.target) s.done = std::max(s.done, std::min(hit, s.target - 1));
      const std::int64_t prefill = s.target - s.done;
      detail::count_admission(stats_, s.req, from == detail::admit_source::requeued, hit);
      if (alloc->host_to_device.blocks > 0)
        batch_.copies.push_back({kv_copy::kind::prefix_in, s.req.id, std::move(alloc->host_to_device), {}});
      s.room = ids.empty() ? static_cast<std::int64_t>(alloc->slots + static_cast<std::size_t>(bs) - 1) / bs * bs : 0;
      s.tokens.clear();  // the KV manager holds them now
      s.alive = true;
      // Take it from its source, and into running (undo-logged; room reserved first).
      undo_.reserve(2);
      detail::reserve_more(running_, 1);
      if (from == detail::admit_source::requeued) {
        push_undo(undo_kind::requeued_erased, 0, std::move(requeued_.front()));
        requeued_.erase(requeued_.begin());
      } else if (from == detail::admit_source::front) {
        push_undo(undo_kind::front_erased, 0, slot{}).saved->req = front_.front();
        front_.erase(front_.begin());
      } else {
        const request popped = queue_.pop(now);  // logged once it happened: a throwing pop changed nothing
        push_undo(undo_kind::queue_popped, 0, slot{}).saved->req = popped;
        queue_.on_admit(s.req);
      }
      // Before the first entry the running set is kept in arrival order (decode_all may follow in
      // this call); after it complete() restores the order.
      std::size_t i = running_.size();
      if (batch_.entries.empty())
        i = static_cast<std::size_t>(std::upper_bound(running_.begin(), running_.end(), s, by_arrival) -
                                     running_.begin());
      push_undo(undo_kind::running_inserted, i);
      running_.insert(running_.begin() + static_cast<std::ptrdiff_t>(i), std::move(s));
      if (prefill > 0) add_entry(i, prefill, 0);
    }
  }

  // (2) Decode phase: oldest first; a request that cannot grow preempts the latest arrivals after it.
  void decode_all() {
    for (std::size_t i = 0; i < running_.size(); ++i) {
      if (!running_[i].alive) continue;
      while (running_[i].alive && !grow_one(i))
        if (!preempt_after(i)) preempt(i);  // nobody later to evict: it gives way itself
      if (running_[i].alive) add_entry(i, 0, 1);
    }
  }

  // A slot for running_[i]'s next decode input (with ids: the token itself goes to the KV manager).
  bool grow_one(std::size_t i) { return detail::grow_one(running_, i, kv_, undo_, batch_); }

  // Preempts the Victim's choice among running requests after position i. False when there is none.
  bool preempt_after(std::size_t i) {
    const std::optional<std::size_t> victim = detail::victim_after(
        running_, i, kv_, victim_, candidates_, candidate_slot_, "weft::sched::prefill_first_scheduler::schedule");
    if (!victim) return false;
    preempt(*victim);
    return true;
  }

  // Preempts running_[j] by recompute: its computed blocks are published (readmitted, it hits them
  // while they stay cached), its KV freed, and it waits at the front of the line, oldest first.
  void preempt(std::size_t j) {
    detail::preempt_by_recompute(
        running_, j, dead_, requeued_, kv_, undo_, batch_, stats_, [](slot&) {}, [] {});
  }

  void add_entry(std::size_t i, std::int64_t prefill, std::int64_t decode) {
    const slot& s = running_[i];
    const bool emits = decode > 0 || s.done + prefill >= s.target;
    batch_.entries.push_back({s.req.id, s.req.client, prefill, decode, s.done + prefill + decode, emits,
                              decode > 0 && s.with_ids ? s.pending : -1});
    entry_slot_.push_back(i);
    batch_.prefill_tokens += prefill;
    batch_.decode_tokens += decode;
  }

  // Undoes schedule()'s changes to the scheduler's own state, newest first.
  void roll_back() noexcept { detail::roll_back(undo_, running_, dead_, requeued_, front_, false); }

  // Removes dead slots, keeping order. Only between batches (no entry refers to a slot).
  void compact() noexcept { detail::compact(running_, dead_); }

  prefill_first_options opt_;
  Queue queue_;
  KV kv_;
  Victim victim_;
  batch batch_;
  batch previous_;  // the batch before batch_, kept to restore last_batch() when schedule() fails
  scheduler_stats stats_;
  // Invariants: running_ holds admitted requests in arrival order between calls (dead_ of them
  // preempted in the batch in flight); requeued_ is sorted oldest first; front_ holds requests a failed
  // schedule() took from the queue, oldest first; entry_slot_[k] is the running_ index of
  // batch_.entries[k]; held_ holds the id of every request waiting or running here. With ids, a running
  // request's KV manager holds the ids of its `done` computed tokens (its pending token joins at the
  // decode step that reads it).
  std::vector<slot> running_;
  std::vector<slot> requeued_;
  std::vector<request> front_;
  detail::request_store held_;  // every request here, with its prompt ids and media (copied at submit)
  std::vector<std::size_t> entry_slot_;
  std::vector<char> is_done_;
  std::vector<std::size_t> token_at_;
  std::vector<std::pair<request_id, std::size_t>> sorted_;
  std::vector<victim_candidate> candidates_;
  std::vector<std::size_t> candidate_slot_;
  detail::recompute_undo_log<slot> undo_;
  std::vector<std::pair<request, std::int64_t>> deferred_finish_;
  std::size_t dead_ = 0;
};

}  // namespace weft::sched

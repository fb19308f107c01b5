// Iteration-level batch scheduling for LLM serving. Continuous batching (Yu et al., "Orca", OSDI 2022,
// §4.2), chunked prefill with stall-free batching (Agrawal et al., "Sarathi-Serve", OSDI 2024, §4:
// running decodes first, then partial prefills, then new prefills, within a per-iteration token budget),
// preemption by recompute or swap (Kwon et al., SOSP 2023, §4.5) and inter-tenant preemption (FastSwitch),
// driving weft::kv with the requests' real token ids: prompt ids at admission, each decoded token as it
// is fed back, and computed-KV reports after every step.
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/kv/kv_manager.hpp>
#include <weft/sched/batch.hpp>
#include <weft/sched/chunked_prefill.hpp>  // named settings, once defined here
#include <weft/sched/concepts.hpp>
#include <weft/sched/continuous_batching.hpp>  // named settings, once defined here
#include <weft/sched/detail/completion.hpp>
#include <weft/sched/detail/reserve_more.hpp>
#include <weft/sched/detail/submission.hpp>
#include <weft/sched/detail/undo_log.hpp>
#include <weft/sched/fcfs_queue.hpp>
#include <weft/sched/request.hpp>
#include <weft/sched/scheduler_options.hpp>
#include <weft/sched/victim_policy.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

namespace weft::sched {

/// The batch scheduler. Each schedule(now): (1) every running decode gets one token, in admission order;
/// (2) swapped-out requests come back while KV allows; (3) partial prefills continue; (4) preempted and
/// then queued requests are admitted (the Queue decides the order among clients) while the batch, the
/// token budget and KV allow. When KV cannot grow, a victim (Victim policy) is preempted.
///
/// The engine loop: submit() requests (with their prompt token ids, which the scheduler copies; or,
/// in simulation, counted_by_length); each iteration b = schedule(now); run b.copies in order, then the
/// forward pass of b.entries (prefill ids are kv().tokens(id), a decode step's input is entry.token; K
/// and V go to the slots of kv().blocks(id)); then complete(finished, decoded) with the {id, token}
/// each emitting entry sampled; cancel(id) between iterations for a client that went away.
/// complete() reports the computed KV to the KV manager, which only then lets other requests hit those
/// blocks. examples/mini_engine is this loop on a real model.
///
/// No livelock: the running request ranked first by (preemptions, descending; arrival; id) — the
/// "head" — is never a victim and its growth may preempt any other, so it progresses every iteration
/// until it ends; preempted requests are readmitted before new ones, in the same rank order, so a
/// request preempted k times outranks one preempted fewer times. (A head that cannot fit in the whole
/// cache alone is aborted and reported in batch::aborted.)
///
/// Every public call either succeeds or throws weft::error leaving the scheduler and its KV manager as
/// they were: it validates first, runs its KV calls in one KV transaction (rolled back if any throws)
/// and keeps an undo log of its own changes. The Queue's hooks must not throw for requests it handed
/// out. One caveat: requests a failed schedule() had already taken from the Queue (and charged) wait
/// at the front of the line, and the next schedule() admits them first, as the failed call would have.
///
/// Not thread-safe (one engine loop owns it). schedule O(R + A log W) (R running, A admitted, W waiting,
/// plus the Queue's and KV manager's costs); complete O(E + F * E) (E batch entries, F finished).
template <fair_queue Queue = fcfs_queue, kv_manager KV = weft::kv::kv_manager<>,
          victim_policy Victim = latest_arrival_victim>
class iteration_scheduler {
 public:
  using queue_type = Queue;
  using kv_type = KV;

  explicit iteration_scheduler(scheduler_options o = {}, Queue q = Queue{}, KV kv = KV{}, Victim v = Victim{})
      : opt_(o), queue_(std::move(q)), kv_(std::move(kv)), victim_(std::move(v)) {
    const char* where = "weft::sched::iteration_scheduler";
    expects(o.token_budget >= 1, errc::invalid_argument, where, "token_budget must be >= 1, got ", o.token_budget);
    expects(o.max_running >= 1, errc::invalid_argument, where, "max_running must be >= 1, got ", o.max_running);
    expects(!o.chunked_prefill || std::cmp_greater_equal(o.token_budget, o.max_running), errc::invalid_argument, where,
            "chunked prefill needs token_budget >= max_running so no running decode is starved; got budget ",
            o.token_budget, " and max_running ", o.max_running);
    if constexpr (binds_prefix_probe<Queue>)
      queue_.bind_prefix_probe([this](const request& r) { return cached_prefix_tokens(r); });
  }
  // The prefix probe captures this; moving would leave it dangling.
  iteration_scheduler(const iteration_scheduler&) = delete;
  iteration_scheduler& operator=(const iteration_scheduler&) = delete;

  /// Queues r. Returns false (and counts it in stats().rejected) when r can never run: its prompt and
  /// first output token need more blocks than the whole device cache. Throws weft::error, changing
  /// nothing, for an invalid request (see validate()), an id already in this scheduler (waiting,
  /// running or swapped out), or kv_ready_tokens on a request with token ids. O(queue push).
  bool submit(const request& r, double now) {
    constexpr const char* where = "weft::sched::iteration_scheduler::submit";
    validate(r, where);
    detail::check_new_request(held_, r, where, "waiting, running or swapped out");
    if (!detail::fits_device_cache(r, kv_, where)) {
      ++stats_.rejected;
      return false;
    }
    detail::enqueue_new(held_, queue_, r, now);
    return true;
  }

  /// The next iteration's batch (valid until the next schedule call). Empty when nothing can run.
  /// Throws weft::error (precondition) while the previous non-empty batch awaits complete(). On any
  /// throw, the scheduler and the KV manager are as before the call.
  const batch& schedule(double now) {
    constexpr const char* where = "weft::sched::iteration_scheduler::schedule";
    expects(batch_.entries.empty(), errc::precondition, where,
            "the last batch has not been completed; call complete() before scheduling again");
    std::swap(batch_, previous_);
    batch_.clear();
    entry_slot_.clear();
    undo_.clear();
    may_report_ = 0;
    deferred_finish_.clear();
    const scheduler_stats stats_before = stats_;
    kv_.begin_transaction();
    try {
      plan_iteration(now);
      // Queue hooks for requests that ended here run last: they cannot be taken back.
      for (const auto& [req, generated] : deferred_finish_) queue_.on_finish(req, generated);
    } catch (...) {
      kv_.rollback_transaction();
      roll_back();
      stats_ = stats_before;
      std::swap(batch_, previous_);
      throw;
    }
    kv_.commit_transaction();
    for (request_id id : batch_.aborted) held_.release(id);
    compact();
    return batch_;
  }

  /// The last batch ran: advances every entry, reports the computed KV to the KV manager, feeds each
  /// emitting entry's sampled token back and ends the finished requests.
  ///
  /// finished: requests that ended (EOS or a length cap); each must be an entry of the last batch that
  /// emitted a token, listed once. decoded: the token each emitting entry sampled, as {request id,
  /// token}, in any order — matched by id, so a list in another order than the entries cannot feed one
  /// request another's token; at most one per request, and only for emitting entries of the last
  /// batch. A token is required for every emitting entry whose request carries prompt token ids and
  /// does not end here (a request counted by length, or one that ends, needs none). Calling it with
  /// nothing in flight and empty arguments does nothing. Throws weft::error naming the request and the
  /// rule, changing nothing, for any other input. O(E + F * E) with the tokens in entry order, else
  /// O(E + F * E + (D + E) log D) (D decoded tokens).
  void complete(std::span<const request_id> finished, std::span<const decoded_token> decoded = {}) {
    constexpr const char* where = "weft::sched::iteration_scheduler::complete";
    const std::size_t n = batch_.entries.size();
    if (n == 0) {
      expects(finished.empty() && decoded.empty(), errc::precondition, where,
              "no batch is in flight (complete() was already called, or schedule() returned an empty batch); ",
              finished.empty() ? "" : "the first finished request is ", finished.empty() ? request_id{} : finished[0]);
      return;
    }
    // Every finished id is checked before anything changes.
    const std::size_t found =
        detail::check_completion(batch_, finished, decoded, is_done_, token_at_, sorted_, where, " (a partial prefill)",
                                 [&](std::size_t k) { return !running_[entry_slot_[k]].req.prompt.empty(); });
    done_entries_.clear();
    for (std::size_t k = 0; k < n && done_entries_.size() < found; ++k)
      if (is_done_[k]) done_entries_.push_back(k);
    // The KV manager first, in one transaction: computed KV (what publishes blocks) and frees.
    bool open = false;
    auto begin = [&] {
      if (!open) kv_.begin_transaction();
      open = true;
    };
    try {
      // Only prefill steps, first steps and finishing requests can need the KV manager (see
      // needs_report); schedule() counted the first two, so a batch of decodes skips this pass.
      for (std::size_t k = 0; k < n && (may_report_ > 0 || !done_entries_.empty()); ++k) {
        const batch_entry& e = batch_.entries[k];
        const slot& s = running_[entry_slot_[k]];
        if (!with_tokens(s)) continue;  // counted requests publish nothing
        const std::int64_t done = s.done + e.prefill_tokens + e.decode_tokens;
        if (is_done_[k]) {
          // A finishing request publishes its last full blocks (a multi-turn conversation's next turn
          // hits them): the KV manager gets the ids it has not heard of, then the computed count.
          if (done == s.reported) continue;
          begin();
          unsynced_ids(s, e.decode_tokens > 0, ids_scratch_);
          if (!ids_scratch_.empty()) (void)kv_.append(s.req.id, ids_scratch_);
          kv_.computed(s.req.id, static_cast<std::size_t>(done));
        } else if (needs_report(s, e, done)) {
          begin();
          kv_.computed(s.req.id, static_cast<std::size_t>(done));
        }
      }
      for (std::size_t k : done_entries_) {
        begin();
        kv_.free(running_[entry_slot_[k]].req.id);
      }
    } catch (...) {
      if (open) kv_.rollback_transaction();
      throw;
    }
    if (open) kv_.commit_transaction();
    // Then the scheduler's own state; nothing below throws.
    for (std::size_t k = 0; k < n; ++k) {
      const batch_entry& e = batch_.entries[k];
      slot& s = running_[entry_slot_[k]];
      const std::int64_t done = s.done + e.prefill_tokens + e.decode_tokens;
      if (!is_done_[k] && with_tokens(s) && needs_report(s, e, done)) s.reported = done;
      // The decode step computed the KV of its input token: its id joins the unsynced ones.
      if (e.decode_tokens > 0 && with_tokens(s) && !s.pending_in_kv) s.fresh[s.fresh_count++] = s.pending;
      s.done = done;
      if (e.emits_token) {
        ++s.generated;
        queue_.on_tokens(s.req, 1);
        if (token_at_[k] != detail::no_token) s.pending = decoded[token_at_[k]].token;
        s.pending_in_kv = false;
      }
    }
    for (std::size_t k : done_entries_) {
      slot& s = running_[entry_slot_[k]];
      queue_.on_finish(s.req, s.generated);
      held_.release(s.req.id);
      s.alive = false;
      ++dead_;
    }
    compact();
    batch_.entries.clear();
    entry_slot_.clear();
  }

  /// Starts `child` as a parallel sample of running request `parent` (vLLM's n > 1, beam search): it
  /// shares every KV block of the parent (copy-on-write: the first write into a shared partial block
  /// copies it, listed in batch::copies) and continues from the parent's state with first_token as its
  /// latest sampled token instead of the parent's. Call it between complete() and schedule(), for a
  /// parent that has emitted at least one token. Returns false, changing nothing, when the batch is
  /// full (max_running) or the KV manager refuses (tenant quota). Throws weft::error, changing nothing,
  /// for an unknown or not-yet-decoding parent, a child id already used, or a batch in flight. The
  /// child is charged to the parent's client for its output only, and shares the scheduler's copy of
  /// the parent's prompt ids and media. O(R + parent's blocks and tokens).
  bool fork(request_id parent, request_id child, token_id first_token) {
    return fork_impl(parent, child, &first_token);
  }
  /// fork() for a parent counted by length (no token ids).
  bool fork(request_id parent, request_id child) { return fork_impl(parent, child, nullptr); }

  /// A running request handed over to another instance (Llumnix migration). It owns what it carries:
  /// req.prompt and req.media are cleared (they viewed this scheduler's copies, gone with it); the
  /// prompt ids are the first req.prompt_tokens of `tokens`, the media are in `media`.
  struct migrated {
    request req;
    std::int64_t generated = 0;       ///< output tokens produced here
    std::int64_t context_tokens = 0;  ///< tokens whose KV moves with it
    std::vector<token_id> tokens;     ///< its prompt and generated token ids (empty when counted by length)
    std::vector<weft::kv::multimodal_item> media;  ///< its multimodal items (as req.media was)
  };

  /// Removes one decoding request — the latest arrival that is not the head — releasing its KV, for
  /// live migration (Li et al., "Llumnix", OSDI 2024, §4). Call between complete() and schedule().
  /// nullopt when no request qualifies. O(R).
  std::optional<migrated> migrate_out() {
    expects(batch_.entries.empty(), errc::precondition, "weft::sched::iteration_scheduler::migrate_out",
            "a batch is in flight; call complete() first");
    head_ = find_head();
    std::size_t pick = running_.size();
    for (std::size_t i = 0; i < running_.size(); ++i) {
      if (i == head_ || !in_decode(running_[i])) continue;
      if (pick == running_.size() || std::tie(running_[i].req.arrival_s, running_[i].req.id) >
                                         std::tie(running_[pick].req.arrival_s, running_[pick].req.id))
        pick = i;
    }
    if (pick == running_.size()) return std::nullopt;
    slot& v = running_[pick];
    migrated m{v.req, v.generated, v.done, {}, {v.req.media.begin(), v.req.media.end()}};
    m.req.prompt = {};
    m.req.media = {};
    if (with_tokens(v)) all_ids(v, m.tokens);
    slot before = v;  // sync() changes the slot: restored if the KV manager fails
    kv_.begin_transaction();
    try {
      if (with_tokens(v)) sync(v);  // its blocks stay cached here for prompts that share them
      kv_.free(v.req.id);
    } catch (...) {
      kv_.rollback_transaction();
      v = std::move(before);
      throw;
    }
    kv_.commit_transaction();
    queue_.on_finish(v.req, v.generated);
    held_.release(v.req.id);
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(pick));
    ++running_version_;
    return m;
  }

  /// Ends request `id` wherever it is (a client that went away): waiting in the Queue or a line,
  /// preempted, swapped out, or running — mid-prefill or decoding, a fork's parent or child. A running
  /// request's computed blocks are published (they stay cached for others) and its KV freed; a
  /// swapped-out one's host blocks are freed; the Queue hears on_finish for a request it had handed
  /// out. Returns false, changing nothing, when `id` is not here (finished, aborted, migrated, never
  /// submitted, or cancelled already). Call it between complete() and schedule(): throws weft::error
  /// (precondition) while a batch is in flight, and on a KV failure throws leaving everything as it was.
  /// Its id may be submitted again at once, unless it was still inside the Queue: that copy is dropped
  /// when the Queue hands it out, and the id is free from then. O(R + W lines + KV free).
  bool cancel(request_id id) {
    expects(batch_.entries.empty(), errc::precondition, "weft::sched::iteration_scheduler::cancel",
            "a batch is in flight; call complete() first and cancel between iterations");
    if (!held_.contains(id) || held_.cancelled(id)) return false;
    const auto is = [&](const slot& s) { return s.req.id == id; };
    if (const auto it = std::find_if(running_.begin(), running_.end(), is); it != running_.end()) {
      slot before = *it;  // sync() changes the slot: restored if the KV manager fails
      kv_.begin_transaction();
      try {
        if (with_tokens(*it)) sync(*it);  // its computed blocks stay cached for prompts that share them
        kv_.free(id);
      } catch (...) {
        kv_.rollback_transaction();
        *it = std::move(before);
        throw;
      }
      kv_.commit_transaction();
      queue_.on_finish(it->req, it->generated);
      running_.erase(it);
      ++running_version_;
    } else if (const auto sw = std::find_if(swapped_.begin(), swapped_.end(), is); sw != swapped_.end()) {
      detail::in_transaction(
          kv_, [&] { kv_.free(id); }, [] {});  // its host blocks
      queue_.on_finish(sw->req, sw->generated);
      swapped_.erase(sw);
    } else if (const auto rq = std::find_if(requeued_.begin(), requeued_.end(), is); rq != requeued_.end()) {
      queue_.on_finish(rq->req, rq->generated);  // its KV went at its preemption
      requeued_.erase(rq);
    } else if (const auto f = std::find_if(front_.begin(), front_.end(), [&](const request& q) { return q.id == id; });
               f != front_.end()) {
      queue_.on_finish(*f, 0);  // charged when a failed schedule() took it
      front_.erase(f);
    } else {
      held_.mark_cancelled(id);  // inside the Queue, which cannot remove it: dropped when it comes out
      ++stats_.cancelled;
      return true;
    }
    held_.release(id);
    ++stats_.cancelled;
    return true;
  }

  std::size_t waiting() const noexcept {
    return queue_.size() - held_.cancelled_in_queue() + front_.size() + requeued_.size() + swapped_.size();
  }
  std::size_t running() const noexcept { return running_.size(); }
  bool idle() const noexcept { return running_.empty() && waiting() == 0; }
  const scheduler_stats& stats() const noexcept { return stats_; }
  /// The batch of the last schedule() until complete() (its entries are cleared there).
  const batch& last_batch() const noexcept { return batch_; }
  const scheduler_options& options() const noexcept { return opt_; }
  Queue& queue() noexcept { return queue_; }
  /// The KV manager: the engine reads token ids, block tables and slot mappings here.
  const KV& kv() const noexcept { return kv_; }
  /// Prompt tokens of r the KV manager would find cached now (0 for a request without token ids).
  std::int64_t cached_prefix_tokens(const request& r) const {
    if (r.prompt.empty()) return 0;
    return static_cast<std::int64_t>(kv_.cached_prefix_tokens(r.prompt, kv_request_options(r)));
  }

 private:
  static constexpr std::uint32_t fresh_capacity = 15;
  // Fields in the order a decode step touches them: the scheduling state and copies of the request's
  // hot fields first (two cache lines), then the fresh ids, then the request itself and the rarely
  // used buffers. bind() keeps the copies equal to the request.
  struct slot {
    std::int64_t target = 0;     // tokens to prefill before decoding: prompt (+ generated, after recompute)
    std::int64_t done = 0;       // tokens whose KV is computed
    std::int64_t generated = 0;  // output tokens produced while in this scheduler
    std::int64_t reported = -1;  // computed tokens last reported to the KV manager (-1: report at once)
    // Decode steps inside the request's private room need no KV call: the KV manager hears of their
    // ids (fresh, kept inline so the slots stay contiguous) at the next block boundary, when fresh is
    // full, or at a fork, preemption or finish ("sync"). Invariants: the KV manager holds `synced`
    // slots and the ids of the first synced tokens (plus pending when pending_in_kv); fresh holds the
    // ids of tokens [synced, done) when !pending_in_kv.
    std::int64_t synced = 0;  // tokens with a slot in the KV manager
    std::int64_t room = 0;    // tokens the request's private blocks hold (0: ask the KV manager)
    std::uint32_t fresh_count = 0;
    token_id pending = 0;  // the latest sampled token: the next decode step's input
    int preemptions = 0;
    bool pending_in_kv = false;  // the KV manager already holds pending (a slot was given to it)
    bool alive = true;
    bool with_ids = false;  // copy of !req.prompt.empty()
    client_id client{};     // copy of req.client
    request_id id{};        // copy of req.id
    double arrival_s = 0;   // copy of req.arrival_s
    std::array<token_id, fresh_capacity> fresh{};
    request req;
    std::vector<token_id> tokens;  // after a recompute preemption: every id to prefill again
  };
  static void bind(slot& s) noexcept {
    s.with_ids = !s.req.prompt.empty();
    s.client = s.req.client;
    s.id = s.req.id;
    s.arrival_s = s.req.arrival_s;
  }

  // One entry of schedule()'s undo log (detail::undo_log: applied newest first on failure).
  enum class undo_kind : std::uint8_t {
    slot_saved,         // running_[index] changed; saved holds it before
    sync_saved,         // running_[index]'s sync state changed; synced, room, pending_in_kv, fresh_count hold it
    running_pushed,     // a slot was appended to running_
    requeued_inserted,  // requeued_[index] was inserted
    requeued_erased,    // requeued_[index] was erased; saved holds it
    swapped_inserted,
    swapped_erased,
    front_erased,  // front_[index] was erased; saved->req holds it
    queue_popped,  // saved->req was popped from the queue (and charged by on_admit)
  };
  struct undo_entry {
    undo_kind kind;
    std::size_t index = 0;
    std::optional<slot> saved;
    std::int64_t synced = 0, room = 0;
    bool pending_in_kv = false;
    std::uint32_t fresh_count = 0;
  };

  static bool in_decode(const slot& s) noexcept { return s.done >= s.target; }
  // A decode step that needs no KV call: its slot is in the request's private room and its input id
  // fits the fresh buffer.
  static bool in_room(const slot& s, std::int64_t tokens) noexcept {
    return s.done >= s.target && tokens <= s.room && (s.pending_in_kv || s.fresh_count < fresh_capacity);
  }

  static bool with_tokens(const slot& s) noexcept { return s.with_ids; }

  // When complete() reports computed KV: after the first step of an admission or a swap-in (their
  // copied-in blocks wait for it) and when a prefill chunk fills a block (only full blocks are
  // published, so that is when it matters: prompts are what other requests share). Decoded blocks are
  // published when the request leaves the batch (finish, preemption, fork, migration): a decode step
  // then costs the KV manager nothing until its private block is full.
  bool needs_report(const slot& s, const batch_entry& e, std::int64_t done) const noexcept {
    if (done > s.synced) return false;
    if (s.reported < 0) return true;
    const auto bs = static_cast<std::int64_t>(kv_.block_size());
    return e.decode_tokens == 0 && done / bs != s.reported / bs;
  }
  std::int64_t round_up(std::int64_t tokens) const noexcept {
    const auto bs = static_cast<std::int64_t>(kv_.block_size());
    return (tokens + bs - 1) / bs * bs;
  }
  // The ids the KV manager has not heard of yet whose KV is computed (with_pending: the latest
  // sampled one too, when its step ran).
  void unsynced_ids(const slot& s, bool with_pending, std::vector<token_id>& out) const {
    out.assign(s.fresh.begin(), s.fresh.begin() + s.fresh_count);
    if (with_pending && !s.pending_in_kv) out.push_back(s.pending);
  }
  // Brings the KV manager up to date with s (its ids and computed KV), before a fork or a swap-out.
  void sync(slot& s) {
    if (with_tokens(s) && s.fresh_count > 0) {
      // Inside the private room: nothing to allocate.
      const auto r = kv_.append(s.req.id, std::span<const token_id>(s.fresh.data(), s.fresh_count));
      expects(r.fits, errc::precondition, "weft::sched::iteration_scheduler", "request ", s.req.id,
              ": the KV manager refused ", s.fresh_count, " tokens inside the blocks it already holds");
      s.synced += s.fresh_count;
      s.fresh_count = 0;
    } else if (!with_tokens(s) && s.synced < s.done) {
      (void)kv_.grow(s.req.id, static_cast<std::size_t>(s.done));
      s.synced = s.done;
    }
    if (s.reported != s.done) {
      kv_.computed(s.req.id, static_cast<std::size_t>(s.done));
      s.reported = s.done;
    }
  }

  void plan_iteration(double now) {
    budget_ = opt_.chunked_prefill ? opt_.token_budget : std::numeric_limits<std::int64_t>::max();
    head_ = find_head();
    // (1) Decodes first (Sarathi's stall-free rule): a running decode is never skipped. The head goes
    // first so its growth can never be blocked by others' growth in the same iteration.
    detail::reserve_more(batch_.entries, running_.size());
    detail::reserve_more(entry_slot_, running_.size());
    if (head_ < running_.size() && in_decode(running_[head_])) decode_or_continue(head_, true);
    for (std::size_t i = 0; i < running_.size(); ++i) {
      if (i == head_ || !running_[i].alive || !in_decode(running_[i])) continue;
      if (in_room(running_[i], running_[i].done + 1))
        add_entry(i, 0, 1);  // the common case: a decode inside the request's private room
      else
        decode_or_continue(i, true);
    }
    // (2) Swapped-out requests return before anything new is admitted.
    resume_swapped(now);
    // (3) Partial prefills continue: the head's first (it may preempt), then in admission order.
    if (head_ < running_.size() && running_[head_].alive && !in_decode(running_[head_]))
      decode_or_continue(head_, true);
    for (std::size_t i = 0; i < running_.size() && budget_ > 0; ++i)
      if (i != head_ && running_[i].alive && !in_decode(running_[i]) && !scheduled(i)) decode_or_continue(i, false);
    // (4) Admission: preempted requests first (rank order), then those a failed call took, then the queue.
    admit(now);
  }

  // Gives s slots up to `tokens` tokens: the next prefill chunk, or the decode step's input token —
  // free inside the request's private room; at a block boundary the KV manager gets the ids decoded
  // since the last sync with the new token, and allocates. A copy-on-write order joins the batch's
  // copies.
  bool ensure(std::size_t i, std::int64_t tokens) {
    if (in_room(running_[i], tokens)) return true;
    save_sync_state(i);
    slot& s = running_[i];
    weft::kv::append_result r;
    if (with_tokens(s) && in_decode(s) && !s.pending_in_kv) {
      unsynced_ids(s, true, ids_scratch_);
      r = kv_.append(s.req.id, ids_scratch_);
      if (r.fits) {
        s.pending_in_kv = true;
        s.fresh_count = 0;
      }
    } else {
      r = kv_.grow(s.req.id, static_cast<std::size_t>(tokens));
    }
    if (!r.fits) {
      undo_.pop();  // nothing changed
      return false;
    }
    s.synced = std::max(s.synced, tokens);
    s.room = round_up(tokens);  // grow and append allocate exactly the blocks the tokens need
    if (r.copy) batch_.copies.push_back({kv_copy::kind::copy_on_write, s.req.id, {}, *r.copy});
    return true;
  }

  static auto rank(const slot& s) noexcept { return std::tuple(-s.preemptions, s.arrival_s, s.id); }

  // The head, recomputed only when running_ changed since the last call (most iterations only decode).
  std::size_t find_head() noexcept {
    if (head_version_ == running_version_ && head_cache_ <= running_.size()) return head_cache_;
    std::size_t h = running_.size();
    for (std::size_t i = 0; i < running_.size(); ++i)
      if (h == running_.size() || rank(running_[i]) < rank(running_[h])) h = i;
    head_cache_ = h;
    head_version_ = running_version_;
    return h;
  }

  bool scheduled(std::size_t i) const noexcept {
    return std::find(entry_slot_.begin(), entry_slot_.end(), i) != entry_slot_.end();
  }

  // Schedules running_[i]: a decode token, or the next prefill chunk. Growth failures preempt victims
  // for the head and for decodes; a partial prefill that does not fit just waits.
  void decode_or_continue(std::size_t i, bool may_preempt) {
    std::int64_t tokens = 0;
    if (in_decode(running_[i])) {
      tokens = 1;
    } else {
      tokens = running_[i].target - running_[i].done;
      if (opt_.chunked_prefill) tokens = std::min(tokens, budget_);
      if (tokens <= 0) return;
    }
    while (!in_room(running_[i], running_[i].done + tokens) && !ensure(i, running_[i].done + tokens)) {
      const slot& s = running_[i];
      if (!in_decode(s) && opt_.chunked_prefill) {
        // Shrink the chunk to what fits before preempting anyone.
        const auto held = static_cast<std::int64_t>(kv_.blocks(s.req.id).size());
        const std::int64_t fit =
            (held + static_cast<std::int64_t>(kv_.free_blocks())) * static_cast<std::int64_t>(kv_.block_size()) -
            s.done;
        if (fit > 0 && fit < tokens && ensure(i, s.done + fit)) {
          tokens = fit;
          break;
        }
      }
      if (!may_preempt && i != head_) return;
      if (!preempt_victim(i)) {
        if (i == head_) {
          abort(i);
          return;
        }
        // i is not the head and no one else can go: i itself gives way.
        preempt(i);
        return;
      }
    }
    if (!running_[i].alive) return;
    const bool decode = in_decode(running_[i]);
    add_entry(i, decode ? 0 : tokens, decode ? 1 : 0);
  }

  void fill_candidates(std::size_t protect, bool lower_priority_than, int priority) {
    candidates_.clear();
    candidate_slot_.clear();
    for (std::size_t j = 0; j < running_.size(); ++j) {
      const slot& v = running_[j];
      if (j == protect || j == head_ || !v.alive) continue;
      if (lower_priority_than && v.req.priority >= priority) continue;
      candidates_.push_back({v.req.id, v.req.client, v.req.priority, v.req.arrival_s, v.preemptions,
                             static_cast<std::int64_t>(kv_.blocks(v.req.id).size()), v.generated});
      candidate_slot_.push_back(j);
    }
  }

  // Preempts one running request other than `protect` and the head. False when there is none.
  bool preempt_victim(std::size_t protect) {
    fill_candidates(protect, false, 0);
    if (candidates_.empty()) return false;
    const std::size_t pick = victim_.choose(std::span<const victim_candidate>(candidates_));
    expects(pick < candidates_.size(), errc::out_of_range, "weft::sched::iteration_scheduler::schedule",
            "victim policy returned index ", pick, " of ", candidates_.size(), " candidates");
    preempt(candidate_slot_[pick]);
    return true;
  }

  void save_slot(std::size_t j) {
    undo_.reserve(1);
    undo_.next().saved = running_[j];  // the only throw, before the entry counts
    undo_.push(undo_kind::slot_saved, j);
  }
  // What ensure() changes in a slot (its sync state): saved without copying the request; the fresh ids
  // go into the entry's reused buffer.
  void save_sync_state(std::size_t j) {
    undo_.reserve(1);
    const slot& s = running_[j];
    undo_entry& e = undo_.push(undo_kind::sync_saved, j);
    e.fresh_count = s.fresh_count;  // the ids stay in the slot's buffer: a sync only resets the count
    e.synced = s.synced;
    e.room = s.room;
    e.pending_in_kv = s.pending_in_kv;
  }

  // Preempts running_[j]: to the host tier when swapping and it decodes (it keeps its computed KV),
  // else by recompute.
  void preempt(std::size_t j, bool force_swap = false) {
    save_slot(j);
    slot& v = running_[j];
    drop_entry(j);
    ++v.preemptions;
    v.alive = false;
    ++dead_;
    if ((force_swap || opt_.preemption == preemption_mode::swap) && in_decode(v)) {
      sync(v);  // swap_out keeps exactly the computed tokens, so the KV manager must know them all
      if (auto plan = kv_.swap_out(v.req.id)) {
        v.synced = v.done;  // slots past the computed tokens are dropped
        v.room = 0;
        batch_.swapped_out.push_back(transfer(v.req.id, *plan));
        batch_.copies.push_back({kv_copy::kind::swap_out, v.req.id, std::move(*plan), {}});
        ++stats_.preempted_swap;
        insert_ranked(swapped_, v, undo_kind::swapped_inserted);
        return;
      }
    }
    recompute(v);
  }

  // Every id of a request the KV manager holds by id: what it knows, then what it has not heard of.
  void all_ids(const slot& v, std::vector<token_id>& out) const {
    const auto t = kv_.tokens(v.req.id);
    out.assign(t.begin(), t.end());
    out.insert(out.end(), v.fresh.begin(), v.fresh.begin() + v.fresh_count);
    if (v.generated > 0 && !v.pending_in_kv) out.push_back(v.pending);
  }

  void recompute(slot& v) {
    if (with_tokens(v)) {
      sync(v);  // publish what it computed: readmitted, it hits its own blocks instead of recomputing them
      all_ids(v, v.tokens);
      v.pending_in_kv = true;  // the last sampled token is among the ids to prefill again
      v.fresh_count = 0;
    }
    kv_.free(v.req.id);
    v.target = v.req.prompt_tokens + v.generated;
    v.done = 0;
    v.synced = 0;
    v.room = 0;
    v.reported = -1;
    batch_.preempted_recompute.push_back(v.req.id);
    ++stats_.preempted_recompute;
    insert_ranked(requeued_, v, undo_kind::requeued_inserted);
  }

  void abort(std::size_t j) {
    save_slot(j);
    slot& v = running_[j];
    drop_entry(j);
    kv_.free(v.req.id);
    deferred_finish_.emplace_back(v.req, v.generated);
    v.alive = false;
    ++dead_;
    batch_.aborted.push_back(v.req.id);
    ++stats_.aborted;
  }

  // Inserts a copy of s, kept in descending rank so the best is at the back (pop_back is O(1)).
  void insert_ranked(std::vector<slot>& list, const slot& s, undo_kind kind) {
    slot copy = s;  // every allocation first: once the undo entry is logged, the insert must happen
    copy.alive = true;
    detail::reserve_more(list, 1);
    undo_.reserve(1);
    auto pos = std::upper_bound(list.begin(), list.end(), copy,
                                [](const slot& a, const slot& b) { return rank(a) > rank(b); });
    undo_.push(kind, static_cast<std::size_t>(pos - list.begin()));
    list.insert(pos, std::move(copy));
  }

  void resume_swapped(double now) {
    while (!swapped_.empty() && running_.size() < opt_.max_running + dead_) {
      const slot& s = swapped_.back();
      if (opt_.inter_tenant_preemption) {
        // Do not bring back a request that a waiting higher-priority one would evict again at once
        // (that would thrash: FastSwitch's point is to switch contexts rarely and cheaply).
        const request* head = detail::peek_live(queue_, held_, now);
        if (head != nullptr && head->priority > s.req.priority) break;
      }
      auto plan = kv_.swap_in(s.req.id);
      if (!plan) break;
      detail::reserve_more(running_, 1);
      undo_.reserve(2);
      undo_.next().saved = s;  // the only throw, before the entry counts
      undo_.push(undo_kind::swapped_erased, swapped_.size() - 1);
      undo_.push(undo_kind::running_pushed, 0);
      batch_.swapped_in.push_back(transfer(s.req.id, *plan));
      batch_.copies.push_back({kv_copy::kind::swap_in, s.req.id, std::move(*plan), {}});
      ++stats_.swapped_in;
      running_.push_back(std::move(swapped_.back()));
      ++running_version_;
      swapped_.pop_back();
      const std::size_t i = running_.size() - 1;
      running_[i].reported = -1;  // its copied-in blocks are published once the step ran
      running_[i].room = 0;
      if (budget_ >= 1 && ensure(i, running_[i].done + 1)) add_entry(i, 0, 1);
    }
  }

  std::size_t live_running() const noexcept { return running_.size() - dead_; }

  enum class source : std::uint8_t { requeued, front, queue };

  void admit(double now) {
    while (live_running() < opt_.max_running && budget_ > 0) {
      source from = source::queue;
      const request* next = nullptr;
      if (!requeued_.empty()) {
        from = source::requeued;
        next = &requeued_.back().req;
      } else if (!front_.empty()) {
        from = source::front;
        next = &front_.front();
      } else {
        next = detail::peek_live(queue_, held_, now);
      }
      if (next == nullptr) return;
      slot s;
      if (from == source::requeued) {
        s = requeued_.back();
      } else {
        s.req = *next;
        bind(s);
        s.target = s.req.prompt_tokens;
        s.done = s.req.kv_ready_tokens;
        if (s.done == s.req.prompt_tokens) s.generated = 1;  // prefilled elsewhere: first token exists
      }
      const std::span<const token_id> ids = !s.tokens.empty() ? std::span<const token_id>(s.tokens) : s.req.prompt;
      const weft::kv::request_options options = kv_request_options(s.req);
      // Orca: the first prefill of an iteration may be any length; later ones stay within token_budget.
      if (!opt_.chunked_prefill && batch_.prefill_tokens > 0 && s.done < s.target) {
        const std::int64_t cached = ids.empty() ? 0 : static_cast<std::int64_t>(kv_.cached_prefix_tokens(ids, options));
        const std::int64_t prefill = s.target - std::max(s.done, std::min(cached, s.target - 1));
        if (batch_.prefill_tokens + prefill > opt_.token_budget) return;
      }
      // The whole prompt must fit (vLLM's admission rule; the KV manager keeps its watermark); the
      // cached prefix gets its slots now, the chunk below.
      auto alloc = allocate(s, ids, options);
      if (!alloc && opt_.inter_tenant_preemption) {
        while (!alloc && make_room_for(s)) alloc = allocate(s, ids, options);
      }
      if (!alloc) return;
      const auto cached = static_cast<std::int64_t>(alloc->cached_tokens);
      detail::count_admission(stats_, s.req, from == source::requeued, cached);
      if (s.done < s.target) s.done = std::max(s.done, std::min(cached, s.target - 1));
      if (alloc->host_to_device.blocks > 0)
        batch_.copies.push_back({kv_copy::kind::prefix_in, s.req.id, std::move(alloc->host_to_device), {}});
      s.reported = -1;
      s.synced = static_cast<std::int64_t>(alloc->slots);
      s.room = 0;
      s.tokens.clear();  // the KV manager holds them now
      s.alive = true;
      // Take it from its source, and into the running batch (undo-logged; room reserved first, so
      // nothing below throws until the queue's own hooks).
      detail::reserve_more(running_, 1);
      undo_.reserve(2);
      if (from == source::requeued) {
        undo_.next().saved = requeued_.back();  // the only throw, before the entry counts
        undo_.push(undo_kind::requeued_erased, requeued_.size() - 1);
        requeued_.pop_back();
      } else if (from == source::front) {
        undo_.next().saved.emplace().req = front_.front();  // the only throw, before the entry counts
        undo_.push(undo_kind::front_erased, 0);
        front_.erase(front_.begin());
      } else {
        undo_.next().saved.emplace();
        const request popped = queue_.pop(now);  // logged once it happened: a throwing pop changed nothing
        undo_.push(undo_kind::queue_popped, 0).saved->req = popped;
        queue_.on_admit(s.req);
      }
      undo_.push(undo_kind::running_pushed, 0);
      running_.push_back(std::move(s));
      ++running_version_;
      const std::size_t i = running_.size() - 1;
      const bool decode = in_decode(running_[i]);
      std::int64_t tokens = decode ? 1 : running_[i].target - running_[i].done;
      if (!decode && opt_.chunked_prefill) tokens = std::min(tokens, budget_);
      if (!ensure(i, running_[i].done + tokens)) {
        // Admitted, but its first step does not fit this iteration (a quota): it waits in the batch.
        continue;
      }
      add_entry(i, decode ? 0 : tokens, decode ? 1 : 0);
    }
  }

  std::optional<weft::kv::prompt_allocation> allocate(const slot& s, std::span<const token_id> ids,
                                                      const weft::kv::request_options& options) {
    const auto slots = static_cast<std::size_t>(s.done);  // kv-ready tokens hold KV already
    if (!ids.empty()) return kv_.allocate_prompt(s.req.id, ids, options, slots);
    return kv_.allocate_prompt(s.req.id, static_cast<std::size_t>(s.target), options, slots);
  }

  // FastSwitch: swaps out (or recomputes) one running request of lower priority than s. False when
  // none is left.
  bool make_room_for(const slot& s) {
    fill_candidates(running_.size(), true, s.req.priority);
    if (candidates_.empty()) return false;
    const std::size_t pick = lowest_priority_victim{}.choose(std::span<const victim_candidate>(candidates_));
    preempt(candidate_slot_[pick], true);
    return true;
  }

  [[gnu::always_inline]] inline void add_entry(std::size_t i, std::int64_t prefill, std::int64_t decode) {
    const slot& s = running_[i];
    if (prefill > 0 || s.reported < 0) ++may_report_;
    const bool emits = decode > 0 || s.done + prefill >= s.target;
    batch_.entries.push_back(
        {s.id, s.client, prefill, decode, s.done + prefill + decode, emits, decode > 0 ? s.pending : -1});
    entry_slot_.push_back(i);
    batch_.prefill_tokens += prefill;
    batch_.decode_tokens += decode;
    budget_ -= prefill + decode;
  }

  void drop_entry(std::size_t i) {
    for (std::size_t k = 0; k < entry_slot_.size(); ++k) {
      if (entry_slot_[k] != i) continue;
      const batch_entry& e = batch_.entries[k];
      batch_.prefill_tokens -= e.prefill_tokens;
      batch_.decode_tokens -= e.decode_tokens;
      budget_ += e.prefill_tokens + e.decode_tokens;
      batch_.entries.erase(batch_.entries.begin() + static_cast<std::ptrdiff_t>(k));
      entry_slot_.erase(entry_slot_.begin() + static_cast<std::ptrdiff_t>(k));
      return;
    }
  }

  kv_transfer transfer(request_id id, const weft::kv::swap_plan& plan) const noexcept {
    const auto blocks = static_cast<std::int64_t>(plan.blocks);
    return {id, blocks, static_cast<std::int64_t>(plan.units.size()),
            blocks * static_cast<std::int64_t>(kv_.bytes_per_block())};
  }

  // Undoes schedule()'s changes to the scheduler's own state, newest first.
  void roll_back() noexcept {
    undo_.roll_back([this](undo_entry& e) noexcept {
      switch (e.kind) {
        case undo_kind::slot_saved:
          running_[e.index] = std::move(*e.saved);
          ++running_version_;
          break;
        case undo_kind::sync_saved: {
          slot& s = running_[e.index];
          s.synced = e.synced;
          s.room = e.room;
          s.pending_in_kv = e.pending_in_kv;
          s.fresh_count = e.fresh_count;
          break;
        }
        case undo_kind::running_pushed:
          running_.pop_back();
          ++running_version_;
          break;
        case undo_kind::requeued_inserted:
          detail::undo_insert(requeued_, e.index);
          break;
        case undo_kind::requeued_erased:
          detail::undo_erase(requeued_, e.index, e.saved);
          break;
        case undo_kind::swapped_inserted:
          detail::undo_insert(swapped_, e.index);
          break;
        case undo_kind::swapped_erased:
          detail::undo_erase(swapped_, e.index, e.saved);
          break;
        case undo_kind::front_erased:
        case undo_kind::queue_popped:
          detail::undo_take(front_, e.saved->req);
          break;
      }
    });
    dead_ = 0;
    entry_slot_.clear();
  }

  // Removes dead slots, keeping admission order, and renumbers the batch's slot indices.
  void compact() {
    if (dead_ == 0) return;  // the common iteration: nobody left
    remap_.assign(running_.size(), 0);
    std::size_t out = 0;
    for (std::size_t i = 0; i < running_.size(); ++i) {
      remap_[i] = out;
      if (running_[i].alive) {
        if (out != i) running_[out] = std::move(running_[i]);
        ++out;
      }
    }
    running_.resize(out);
    ++running_version_;
    for (auto& k : entry_slot_) k = remap_[k];
    dead_ = 0;
  }

  bool fork_impl(request_id parent, request_id child, const token_id* first_token) {
    constexpr const char* where = "weft::sched::iteration_scheduler::fork";
    expects(batch_.entries.empty(), errc::precondition, where, "a batch is in flight; call complete() first");
    const auto it = std::find_if(running_.begin(), running_.end(), [&](const slot& s) { return s.req.id == parent; });
    expects(it != running_.end(), errc::not_found, where, "request ", parent,
            " is not running (waiting, swapped out, finished or unknown)");
    expects(child.valid(), errc::invalid_argument, where, "child id is invalid()");
    expects(!held_.contains(child), errc::already_exists, where, "request ", child,
            " is already in this scheduler; request ids must be unique");
    expects(in_decode(*it) && it->generated >= 1 && !it->pending_in_kv, errc::precondition, where, "request ", parent,
            it->generated == 0 ? " has not produced its first token yet" : " is not right after a step that emitted",
            "; fork it between the complete() of a step in which it emitted a token and the next schedule()");
    expects((first_token != nullptr) == with_tokens(*it), errc::invalid_argument, where, "request ", parent,
            with_tokens(*it) ? " carries token ids: fork it with the child's first token"
                             : " is counted by length: fork it without a token");
    if (live_running() >= opt_.max_running) return false;
    const std::size_t p = static_cast<std::size_t>(it - running_.begin());
    // Everything that can throw before the KV manager changes: the child's slot and room for it.
    slot c = running_[p];
    c.req.id = child;
    c.req.kv_ready_tokens = c.req.prompt_tokens;  // its prompt is shared: the queue charges output only
    bind(c);
    c.preemptions = 0;
    c.tokens.clear();
    slot parent_before = running_[p];
    detail::reserve_more(running_, 1);
    held_.share(parent, c.req);  // the child views the parent's prompt copy
    kv_.begin_transaction();
    bool ok = false;
    try {
      sync(running_[p]);  // the child starts from the parent's computed KV
      ok = kv_.fork(parent, child);
    } catch (...) {
      kv_.rollback_transaction();
      running_[p] = std::move(parent_before);
      held_.release(child);
      throw;
    }
    if (!ok) {
      kv_.rollback_transaction();
      running_[p] = std::move(parent_before);
      held_.release(child);
      return false;
    }
    kv_.commit_transaction();
    // Both now share the partial last block: their next token must go through the KV manager, which
    // copies it first.
    running_[p].room = 0;
    c.reported = running_[p].reported;
    c.synced = running_[p].synced;
    c.room = 0;
    c.fresh_count = 0;
    if (first_token != nullptr) c.pending = *first_token;
    c.pending_in_kv = false;
    queue_.on_admit(c.req);
    running_.push_back(std::move(c));
    ++running_version_;
    ++stats_.forked;
    return true;
  }

  scheduler_options opt_;
  Queue queue_;
  KV kv_;
  Victim victim_;
  batch batch_;
  batch previous_;  // the batch before batch_, kept to restore last_batch() when schedule() fails
  scheduler_stats stats_;
  // Invariants: running_ holds admitted requests in admission order (dead ones only inside schedule);
  // requeued_ and swapped_ are sorted by descending rank (best at the back); front_ holds requests a
  // failed schedule() took from the queue, oldest first; entry_slot_[k] is the running_ index of
  // batch_.entries[k]; held_ holds every request waiting, running or swapped out here.
  std::vector<slot> running_;
  std::vector<slot> requeued_;
  std::vector<slot> swapped_;
  std::vector<request> front_;
  detail::request_store held_;  // every request here, with its prompt ids and media (copied at submit)
  std::vector<std::size_t> entry_slot_;
  std::vector<std::size_t> remap_;
  std::vector<std::size_t> done_entries_;
  std::vector<char> is_done_;
  std::vector<std::size_t> token_at_;  // complete(): entry k's index in decoded (detail::no_token: none)
  std::vector<std::pair<request_id, std::size_t>> sorted_;
  std::vector<victim_candidate> candidates_;
  std::vector<std::size_t> candidate_slot_;
  detail::undo_log<undo_entry> undo_;
  // find_head()'s cache: running_version_ changes whenever running_ gains, loses or replaces a slot.
  std::uint64_t running_version_ = 0, head_version_ = ~std::uint64_t{0};
  std::size_t head_cache_ = 0;
  std::size_t may_report_ = 0;  // entries of the batch that may report computed KV at complete()
  std::vector<token_id> ids_scratch_;
  std::vector<std::pair<request, std::int64_t>> deferred_finish_;
  std::int64_t budget_ = 0;
  std::size_t head_ = 0;
  std::size_t dead_ = 0;
};

}  // namespace weft::sched

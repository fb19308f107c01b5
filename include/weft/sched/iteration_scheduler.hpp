// weft's one batch scheduler for LLM serving: iteration-level scheduling (Yu et al., "Orca", OSDI 2022,
// §4.2) whose Phase policy says what an iteration runs — stall-free chunked prefill (Sarathi-Serve,
// OSDI 2024, §4) and Dynamic SplitFuse, Orca's whole prompts, vLLM v0's prefill-first batches, layered
// prefill — over one running set, one set of waiting lines and one surface: preemption by recompute or
// swap (Kwon et al., SOSP 2023, §4.5), inter-tenant preemption (FastSwitch), forks, cancellation and
// migration (Llumnix) work under every phase. It drives weft::kv with the requests' real token ids:
// prompt ids at admission, each decoded token as it is fed back, computed-KV reports after every step.
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/detail/reserve_more.hpp>
#include <weft/core/error.hpp>
#include <weft/kv/kv_manager.hpp>
#include <weft/sched/batch.hpp>
#include <weft/sched/chunked_prefill.hpp>  // named settings, once defined here
#include <weft/sched/concepts.hpp>
#include <weft/sched/continuous_batching.hpp>  // named settings, once defined here
#include <weft/sched/detail/completion.hpp>
#include <weft/sched/detail/scheduler_slot.hpp>
#include <weft/sched/detail/submission.hpp>
#include <weft/sched/detail/undo_log.hpp>
#include <weft/sched/fcfs_queue.hpp>
#include <weft/sched/request.hpp>
#include <weft/sched/scheduler_options.hpp>
#include <weft/sched/scheduler_steps.hpp>
#include <weft/sched/stall_free_phase.hpp>
#include <weft/sched/victim_policy.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

namespace weft::sched {

/// The batch scheduler. Each schedule(now) runs the Phase's plan over the scheduler's steps
/// (scheduler_steps.hpp). The default, stall_free_phase: (1) every running decode gets one token, in admission
/// order; (2) swapped-out requests come back while KV allows; (3) partial prefills continue; (4)
/// preempted and then queued requests are admitted (the Queue decides the order among clients) while
/// the batch, the token budget and KV allow. prefill_first_phase (vLLM v0) and layered_phase (layered
/// prefill) are the other two; prefill_first_scheduler and layered_prefill_scheduler name them. When KV
/// cannot grow, a victim (Victim policy) is preempted, by recompute or swap (the phase's option); forks
/// made while the batch is full wait for room and join first.
///
/// The engine loop: submit() requests (with their prompt token ids, which the scheduler copies; or,
/// in simulation, counted_by_length); each iteration b = schedule(now); run b.copies in order, then the
/// forward pass of b.entries (prefill ids are kv().tokens(id), a decode step's input is entry.token; K
/// and V go to the slots of kv().blocks(id)); then complete(finished, decoded) with the {id, token}
/// each emitting entry sampled; cancel(id) between iterations for a client that went away.
/// complete() reports the computed KV to the KV manager, which only then lets other requests hit those
/// blocks. examples/mini_engine is this loop on a real model.
///
/// No livelock (stall-free phase): the running request ranked first by (preemptions, descending;
/// arrival; id) — the "head" — is never a victim and its growth may preempt any other, so it progresses
/// every iteration until it ends; preempted requests are readmitted before new ones, in the same rank
/// order, so a request preempted k times outranks one preempted fewer times. (A head that cannot fit in
/// the whole cache alone is aborted and reported in batch::aborted.) The vLLM v0 and layered phases
/// rank by arrival instead: the oldest request grows first and may preempt any later arrival.
///
/// Every public call either succeeds or throws weft::error leaving the scheduler and its KV manager as
/// they were: it validates first, runs its KV calls in one KV transaction (rolled back if any throws)
/// and keeps an undo log of its own changes. The Queue's hooks must not throw for requests it handed
/// out. One caveat: requests a failed schedule() had already taken from the Queue (and charged) wait
/// at the front of the line, and the next schedule() admits them first, as the failed call would have.
///
/// Not thread-safe (one engine loop owns it). schedule O(R + A log W) (R running, A admitted, W waiting,
/// plus the Queue's and KV manager's costs; O(R log R) more under the arrival-order phases); complete
/// O(E + F * E) with the decoded tokens in entry order (E batch entries, F finished).
template <fair_queue Queue = fcfs_queue, kv_manager KV = weft::kv::kv_manager<>,
          victim_policy Victim = latest_arrival_victim, scheduler_phase Phase = stall_free_phase>
class iteration_scheduler {
 public:
  using queue_type = Queue;
  using kv_type = KV;
  using phase_type = Phase;
  using options_type = typename Phase::options_type;
  /// What a Phase's plan() is given: the scheduler's steps (scheduler_steps.hpp).
  using steps = scheduler_steps<iteration_scheduler>;

  /// Throws weft::error(invalid_argument), from the Phase, for bad options.
  explicit iteration_scheduler(options_type o = {}, Queue q = Queue{}, KV kv = KV{}, Victim v = Victim{})
      : phase_(o), queue_(std::move(q)), kv_(std::move(kv)), victim_(std::move(v)) {
    if constexpr (binds_prefix_probe<Queue>)
      queue_.bind_prefix_probe([this](const request& r) { return cached_prefix_tokens(r); });
  }
  // The prefix probe captures this; moving would leave it dangling.
  iteration_scheduler(const iteration_scheduler&) = delete;
  iteration_scheduler& operator=(const iteration_scheduler&) = delete;

  /// Queues r. Returns false (and counts it in stats().rejected) when r can never run: its prompt and
  /// first output token need more blocks than the whole device cache, or the Phase refuses it (vLLM v0:
  /// a prompt longer than max_batched_tokens). Throws weft::error, changing nothing, for an invalid
  /// request (see validate()), one without ids that is not counted_by_length, an id already in this
  /// scheduler (waiting, running or swapped out), or kv_ready_tokens on a request with token ids. The
  /// scheduler copies the prompt ids and media, and has the KV manager hash the prompt's block keys
  /// now (when it can: precomputes_prompt_keys), so admission does not. O(prompt + queue push).
  ///
  /// Parallel samples (r.n > 1): the ids in r.sample_ids are held for the samples from now on, and
  /// must be new to this scheduler too. At r's first token the n - 1 samples start (see complete()),
  /// sharing r's prompt blocks; they are never dropped (a full batch makes them wait, a KV quota that
  /// refuses the sharing sends them to prefill again). Throws weft::error (capacity), changing
  /// nothing, when the prompt fits but the n samples' first tokens cannot (the prompt's blocks plus
  /// one block per sample exceed the device cache).
  bool submit(const request& r, double now) {
    constexpr const char* where = "weft::sched::iteration_scheduler::submit";
    validate(r, where);
    detail::check_new_request(held_, r, where, "waiting, running or swapped out");
    for (const request_id c : r.sample_ids)
      expects(!held_.contains(c), errc::already_exists, where, "request ", r.id, ": sample id ", c,
              " is already in this scheduler; request ids must be unique");
    const bool fits = detail::fits_device_cache(r, kv_, where);  // first: it may throw
    if (!fits || !phase_.accepts(r)) {
      ++stats_.rejected;
      return false;
    }
    if (r.n > 1) {
      // Each sample writes its first token into a block of its own (the shared partial one is copied).
      const std::uint64_t need =
          detail::blocks_to_first_token(r, kv_.block_size(), where) + static_cast<std::uint64_t>(r.n - 1);
      expects(need <= kv_.usable_blocks(), errc::capacity, where, "request ", r.id, ": n = ", r.n,
              " parallel samples need ", need, " blocks for their first tokens (the prompt's and one per sample) but ",
              "the device cache has ", kv_.usable_blocks(), "; lower n");
    }
    // The prompt's block keys are hashed here, once, off the per-iteration path: admission (and a
    // prefix-aware Queue's probes) reuse them.
    weft::kv::prompt_keys keys;
    if constexpr (precomputes_prompt_keys<KV>)
      if (!r.prompt.empty()) keys = kv_.compute_prompt_keys(r.prompt, kv_request_options(r));
    const request stored = held_.adopt(r, std::move(keys));
    try {
      held_.reserve_samples(r.id, where);
      queue_.push(stored, now);
    } catch (...) {
      held_.release_samples(r.id);
      held_.release(r.id);
      throw;
    }
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
    first_step_reports_ = 0;
    spawning_ = 0;
    deferred_finish_.clear();
    prefill_slots_.clear();
    scanned_ = 0;
    const scheduler_stats stats_before = stats_;
    dead_at_start_ = dead_;
    kv_.begin_transaction();
    try {
      budget_ = std::numeric_limits<std::int64_t>::max();  // a phase with a token budget sets it
      join_forks();
      head_ = find_head();
      steps plan(*this);
      phase_.plan(plan, now);
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
    for (request_id id : batch_.aborted) {
      held_.release_samples(id);  // a parent that never produced its first token: its samples never start
      held_.release(id);
    }
    maybe_compact();
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
    // Every finished id is checked before anything changes. Parallel samples that start now take their
    // first tokens out of `decoded` first.
    std::span<const decoded_token> tokens = decoded;
    std::span<const request_id> ended = finished;
    spawns_.clear();
    if (spawning_ > 0) take_sample_tokens(tokens, ended, where);
    const std::size_t found =
        detail::check_completion(batch_, ended, tokens, is_done_, token_at_, sorted_, where,
                                 " (a partial prefill, or a layer group short of the last layer)",
                                 [&](std::size_t k) { return !running_[entry_slot_[k]].req.prompt.empty(); });
    done_entries_.clear();
    for (std::size_t k = 0; k < n && done_entries_.size() < found; ++k)
      if (is_done_[k]) done_entries_.push_back(k);
    if (!spawns_.empty()) {  // room for the samples first: nothing may throw once the KV part is done
      weft::detail::reserve_more(running_, spawns_.size());
      weft::detail::reserve_more(forked_, spawns_.size());
      weft::detail::reserve_more(requeued_, spawns_.size());
    }
    // The KV manager first, in one transaction: computed KV (what publishes blocks) and frees.
    bool open = false;
    auto begin = [&] {
      if (!open) kv_.begin_transaction();
      open = true;
    };
    try {
      // Only prefill steps, first steps and finishing requests can need the KV manager (see
      // needs_report); schedule() counted the first two, so a batch of decodes skips this pass.
      // When no decode is a first step, a decode that does not end reports nothing (needs_report):
      // only prefill entries and finishing ones are visited (their slots are all this pass reads).
      const bool every_entry = !Phase::batches_decoded_ids || first_step_reports_ > 0;
      for (std::size_t k = 0; k < n && (may_report_ > 0 || !done_entries_.empty()); ++k) {
        const batch_entry& e = batch_.entries[k];
        if (!every_entry && e.prefill_tokens == 0 && !is_done_[k]) continue;
        const slot& s = running_[entry_slot_[k]];
        if (!with_tokens(s)) continue;  // counted requests publish nothing
        const std::int64_t done = done_after(s, e);
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
      // Samples share their parent's prompt blocks (before a parent that ends here frees them).
      for (sample_start& p : spawns_) {
        if (p.finished) continue;  // it ends at its first token: nothing to share
        const slot& s = running_[entry_slot_[p.entry]];
        begin();
        p.shared = kv_.fork(s.req.id, p.child);
        if (!p.shared && with_tokens(s)) {  // a quota refused: it prefills its prompt and token again
          p.ids.assign(s.req.prompt.begin(), s.req.prompt.end());
          p.ids.push_back(p.token);
        }
      }
      // The finished requests' KV goes last. A KV manager whose free() of a request it holds
      // cannot fail (weft's) frees outside the transaction: no undo record per released block.
      if constexpr (!frees_without_failing)
        for (std::size_t k : done_entries_) {
          begin();
          kv_.free(running_[entry_slot_[k]].req.id);
        }
    } catch (...) {
      if (open) kv_.rollback_transaction();
      throw;
    }
    if (open) kv_.commit_transaction();
    if constexpr (frees_without_failing)
      for (std::size_t k : done_entries_) kv_.free(running_[entry_slot_[k]].req.id);
    // Then the scheduler's own state; nothing below throws.
    for (std::size_t k = 0; k < n; ++k) {
      const batch_entry& e = batch_.entries[k];
      slot& s = running_[entry_slot_[k]];
      const std::int64_t done = done_after(s, e);
      if (!is_done_[k] && with_tokens(s) && needs_report(s, e, done)) s.reported = done;
      // The decode step computed the KV of its input token: its id joins the unsynced ones.
      if (e.decode_tokens > 0 && with_tokens(s) && !s.pending_in_kv) s.fresh[s.fresh_count++] = s.pending;
      s.done = done;
      // A layer group short of the last layer: the request's next entry runs its next group. (An entry
      // over every layer leaves group alone: it is 0 then, and the field is off the decode's cache lines.)
      if (!e.layers.all()) s.group = e.layers.reaches_output() ? 0 : s.group + 1;
      if (e.emits_token) {
        ++s.generated;
        queue_.on_tokens(s.req, 1);
        if (token_at_[k] != detail::no_token) s.pending = tokens[token_at_[k]].token;
        s.pending_in_kv = false;
      }
    }
    for (sample_start& p : spawns_) start_sample(p);
    for (std::size_t k : done_entries_) {
      slot& s = running_[entry_slot_[k]];
      queue_.on_finish(s.req, s.generated);
      held_.release(s.req.id);
      s.alive = false;
      s.tokens = {};
      ++dead_;
    }
    if (!done_entries_.empty()) ++running_version_;  // the head may have ended
    maybe_compact();
    batch_.entries.clear();
    entry_slot_.clear();
  }

  /// Starts `child` as a parallel sample of running request `parent` (vLLM's n > 1, beam search): it
  /// shares every KV block of the parent (copy-on-write: the first write into a shared partial block
  /// copies it, listed in batch::copies) and continues from the parent's state with first_token as its
  /// latest sampled token instead of the parent's. Call it between complete() and schedule(), for a
  /// parent that has emitted at least one token. A full batch (max_running) does not drop the sample:
  /// it waits, holding its share of the parent's KV, counted in waiting(), and joins the batch first
  /// when a running slot frees (when KV runs out meanwhile, it gives way first, preempted like any
  /// request, and comes back). Returns false, changing nothing, only when the KV manager refuses (a
  /// tenant quota). Throws weft::error, changing nothing,
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
      if (i == head_ || !running_[i].alive || !in_decode(running_[i])) continue;
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
    const auto is_live = [&](const slot& s) { return s.alive && s.req.id == id; };
    if (const auto it = std::find_if(running_.begin(), running_.end(), is_live); it != running_.end()) {
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
    } else if (const auto fk = std::find_if(forked_.begin(), forked_.end(), is); fk != forked_.end()) {
      detail::in_transaction(
          kv_, [&] { kv_.free(id); }, [] {});  // its share of the parent's blocks
      queue_.on_finish(fk->req, fk->generated);
      forked_.erase(fk);
    } else if (const auto rq = std::find_if(requeued_.begin(), requeued_.end(), is); rq != requeued_.end()) {
      queue_.on_finish(rq->req, rq->generated);  // its KV went at its preemption
      requeued_.erase(rq);
    } else if (const auto f = std::find_if(front_.begin(), front_.end(), [&](const request& q) { return q.id == id; });
               f != front_.end()) {
      queue_.on_finish(*f, 0);  // charged when a failed schedule() took it
      front_.erase(f);
    } else {
      held_.mark_cancelled(id);   // inside the Queue, which cannot remove it: dropped when it comes out
      held_.release_samples(id);  // its samples' ids are free at once
      ++stats_.cancelled;
      return true;
    }
    held_.release_samples(id);  // before its first token: its samples never start
    held_.release(id);
    ++stats_.cancelled;
    return true;
  }

  std::size_t waiting() const noexcept {
    return queue_.size() - held_.cancelled_in_queue() + front_.size() + requeued_.size() + swapped_.size() +
           forked_.size();
  }
  std::size_t running() const noexcept { return live_running(); }
  bool idle() const noexcept { return live_running() == 0 && waiting() == 0; }
  const scheduler_stats& stats() const noexcept { return stats_; }
  /// The batch of the last schedule() until complete() (its entries are cleared there).
  const batch& last_batch() const noexcept { return batch_; }
  /// The Phase's options (scheduler_options for the stall-free phase).
  const options_type& options() const noexcept { return phase_.options(); }
  /// True while a layered prefill has run some but not all of its layer groups (never for the phases
  /// that run every layer in every entry). O(R).
  bool prefill_in_flight() const noexcept {
    return std::any_of(running_.begin(), running_.end(), [](const slot& s) { return s.alive && s.group > 0; });
  }
  Queue& queue() noexcept { return queue_; }
  /// The KV manager: the engine reads token ids, block tables and slot mappings here.
  const KV& kv() const noexcept { return kv_; }
  /// Prompt tokens of r the KV manager would find cached now (0 for a request without token ids).
  std::int64_t cached_prefix_tokens(const request& r) const {
    if (r.prompt.empty()) return 0;
    if constexpr (precomputes_prompt_keys<KV>)
      if (const weft::kv::prompt_keys* k = held_.keys_for(r))
        return static_cast<std::int64_t>(kv_.cached_prefix_tokens(r.prompt, kv_request_options(r), *k));
    return static_cast<std::int64_t>(kv_.cached_prefix_tokens(r.prompt, kv_request_options(r)));
  }

 private:
  friend steps;

  // The running set's element and the undo log's entry (detail/scheduler_slot.hpp).
  using slot = detail::scheduler_slot;
  using undo_kind = detail::slot_undo;
  using undo_entry = detail::slot_undo_entry;
  static constexpr std::uint32_t fresh_capacity = detail::fresh_capacity;
  // The KV manager promises that free() of a request it holds never throws (see concepts.hpp).
  static constexpr bool frees_without_failing = [] {
    if constexpr (requires { KV::frees_without_failing; })
      return static_cast<bool>(KV::frees_without_failing);
    else
      return false;
  }();
  // complete(): the samples (request::n) that start at this batch's first tokens, and the decoded
  // tokens without theirs.
  struct sample_start {
    std::size_t entry;  // the parent's entry in the batch
    request_id child;
    token_id token;
    bool has_token;
    bool finished;              // listed in complete()'s finished: it ends at its first token
    bool shared;                // the KV manager forked the parent's blocks for it
    std::vector<token_id> ids;  // when it did not: the prompt and first token to prefill again
  };
  static void bind(slot& s) noexcept { detail::bind(s); }

  static bool in_decode(const slot& s) noexcept { return s.done >= s.target; }
  // A decode step that needs no KV call: its slot is in the request's private room and its input id
  // fits the fresh buffer. A phase that hands each decoded id to the KV manager at once (vLLM v0's
  // way) never skips the call for a request with ids.
  static bool in_room(const slot& s, std::int64_t tokens) noexcept {
    if constexpr (!Phase::batches_decoded_ids)
      if (s.with_ids) return false;
    return s.done >= s.target && tokens <= s.room && (s.pending_in_kv || s.fresh_count < fresh_capacity);
  }
  // The tokens whose KV is computed in every layer once entry e ran (a layer group short of the last
  // layer computes none of them in every layer yet).
  static std::int64_t done_after(const slot& s, const batch_entry& e) noexcept {
    return e.layers.reaches_output() ? s.done + e.prefill_tokens + e.decode_tokens : s.done;
  }

  static bool with_tokens(const slot& s) noexcept { return s.with_ids; }

  // When complete() reports computed KV: after the first step of an admission or a swap-in (their
  // copied-in blocks wait for it) and when a prefill chunk fills a block (only full blocks are
  // published, so that is when it matters: prompts are what other requests share). Decoded blocks are
  // published when the request leaves the batch (finish, preemption, fork, migration): a decode step
  // then costs the KV manager nothing until its private block is full.
  // A phase that hands decoded ids over at once reports after every prefill that reaches the last
  // layer and whenever a block fills, so decoded blocks are published as they fill (vLLM v0).
  bool needs_report(const slot& s, const batch_entry& e, std::int64_t done) const noexcept {
    const auto bs = static_cast<std::int64_t>(kv_.block_size());
    if constexpr (!Phase::batches_decoded_ids) {
      return e.layers.reaches_output() && (e.prefill_tokens > 0 || done % bs == 0);
    } else {
      if (done > s.synced) return false;
      if (s.reported < 0) return true;
      return e.decode_tokens == 0 && done / bs != s.reported / bs;
    }
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

  // ----- Decode staging (the stall-free and arrival-order phases) ------------------------------

  // The common decode — one token inside the request's private room, no KV call — is staged in a
  // small buffer and appended in bulk: one vector insert per 64 entries instead of two calls per entry
  // (inside a phase's plan the compiler will not inline the pushes). Anything else flushes the buffer
  // first, so the batch keeps the loop's order and a preemption finds every entry in place.
  class decode_stager {
   public:
    explicit decode_stager(iteration_scheduler& sched) : sched_(sched) {
      // The buffer lives with the scheduler (a local array's 64 default-built entries cost more per
      // iteration than the decodes of a small batch). Every staged entry is a one-token decode over
      // every layer that emits: the buffer holds those fields once, and add() writes the rest.
      if (sched_.staged_.size() < chunk) {
        sched_.staged_.assign(chunk, batch_entry{{}, {}, 0, 1, 0, true, -1, layer_range{}});
        sched_.staged_slot_.resize(chunk);
      }
      staged_ = sched_.staged_.data();
      staged_slot_ = sched_.staged_slot_.data();
    }
    // add_entry(i, 0, 1), staged: one decode token over every layer, which emits. The caller checked
    // in_room(s, s.done + 1).
    void add(std::size_t i) {
      const slot& s = sched_.running_[i];
      if (s.reported < 0) {
        ++sched_.may_report_;
        ++sched_.first_step_reports_;
      } else if (!Phase::batches_decoded_ids) {
        ++sched_.may_report_;
      }
      batch_entry& e = staged_[m_];
      e.id = s.id;
      e.client = s.client;
      e.context_tokens = s.done + 1;
      e.token = s.with_ids ? s.pending : -1;
      staged_slot_[m_] = i;
      if (++m_ == chunk) flush();
    }
    void flush() {
      sched_.batch_.entries.insert(sched_.batch_.entries.end(), staged_, staged_ + m_);
      sched_.entry_slot_.insert(sched_.entry_slot_.end(), staged_slot_, staged_slot_ + m_);
      sched_.batch_.decode_tokens += static_cast<std::int64_t>(m_);
      sched_.budget_ -= static_cast<std::int64_t>(m_);
      m_ = 0;
    }

   private:
    static constexpr std::size_t chunk = 64;
    iteration_scheduler& sched_;
    batch_entry* staged_ = nullptr;
    std::size_t* staged_slot_ = nullptr;
    std::size_t m_ = 0;
  };

  // ----- The steps of the stall-free phase -----------------------------------------------------

  // (1) Decodes first (Sarathi's stall-free rule): a running decode is never skipped. The head goes
  // first so its growth can never be blocked by others' growth in the same iteration.
  void decode_head_first() {
    weft::detail::reserve_more(batch_.entries, running_.size());
    weft::detail::reserve_more(entry_slot_, running_.size());
    if (head_ < running_.size() && in_decode(running_[head_])) decode_or_continue(head_, true, false);
    decode_stager staged(*this);
    std::size_t i = 0;
    for (; i < running_.size(); ++i) {
      const slot& s = running_[i];
      if (i == head_ || !s.alive) continue;
      if (!in_decode(s)) {
        prefill_slots_.push_back(i);  // continue_prefills() visits these instead of every slot again
        continue;
      }
      if (in_room(s, s.done + 1)) {
        staged.add(i);
      } else {
        staged.flush();
        decode_or_continue(i, true, false);
      }
    }
    staged.flush();
    scanned_ = i;
  }

  // (3) Partial prefills continue: the head's first (it may preempt), then in admission order.
  void continue_prefills(bool chunked) {
    if (head_ < running_.size() && running_[head_].alive && !in_decode(running_[head_]))
      decode_or_continue(head_, true, chunked);
    // Slots stay in place during schedule() and none goes back to prefill while alive, so the prefills
    // decode_head_first() saw (in index order) and the slots appended since are every candidate.
    const auto visit = [&](std::size_t i) {
      if (i != head_ && running_[i].alive && !in_decode(running_[i]) && !scheduled(i))
        decode_or_continue(i, false, chunked);
    };
    for (std::size_t k = 0; k < prefill_slots_.size() && budget_ > 0; ++k) visit(prefill_slots_[k]);
    for (std::size_t i = scanned_; i < running_.size() && budget_ > 0; ++i) visit(i);
  }

  // ----- The steps of the arrival-order phases (vLLM v0, layered prefill) ---------------------------

  // The live running requests in arrival order (ties: id), into order_. O(R) when the slots are in
  // that order already (admissions append in queue order; only a re-admitted preempted request lands
  // out of order), else O(R log R). This runs every iteration, so the common case skips the sort.
  void arrival_order() {
    const auto earlier = [&](std::size_t a, std::size_t b) {
      return std::tie(running_[a].arrival_s, running_[a].id) < std::tie(running_[b].arrival_s, running_[b].id);
    };
    order_.resize(running_.size());
    std::size_t n = 0;
    bool sorted = true;
    double last_arrival = 0;
    request_id last_id{};
    for (std::size_t i = 0; i < running_.size(); ++i) {
      const slot& s = running_[i];
      if (!s.alive) continue;
      sorted = sorted && (n == 0 || std::tie(last_arrival, last_id) < std::tie(s.arrival_s, s.id));
      last_arrival = s.arrival_s;
      last_id = s.id;
      order_[n++] = i;
    }
    order_.resize(n);
    if (!sorted) std::sort(order_.begin(), order_.end(), earlier);
  }

  // Every running request past its prefill decodes one token, oldest first; when KV cannot grow, the
  // Victim's choice among the later arrivals is preempted, or the request itself when none is left.
  void decode_in_arrival_order() {
    arrival_order();
    weft::detail::reserve_more(batch_.entries, running_.size());
    weft::detail::reserve_more(entry_slot_, running_.size());
    decode_stager staged(*this);
    for (std::size_t pos = 0; pos < order_.size(); ++pos) {
      const std::size_t i = order_[pos];
      if (!running_[i].alive || !in_decode(running_[i])) continue;
      if (in_room(running_[i], running_[i].done + 1)) {  // what ensure() would say, without a KV call
        staged.add(i);
        continue;
      }
      staged.flush();
      while (running_[i].alive && !ensure(i, running_[i].done + 1))
        if (!preempt_later(pos)) preempt(i);  // nobody later to evict: it gives way itself
      if (running_[i].alive) add_entry(i, 0, 1);
    }
    staged.flush();
  }

  // Preempts the Victim's choice among the live requests after order_[pos] (a waiting fork first).
  // False when there is none.
  bool preempt_later(std::size_t pos) {
    if (preempt_parked_fork()) return true;
    candidates_.clear();
    candidate_slot_.clear();
    for (std::size_t q = pos + 1; q < order_.size(); ++q) {
      const slot& v = running_[order_[q]];
      if (!v.alive) continue;
      candidates_.push_back({v.req.id, v.req.client, v.req.priority, v.req.arrival_s, v.preemptions,
                             static_cast<std::int64_t>(kv_.blocks(v.req.id).size()), v.generated});
      candidate_slot_.push_back(order_[q]);
    }
    if (candidates_.empty()) return false;
    const std::size_t pick = victim_.choose(std::span<const victim_candidate>(candidates_));
    expects(pick < candidates_.size(), errc::out_of_range, "weft::sched::iteration_scheduler::schedule",
            "victim policy returned index ", pick, " of ", candidates_.size(), " candidates");
    preempt(candidate_slot_[pick]);
    return true;
  }

  // Whole-prompt admission: preempted requests (rank order), then those a failed call took, then the
  // Queue's, while the running cap allows and gate(candidate) agrees; each gets slots for its whole
  // prompt at once; after(i) runs for each admitted running_[i]. A preempted request whose prompt and
  // output outgrew the whole cache while nothing else runs is aborted (the only way it ends unfinished).
  template <class Gate, class After>
  void admit_whole(double now, Gate&& gate, After&& after) {
    const std::size_t usable = kv_.usable_blocks();
    while (live_running() < phase_.max_running()) {
      source from = source::queue;
      const request* next = next_waiting(now, from);
      if (next == nullptr) return;
      slot s = from == source::requeued ? requeued_.back() : new_slot(*next);
      if (from == source::requeued && live_running() == 0 && std::cmp_greater(blocks_for(s.target + 1), usable)) {
        abort_preempted();
        continue;
      }
      const std::span<const token_id> ids = !s.tokens.empty() ? std::span<const token_id>(s.tokens) : s.req.prompt;
      const weft::kv::request_options options = kv_request_options(s.req);
      std::int64_t cached = 0;
      if (!ids.empty() && s.done < s.target)
        cached = static_cast<std::int64_t>(kv_cached_prefix(s.req.id, ids, options));
      const std::int64_t start = s.done < s.target ? std::max(s.done, std::min(cached, s.target - 1)) : s.done;
      if (!gate(admission_candidate{s.target, start, cached})) return;
      const auto slots = static_cast<std::size_t>(s.target);  // the whole prompt's KV now
      auto alloc = ids.empty() ? kv_.allocate_prompt(s.req.id, slots, options, slots)
                               : kv_allocate(s.req.id, ids, options, slots);
      if (!alloc) return;
      const auto hit = static_cast<std::int64_t>(alloc->cached_tokens);
      if (s.done < s.target) s.done = std::max(s.done, std::min(hit, s.target - 1));
      detail::count_admission(stats_, s.req, from == source::requeued, hit);
      if (alloc->host_to_device.blocks > 0)
        batch_.copies.push_back({kv_copy::kind::prefix_in, s.req.id, std::move(alloc->host_to_device), {}});
      s.reported = -1;
      s.synced = static_cast<std::int64_t>(alloc->slots);
      s.room = ids.empty() ? round_up(static_cast<std::int64_t>(alloc->slots)) : 0;
      s.tokens.clear();  // the KV manager holds them now
      s.alive = true;
      s.group = 0;
      take(from, std::move(s), now);
      after(running_.size() - 1);
    }
  }

  // Layered prefill: the prefills in flight run their next layer group, oldest first (their KV was
  // allocated at admission); range_of(groups, group) is the group's layer range.
  template <class RangeOf>
  void advance_layer_groups(RangeOf&& range_of) {
    arrival_order();
    for (const std::size_t i : order_) {
      const slot& s = running_[i];
      if (s.alive && s.group > 0) add_entry(i, s.target - s.done, 0, range_of(s.groups, s.group));
    }
  }

  // Layered prefill: the requests admitted from running_[first_new] on start their first layer group
  // (split into `groups`); a request whose KV arrived ready decodes now if it can grow (no preemption).
  template <class RangeOf>
  void start_layer_groups(std::size_t first_new, int groups, RangeOf&& range_of) {
    for (std::size_t i = first_new; i < running_.size(); ++i) {
      if (!running_[i].alive) continue;
      if (!in_decode(running_[i])) {
        running_[i].groups = groups;
        add_entry(i, running_[i].target - running_[i].done, 0, range_of(groups, 0));
      } else if (ensure(i, running_[i].done + 1)) {
        add_entry(i, 0, 1);
      }
    }
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

  // The order of the waiting lines and of the head: (preemptions descending, arrival, id), or for
  // phases that rank by arrival, (arrival, id) — preemptions then count 0 for everyone.
  static auto rank(const slot& s) noexcept {
    return std::tuple(Phase::ranks_by_preemptions ? -s.preemptions : 0, s.arrival_s, s.id);
  }

  // The head, recomputed only when running_ changed since the last call (most iterations only decode).
  std::size_t find_head() noexcept {
    if (head_version_ == running_version_ && head_cache_ <= running_.size()) return head_cache_;
    std::size_t h = running_.size();
    for (std::size_t i = 0; i < running_.size(); ++i)
      if (running_[i].alive && (h == running_.size() || rank(running_[i]) < rank(running_[h]))) h = i;
    head_cache_ = h;
    head_version_ = running_version_;
    return h;
  }

  bool scheduled(std::size_t i) const noexcept {
    return std::find(entry_slot_.begin(), entry_slot_.end(), i) != entry_slot_.end();
  }

  // Schedules running_[i]: a decode token, or the next prefill chunk. Growth failures preempt victims
  // for the head and for decodes; a partial prefill that does not fit just waits.
  void decode_or_continue(std::size_t i, bool may_preempt, bool chunked) {
    std::int64_t tokens = 0;
    if (in_decode(running_[i])) {
      tokens = 1;
    } else {
      tokens = running_[i].target - running_[i].done;
      if (chunked) tokens = std::min(tokens, budget_);
      if (tokens <= 0) return;
    }
    while (!in_room(running_[i], running_[i].done + tokens) && !ensure(i, running_[i].done + tokens)) {
      const slot& s = running_[i];
      if (!in_decode(s) && chunked) {
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

  // Preempts one running request other than `protect` and the head (a waiting fork first). False when
  // there is none.
  bool preempt_victim(std::size_t protect) {
    if (preempt_parked_fork()) return true;
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
    if ((force_swap || phase_.preemption() == preemption_mode::swap) && in_decode(v)) {
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
    v.group = 0;  // a layered prefill in flight loses its partial layers
    v.groups = 1;
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
    weft::detail::reserve_more(list, 1);
    undo_.reserve(1);
    auto pos = std::upper_bound(list.begin(), list.end(), copy,
                                [](const slot& a, const slot& b) { return rank(a) > rank(b); });
    undo_.push(kind, static_cast<std::size_t>(pos - list.begin()));
    list.insert(pos, std::move(copy));
  }

  // (2) Swapped-out requests return (best rank first) while the KV cache takes them back; each decodes
  // now if it can grow.
  void resume_swapped(double now, bool inter_tenant) {
    while (!swapped_.empty() && running_.size() < phase_.max_running() + dead_) {
      const slot& s = swapped_.back();
      if (inter_tenant) {
        // Do not bring back a request that a waiting higher-priority one would evict again at once
        // (that would thrash: FastSwitch's point is to switch contexts rarely and cheaply).
        const request* head = detail::peek_live(queue_, held_, now);
        if (head != nullptr && head->priority > s.req.priority) break;
      }
      auto plan = kv_.swap_in(s.req.id);
      if (!plan) break;
      weft::detail::reserve_more(running_, 1);
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

  // The next request to admit and its line: preempted ones first (best rank), then those a failed call
  // took from the Queue, then the Queue's choice (requests cancelled inside it are dropped on the way).
  const request* next_waiting(double now, source& from) {
    if (!requeued_.empty()) {
      from = source::requeued;
      return &requeued_.back().req;
    }
    if (!front_.empty()) {
      from = source::front;
      return &front_.front();
    }
    from = source::queue;
    return detail::peek_live(queue_, held_, now);
  }

  // The slot of a request starting for the first time: its prompt to prefill, from kv_ready_tokens on.
  static slot new_slot(const request& r) {
    slot s;
    s.req = r;
    bind(s);
    s.target = s.req.prompt_tokens;
    s.done = s.req.kv_ready_tokens;
    if (s.done == s.req.prompt_tokens) s.generated = 1;  // prefilled elsewhere: first token exists
    return s;
  }

  // Takes the admitted request s from its line and appends it to the running batch (undo-logged; room
  // reserved first, so nothing below throws until the Queue's own hooks).
  void take(source from, slot&& s, double now) {
    weft::detail::reserve_more(running_, 1);
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
  }

  // Ends the best-ranked preempted request, which can never fit again (whole-prompt admission).
  void abort_preempted() {
    deferred_finish_.emplace_back(requeued_.back().req, requeued_.back().generated);
    batch_.aborted.push_back(requeued_.back().req.id);
    undo_.reserve(1);
    undo_.next().saved = requeued_.back();  // the only throw, before the entry counts
    undo_.push(undo_kind::requeued_erased, requeued_.size() - 1);
    requeued_.pop_back();
    ++stats_.aborted;
  }

  std::int64_t blocks_for(std::int64_t tokens) const noexcept {
    const auto bs = static_cast<std::int64_t>(kv_.block_size());
    return tokens / bs + (tokens % bs != 0 ? 1 : 0);
  }

  // (4) Admission in chunks: preempted requests first (rank order), then those a failed call took,
  // then the queue, while the batch, the token budget and the KV cache allow. Without chunks (Orca)
  // the first prefill of an iteration may be any length and later ones stay within orca_budget.
  void admit_chunks(double now, bool chunked, std::int64_t orca_budget, bool inter_tenant) {
    while (live_running() < phase_.max_running() && budget_ > 0) {
      source from = source::queue;
      const request* next = next_waiting(now, from);
      if (next == nullptr) return;
      slot s = from == source::requeued ? requeued_.back() : new_slot(*next);
      const std::span<const token_id> ids = !s.tokens.empty() ? std::span<const token_id>(s.tokens) : s.req.prompt;
      const weft::kv::request_options options = kv_request_options(s.req);
      // Orca: the first prefill of an iteration may be any length; later ones stay within token_budget.
      if (!chunked && batch_.prefill_tokens > 0 && s.done < s.target) {
        const std::int64_t cached =
            ids.empty() ? 0 : static_cast<std::int64_t>(kv_cached_prefix(s.req.id, ids, options));
        const std::int64_t prefill = s.target - std::max(s.done, std::min(cached, s.target - 1));
        if (batch_.prefill_tokens + prefill > orca_budget) return;
      }
      // The whole prompt must fit (vLLM's admission rule; the KV manager keeps its watermark); the
      // cached prefix gets its slots now, the chunk below.
      auto alloc = allocate(s, ids, options);
      if (!alloc && inter_tenant) {
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
      take(from, std::move(s), now);
      const std::size_t i = running_.size() - 1;
      const bool decode = in_decode(running_[i]);
      std::int64_t tokens = decode ? 1 : running_[i].target - running_[i].done;
      if (!decode && chunked) tokens = std::min(tokens, budget_);
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
    if (!ids.empty()) return kv_allocate(s.req.id, ids, options, slots);
    return kv_.allocate_prompt(s.req.id, static_cast<std::size_t>(s.target), options, slots);
  }

  // The KV manager's prefix lookup and allocation for request id's ids (its prompt, or after a
  // recompute its prompt and decoded tokens), from the prompt keys submit() had it compute.
  std::size_t kv_cached_prefix(request_id id, std::span<const token_id> ids,
                               const weft::kv::request_options& options) const {
    if constexpr (precomputes_prompt_keys<KV>)
      if (const weft::kv::prompt_keys* k = held_.keys_of(id)) return kv_.cached_prefix_tokens(ids, options, *k);
    return kv_.cached_prefix_tokens(ids, options);
  }
  std::optional<weft::kv::prompt_allocation> kv_allocate(request_id id, std::span<const token_id> ids,
                                                         const weft::kv::request_options& options, std::size_t slots) {
    if constexpr (precomputes_prompt_keys<KV>)
      if (const weft::kv::prompt_keys* k = held_.keys_of(id)) return kv_.allocate_prompt(id, ids, options, slots, *k);
    return kv_.allocate_prompt(id, ids, options, slots);
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

  // Adds running_[i]'s step to the batch: `prefill` prompt tokens or one decode token, through
  // `layers` (default: all). Only a step that reaches the last layer may emit a token.
  [[gnu::always_inline]] inline void add_entry(std::size_t i, std::int64_t prefill, std::int64_t decode,
                                               layer_range layers = {}) {
    const slot& s = running_[i];
    if (!Phase::batches_decoded_ids || prefill > 0 || s.reported < 0) ++may_report_;
    if (prefill == 0 && s.reported < 0) ++first_step_reports_;
    const bool emits = (decode > 0 || s.done + prefill >= s.target) && layers.reaches_output();
    if (emits && s.generated == 0 && s.req.n > 1) ++spawning_;
    batch_.entries.push_back({s.id, s.client, prefill, decode, s.done + prefill + decode, emits,
                              decode > 0 && s.with_ids ? s.pending : -1, layers.all() ? layer_range{} : layers});
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
        case undo_kind::forked_erased:
          detail::undo_erase(forked_, e.index, e.saved);
          break;
        case undo_kind::front_erased:
        case undo_kind::queue_popped:
          detail::undo_take(front_, e.saved->req);
          break;
      }
    });
    dead_ = dead_at_start_;
    entry_slot_.clear();
  }

  // Slots of ended requests stay in running_ (alive == false, skipped by every step) until they are
  // an eighth of it: compacting shifts every later slot, so doing it each time a request ends would
  // move the whole running set each iteration (slots are ~340 bytes). Order and batches are the same.
  void maybe_compact() {
    if (dead_ * 8 > running_.size()) compact();
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

  // ----- Parallel samples (request::n) ---------------------------------------------------------

  // Finds this batch's entries that emit a parent's first token (its samples start now) into spawns_,
  // and takes the samples' first tokens out of `decoded` and the samples that end at once (a length
  // cap of one token) out of `finished`, checking them: one token per sample, and one for every
  // sample of a parent that carries token ids. O(E + (D + F) * S) (S samples starting).
  void take_sample_tokens(std::span<const decoded_token>& decoded, std::span<const request_id>& finished,
                          const char* where) {
    for (std::size_t k = 0; k < batch_.entries.size(); ++k) {
      const slot& s = running_[entry_slot_[k]];
      if (!batch_.entries[k].emits_token || s.generated != 0) continue;
      for (const request_id c : held_.reserved_samples(s.req.id)) spawns_.push_back({k, c, 0, false, false, false, {}});
    }
    if (spawns_.empty()) return;
    const auto sample = [&](request_id id) {
      return std::find_if(spawns_.begin(), spawns_.end(), [&](const sample_start& p) { return p.child == id; });
    };
    main_finished_.clear();
    for (const request_id id : finished) {
      const auto it = sample(id);
      if (it == spawns_.end()) {
        main_finished_.push_back(id);
        continue;
      }
      expects(!it->finished, errc::invalid_argument, where, "request ", id, " is listed as finished twice");
      it->finished = true;
    }
    finished = main_finished_;
    main_decoded_.clear();
    for (const decoded_token& t : decoded) {
      const auto it = sample(t.id);
      if (it == spawns_.end()) {
        main_decoded_.push_back(t);
        continue;
      }
      expects(!it->has_token, errc::invalid_argument, where, "sample ", t.id,
              " is given two first tokens; give one per sample");
      it->token = t.token;
      it->has_token = true;
    }
    for (const sample_start& p : spawns_) {
      const slot& s = running_[entry_slot_[p.entry]];
      expects(p.has_token || !with_tokens(s), errc::invalid_argument, where, "request ", s.req.id,
              " emitted its first token and has n = ", s.req.n, " samples: complete() needs the first token of sample ",
              p.child, " too ({", p.child, ", token} in decoded)");
    }
    decoded = main_decoded_;
  }

  // Starts sample p of its parent (whose state complete() has just advanced past its first token):
  // sharing the parent's blocks (the KV fork succeeded), into the batch or, when it is full, to wait
  // for room as fork() does; or, when the KV manager refused the sharing (a quota), as a request to
  // prefill its prompt and first token again. Allocates nothing (room was reserved).
  void start_sample(sample_start& p) {
    slot& parent = running_[entry_slot_[p.entry]];
    held_.samples_started(parent.req.id);
    slot c = parent;  // no allocation: a running slot's tokens are empty
    c.req.id = p.child;
    c.req.kv_ready_tokens = c.req.prompt_tokens;  // its prompt is shared: the queue charges output only
    c.req.n = 1;
    c.req.sample_ids = {};
    bind(c);
    c.alive = true;
    c.preemptions = 0;
    c.fresh_count = 0;
    c.room = 0;
    c.group = 0;
    if (p.has_token) c.pending = p.token;
    c.pending_in_kv = false;
    queue_.on_admit(c.req);
    ++stats_.forked;
    if (p.finished) {  // its first token was its last
      queue_.on_finish(c.req, c.generated);
      held_.release(c.req.id);
      return;
    }
    if (p.shared) {
      parent.room = 0;  // both share the partial last block: the next token goes through the KV manager
      if (live_running() < phase_.max_running()) {
        running_.push_back(std::move(c));
        ++running_version_;
      } else {
        forked_.push_back(std::move(c));
      }
      return;
    }
    c.tokens = std::move(p.ids);
    c.pending_in_kv = true;  // its first token is among the ids to prefill
    c.target = c.req.prompt_tokens + c.generated;
    c.done = 0;
    c.synced = 0;
    c.reported = -1;
    c.groups = 1;
    const auto pos = std::upper_bound(requeued_.begin(), requeued_.end(), c,
                                      [](const slot& a, const slot& b) { return rank(a) > rank(b); });
    requeued_.insert(pos, std::move(c));
  }

  bool fork_impl(request_id parent, request_id child, const token_id* first_token) {
    constexpr const char* where = "weft::sched::iteration_scheduler::fork";
    expects(batch_.entries.empty(), errc::precondition, where, "a batch is in flight; call complete() first");
    const auto it =
        std::find_if(running_.begin(), running_.end(), [&](const slot& s) { return s.alive && s.req.id == parent; });
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
    // A full batch does not drop the sample: it waits, holding its share of the parent's KV.
    const bool park = live_running() >= phase_.max_running();
    const std::size_t p = static_cast<std::size_t>(it - running_.begin());
    // Everything that can throw before the KV manager changes: the child's slot and room for it.
    slot c = running_[p];
    c.req.id = child;
    c.req.kv_ready_tokens = c.req.prompt_tokens;  // its prompt is shared: the queue charges output only
    bind(c);
    c.preemptions = 0;
    c.tokens.clear();
    slot parent_before = running_[p];
    weft::detail::reserve_more(park ? forked_ : running_, 1);
    held_.share(parent, c.req);  // the child views the parent's prompt copy
    c.req.n = 1;                 // a sample of its own, with no samples
    c.req.sample_ids = {};
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
    if (park) {
      forked_.push_back(std::move(c));
    } else {
      running_.push_back(std::move(c));
      ++running_version_;
    }
    ++stats_.forked;
    return true;
  }

  // Forked samples that waited for room join the running batch, oldest fork first, while the running
  // cap allows (undo-logged). They decode in this iteration's decode step.
  void join_forks() {
    while (!forked_.empty() && live_running() < phase_.max_running()) unpark(0);
  }
  // Moves forked_[k] to the back of running_ (undo-logged).
  void unpark(std::size_t k) {
    weft::detail::reserve_more(running_, 1);
    undo_.reserve(2);
    undo_.next().saved = forked_[k];  // the only throw, before the entry counts
    undo_.push(undo_kind::forked_erased, k);
    undo_.push(undo_kind::running_pushed, 0);
    running_.push_back(std::move(forked_[k]));
    forked_.erase(forked_.begin() + static_cast<std::ptrdiff_t>(k));
    ++running_version_;
  }
  // When KV runs out, a forked sample still waiting for room gives way first (it is not running; it
  // holds its share of blocks): preempted like any request, so it comes back and is never dropped.
  // False when none waits.
  bool preempt_parked_fork() {
    if (forked_.empty()) return false;
    unpark(forked_.size() - 1);
    preempt(running_.size() - 1);
    return true;
  }

  Phase phase_;
  Queue queue_;
  KV kv_;
  Victim victim_;
  batch batch_;
  batch previous_;  // the batch before batch_, kept to restore last_batch() when schedule() fails
  scheduler_stats stats_;
  // Invariants: running_ holds admitted requests in admission order (dead ones only inside schedule);
  // requeued_ and swapped_ are sorted by descending rank (best at the back); forked_ holds forks made
  // while the batch was full, oldest first, each holding KV and in decode; front_ holds requests a
  // failed schedule() took from the queue, oldest first; entry_slot_[k] is the running_ index of
  // batch_.entries[k]; held_ holds every request waiting, running, swapped out or forked here.
  std::vector<slot> running_;
  std::vector<slot> requeued_;
  std::vector<slot> swapped_;
  std::vector<slot> forked_;  // forked samples waiting for room in the batch, oldest first; they hold KV
  std::vector<request> front_;
  detail::request_store held_;  // every request here, with its prompt ids and media (copied at submit)
  std::vector<std::size_t> entry_slot_;
  std::vector<batch_entry> staged_;       // decode_stager's buffer (only its per-request fields change)
  std::vector<std::size_t> staged_slot_;  // its slots
  std::vector<std::size_t> remap_;
  std::vector<std::size_t> done_entries_;
  std::vector<char> is_done_;
  std::vector<std::size_t> token_at_;  // complete(): entry k's index in decoded (detail::no_token: none)
  std::vector<std::pair<request_id, std::size_t>> sorted_;
  std::vector<sample_start> spawns_;
  std::vector<decoded_token> main_decoded_;
  std::vector<request_id> main_finished_;
  std::vector<victim_candidate> candidates_;
  std::vector<std::size_t> candidate_slot_;
  // decode_head_first(): the live slots in prefill among running_[0, scanned_) it passed, in index order
  // (scanned_ is 0 when it did not run in this schedule()).
  std::vector<std::size_t> prefill_slots_;
  std::size_t scanned_ = 0;
  std::vector<std::size_t> order_;  // arrival-order steps: live running indices by (arrival, id)
  detail::undo_log<undo_entry> undo_;
  // find_head()'s cache: running_version_ changes whenever running_ gains, loses or replaces a slot.
  std::uint64_t running_version_ = 0, head_version_ = ~std::uint64_t{0};
  std::size_t head_cache_ = 0;
  std::size_t may_report_ = 0;  // entries of the batch that may report computed KV at complete()
  // Decode entries that are a request's first step (reported < 0: they report at complete()); drop_entry
  // leaves the count as it was (over-counting only makes complete() visit every entry).
  std::size_t first_step_reports_ = 0;
  std::size_t spawning_ = 0;  // entries that emit the first token of a request with n > 1 (over-counted at most)
  std::vector<token_id> ids_scratch_;
  std::vector<std::pair<request, std::int64_t>> deferred_finish_;
  std::int64_t budget_ = 0;
  std::size_t head_ = 0;
  // Slots in running_ whose request ended or left (alive == false; see maybe_compact).
  std::size_t dead_ = 0;
  std::size_t dead_at_start_ = 0;  // dead_ when schedule() began: what roll_back() restores
};

}  // namespace weft::sched

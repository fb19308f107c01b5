// Layered prefill (Lee, Kim, Park, Lee and Ahn, "From Tokens to Layers: Redefining Stall-Free Scheduling
// for LLM Serving with Layered Prefill", arXiv 2510.08055, 2025): the scheduling unit of a prefill is a
// group of contiguous layers instead of a chunk of tokens. A prompt runs whole through one layer group
// per iteration, so it is done after G iterations, while every running decode runs all layers in every
// iteration (stall-free, as Sarathi-Serve's chunked prefill); each layer's weights are read once per
// iteration for all the tokens that pass it, instead of once per chunk.
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
#include <weft/sched/request.hpp>
#include <weft/sched/scheduler_options.hpp>  // scheduler_stats
#include <weft/sched/victim_policy.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace weft::sched {

/// How a layered_prefill_scheduler splits prefills. A plain value; see layered_prefill() for the rules.
struct layered_prefill_options {
  int layers = 32;       ///< the model's transformer layers (L), >= 1
  int layer_groups = 4;  ///< groups a prefill is split into (G), in [1, L]: a prompt's first token after G iterations
  std::size_t max_running = 256;  ///< requests holding KV at once, >= 1
  /// Prompt tokens of the prefills that advance together (admitted in the same iteration); the first
  /// one is admitted whatever its length (a prompt is never split by tokens). >= 1.
  std::int64_t max_prefill_tokens = 8192;
  /// 0: every prefill takes layer_groups groups (the paper's fixed split). > 0: the group count of the
  /// prefills admitted together is chosen at admission as clamp(ceil(their prompt tokens /
  /// group_token_budget), 1, layers), so an iteration runs about group_token_budget prompt tokens' worth
  /// of whole-model work whatever the prompt's length (a short prompt runs whole in one iteration, a
  /// long one in many): weft's addition, to hold a TBT target on prompts of very different lengths as
  /// Sarathi-Serve's token budget does. layer_groups is then unused (but still validated).
  std::int64_t group_token_budget = 0;
};

/// Throws weft::error(invalid_argument) naming the field and the rule unless layers >= 1,
/// 1 <= layer_groups <= layers, max_running >= 1 and max_prefill_tokens >= 1. O(1). Thread-safe.
inline void validate(const layered_prefill_options& o, const char* where) {
  expects(o.layers >= 1, errc::invalid_argument, where, "layers must be >= 1, got ", o.layers);
  expects(o.layer_groups >= 1 && o.layer_groups <= o.layers, errc::invalid_argument, where,
          "layer_groups must be in [1, layers = ", o.layers, "], got ", o.layer_groups);
  expects(o.max_running >= 1, errc::invalid_argument, where, "max_running must be >= 1, got ", o.max_running);
  expects(o.max_prefill_tokens >= 1, errc::invalid_argument, where, "max_prefill_tokens must be >= 1, got ",
          o.max_prefill_tokens);
  expects(o.group_token_budget >= 0, errc::invalid_argument, where, "group_token_budget must be >= 0, got ",
          o.group_token_budget);
}

/// Layered-prefill settings in one call, validated (see validate()): every prefill in layer_groups
/// groups of the model's layers. O(1). Thread-safe.
inline layered_prefill_options layered_prefill(int layers, int layer_groups, std::int64_t max_prefill_tokens = 8192,
                                               std::size_t max_running = 256) {
  layered_prefill_options o{layers, layer_groups, max_running, max_prefill_tokens, 0};
  validate(o, "weft::sched::layered_prefill");
  return o;
}

/// Layered-prefill settings whose group count follows the prompt (see group_token_budget), validated.
/// O(1). Thread-safe.
inline layered_prefill_options layered_prefill_budget(int layers, std::int64_t group_token_budget,
                                                      std::int64_t max_prefill_tokens = 8192,
                                                      std::size_t max_running = 256) {
  layered_prefill_options o{layers, 1, max_running, max_prefill_tokens, group_token_budget};
  validate(o, "weft::sched::layered_prefill_budget");
  expects(group_token_budget >= 1, errc::invalid_argument, "weft::sched::layered_prefill_budget",
          "group_token_budget must be >= 1, got ", group_token_budget);
  return o;
}

/// Layer group g of `groups` over `layers` layers: [floor(g L / G), floor((g + 1) L / G)). The G groups
/// partition [0, L) in order, their sizes differ by at most one. Throws weft::error(invalid_argument)
/// unless 1 <= groups <= layers, and out_of_range unless 0 <= g < groups. O(1). Thread-safe.
inline layer_range layer_group(int layers, int groups, int g) {
  constexpr const char* where = "weft::sched::layer_group";
  expects(layers >= 1 && groups >= 1 && groups <= layers, errc::invalid_argument, where,
          "need 1 <= groups <= layers, got ", groups, " groups of ", layers, " layers");
  expects(g >= 0 && g < groups, errc::out_of_range, where, "group must be in [0, ", groups, "), got ", g);
  const auto bound = [&](int k) { return static_cast<int>(static_cast<std::int64_t>(k) * layers / groups); };
  return {bound(g), bound(g + 1), layers};
}
/// Layer group g of o's fixed split (o.layer_groups groups of o.layers). O(1). Thread-safe.
inline layer_range layer_group(const layered_prefill_options& o, int g) {
  return layer_group(o.layers, o.layer_groups, g);
}

/// Each schedule(now): (1) every running decode gets one token, oldest arrival first (when KV cannot
/// grow, the Victim's choice among later arrivals is preempted by recompute, or the request itself
/// when none is left); (2) the prefills in flight advance one layer group: each entry carries the
/// request's whole remaining prompt and `layers` = the group, and only the entry of the last group
/// emits the first token; (3) when no prefill is in flight, preempted then queued requests are admitted
/// while their prompts fit max_prefill_tokens (the first always), max_running and the KV cache —
/// every admitted prompt's KV is allocated whole at admission — and run their first group at once.
/// Requests whose KV arrives ready (kv_ready_tokens == prompt_tokens) join as decodes.
///
/// The engine loop is iteration_scheduler's (run batch::copies, then the entries, then complete()),
/// with one addition: an entry whose `layers` is not all() runs only those layers, and the engine keeps
/// that request's hidden states at `layers.end` until its next entry (examples/mini_engine does). The
/// KV manager hears of a prefill's computed KV only after its last group (complete() reports it then).
///
/// Every public call either succeeds or throws weft::error leaving the scheduler and its KV manager as
/// they were (one KV transaction per call plus an undo log of its own changes; a request a failed
/// schedule() had taken from the Queue then waits at the front of the line). The Queue's hooks must
/// not throw for requests it handed out. Satisfies batch_scheduler. Not thread-safe (one engine loop
/// owns it). schedule O(R + A log W) (R running, A admitted, W waiting, plus the Queue's and KV
/// manager's costs); complete O(E + F * E + R log R) (E batch entries, F finished).
template <fair_queue Queue = fcfs_queue, kv_manager KV = weft::kv::kv_manager<>,
          victim_policy Victim = latest_arrival_victim>
class layered_prefill_scheduler {
 public:
  using queue_type = Queue;
  using kv_type = KV;

  /// Throws weft::error(invalid_argument), as validate() does, for bad options.
  explicit layered_prefill_scheduler(layered_prefill_options o = {}, Queue q = Queue{}, KV kv = KV{},
                                     Victim v = Victim{})
      : opt_(o), queue_(std::move(q)), kv_(std::move(kv)), victim_(std::move(v)) {
    validate(o, "weft::sched::layered_prefill_scheduler");
  }
  layered_prefill_scheduler(const layered_prefill_scheduler&) = delete;
  layered_prefill_scheduler& operator=(const layered_prefill_scheduler&) = delete;

  /// Queues r. Returns false (counted in stats().rejected) when its prompt and first output token
  /// need more blocks than the whole device cache. Throws weft::error, changing nothing, for an invalid
  /// request (see validate()), an id already in this scheduler, or kv_ready_tokens on a request with
  /// token ids. O(queue push).
  bool submit(const request& r, double now) {
    constexpr const char* where = "weft::sched::layered_prefill_scheduler::submit";
    validate(r, where);
    detail::check_new_request(held_, r, where, "waiting or running");
    if (!detail::fits_device_cache(r, kv_, where)) {
      ++stats_.rejected;
      return false;
    }
    detail::enqueue_new(held_, queue_, r, now);
    return true;
  }

  /// The next iteration's batch: every running decode, and the layer group of each prefill in flight.
  /// Valid until the next schedule call. Throws weft::error (precondition) while the previous non-empty
  /// batch awaits complete(). On any throw, the scheduler and the KV manager are as before the call.
  const batch& schedule(double now) {
    constexpr const char* where = "weft::sched::layered_prefill_scheduler::schedule";
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
          decode_all();
          advance_prefills();
          if (!prefill_in_flight()) admit(now);
          for (const auto& [req, generated] : deferred_finish_) queue_.on_finish(req, generated);
        },
        [&]() noexcept {
          // A request taken from the Queue waits ahead of those a failed call had taken before.
          detail::roll_back(undo_, running_, dead_, requeued_, front_, true);
          stats_ = stats_before;
          std::swap(batch_, previous_);
          entry_slot_.clear();
        });
    for (const request_id id : batch_.aborted) held_.release(id);
    return batch_;
  }

  /// The last batch ran: decodes and finished prefills advance, each emitting entry's sampled token is
  /// kept as its request's next input, a prefill entry short of the last layer moves its request to its
  /// next group, the computed KV is reported to the KV manager and `finished` end. finished: requests
  /// that ended, each an entry of the last batch that emitted a token, listed once. decoded: the token
  /// each emitting entry sampled, as {request id, token}, in any order (required for a request with
  /// token ids that does not end here). Throws weft::error naming the request and the rule, changing
  /// nothing, for any other input. O(E + F * E + D log D + R log R) (D decoded tokens).
  void complete(std::span<const request_id> finished, std::span<const decoded_token> decoded = {}) {
    constexpr const char* where = "weft::sched::layered_prefill_scheduler::complete";
    const std::size_t n = batch_.entries.size();
    if (detail::nothing_in_flight(n, finished, decoded, where)) return;
    detail::check_completion(batch_, finished, decoded, is_done_, token_at_, sorted_, where,
                             " (a layer group short of the last layer)",
                             [&](std::size_t k) { return running_[entry_slot_[k]].with_ids; });
    // The KV manager first, in one transaction: computed KV (only once every layer has it), then frees.
    detail::report_and_free(kv_, batch_, entry_slot_, running_, is_done_,
                            [](const batch_entry& e) { return e.layers.reaches_output(); });
    // Then the scheduler's own state; nothing below throws.
    detail::apply_completion(batch_, entry_slot_, running_, dead_, is_done_, decoded, token_at_, queue_, held_,
                             [](const batch_entry& e, slot& s) noexcept {
                               if (e.layers.reaches_output()) {
                                 s.done += e.prefill_tokens + e.decode_tokens;
                                 s.group = 0;
                               } else {
                                 ++s.group;  // the next iteration runs its next layer group
                               }
                             });
  }

  /// Ends request `id` wherever it is (a client that went away): waiting in the Queue or a line,
  /// preempted, or running — mid-prefill or decoding. A running request's computed blocks are published
  /// (they stay cached for others) and its KV freed; the Queue hears on_finish for a request it had
  /// handed out. Returns false, changing nothing, when `id` is not here (finished, aborted, migrated,
  /// never submitted, or cancelled already). Call it between complete() and schedule(): throws
  /// weft::error (precondition) while a batch is in flight, and on a KV failure throws leaving
  /// everything as it was. An engine that holds a layered prefill's hidden states between groups drops them. Its id may
  /// be submitted again at once, unless it was still inside the Queue: that copy is dropped when the Queue hands it
  /// out, and the id is free from then. O(R + W lines + KV free).
  bool cancel(request_id id) {
    expects(batch_.entries.empty(), errc::precondition, "weft::sched::layered_prefill_scheduler::cancel",
            "a batch is in flight; call complete() first and cancel between iterations");
    return detail::cancel_request(id, running_, requeued_, front_, queue_, kv_, held_, stats_);
  }

  std::size_t waiting() const noexcept {
    return queue_.size() - held_.cancelled_in_queue() + front_.size() + requeued_.size();
  }
  std::size_t running() const noexcept { return running_.size() - dead_; }
  bool idle() const noexcept { return running() == 0 && waiting() == 0; }
  /// True while a prefill has run some but not all of its layer groups. O(R).
  bool prefill_in_flight() const noexcept {
    return std::any_of(running_.begin(), running_.end(), [](const slot& s) { return s.alive && s.group > 0; });
  }
  /// Counters as iteration_scheduler's (no swaps: preemption is by recompute).
  const scheduler_stats& stats() const noexcept { return stats_; }
  /// The batch of the last schedule() until complete() (its entries are cleared there).
  const batch& last_batch() const noexcept { return batch_; }
  const layered_prefill_options& options() const noexcept { return opt_; }
  Queue& queue() noexcept { return queue_; }
  /// The KV manager: the engine reads token ids, block tables and slot mappings here.
  const KV& kv() const noexcept { return kv_; }

 private:
  struct slot {
    request req;
    std::int64_t target = 0;     // tokens to prefill: prompt (+ generated, after a preemption)
    std::int64_t done = 0;       // tokens whose KV is computed in every layer
    std::int64_t generated = 0;  // output tokens produced here
    std::int64_t room = 0;       // counted requests: tokens their blocks hold (decodes inside need no KV call)
    int group = 0;               // prefilling: the next layer group to run (0: not started)
    int groups = 1;              // prefilling: the groups its prefill is split into
    token_id pending = 0;        // with ids: the latest sampled token, the next decode step's input
    bool with_ids = false;
    bool alive = true;
    std::vector<token_id> tokens;  // with ids, after a preemption: every id to prefill again
  };

  std::int64_t blocks_for(std::int64_t tokens) const noexcept { return detail::blocks_for(tokens, kv_.block_size()); }
  bool prefilling(const slot& s) const noexcept { return s.done < s.target; }

  // schedule()'s undo log (detail::undo_log: applied newest first on failure); callers reserve room
  // before pushing.
  using undo_kind = detail::recompute_undo;
  detail::recompute_undo_entry<slot>& push_undo(undo_kind kind, std::size_t index,
                                                std::optional<slot> saved = std::nullopt) {
    return detail::push_undo(undo_, kind, index, std::move(saved));
  }

  // (1) Every running decode, oldest first; a request that cannot grow preempts a later arrival.
  void decode_all() {
    for (std::size_t i = 0; i < running_.size(); ++i) {
      if (!running_[i].alive || prefilling(running_[i])) continue;
      while (running_[i].alive && !grow_one(i))
        if (!preempt_after(i)) preempt(i);  // nobody later to evict: it gives way itself
      if (running_[i].alive) add_entry(i, 0, 1, layer_range{});
    }
  }

  // (2) Prefills in flight run their next layer group (their KV was allocated at admission).
  void advance_prefills() {
    for (std::size_t i = 0; i < running_.size(); ++i) {
      const slot& s = running_[i];
      if (s.alive && s.group > 0) add_entry(i, s.target - s.done, 0, layer_group(opt_.layers, s.groups, s.group));
    }
  }

  // (3) No prefill in flight: admit prompts that fit, each starting its first layer group now.
  void admit(double now) {
    const std::size_t first_new = running_.size();
    std::int64_t prompt_tokens = 0;
    while (running() < opt_.max_running) {
      const auto [from, next] = detail::next_to_admit(requeued_, front_, queue_, held_, now);
      if (next == nullptr) break;
      slot s = from == detail::admit_source::requeued ? requeued_.front() : detail::fresh_slot<slot>(*next);
      if (from == detail::admit_source::requeued && running() == 0 &&
          std::cmp_greater(blocks_for(s.target + 1), kv_.usable_blocks())) {
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
      if (prompt_tokens > 0 && prompt_tokens + (s.target - start) > opt_.max_prefill_tokens) break;
      // The whole prompt's KV now: every layer group writes into it.
      const auto slots = static_cast<std::size_t>(s.target);
      auto alloc = ids.empty() ? kv_.allocate_prompt(s.req.id, slots, options, slots)
                               : kv_.allocate_prompt(s.req.id, ids, options, slots);
      if (!alloc) break;
      const auto hit = static_cast<std::int64_t>(alloc->cached_tokens);
      if (s.done < s.target) s.done = std::max(s.done, std::min(hit, s.target - 1));
      detail::count_admission(stats_, s.req, from == detail::admit_source::requeued, hit);
      if (alloc->host_to_device.blocks > 0)
        batch_.copies.push_back({kv_copy::kind::prefix_in, s.req.id, std::move(alloc->host_to_device), {}});
      const auto bs = static_cast<std::int64_t>(kv_.block_size());
      s.room = ids.empty() ? static_cast<std::int64_t>(alloc->slots + static_cast<std::size_t>(bs) - 1) / bs * bs : 0;
      s.tokens.clear();  // the KV manager holds them now
      s.alive = true;
      s.group = 0;
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
      push_undo(undo_kind::running_inserted, running_.size());
      running_.push_back(std::move(s));
      const slot& added = running_.back();
      if (prefilling(added)) prompt_tokens += added.target - added.done;
    }
    // The admitted prompts' split: fixed, or from their tokens (group_token_budget).
    int groups = opt_.layer_groups;
    if (opt_.group_token_budget > 0)
      groups = static_cast<int>(std::clamp<std::int64_t>(
          prompt_tokens / opt_.group_token_budget + (prompt_tokens % opt_.group_token_budget != 0 ? 1 : 0), 1,
          opt_.layers));
    for (std::size_t i = first_new; i < running_.size(); ++i) {
      if (!running_[i].alive) continue;
      if (prefilling(running_[i])) {
        running_[i].groups = groups;
        add_entry(i, running_[i].target - running_[i].done, 0, layer_group(opt_.layers, groups, 0));
      } else if (grow_one(i)) {
        add_entry(i, 0, 1, layer_range{});  // KV arrived ready: it decodes now if it can grow (no preemption)
      }
    }
  }

  // A slot for running_[i]'s next decode input (with ids: the token itself goes to the KV manager).
  bool grow_one(std::size_t i) { return detail::grow_one(running_, i, kv_, undo_, batch_); }

  // Preempts the Victim's choice among running requests after position i. False when there is none.
  bool preempt_after(std::size_t i) {
    const std::optional<std::size_t> victim = detail::victim_after(
        running_, i, kv_, victim_, candidates_, candidate_slot_, "weft::sched::layered_prefill_scheduler::schedule");
    if (!victim) return false;
    preempt(*victim);
    return true;
  }

  // Preempts running_[j] by recompute (a prefill in flight loses its partial layers): its computed
  // blocks are published, its KV freed, and it waits at the front of the line, oldest first.
  void preempt(std::size_t j) {
    detail::preempt_by_recompute(
        running_, j, dead_, requeued_, kv_, undo_, batch_, stats_,
        [](slot& back) {
          back.group = 0;
          back.groups = 1;
        },
        [&] { drop_entry(j); });
  }

  void add_entry(std::size_t i, std::int64_t prefill, std::int64_t decode, layer_range layers) {
    const slot& s = running_[i];
    const bool last = layers.reaches_output();
    batch_entry e{s.req.id,
                  s.req.client,
                  prefill,
                  decode,
                  s.done + prefill + decode,
                  last,
                  decode > 0 && s.with_ids ? s.pending : -1};
    e.layers = layers.all() ? layer_range{} : layers;
    batch_.entries.push_back(e);
    entry_slot_.push_back(i);
    batch_.prefill_tokens += prefill;
    batch_.decode_tokens += decode;
  }

  // Removes running_[i]'s entry from the batch, if it has one (a request preempted after its entry).
  void drop_entry(std::size_t i) noexcept {
    for (std::size_t k = 0; k < entry_slot_.size(); ++k) {
      if (entry_slot_[k] != i) continue;
      batch_.prefill_tokens -= batch_.entries[k].prefill_tokens;
      batch_.decode_tokens -= batch_.entries[k].decode_tokens;
      batch_.entries.erase(batch_.entries.begin() + static_cast<std::ptrdiff_t>(k));
      entry_slot_.erase(entry_slot_.begin() + static_cast<std::ptrdiff_t>(k));
      return;
    }
  }

  // Removes dead slots, keeping order. Only between batches (no entry refers to a slot).
  void compact() noexcept { detail::compact(running_, dead_); }

  layered_prefill_options opt_;
  Queue queue_;
  KV kv_;
  Victim victim_;
  batch batch_;
  batch previous_;  // the batch before batch_, kept to restore last_batch() when schedule() fails
  scheduler_stats stats_;
  // Invariants: running_ holds admitted requests in arrival order between calls (during schedule(),
  // admitted ones are appended and dead_ of them may be preempted); every running request with
  // group > 0 is a prefill in flight, and all of them started together (admission waits until none
  // is left); requeued_ is sorted oldest first; front_ holds requests a failed schedule() took from the
  // queue, oldest first; entry_slot_[k] is the running_ index of batch_.entries[k]; held_ holds the id
  // of every request waiting or running here.
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
  std::vector<std::pair<request, std::int64_t>> deferred_finish_;
  detail::recompute_undo_log<slot> undo_;  // schedule()'s changes to the above, undone when it throws
  std::size_t dead_ = 0;
};

}  // namespace weft::sched

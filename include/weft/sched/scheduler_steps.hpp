// The steps a phase policy composes into an iteration of weft's one batch scheduler
// (iteration_scheduler): stall-free decoding, chunked and whole-prompt admission, arrival-order
// decoding with preemption of later arrivals, swapped-out requests' return, layer groups. A phase's
// plan() receives them (scheduler_phase in concepts.hpp; stall_free_phase.hpp, prefill_first_scheduler.hpp
// and layered_prefill.hpp are the three weft ships).
#pragma once

#include <weft/sched/batch.hpp>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace weft::sched {

/// A request whole-prompt admission considers: its prefill target, where its prefill would start
/// (after the cached prefix) and the cached prefix tokens the KV manager holds for it.
struct admission_candidate {
  std::int64_t target = 0;
  std::int64_t start = 0;
  std::int64_t cached = 0;
};

/// What a Phase's plan() is made of: the scheduler's steps, each keeping every invariant (the undo
/// log, the KV transaction, the running cap, preemption by the Victim in the phase's mode). A plan
/// calls them in its phase order (see stall_free_phase, prefill_first_phase, layered_phase and, for a
/// user-written phase, tests/sched/archetype_test.cpp). Valid only inside plan(). Not thread-safe.
template <class Core>
class scheduler_steps {
 public:
  using candidate = admission_candidate;

  /// Requests holding device KV now. O(1).
  std::size_t live() const noexcept { return s_.live_running(); }
  /// The batch built so far (its prefill_tokens, its entries). O(1).
  const batch& current() const noexcept { return s_.batch_; }
  const typename Core::kv_type& kv() const noexcept { return s_.kv_; }
  /// Requests preempted by recompute and waiting to run again / swapped out to the host tier. O(1).
  bool has_preempted() const noexcept { return !s_.requeued_.empty(); }
  bool has_swapped() const noexcept { return !s_.swapped_.empty(); }
  /// True while a layered prefill has run some but not all of its groups. O(R).
  bool prefill_in_flight() const noexcept { return s_.prefill_in_flight(); }
  /// Slots of the running set (admissions append: the index of the next admitted one). O(1).
  std::size_t running_slots() const noexcept { return s_.running_.size(); }

  /// Tokens this iteration may still compute (default: no limit). O(1).
  void set_token_budget(std::int64_t tokens) noexcept { s_.budget_ = tokens; }
  /// Stall-free: every running decode gets its token, the head first, then in admission order; a
  /// decode that cannot grow preempts any request but the head (the head aborts if alone). O(R).
  void decode_head_first() { s_.decode_head_first(); }
  /// Swapped-out requests come back, best rank first, while the cache takes them (each decodes now
  /// if it can grow); with inter_tenant, not while a waiting request of higher priority would evict
  /// it again. O(resumed).
  void resume_swapped(double now, bool inter_tenant) { s_.resume_swapped(now, inter_tenant); }
  /// Stall-free: partial prefills continue, the head's first; in chunks of the budget if chunked.
  void continue_prefills(bool chunked) { s_.continue_prefills(chunked); }
  /// Stall-free admission: preempted, then queued requests, in chunks of the budget if chunked
  /// (else whole, within orca_budget after an iteration's first prefill), while the cap, the budget
  /// and the KV cache allow; with inter_tenant, by swapping out lower-priority requests.
  void admit_chunks(double now, bool chunked, std::int64_t orca_budget, bool inter_tenant) {
    s_.admit_chunks(now, chunked, orca_budget, inter_tenant);
  }
  /// Every running request past its prefill decodes one token, oldest arrival first; a request that
  /// cannot grow preempts the Victim's choice among later arrivals, or gives way itself. O(R log R).
  void decode_in_arrival_order() { s_.decode_in_arrival_order(); }
  /// Whole-prompt admission (preempted, then queued requests) while the cap allows, gate(candidate)
  /// returns true and the KV cache holds the whole prompt; after(i) runs for each admitted request
  /// (running index i); a preempted request that outgrew the whole cache alone is aborted.
  template <class Gate, class After>
  void admit_whole(double now, Gate&& gate, After&& after) {
    s_.admit_whole(now, std::forward<Gate>(gate), std::forward<After>(after));
  }
  /// The prompt tokens running_[i] still has to prefill (0 past its prefill). O(1).
  std::int64_t prefill_left(std::size_t i) const noexcept { return s_.running_[i].target - s_.running_[i].done; }
  /// Adds running_[i]'s whole remaining prefill to the batch, through every layer. O(1).
  void prefill_whole(std::size_t i) { s_.add_entry(i, prefill_left(i), 0); }
  /// Layered prefill: the prefills in flight run their next layer group (range_of(groups, group)).
  template <class RangeOf>
  void advance_layer_groups(RangeOf&& range_of) {
    s_.advance_layer_groups(std::forward<RangeOf>(range_of));
  }
  /// Layered prefill: requests admitted from running index first_new on start their first of
  /// `groups` layer groups; one whose KV arrived ready decodes if it can grow.
  template <class RangeOf>
  void start_layer_groups(std::size_t first_new, int groups, RangeOf&& range_of) {
    s_.start_layer_groups(first_new, groups, std::forward<RangeOf>(range_of));
  }

 private:
  friend Core;
  explicit scheduler_steps(Core& s) noexcept : s_(s) {}
  Core& s_;
};

}  // namespace weft::sched

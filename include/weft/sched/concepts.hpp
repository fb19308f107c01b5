// The policy concepts of weft::sched: fair_queue (which waiting request next, and how service is
// charged), kv_manager (whether a request's next tokens fit, and how it is preempted),
// victim_policy (whom to preempt) and batch_scheduler (what runs each iteration).
#pragma once

#include <weft/sched/batch.hpp>
#include <weft/sched/request.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace weft::sched {

/// Q orders waiting requests between clients. push() queues a request; peek(now) names the request
/// pop(now) would remove (nullptr when empty); the scheduler then reports service: on_admit when the
/// request starts (input charged), on_tokens for output tokens produced, on_finish at its end.
/// Fairness lives in the charging: a queue may use it (VTC, WFQ, DRR) or ignore it (FCFS).
template <class Q>
concept fair_queue = requires(Q& q, const Q& cq, const request& r, double now, std::int64_t n) {
  q.push(r, now);
  { q.peek(now) } -> std::same_as<const request*>;
  { q.pop(now) } -> std::same_as<request>;
  q.on_admit(r);
  q.on_tokens(r, n);
  q.on_finish(r, n);
  { cq.size() } -> std::convertible_to<std::size_t>;
  { cq.empty() } -> std::convertible_to<bool>;
};

/// K tracks KV-cache blocks per request. grow(r, tokens) makes r hold KV for `tokens` tokens,
/// returning false (and changing nothing) when the blocks are not there; release frees them;
/// swap_out/swap_in move a request's blocks to and from a host tier (nullopt: no room, nothing
/// moved); cached_prefix_tokens says how much of r's prompt is already resident (prefix cache).
template <class K>
concept kv_manager = requires(K& kv, const K& ckv, const request& r, request_id id, std::int64_t tokens) {
  { ckv.block_tokens() } -> std::convertible_to<std::int64_t>;
  { ckv.total_blocks() } -> std::convertible_to<std::int64_t>;
  { ckv.free_blocks() } -> std::convertible_to<std::int64_t>;
  { ckv.blocks_to_grow(r, tokens) } -> std::convertible_to<std::int64_t>;
  { kv.grow(r, tokens) } -> std::same_as<bool>;
  kv.release(id);
  { kv.swap_out(id) } -> std::same_as<std::optional<kv_transfer>>;
  { kv.swap_in(id) } -> std::same_as<std::optional<kv_transfer>>;
  { ckv.held_blocks(id) } -> std::convertible_to<std::int64_t>;
  { ckv.cached_prefix_tokens(r) } -> std::convertible_to<std::int64_t>;
};

/// V picks which running request to preempt: choose() returns an index into candidates, which is
/// never empty. The scheduler removes protected requests from the candidates first (see docs).
template <class V>
concept victim_policy = requires(const V& v, std::span<const victim_candidate> candidates) {
  { v.choose(candidates) } -> std::convertible_to<std::size_t>;
};

/// S decides each iteration's batch. submit() hands it a request (false: it can never run, e.g.
/// its prompt exceeds the whole KV cache); schedule(now) returns the next batch; complete(finished)
/// tells it the batch ran and which requests ended (EOS or length cap).
template <class S>
concept batch_scheduler = requires(S& s, const S& cs, const request& r, double now,
                                   std::span<const request_id> finished) {
  { s.submit(r, now) } -> std::same_as<bool>;
  { s.schedule(now) } -> std::same_as<const batch&>;
  s.complete(finished);
  { cs.waiting() } -> std::convertible_to<std::size_t>;
  { cs.running() } -> std::convertible_to<std::size_t>;
  { cs.idle() } -> std::convertible_to<bool>;
};

}  // namespace weft::sched

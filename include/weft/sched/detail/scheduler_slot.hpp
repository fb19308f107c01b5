// Internal: the element of weft's batch scheduler's running set and waiting lines (a request and its
// scheduling state: what is computed, what the KV manager has heard, the decoded ids it has not) and
// the entry of the undo log schedule() keeps of its changes. Plain values, shared by every phase.
#pragma once

#include <weft/sched/request.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace weft::sched::detail {

/// Decoded ids a slot keeps before the KV manager hears of them (see scheduler_slot::fresh).
inline constexpr std::uint32_t fresh_capacity = 15;
// Fields by the cache line a step touches (the running set is ~1,000 slots walked every iteration, so
// the lines each slot costs are the decision's cost). The slot is aligned to a cache line, so every
// slot splits the same way: line 0 holds all that schedule()'s decode pass reads (the scheduling
// state and copies of the request's hot fields); complete() also reads and writes line 1 (generated and
// the fresh ids: the 15th id alone spills into line 2); the request itself and the rarely used fields
// follow. bind() keeps the copies equal to the request. (Unaligned, the 24 bytes request-level n added
// to `request` shifted every slot's lines; aligned, callgrind counts 36 % fewer L1 read misses in the
// decision bench's steady state.)
struct alignas(64) scheduler_slot {
  // ---- line 0: the decode pass
  std::int64_t target = 0;     // tokens to prefill before decoding: prompt (+ generated, after recompute)
  std::int64_t done = 0;       // tokens whose KV is computed
  std::int64_t reported = -1;  // computed tokens last reported to the KV manager (-1: report at once)
  // Decode steps inside the request's private room need no KV call: the KV manager hears of their
  // ids (fresh, kept inline so the slots stay contiguous) at the next block boundary, when fresh is
  // full, or at a fork, preemption or finish ("sync"). Invariants: the KV manager holds `synced`
  // slots and the ids of the first synced tokens (plus pending when pending_in_kv); fresh holds the
  // ids of tokens [synced, done) when !pending_in_kv.
  std::int64_t synced = 0;  // tokens with a slot in the KV manager
  std::int64_t room = 0;    // tokens the request's private blocks hold (0: ask the KV manager)
  request_id id{};          // copy of req.id
  token_id pending = 0;     // the latest sampled token: the next decode step's input
  client_id client{};       // copy of req.client
  std::uint32_t fresh_count = 0;
  bool pending_in_kv = false;  // the KV manager already holds pending (a slot was given to it)
  bool alive = true;
  bool with_ids = false;  // copy of !req.prompt.empty()
  // ---- line 1: complete() also
  std::int64_t generated = 0;  // output tokens produced while in this scheduler
  std::array<token_id, fresh_capacity> fresh{};
  // ---- cold
  double arrival_s = 0;  // copy of req.arrival_s
  int preemptions = 0;
  int group = 0;   // layered prefill: the next layer group to run (0: not started)
  int groups = 1;  // layered prefill: the groups its prefill is split into
  request req;
  std::vector<token_id> tokens;  // after a recompute preemption: every id to prefill again
};
/// Keeps s's copies of its request's hot fields equal to the request. O(1).
inline void bind(scheduler_slot& s) noexcept {
  s.with_ids = !s.req.prompt.empty();
  s.client = s.req.client;
  s.id = s.req.id;
  s.arrival_s = s.req.arrival_s;
}

// What schedule() changed, one entry of its undo log (undo_log: applied newest first on failure).
enum class slot_undo : std::uint8_t {
  slot_saved,         // running_[index] changed; saved holds it before
  sync_saved,         // running_[index]'s sync state changed; synced, room, pending_in_kv, fresh_count hold it
  running_pushed,     // a slot was appended to running_
  requeued_inserted,  // requeued_[index] was inserted
  requeued_erased,    // requeued_[index] was erased; saved holds it
  swapped_inserted,
  swapped_erased,
  forked_erased,  // forked_[index] was erased (it joined the batch); saved holds it
  front_erased,   // front_[index] was erased; saved->req holds it
  queue_popped,   // saved->req was popped from the queue (and charged by on_admit)
};
struct slot_undo_entry {
  slot_undo kind;
  std::size_t index = 0;
  std::optional<scheduler_slot> saved;
  std::int64_t synced = 0, room = 0;
  bool pending_in_kv = false;
  std::uint32_t fresh_count = 0;
};

}  // namespace weft::sched::detail

// Internal: the running-set bookkeeping prefill_first_scheduler and layered_prefill_scheduler share.
// Both keep their running requests in arrival order, preempt only by recompute (Kwon et al., SOSP 2023,
// §4.5) and admit from the same three lines: preempted requests, then requests a failed schedule() took
// from the Queue, then the Queue. Slot is the scheduler's running-set element, with members req,
// target, done, generated, with_ids and alive.
#pragma once

#include <weft/core/error.hpp>
#include <weft/sched/batch.hpp>
#include <weft/sched/detail/completion.hpp>
#include <weft/sched/detail/reserve_more.hpp>
#include <weft/sched/detail/submission.hpp>
#include <weft/sched/detail/undo_log.hpp>
#include <weft/sched/request.hpp>
#include <weft/sched/scheduler_options.hpp>  // scheduler_stats
#include <weft/sched/victim_policy.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

namespace weft::sched::detail {

/// Where the next request to admit comes from.
enum class admit_source : std::uint8_t { requeued, front, queue };

/// The next request to admit and its line: preempted ones first, then those a failed call took from
/// the Queue, then the Queue's choice at `now` (requests cancelled inside the Queue are dropped on the
/// way; null request when every line is empty). O(Queue peek).
template <class Slot, class Queue>
std::pair<admit_source, const request*> next_to_admit(const std::vector<Slot>& requeued,
                                                      const std::vector<request>& front, Queue& queue,
                                                      request_store& held, double now) {
  if (!requeued.empty()) return {admit_source::requeued, &requeued.front().req};
  if (!front.empty()) return {admit_source::front, &front.front()};
  return {admit_source::queue, peek_live(queue, held, now)};
}

/// cancel(id) of a scheduler whose running requests are Slots (members req, done, generated, with_ids,
/// alive): a running request publishes its computed KV and frees it (one KV transaction: on a throw
/// nothing changed), a preempted one or one a failed schedule() took from the Queue leaves its line,
/// and each of them ends for the Queue (on_finish); a request still inside the Queue is marked, and
/// dropped when the Queue hands it out (never charged). False, changing nothing, when id is not here.
/// Call it with no batch in flight. O(R + W_lines + KV free).
template <class Slot, class Queue, class KV>
bool cancel_request(request_id id, std::vector<Slot>& running, std::vector<Slot>& requeued, std::vector<request>& front,
                    Queue& queue, KV& kv, request_store& held, scheduler_stats& stats) {
  if (!held.contains(id) || held.cancelled(id)) return false;
  const auto is = [&](const Slot& s) { return s.alive && s.req.id == id; };
  if (const auto it = std::find_if(running.begin(), running.end(), is); it != running.end()) {
    in_transaction(
        kv,
        [&] {
          if (it->with_ids) kv.computed(id, static_cast<std::size_t>(it->done));  // its blocks stay cached
          kv.free(id);
        },
        [] {});
    queue.on_finish(it->req, it->generated);
    running.erase(it);
  } else if (const auto r = std::find_if(requeued.begin(), requeued.end(), is); r != requeued.end()) {
    queue.on_finish(r->req, r->generated);  // its KV went at its preemption
    requeued.erase(r);
  } else if (const auto f = std::find_if(front.begin(), front.end(), [&](const request& q) { return q.id == id; });
             f != front.end()) {
    queue.on_finish(*f, 0);  // charged when a failed schedule() took it
    front.erase(f);
  } else {
    held.mark_cancelled(id);  // inside the Queue
    ++stats.cancelled;
    return true;
  }
  held.release(id);
  ++stats.cancelled;
  return true;
}

/// Arrival order (ties by id): the order of the running set and of the preempted line. O(1).
template <class Slot>
bool by_arrival(const Slot& a, const Slot& b) noexcept {
  return std::tie(a.req.arrival_s, a.req.id) < std::tie(b.req.arrival_s, b.req.id);
}

/// The slot of a newly admitted request: its prompt to prefill, from kv_ready_tokens on. O(1).
template <class Slot>
Slot fresh_slot(const request& r) {
  Slot s;
  s.req = r;
  s.target = r.prompt_tokens;
  s.done = r.kv_ready_tokens;
  s.with_ids = !r.prompt.empty();
  if (s.done == s.target) s.generated = 1;  // prefilled elsewhere: the first token exists
  return s;
}

/// ceil(tokens / block_size). O(1).
inline std::int64_t blocks_for(std::int64_t tokens, std::size_t block_size) noexcept {
  const auto bs = static_cast<std::int64_t>(block_size);
  return tokens / bs + (tokens % bs != 0 ? 1 : 0);
}

/// The Victim's choice among the live requests after position i of `running` (its index there), or
/// nothing when there is none. candidates and candidate_slot are scratch. Throws weft::error
/// (out_of_range, naming `where`) when the Victim returns an index past the candidates. O(R + Victim).
template <class Slot, class KV, class Victim>
std::optional<std::size_t> victim_after(const std::vector<Slot>& running, std::size_t i, const KV& kv, Victim& victim,
                                        std::vector<victim_candidate>& candidates,
                                        std::vector<std::size_t>& candidate_slot, const char* where) {
  candidates.clear();
  candidate_slot.clear();
  for (std::size_t j = i + 1; j < running.size(); ++j) {
    const Slot& v = running[j];
    if (!v.alive) continue;
    candidates.push_back({v.req.id, v.req.client, v.req.priority, v.req.arrival_s, 0,
                          static_cast<std::int64_t>(kv.blocks(v.req.id).size()), v.generated});
    candidate_slot.push_back(j);
  }
  if (candidates.empty()) return std::nullopt;
  const std::size_t pick = victim.choose(std::span<const victim_candidate>(candidates));
  expects(pick < candidates.size(), errc::out_of_range, where, "victim policy returned index ", pick, " of ",
          candidates.size(), " candidates");
  return candidate_slot[pick];
}

/// Removes the dead slots of `running`, keeping order, and zeroes `dead`. O(R) when any is dead.
template <class Slot>
void compact(std::vector<Slot>& running, std::size_t& dead) noexcept {
  if (dead == 0) return;
  std::erase_if(running, [](const Slot& s) { return !s.alive; });
  dead = 0;
}

/// The changes schedule() logs to undo on failure (detail::undo_log, applied newest first).
enum class recompute_undo : std::uint8_t {
  running_inserted,   // running[index] was inserted
  killed,             // running[index] was preempted (alive cleared)
  room_saved,         // running[index].room was `room`
  requeued_inserted,  // requeued[index] was inserted
  requeued_erased,    // requeued[index] was erased; saved holds it
  front_erased,       // front[0] was erased; saved->req holds it
  queue_popped,       // saved->req was popped from the queue (and charged by on_admit)
};
template <class Slot>
struct recompute_undo_entry {
  recompute_undo kind;
  std::size_t index = 0;
  std::int64_t room = 0;
  std::optional<Slot> saved;
};
template <class Slot>
using recompute_undo_log = undo_log<recompute_undo_entry<Slot>>;

/// Logs (kind, index, saved) (undo_log reuses entries, so every field is set); reserve room first.
/// O(1) plus moving `saved`.
template <class Slot>
recompute_undo_entry<Slot>& push_undo(recompute_undo_log<Slot>& log, recompute_undo kind, std::size_t index,
                                      std::optional<Slot> saved = std::nullopt) {
  recompute_undo_entry<Slot>& e = log.push(kind, index);
  e.room = 0;
  e.saved = std::move(saved);
  return e;
}

/// Undoes the logged changes to running (dead counts its killed slots), requeued and front, newest
/// first, and empties the log. Requests taken back from the Queue go to the front of `front`; with
/// popped_lead_front they also stay ahead of the front-line requests taken back in the same call
/// (layered_prefill_scheduler's order), else behind them (prefill_first_scheduler's). O(log size * R).
template <class Slot>
void roll_back(recompute_undo_log<Slot>& log, std::vector<Slot>& running, std::size_t& dead,
               std::vector<Slot>& requeued, std::vector<request>& front, bool popped_lead_front) noexcept {
  std::size_t popped_back = 0;  // requests of the Queue put back at the front so far
  log.roll_back([&](recompute_undo_entry<Slot>& e) noexcept {
    switch (e.kind) {
      case recompute_undo::running_inserted:
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(e.index));
        break;
      case recompute_undo::killed:
        running[e.index].alive = true;
        --dead;
        break;
      case recompute_undo::room_saved:
        running[e.index].room = e.room;
        break;
      case recompute_undo::requeued_inserted:
        undo_insert(requeued, e.index);
        break;
      case recompute_undo::requeued_erased:
        undo_erase(requeued, e.index, e.saved);
        break;
      case recompute_undo::front_erased:
        if (popped_lead_front)
          front.insert(front.begin() + static_cast<std::ptrdiff_t>(popped_back), std::move(e.saved->req));
        else
          undo_take(front, e.saved->req);
        break;
      case recompute_undo::queue_popped:
        undo_take(front, e.saved->req);
        ++popped_back;
        break;
    }
  });
}

/// Room in running[i]'s KV for its next decode input (with ids, the token itself goes to the KV
/// manager): false when the KV manager has none; a copy-on-write it asks for joins b.copies. A counted
/// request inside its blocks needs no KV call. Logs the room it changes. O(KV append or grow).
template <class Slot, class KV>
bool grow_one(std::vector<Slot>& running, std::size_t i, KV& kv, recompute_undo_log<Slot>& undo, batch& b) {
  Slot& s = running[i];
  if (!s.with_ids && s.done + 1 <= s.room) return true;  // counted, inside its blocks: no KV call
  undo.reserve(1);
  const auto r = s.with_ids ? kv.append(s.req.id, std::span<const token_id>(&s.pending, 1))
                            : kv.grow(s.req.id, static_cast<std::size_t>(s.done + 1));
  if (!r.fits) return false;
  if (!s.with_ids) {
    push_undo(undo, recompute_undo::room_saved, i).room = s.room;
    const auto bs = static_cast<std::int64_t>(kv.block_size());
    s.room = (s.done + 1 + bs - 1) / bs * bs;  // grow allocates exactly the blocks the tokens need
  }
  if (r.copy) b.copies.push_back({kv_copy::kind::copy_on_write, s.req.id, {}, *r.copy});
  return true;
}

/// Preempts running[j] by recompute: its computed blocks are published (readmitted, it hits them while
/// they stay cached), its KV freed, and it waits in `requeued` (arrival order) to prefill its prompt
/// and output again. restart(slot) resets the scheduler's own fields of the waiting copy; unlist()
/// runs just before running[j] is marked dead. Logged for undo. O(R + its tokens).
template <class Slot, class KV, class Restart, class Unlist>
void preempt_by_recompute(std::vector<Slot>& running, std::size_t j, std::size_t& dead, std::vector<Slot>& requeued,
                          KV& kv, recompute_undo_log<Slot>& undo, batch& b, scheduler_stats& stats, Restart&& restart,
                          Unlist&& unlist) {
  Slot back = running[j];  // every allocation first
  back.target = back.req.prompt_tokens + back.generated;
  back.done = 0;
  back.room = 0;
  restart(back);
  if (back.with_ids) {
    // The KV manager holds the ids of the computed tokens; the latest sampled one follows.
    const auto t = kv.tokens(back.req.id);
    back.tokens.assign(t.begin(), t.end());
    if (back.generated > 0) back.tokens.push_back(back.pending);
  }
  const auto pos = static_cast<std::size_t>(std::upper_bound(requeued.begin(), requeued.end(), back, by_arrival<Slot>) -
                                            requeued.begin());
  undo.reserve(2);
  reserve_more(requeued, 1);
  if (back.with_ids) kv.computed(back.req.id, static_cast<std::size_t>(running[j].done));
  kv.free(back.req.id);
  b.preempted_recompute.push_back(back.req.id);
  unlist();
  push_undo(undo, recompute_undo::killed, j);
  running[j].alive = false;
  ++dead;
  push_undo(undo, recompute_undo::requeued_inserted, pos);
  requeued.insert(requeued.begin() + static_cast<std::ptrdiff_t>(pos), std::move(back));
  ++stats.preempted_recompute;
}

/// complete()'s change to the scheduler's own state, once the KV manager has heard (nothing here
/// throws but the Queue's hooks, which must not): for every entry k of b, advance(entry, slot) moves its
/// request on; an emitting entry counts its token (Queue::on_tokens) and keeps its decoded token
/// (decoded[token_at[k]], when given) as the next input; a finished one (is_done[k]) ends
/// (Queue::on_finish, id and prompt copy released). Then the batch is emptied, dead slots removed and
/// arrival order restored. O(E + R log R) when the order changed, else O(E + R).
template <class Slot, class Queue, class Store, class Advance>
void apply_completion(batch& b, std::vector<std::size_t>& entry_slot, std::vector<Slot>& running, std::size_t& dead,
                      const std::vector<char>& is_done, std::span<const decoded_token> decoded,
                      const std::vector<std::size_t>& token_at, Queue& queue, Store& held, Advance&& advance) {
  for (std::size_t k = 0; k < b.entries.size(); ++k) {
    const batch_entry& e = b.entries[k];
    Slot& s = running[entry_slot[k]];
    advance(e, s);
    if (e.emits_token) {
      ++s.generated;
      queue.on_tokens(s.req, 1);
      if (token_at[k] != no_token) s.pending = decoded[token_at[k]].token;
    }
    if (is_done[k]) {
      queue.on_finish(s.req, s.generated);
      held.release(s.req.id);
      s.alive = false;
      ++dead;
    }
  }
  b.entries.clear();
  entry_slot.clear();
  compact(running, dead);
  // Ids are unique, so arrival order is a strict total order: any sort gives the one result.
  if (!std::is_sorted(running.begin(), running.end(), by_arrival<Slot>))
    std::sort(running.begin(), running.end(), by_arrival<Slot>);
}

/// complete()'s KV step, in one transaction opened only when needed: a request with token ids reports
/// its computed KV (what publishes full blocks) after a prefill, when a block fills and when it ends,
/// but only once its KV is in every layer (in_every_layer(entry); counted requests publish nothing);
/// then the finished requests' KV is freed. On a throw the KV manager is as before. O(E) KV calls.
template <class Slot, class KV, class InEveryLayer>
void report_and_free(KV& kv, const batch& b, const std::vector<std::size_t>& entry_slot,
                     const std::vector<Slot>& running, const std::vector<char>& is_done,
                     InEveryLayer&& in_every_layer) {
  const auto bs = static_cast<std::int64_t>(kv.block_size());
  const std::size_t n = b.entries.size();
  in_lazy_transaction(kv, [&](auto begin) {
    for (std::size_t k = 0; k < n; ++k) {
      const batch_entry& e = b.entries[k];
      const Slot& s = running[entry_slot[k]];
      if (!s.with_ids || !in_every_layer(e)) continue;
      const std::int64_t done = s.done + e.prefill_tokens + e.decode_tokens;
      if (!(is_done[k] || e.prefill_tokens > 0 || done % bs == 0)) continue;
      begin();
      kv.computed(s.req.id, static_cast<std::size_t>(done));
    }
    for (std::size_t k = 0; k < n; ++k) {
      if (!is_done[k]) continue;
      begin();
      kv.free(running[entry_slot[k]].req.id);
    }
  });
}

}  // namespace weft::sched::detail

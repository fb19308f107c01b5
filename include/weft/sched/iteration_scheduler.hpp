// Iteration-level batch scheduling for LLM serving. Continuous batching (Yu et al., "Orca", OSDI 2022,
// §4.2), chunked prefill with stall-free batching (Agrawal et al., "Sarathi-Serve", OSDI 2024, §4:
// running decodes first, then partial prefills, then new prefills, within a per-iteration token budget),
// preemption by recompute or swap (Kwon et al., SOSP 2023, §4.5) and inter-tenant preemption (FastSwitch).
#pragma once

#include <weft/sched/batch.hpp>
#include <weft/sched/block_kv_manager.hpp>
#include <weft/sched/concepts.hpp>
#include <weft/sched/fcfs_queue.hpp>
#include <weft/sched/request.hpp>
#include <weft/sched/victim_policy.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

namespace weft::sched {

struct scheduler_options {
  /// Tokens (prefill + decode) one iteration may compute. Chunked mode: the Sarathi budget (set it from
  /// a TBT target with sim::token_budget_for_tbt); it must be >= max_running so every running decode
  /// fits. Unchunked (Orca): a prompt is prefilled whole; the first prefill of an iteration may exceed it.
  std::int64_t token_budget = 2048;
  std::size_t max_running = 256;  ///< requests holding device KV at once (batch size cap); >= 1
  bool chunked_prefill = true;
  preemption_mode preemption = preemption_mode::recompute;
  double watermark = 0.01;  ///< share of device blocks kept free when admitting, in [0, 1)
  /// FastSwitch: a waiting request that does not fit may swap out running requests of strictly lower
  /// priority (needs a host tier; falls back to recompute when the host is full).
  bool inter_tenant_preemption = false;
};

/// Running-request counters, cumulative.
struct scheduler_stats {
  std::uint64_t admitted = 0;
  std::uint64_t preempted_recompute = 0;
  std::uint64_t preempted_swap = 0;
  std::uint64_t swapped_in = 0;
  std::uint64_t aborted = 0;
  std::uint64_t rejected = 0;
};

/// The batch scheduler. Each schedule(now): (1) every running decode gets one token, in admission order;
/// (2) swapped-out requests come back while KV allows; (3) partial prefills continue; (4) preempted and
/// then queued requests are admitted (the Queue decides the order among clients) while the batch, the
/// token budget and KV allow. When KV cannot grow, a victim (Victim policy) is preempted.
///
/// No livelock: the running request ranked first by (preemptions, descending; arrival; id) — the
/// "head" — is never a victim and its growth may preempt any other, so it progresses every iteration
/// until it ends; preempted requests are readmitted before new ones, in the same rank order, so a
/// request preempted k times outranks one preempted fewer times. (A head that cannot fit in the whole
/// cache alone is aborted and reported in batch::aborted.)
///
/// Not thread-safe (one engine loop owns it). schedule O(R + A log W) (R running, A admitted, W waiting,
/// plus the Queue's own costs); complete O(E + F * E) (E batch entries, F finished).
template <fair_queue Queue = fcfs_queue, kv_manager KV = block_kv_manager, victim_policy Victim = latest_arrival_victim>
class iteration_scheduler {
 public:
  using queue_type = Queue;
  using kv_type = KV;

  explicit iteration_scheduler(scheduler_options o = {}, Queue q = Queue{}, KV kv = KV{}, Victim v = Victim{})
      : opt_(o), queue_(std::move(q)), kv_(std::move(kv)), victim_(std::move(v)) {
    const char* where = "weft::sched::iteration_scheduler";
    expects(o.token_budget >= 1, errc::invalid_argument, where, "token_budget must be >= 1, got ", o.token_budget);
    expects(o.max_running >= 1, errc::invalid_argument, where, "max_running must be >= 1, got ", o.max_running);
    expects(!o.chunked_prefill || o.token_budget >= static_cast<std::int64_t>(o.max_running), errc::invalid_argument,
            where, "chunked prefill needs token_budget >= max_running so no running decode is starved; got budget ",
            o.token_budget, " and max_running ", o.max_running);
    expects(o.watermark >= 0.0 && o.watermark < 1.0, errc::invalid_argument, where, "watermark must be in [0, 1), got ",
            o.watermark);
    if constexpr (requires { queue_.bind_prefix_probe([](const request&) { return std::int64_t{0}; }); })
      queue_.bind_prefix_probe([this](const request& r) { return kv_.cached_prefix_tokens(r); });
  }
  // The prefix probe captures this; moving would leave it dangling.
  iteration_scheduler(const iteration_scheduler&) = delete;
  iteration_scheduler& operator=(const iteration_scheduler&) = delete;

  /// Queues r. Returns false (and counts it in stats().rejected) when r can never run: its prompt needs
  /// more blocks than the whole device cache. Throws weft::error for an invalid request.
  bool submit(const request& r, double now) {
    validate(r, "weft::sched::iteration_scheduler::submit");
    const std::int64_t blocks = (r.prompt_tokens + 1 + kv_.block_tokens() - 1) / kv_.block_tokens();
    if (blocks > kv_.total_blocks()) {
      ++stats_.rejected;
      return false;
    }
    queue_.push(r, now);
    return true;
  }

  /// The next iteration's batch (valid until the next schedule call). Empty when nothing can run.
  const batch& schedule(double now) {
    batch_.clear();
    entry_slot_.clear();
    budget_ = opt_.chunked_prefill ? opt_.token_budget : std::numeric_limits<std::int64_t>::max();
    head_ = find_head();

    // (1) Decodes first (Sarathi's stall-free rule): a running decode is never skipped. The head goes
    // first so its growth can never be blocked by others' growth in the same iteration.
    if (head_ < running_.size() && in_decode(running_[head_])) decode_or_continue(head_, true);
    for (std::size_t i = 0; i < running_.size(); ++i)
      if (i != head_ && running_[i].alive && in_decode(running_[i])) decode_or_continue(i, true);
    // (2) Swapped-out requests return before anything new is admitted.
    resume_swapped(now);
    // (3) Partial prefills continue: the head's first (it may preempt), then in admission order.
    if (head_ < running_.size() && running_[head_].alive && !in_decode(running_[head_]))
      decode_or_continue(head_, true);
    for (std::size_t i = 0; i < running_.size() && budget_ > 0; ++i)
      if (i != head_ && running_[i].alive && !in_decode(running_[i]) && !scheduled(i)) decode_or_continue(i, false);
    // (4) Admission: preempted requests first (rank order), then the queue.
    admit(now);
    compact();
    return batch_;
  }

  /// The last batch ran. Advances every entry and ends the finished requests (which must be in that
  /// batch and must have emitted a token). Throws weft::error, changing nothing, for an id that is not.
  void complete(std::span<const request_id> finished) {
    // One pass finds every finished id among the entries (F is small: a linear find per entry);
    // all are checked before anything changes.
    done_entries_.clear();
    if (!finished.empty()) {
      for (std::size_t k = 0; k < batch_.entries.size(); ++k) {
        const batch_entry& e = batch_.entries[k];
        if (e.emits_token && std::find(finished.begin(), finished.end(), e.id) != finished.end())
          done_entries_.push_back(k);
      }
      if (done_entries_.size() != finished.size()) {
        for (request_id id : finished) {
          const bool known = std::any_of(batch_.entries.begin(), batch_.entries.end(),
                                         [&](const batch_entry& e) { return e.id == id && e.emits_token; });
          expects(known, errc::not_found, "weft::sched::iteration_scheduler::complete", "request ", id,
                  " did not emit a token in the last batch");
        }
        expects(false, errc::invalid_argument, "weft::sched::iteration_scheduler::complete",
                "a finished request id is listed twice");
      }
    }
    for (std::size_t k = 0; k < batch_.entries.size(); ++k) {
      const batch_entry& e = batch_.entries[k];
      slot& s = running_[entry_slot_[k]];
      s.done += e.prefill_tokens + e.decode_tokens;
      if (e.emits_token) {
        ++s.generated;
        queue_.on_tokens(s.req, 1);
      }
    }
    if (!done_entries_.empty()) {
      for (std::size_t k : done_entries_) {
        slot& s = running_[entry_slot_[k]];
        kv_.release(s.req.id);
        queue_.on_finish(s.req, s.generated);
        s.alive = false;
        ++dead_;
      }
      compact();
    }
    batch_.entries.clear();
    entry_slot_.clear();
  }

  /// A running request handed over to another instance (Llumnix migration).
  struct migrated {
    request req;
    std::int64_t generated = 0;       ///< output tokens produced here
    std::int64_t context_tokens = 0;  ///< tokens whose KV moves with it
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
    migrated m{v.req, v.generated, v.done};
    kv_.release(v.req.id);
    queue_.on_finish(v.req, v.generated);
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(pick));
    return m;
  }

  std::size_t waiting() const noexcept { return queue_.size() + requeued_.size() + swapped_.size(); }
  std::size_t running() const noexcept { return running_.size(); }
  bool idle() const noexcept { return running_.empty() && waiting() == 0; }
  const scheduler_stats& stats() const noexcept { return stats_; }
  /// The batch of the last schedule() until complete() (its entries are cleared there).
  const batch& last_batch() const noexcept { return batch_; }
  const scheduler_options& options() const noexcept { return opt_; }
  Queue& queue() noexcept { return queue_; }
  const KV& kv() const noexcept { return kv_; }

 private:
  struct slot {
    request req;
    std::int64_t target = 0;     // tokens to prefill before decoding: prompt (+ generated, after recompute)
    std::int64_t done = 0;       // tokens whose KV is computed
    std::int64_t generated = 0;  // output tokens produced while in this scheduler
    int preemptions = 0;
    std::int64_t capacity = 0;  // tokens the held blocks cover (only with KV::counts_blocks_only)
    bool alive = true;
  };

  static bool in_decode(const slot& s) noexcept { return s.done >= s.target; }

  // kv_.grow, skipped while the tokens fit the blocks already held when the KV manager declares that
  // it only counts blocks (KV::counts_blocks_only): a real cache must see every token (slot mapping),
  // a counter need not, and skipping saves a hash lookup on 15 of 16 decode steps.
  bool ensure(slot& s, std::int64_t tokens) {
    if constexpr (requires { requires KV::counts_blocks_only; }) {
      if (tokens <= s.capacity) return true;
      if (!kv_.grow(s.req, tokens)) return false;
      s.capacity = kv_.held_blocks(s.req.id) * kv_.block_tokens();
      return true;
    } else {
      return kv_.grow(s.req, tokens);
    }
  }
  static auto rank(const slot& s) noexcept { return std::tuple(-s.preemptions, s.req.arrival_s, s.req.id); }

  std::size_t find_head() const noexcept {
    std::size_t h = running_.size();
    for (std::size_t i = 0; i < running_.size(); ++i)
      if (h == running_.size() || rank(running_[i]) < rank(running_[h])) h = i;
    return h;
  }

  bool scheduled(std::size_t i) const noexcept {
    return std::find(entry_slot_.begin(), entry_slot_.end(), i) != entry_slot_.end();
  }

  // Schedules running_[i]: a decode token, or the next prefill chunk. Growth failures preempt victims
  // for the head and for decodes; a partial prefill that does not fit just waits.
  void decode_or_continue(std::size_t i, bool may_preempt) {
    slot& s = running_[i];
    std::int64_t tokens = 0;
    if (in_decode(s)) {
      tokens = 1;
    } else {
      tokens = s.target - s.done;
      if (opt_.chunked_prefill) tokens = std::min(tokens, budget_);
      if (tokens <= 0) return;
    }
    while (!ensure(s, s.done + tokens)) {
      if (!in_decode(s) && opt_.chunked_prefill) {
        // Shrink the chunk to what fits before preempting anyone.
        const std::int64_t fit = (kv_.held_blocks(s.req.id) + kv_.free_blocks()) * kv_.block_tokens() - s.done;
        if (fit > 0 && fit < tokens && ensure(s, s.done + fit)) {
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
    add_entry(i, in_decode(s) ? 0 : tokens, in_decode(s) ? 1 : 0);
  }

  // Preempts one running request other than `protect` and the head. False when there is none.
  bool preempt_victim(std::size_t protect) {
    candidates_.clear();
    candidate_slot_.clear();
    for (std::size_t j = 0; j < running_.size(); ++j) {
      if (j == protect || j == head_ || !running_[j].alive) continue;
      const slot& v = running_[j];
      candidates_.push_back({v.req.id, v.req.client, v.req.priority, v.req.arrival_s, v.preemptions,
                             kv_.held_blocks(v.req.id), v.generated});
      candidate_slot_.push_back(j);
    }
    if (candidates_.empty()) return false;
    const std::size_t pick = victim_.choose(std::span<const victim_candidate>(candidates_));
    expects(pick < candidates_.size(), errc::out_of_range, "weft::sched::iteration_scheduler::schedule",
            "victim policy returned index ", pick, " of ", candidates_.size(), " candidates");
    preempt(candidate_slot_[pick]);
    return true;
  }

  void preempt(std::size_t j) {
    slot& v = running_[j];
    drop_entry(j);
    ++v.preemptions;
    v.alive = false;
    ++dead_;
    if (opt_.preemption == preemption_mode::swap && in_decode(v)) {
      if (auto t = kv_.swap_out(v.req.id)) {
        batch_.swapped_out.push_back(*t);
        ++stats_.preempted_swap;
        v.capacity = 0;
        insert_ranked(swapped_, v);
        return;
      }
    }
    recompute(v);
  }

  void recompute(slot& v) {
    kv_.release(v.req.id);
    v.capacity = 0;
    v.target = v.req.prompt_tokens + v.generated;
    v.done = 0;
    batch_.preempted_recompute.push_back(v.req.id);
    ++stats_.preempted_recompute;
    insert_ranked(requeued_, v);
  }

  void abort(std::size_t j) {
    slot& v = running_[j];
    drop_entry(j);
    kv_.release(v.req.id);
    queue_.on_finish(v.req, v.generated);
    v.alive = false;
    ++dead_;
    batch_.aborted.push_back(v.req.id);
    ++stats_.aborted;
  }

  static void insert_ranked(std::vector<slot>& list, slot s) {
    s.alive = true;
    // Kept in descending rank so the best is at the back (pop_back is O(1)).
    auto pos =
        std::upper_bound(list.begin(), list.end(), s, [](const slot& a, const slot& b) { return rank(a) > rank(b); });
    list.insert(pos, std::move(s));
  }

  void resume_swapped(double now) {
    while (!swapped_.empty() && running_.size() < opt_.max_running + dead_) {
      slot& s = swapped_.back();
      if (opt_.inter_tenant_preemption) {
        // Do not bring back a request that a waiting higher-priority one would evict again at once
        // (that would thrash: FastSwitch's point is to switch contexts rarely and cheaply).
        const request* head = queue_.peek(now);
        if (head != nullptr && head->priority > s.req.priority) break;
      }
      auto t = kv_.swap_in(s.req.id);
      if (!t) break;
      batch_.swapped_in.push_back(*t);
      ++stats_.swapped_in;
      running_.push_back(std::move(s));
      swapped_.pop_back();
      const std::size_t i = running_.size() - 1;
      if (budget_ >= 1 && ensure(running_[i], running_[i].done + 1)) add_entry(i, 0, 1);
    }
  }

  std::size_t live_running() const noexcept { return running_.size() - dead_; }

  void admit(double now) {
    while (live_running() < opt_.max_running && budget_ > 0) {
      const bool from_requeue = !requeued_.empty();
      const request* next = from_requeue ? &requeued_.back().req : queue_.peek(now);
      if (next == nullptr) return;
      slot s;
      if (from_requeue) {
        s = requeued_.back();
      } else {
        s.req = *next;
        s.target = s.req.prompt_tokens;
        s.done = s.req.kv_ready_tokens;
        if (s.done == s.req.prompt_tokens) s.generated = 1;  // prefilled elsewhere: first token exists
      }
      if (s.done < s.target) s.done = std::max(s.done, std::min(kv_.cached_prefix_tokens(s.req), s.target - 1));
      const bool decode = in_decode(s);
      std::int64_t tokens = decode ? 1 : s.target - s.done;
      if (!decode && opt_.chunked_prefill) tokens = std::min(tokens, budget_);
      // Orca: the first prefill of an iteration may be any length; later ones stay within token_budget.
      if (!decode && !opt_.chunked_prefill && batch_.prefill_tokens > 0 &&
          batch_.prefill_tokens + tokens > opt_.token_budget)
        return;
      // vLLM's admission rule: the whole prompt (plus its first token) must fit above the watermark.
      const auto watermark =
          static_cast<std::int64_t>(std::ceil(opt_.watermark * static_cast<double>(kv_.total_blocks())));
      const std::int64_t need = kv_.blocks_to_grow(s.req, s.target + 1);
      const std::int64_t reserve = live_running() == 0 ? 0 : watermark;  // never idle a free machine
      if (need > kv_.free_blocks() - reserve) {
        if (!(opt_.inter_tenant_preemption && make_room_for(s, need + reserve))) return;
      }
      if (!ensure(s, s.done + tokens)) return;
      if (from_requeue) {
        // make_room_for may have requeued others; find this one by id.
        requeued_.erase(
            std::find_if(requeued_.begin(), requeued_.end(), [&](const slot& q) { return q.req.id == s.req.id; }));
      } else {
        queue_.pop(now);
        queue_.on_admit(s.req);
        ++stats_.admitted;
      }
      s.alive = true;
      running_.push_back(std::move(s));
      const std::size_t i = running_.size() - 1;
      add_entry(i, decode ? 0 : tokens, decode ? 1 : 0);
    }
  }

  // FastSwitch: swaps out running requests of lower priority than s until `blocks` are free.
  bool make_room_for(const slot& s, std::int64_t blocks) {
    while (kv_.free_blocks() < blocks) {
      candidates_.clear();
      candidate_slot_.clear();
      for (std::size_t j = 0; j < running_.size(); ++j) {
        const slot& v = running_[j];
        if (!v.alive || j == head_ || v.req.priority >= s.req.priority) continue;
        candidates_.push_back({v.req.id, v.req.client, v.req.priority, v.req.arrival_s, v.preemptions,
                               kv_.held_blocks(v.req.id), v.generated});
        candidate_slot_.push_back(j);
      }
      if (candidates_.empty()) return false;
      const std::size_t pick = lowest_priority_victim{}.choose(std::span<const victim_candidate>(candidates_));
      const std::size_t j = candidate_slot_[pick];
      slot& v = running_[j];
      drop_entry(j);
      ++v.preemptions;
      v.alive = false;
      ++dead_;
      if (in_decode(v)) {
        if (auto t = kv_.swap_out(v.req.id)) {
          batch_.swapped_out.push_back(*t);
          ++stats_.preempted_swap;
          v.capacity = 0;
          insert_ranked(swapped_, v);
          continue;
        }
      }
      recompute(v);
    }
    return true;
  }

  void add_entry(std::size_t i, std::int64_t prefill, std::int64_t decode) {
    const slot& s = running_[i];
    const bool emits = decode > 0 || s.done + prefill >= s.target;
    batch_.entries.push_back({s.req.id, s.req.client, prefill, decode, s.done + prefill + decode, emits});
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
    for (auto& k : entry_slot_) k = remap_[k];
    dead_ = 0;
  }

  scheduler_options opt_;
  Queue queue_;
  KV kv_;
  Victim victim_;
  batch batch_;
  scheduler_stats stats_;
  // Invariants: running_ holds admitted requests in admission order (dead ones only inside schedule);
  // requeued_ and swapped_ are sorted by descending rank (best at the back); entry_slot_[k] is the
  // running_ index of batch_.entries[k].
  std::vector<slot> running_;
  std::vector<slot> requeued_;
  std::vector<slot> swapped_;
  std::vector<std::size_t> entry_slot_;
  std::vector<std::size_t> remap_;
  std::vector<std::size_t> done_entries_;
  std::vector<victim_candidate> candidates_;
  std::vector<std::size_t> candidate_slot_;
  std::int64_t budget_ = 0;
  std::size_t head_ = 0;
  std::size_t dead_ = 0;
};

/// Orca-style continuous batching: whole-prompt prefills, token_budget caps the prefill tokens added
/// to an iteration after its first prefill.
inline scheduler_options continuous_batching(std::size_t max_running = 256, std::int64_t max_batch_tokens = 8192) {
  scheduler_options o;
  o.chunked_prefill = false;
  o.max_running = max_running;
  o.token_budget = max_batch_tokens;
  return o;
}

/// Sarathi-Serve chunked prefill with a token budget per iteration.
inline scheduler_options chunked_prefill(std::int64_t token_budget, std::size_t max_running = 256) {
  scheduler_options o;
  o.chunked_prefill = true;
  o.token_budget = token_budget;
  o.max_running = max_running;
  return o;
}

}  // namespace weft::sched

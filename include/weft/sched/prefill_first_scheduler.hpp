// vLLM's original (v0) iteration scheduler, the baseline Sarathi-Serve compares against (Kwon et al.,
// "PagedAttention", SOSP 2023, §4.5; Agrawal et al., "Sarathi-Serve", OSDI 2024, §2.4): prefills are
// prioritised — while a waiting prompt fits (KV above the watermark, the batched-token and sequence
// caps), an iteration runs only whole prompts; decodes run only in iterations with nothing to admit,
// so every admission stalls every running decode (the "generation stall" chunked prefill removes).
#pragma once

#include <weft/sched/batch.hpp>
#include <weft/sched/block_kv_manager.hpp>
#include <weft/sched/concepts.hpp>
#include <weft/sched/fcfs_queue.hpp>
#include <weft/sched/iteration_scheduler.hpp>  // scheduler_stats
#include <weft/sched/request.hpp>
#include <weft/sched/victim_policy.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <tuple>
#include <vector>

namespace weft::sched {

/// vLLM v0's scheduler settings (its max_num_seqs, max_num_batched_tokens and watermark).
struct prefill_first_options {
  std::size_t max_running = 256;  ///< sequences holding KV at once; >= 1
  /// Prompt tokens one prefill iteration may batch; a prompt longer than this can never run and is
  /// refused at submit (vLLM ignores it). Sarathi-Serve's artifact sets it to the longest sequence.
  std::int64_t max_batched_tokens = 8192;
  double watermark = 0.01;  ///< share of device blocks kept free when admitting, in [0, 1)
};

/// vLLM-style settings in one call: the Sarathi-Serve artifact's baseline is vllm_baseline(128, 8192).
inline prefill_first_options vllm_baseline(std::size_t max_running = 256, std::int64_t max_batched_tokens = 8192) {
  prefill_first_options o;
  o.max_running = max_running;
  o.max_batched_tokens = max_batched_tokens;
  return o;
}

/// Each schedule(now): (1) preempted, then queued requests are admitted in order while the next one's
/// whole prompt fits (batched tokens, running cap, KV above the watermark); if any was, the batch is
/// those prefills only. (2) Otherwise every running request decodes one token, oldest first; when KV
/// cannot grow, the latest arrival (Victim) is preempted by recompute — its KV dropped, it waits at the
/// front of the queue to prefill its prompt and output again. Requests whose KV arrives ready
/// (request::kv_ready_tokens == prompt_tokens: disaggregation) join the running set without a prefill.
///
/// Satisfies batch_scheduler; usable in every simulator deployment (it has kv()). Not thread-safe
/// (one engine loop owns it). schedule O(R + A log W) (R running, A admitted, W waiting, plus the
/// Queue's costs); complete O(E + F * E) (E batch entries, F finished).
template <fair_queue Queue = fcfs_queue, kv_manager KV = block_kv_manager, victim_policy Victim = latest_arrival_victim>
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
  /// max_batched_tokens or the whole device cache. Throws weft::error for an invalid request.
  bool submit(const request& r, double now) {
    validate(r, "weft::sched::prefill_first_scheduler::submit");
    const std::int64_t blocks = (r.prompt_tokens + 1 + kv_.block_tokens() - 1) / kv_.block_tokens();
    if (r.prompt_tokens - r.kv_ready_tokens > opt_.max_batched_tokens || blocks > kv_.total_blocks()) {
      ++stats_.rejected;
      return false;
    }
    queue_.push(r, now);
    return true;
  }

  /// The next iteration's batch: prefills only, or decodes only. Valid until the next schedule call.
  const batch& schedule(double now) {
    batch_.clear();
    entry_slot_.clear();
    if (dead_ > 0) {  // preempted in an empty batch that was never completed
      std::erase_if(running_, [](const slot& s) { return !s.alive; });
      dead_ = 0;
    }
    admit(now);
    if (batch_.entries.empty()) decode_all();
    return batch_;
  }

  /// The last batch ran: every entry advances; `finished` (which must have emitted a token in it) end.
  /// Throws weft::error, changing nothing, for an id that did not.
  void complete(std::span<const request_id> finished) {
    for (request_id id : finished) {
      const bool known = std::any_of(batch_.entries.begin(), batch_.entries.end(),
                                     [&](const batch_entry& e) { return e.id == id && e.emits_token; });
      expects(known, errc::not_found, "weft::sched::prefill_first_scheduler::complete", "request ", id,
              " did not emit a token in the last batch");
    }
    for (std::size_t i = 0; i < finished.size(); ++i)
      expects(std::find(finished.begin() + static_cast<std::ptrdiff_t>(i) + 1, finished.end(), finished[i]) ==
                  finished.end(),
              errc::invalid_argument, "weft::sched::prefill_first_scheduler::complete", "request ", finished[i],
              " is listed twice");
    for (std::size_t k = 0; k < batch_.entries.size(); ++k) {
      const batch_entry& e = batch_.entries[k];
      slot& s = running_[entry_slot_[k]];
      s.done += e.prefill_tokens + e.decode_tokens;
      if (e.emits_token) {
        ++s.generated;
        queue_.on_tokens(s.req, 1);
      }
      if (std::find(finished.begin(), finished.end(), e.id) != finished.end()) {
        kv_.release(s.req.id);
        queue_.on_finish(s.req, s.generated);
        s.alive = false;
      }
    }
    std::erase_if(running_, [](const slot& s) { return !s.alive; });
    dead_ = 0;
    batch_.entries.clear();
    entry_slot_.clear();
  }

  std::size_t waiting() const noexcept { return queue_.size() + requeued_.size(); }
  std::size_t running() const noexcept { return live(); }
  bool idle() const noexcept { return live() == 0 && waiting() == 0; }
  /// Counters as iteration_scheduler's (no swaps: vLLM v0's default preemption is recompute).
  const scheduler_stats& stats() const noexcept { return stats_; }
  const batch& last_batch() const noexcept { return batch_; }
  const prefill_first_options& options() const noexcept { return opt_; }
  Queue& queue() noexcept { return queue_; }
  const KV& kv() const noexcept { return kv_; }

 private:
  struct slot {
    request req;
    std::int64_t target = 0;     // tokens to prefill: prompt (+ generated, after a preemption)
    std::int64_t done = 0;       // tokens whose KV is computed
    std::int64_t generated = 0;  // output tokens produced here
    bool alive = true;
  };
  static auto arrival_rank(const slot& s) noexcept { return std::tuple(s.req.arrival_s, s.req.id); }
  std::size_t live() const noexcept { return running_.size() - dead_; }

  // (1) Prefill phase. Requests whose KV arrived ready join running without an entry.
  void admit(double now) {
    const auto watermark =
        static_cast<std::int64_t>(std::ceil(opt_.watermark * static_cast<double>(kv_.total_blocks())));
    while (live() < opt_.max_running) {
      const bool requeued = !requeued_.empty();
      const request* next = requeued ? &requeued_.front().req : queue_.peek(now);
      if (next == nullptr) return;
      slot s = requeued ? requeued_.front() : fresh(*next);
      if (requeued && live() == 0 && kv_.blocks_to_grow(s.req, s.target + 1) > kv_.total_blocks()) {
        // Prompt plus output outgrew the whole cache: end it (the only way a request ends unfinished).
        requeued_.erase(requeued_.begin());
        queue_.on_finish(s.req, s.generated);
        batch_.aborted.push_back(s.req.id);
        ++stats_.aborted;
        continue;
      }
      if (s.done < s.target) s.done = std::max(s.done, std::min(kv_.cached_prefix_tokens(s.req), s.target - 1));
      const std::int64_t prefill = s.target - s.done;
      if (prefill > 0 && batch_.prefill_tokens + prefill > opt_.max_batched_tokens) return;
      const std::int64_t reserve = live() == 0 ? 0 : watermark;  // never idle an empty machine
      if (kv_.blocks_to_grow(s.req, s.target + 1) > kv_.free_blocks() - reserve) return;
      if (!kv_.grow(s.req, std::max(s.done, s.target))) return;
      if (requeued) {
        requeued_.erase(requeued_.begin());
      } else {
        queue_.pop(now);
        queue_.on_admit(s.req);
        ++stats_.admitted;
      }
      running_.push_back(s);
      if (prefill > 0) add_entry(running_.size() - 1, prefill, 0);
    }
  }

  slot fresh(const request& r) const {
    slot s;
    s.req = r;
    s.target = r.prompt_tokens;
    s.done = r.kv_ready_tokens;
    if (s.done == s.target) s.generated = 1;  // prefilled elsewhere: the first token exists
    return s;
  }

  // (2) Decode phase: oldest first; a request that cannot grow preempts the latest arrivals.
  void decode_all() {
    if (!std::is_sorted(running_.begin(), running_.end(),
                        [](const slot& a, const slot& b) { return arrival_rank(a) < arrival_rank(b); }))
      std::sort(running_.begin(), running_.end(),
                [](const slot& a, const slot& b) { return arrival_rank(a) < arrival_rank(b); });
    for (std::size_t i = 0; i < running_.size(); ++i) {
      while (running_[i].alive && !kv_.grow(running_[i].req, running_[i].done + 1))
        if (!preempt_after(i)) preempt(i);  // nobody later to evict: it gives way itself
      if (running_[i].alive) add_entry(i, 0, 1);
    }
  }

  // Preempts the Victim's choice among running requests after position i. False when there is none.
  bool preempt_after(std::size_t i) {
    candidates_.clear();
    candidate_slot_.clear();
    for (std::size_t j = i + 1; j < running_.size(); ++j) {
      const slot& v = running_[j];
      if (!v.alive) continue;
      candidates_.push_back(
          {v.req.id, v.req.client, v.req.priority, v.req.arrival_s, 0, kv_.held_blocks(v.req.id), v.generated});
      candidate_slot_.push_back(j);
    }
    if (candidates_.empty()) return false;
    const std::size_t pick = victim_.choose(std::span<const victim_candidate>(candidates_));
    expects(pick < candidates_.size(), errc::out_of_range, "weft::sched::prefill_first_scheduler::schedule",
            "victim policy returned index ", pick, " of ", candidates_.size(), " candidates");
    preempt(candidate_slot_[pick]);
    return true;
  }

  void preempt(std::size_t j) {
    slot& v = running_[j];
    kv_.release(v.req.id);
    v.alive = false;
    ++dead_;
    slot back = v;
    back.alive = true;
    back.target = v.req.prompt_tokens + v.generated;
    back.done = 0;
    // Back to the front of the queue, oldest first (vLLM's waiting deque).
    const auto pos = std::upper_bound(requeued_.begin(), requeued_.end(), back,
                                      [](const slot& a, const slot& b) { return arrival_rank(a) < arrival_rank(b); });
    requeued_.insert(pos, back);
    batch_.preempted_recompute.push_back(v.req.id);
    ++stats_.preempted_recompute;
  }

  void add_entry(std::size_t i, std::int64_t prefill, std::int64_t decode) {
    const slot& s = running_[i];
    const bool emits = decode > 0 || s.done + prefill >= s.target;
    batch_.entries.push_back({s.req.id, s.req.client, prefill, decode, s.done + prefill + decode, emits});
    entry_slot_.push_back(i);
    batch_.prefill_tokens += prefill;
    batch_.decode_tokens += decode;
  }

  prefill_first_options opt_;
  Queue queue_;
  KV kv_;
  Victim victim_;
  batch batch_;
  scheduler_stats stats_;
  // Invariants: running_ holds admitted requests, dead_ of them preempted in the batch in flight
  // (erased at complete); requeued_ is sorted oldest first; entry_slot_[k] is the running_ index of
  // batch_.entries[k].
  std::vector<slot> running_;
  std::vector<slot> requeued_;
  std::vector<std::size_t> entry_slot_;
  std::vector<victim_candidate> candidates_;
  std::vector<std::size_t> candidate_slot_;
  std::size_t dead_ = 0;
};

}  // namespace weft::sched

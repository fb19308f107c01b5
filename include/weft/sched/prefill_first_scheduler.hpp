// vLLM's original (v0) iteration scheduler, the baseline Sarathi-Serve compares against (Kwon et al.,
// "PagedAttention", SOSP 2023, §4.5; Agrawal et al., "Sarathi-Serve", OSDI 2024, §2.4): prefills are
// prioritised — while a waiting prompt fits (KV above the watermark, the batched-token and sequence
// caps), an iteration runs only whole prompts; decodes run only in iterations with nothing to admit,
// so every admission stalls every running decode (the "generation stall" chunked prefill removes).
// A phase of weft's one batch scheduler (iteration_scheduler): prefill_first_scheduler names it.
#pragma once

#include <weft/core/error.hpp>
#include <weft/kv/kv_manager.hpp>
#include <weft/sched/batch.hpp>
#include <weft/sched/concepts.hpp>
#include <weft/sched/fcfs_queue.hpp>
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/request.hpp>
#include <weft/sched/victim_policy.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace weft::sched {

/// vLLM v0's scheduler settings (its max_num_seqs, max_num_batched_tokens and watermark).
struct prefill_first_options {
  std::size_t max_running = 256;  ///< sequences holding KV at once; >= 1
  /// Prompt tokens one prefill iteration may batch; a prompt longer than this can never run and is
  /// refused at submit (vLLM ignores it). Sarathi-Serve's artifact sets it to the longest sequence.
  std::int64_t max_batched_tokens = 8192;
  double watermark = 0.01;  ///< share of usable device blocks kept free when admitting, in [0, 1)
  /// How a running request is preempted when KV runs out (vLLM v0's default: recompute). With swap, a
  /// swapped-out request comes back before any new prompt is admitted.
  preemption_mode preemption = preemption_mode::recompute;
};

/// vLLM-style settings in one call: the Sarathi-Serve artifact's baseline is vllm_baseline(128, 8192).
inline prefill_first_options vllm_baseline(std::size_t max_running = 256, std::int64_t max_batched_tokens = 8192) {
  prefill_first_options o;
  o.max_running = max_running;
  o.max_batched_tokens = max_batched_tokens;
  return o;
}

/// vLLM v0's phase. Each schedule(now): (1) while nothing waits swapped out, preempted and then queued
/// requests are admitted in order while the next one's whole prompt fits (batched tokens, running cap,
/// KV above the watermark; a cached prefix is not prefilled again); if any was, the batch is those
/// prefills only. (2) Otherwise every running request decodes one token, oldest arrival first; when KV
/// cannot grow, the latest arrival (Victim) is preempted — by recompute (its computed blocks published,
/// its KV freed, it waits at the front of the line to prefill its prompt and output again, hitting its
/// own blocks while they stay cached) or, with preemption = swap, to the host tier; swapped-out
/// requests then come back. Requests whose KV arrives ready (kv_ready_tokens == prompt_tokens:
/// disaggregation) join the running set without a prefill. Decoded ids reach the KV manager one at a
/// time and full decoded blocks are published as they fill, as in vLLM v0. A plain value.
class prefill_first_phase {
 public:
  using options_type = prefill_first_options;

  /// Throws weft::error(invalid_argument) unless max_running >= 1, max_batched_tokens >= 1 and
  /// 0 <= watermark < 1.
  explicit prefill_first_phase(const prefill_first_options& o) : o_(o) {
    const char* where = "weft::sched::prefill_first_scheduler";
    expects(o.max_running >= 1, errc::invalid_argument, where, "max_running must be >= 1, got ", o.max_running);
    expects(o.max_batched_tokens >= 1, errc::invalid_argument, where, "max_batched_tokens must be >= 1, got ",
            o.max_batched_tokens);
    expects(o.watermark >= 0.0 && o.watermark < 1.0, errc::invalid_argument, where, "watermark must be in [0, 1), got ",
            o.watermark);
  }

  const prefill_first_options& options() const noexcept { return o_; }
  std::size_t max_running() const noexcept { return o_.max_running; }
  preemption_mode preemption() const noexcept { return o_.preemption; }
  /// A prompt longer than max_batched_tokens can never run (vLLM ignores it).
  bool accepts(const request& r) const noexcept { return r.prompt_tokens - r.kv_ready_tokens <= o_.max_batched_tokens; }
  static constexpr bool ranks_by_preemptions = false;  // oldest arrival first
  static constexpr bool batches_decoded_ids = false;   // every decoded id at once; blocks published as they fill

  template <class Steps>
  void plan(Steps& s, double now) const {
    if (!s.has_swapped()) admit(s, now);
    if (!s.current().empty()) return;
    s.decode_in_arrival_order();
    s.resume_swapped(now, false);
    // Everyone gave way (a request outgrew the free cache): admit again now, so a request that can
    // never fit is aborted and the others restart, instead of waiting for an event.
    if (s.current().empty() && s.has_preempted() && !s.has_swapped()) admit(s, now);
  }

 private:
  // Whole prompts while they fit the batched-token cap and leave the watermark free (waived on an
  // empty machine); each is prefilled now.
  template <class Steps>
  void admit(Steps& s, double now) const {
    const std::size_t usable = s.kv().usable_blocks();
    const auto watermark = static_cast<std::size_t>(std::ceil(o_.watermark * static_cast<double>(usable)));
    const auto bs = static_cast<std::int64_t>(s.kv().block_size());
    s.admit_whole(
        now,
        [&](const typename Steps::candidate& c) {
          if (c.target > c.start && s.current().prefill_tokens + (c.target - c.start) > o_.max_batched_tokens)
            return false;
          const std::size_t reserve = s.live() == 0 ? 0 : watermark;  // never idle an empty machine
          const std::int64_t need = (c.target + 1) / bs + ((c.target + 1) % bs != 0 ? 1 : 0) - c.cached / bs;
          const std::size_t free = s.kv().free_blocks();
          return !(std::cmp_greater(need, free) || std::cmp_greater(reserve, free - static_cast<std::size_t>(need)));
        },
        [&](std::size_t i) {
          if (s.prefill_left(i) > 0) s.prefill_whole(i);
        });
  }

  prefill_first_options o_;
};

/// vLLM v0's scheduler: weft's one batch scheduler in its prefill-first phase (see prefill_first_phase;
/// every call, counter and guarantee is iteration_scheduler's: swap, forks, cancellation and migration
/// included). The name stays for one release.
template <fair_queue Queue = fcfs_queue, kv_manager KV = weft::kv::kv_manager<>,
          victim_policy Victim = latest_arrival_victim>
using prefill_first_scheduler = iteration_scheduler<Queue, KV, Victim, prefill_first_phase>;

}  // namespace weft::sched

// The settings and counters of weft::sched::iteration_scheduler, apart from the scheduler so the named
// policies (continuous_batching.hpp for Orca, chunked_prefill.hpp for Sarathi-Serve,
// dynamic_splitfuse.hpp for DeepSpeed-FastGen) can be found and included on their own.
#pragma once

#include <weft/sched/batch.hpp>

#include <cstddef>
#include <cstdint>

namespace weft::sched {

/// How an iteration_scheduler batches, budgets and preempts. A plain value.
struct scheduler_options {
  /// Tokens (prefill + decode) one iteration may compute. Chunked mode: the Sarathi budget (set it from
  /// a TBT target with sim::token_budget_for_tbt); it must be >= max_running so every running decode
  /// fits. Unchunked (Orca): a prompt is prefilled whole; the first prefill of an iteration may exceed it.
  std::int64_t token_budget = 2048;
  std::size_t max_running = 256;  ///< requests holding device KV at once (batch size cap); >= 1
  bool chunked_prefill = true;
  preemption_mode preemption = preemption_mode::recompute;
  /// FastSwitch: a waiting request that does not fit may swap out running requests of strictly lower
  /// priority (needs a host tier; falls back to recompute when the host is full).
  bool inter_tenant_preemption = false;
};

/// Cumulative counters of one scheduler. First admissions (a request's first start) and
/// re-admissions (its restarts after a recompute preemption) are counted apart: a re-admission mostly
/// hits the blocks it published itself when it was preempted, so a hit rate over both overstates what
/// the prefix cache does for new requests. Invariant: cached_prompt_tokens = first_admission_cached_tokens
/// + readmission_cached_tokens.
struct scheduler_stats {
  std::uint64_t admitted = 0;              ///< first admissions: requests taken from the queue into the running batch
  std::uint64_t readmitted = 0;            ///< re-admissions of requests preempted by recompute
  std::uint64_t preempted_recompute = 0;   ///< preemptions that dropped a request's KV (it prefills again)
  std::uint64_t preempted_swap = 0;        ///< preemptions that moved a request's KV to the host tier
  std::uint64_t swapped_in = 0;            ///< swapped-out requests brought back
  std::uint64_t aborted = 0;               ///< requests ended because they cannot fit the cache even alone
  std::uint64_t rejected = 0;              ///< submits refused because the prompt can never fit the cache
  std::uint64_t forked = 0;                ///< requests started by fork()
  std::uint64_t cancelled = 0;             ///< requests ended by cancel()
  std::uint64_t cached_prompt_tokens = 0;  ///< prompt tokens admissions (first and re-) found in the prefix cache
  /// Prompt tokens first admissions asked the prefix cache for (prompt_tokens - kv_ready_tokens).
  std::uint64_t first_admission_prompt_tokens = 0;
  std::uint64_t first_admission_cached_tokens = 0;  ///< of them, tokens found cached (not computed)
  std::uint64_t readmission_cached_tokens = 0;      ///< tokens re-admissions found cached (their own, mostly)

  /// The share of first admissions' prompt tokens the prefix cache held, in [0, 1] (0 before any). O(1).
  double first_admission_hit_rate() const noexcept {
    return first_admission_prompt_tokens == 0 ? 0.0
                                              : static_cast<double>(first_admission_cached_tokens) /
                                                    static_cast<double>(first_admission_prompt_tokens);
  }
};

}  // namespace weft::sched

// DeepSpeed-FastGen's Dynamic SplitFuse (Holmes et al., "DeepSpeed-FastGen: High-throughput Text
// Generation for LLMs via MII and DeepSpeed-Inference", arXiv 2401.08671, 2024, §3B): every forward pass
// is composed to one fixed token count — long prompts split into chunks over several passes, short ones
// fused (and split if needed) so the pass is exactly full, decodes always included.
#pragma once

#include <weft/core/error.hpp>
#include <weft/sched/chunked_prefill.hpp>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace weft::sched {

/// Settings of iteration_scheduler that make it Dynamic SplitFuse. iteration_scheduler's chunked mode
/// already composes a pass as SplitFuse does (running decodes, then continuing chunks, then new prompts
/// taken while tokens are left, the last one cut to what is left), so SplitFuse is a choice of budget,
/// not another scheduler: `forward_tokens` is the pass size at which the model's token throughput
/// saturates (FastGen's §3A insight 2; sim::saturating_forward_tokens finds it on a cost model), where
/// Sarathi-Serve picks the largest budget that keeps a TBT target (sim::token_budget_for_tbt).
/// Throws weft::error(invalid_argument) unless forward_tokens >= 1 and 1 <= max_running <=
/// forward_tokens (every running decode must fit the pass). O(1). Thread-safe.
inline scheduler_options dynamic_splitfuse(std::int64_t forward_tokens, std::size_t max_running = 256) {
  constexpr const char* where = "weft::sched::dynamic_splitfuse";
  expects(forward_tokens >= 1, errc::invalid_argument, where, "forward_tokens must be >= 1, got ", forward_tokens);
  expects(max_running >= 1 && std::cmp_less_equal(max_running, forward_tokens), errc::invalid_argument, where,
          "max_running must be in [1, forward_tokens = ", forward_tokens,
          "] so every running decode fits the pass, got ", max_running);
  return chunked_prefill(forward_tokens, max_running);
}

}  // namespace weft::sched

// Sarathi-Serve's chunked prefill with stall-free batching (Agrawal et al., "Taming Throughput-Latency
// Tradeoff in LLM Inference with Sarathi-Serve", OSDI 2024, §4) as settings of
// weft::sched::iteration_scheduler: running decodes first, then partial prefills, then new prefills,
// within a per-iteration token budget (pick it from a TBT target with sim::token_budget_for_tbt).
#pragma once

#include <weft/sched/scheduler_options.hpp>

#include <cstddef>
#include <cstdint>

namespace weft::sched {

/// Sarathi-Serve chunked prefill with a token budget per iteration.
inline scheduler_options chunked_prefill(std::int64_t token_budget, std::size_t max_running = 256) {
  scheduler_options o;
  o.chunked_prefill = true;
  o.token_budget = token_budget;
  o.max_running = max_running;
  return o;
}

}  // namespace weft::sched

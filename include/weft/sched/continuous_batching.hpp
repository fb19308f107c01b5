// Orca's continuous batching (Yu et al., "Orca: A Distributed Serving System for Transformer-Based
// Generative Models", OSDI 2022, §4.2: iteration-level scheduling, a request joins or leaves the batch
// at any iteration) as settings of weft::sched::iteration_scheduler: whole-prompt prefills, no chunks.
#pragma once

#include <weft/sched/scheduler_options.hpp>

#include <cstddef>
#include <cstdint>

namespace weft::sched {

/// Orca-style continuous batching: whole-prompt prefills, token_budget caps the prefill tokens added
/// to an iteration after its first prefill.
inline scheduler_options continuous_batching(std::size_t max_running = 256, std::int64_t max_batch_tokens = 8192) {
  scheduler_options o;
  o.chunked_prefill = false;
  o.max_running = max_running;
  o.token_budget = max_batch_tokens;
  return o;
}

}  // namespace weft::sched

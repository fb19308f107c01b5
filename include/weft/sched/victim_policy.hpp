// Victim policies: which running request a batch scheduler preempts when the KV cache runs out.
// latest_arrival_victim is vLLM's rule (preempt the most recently arrived request, so the oldest
// keep their progress; Kwon et al., SOSP 2023, §4.5); the others trade progress for memory or priority.
#pragma once

#include <weft/sched/batch.hpp>

#include <cstddef>
#include <span>
#include <tuple>

namespace weft::sched {

/// The latest arrival (ties: larger id). Stateless, thread-safe. O(n).
struct latest_arrival_victim {
  std::size_t choose(std::span<const victim_candidate> c) const noexcept {
    std::size_t best = 0;
    for (std::size_t i = 1; i < c.size(); ++i)
      if (std::tie(c[i].arrival_s, c[i].id) > std::tie(c[best].arrival_s, c[best].id)) best = i;
    return best;
  }
};

/// The request holding the most device blocks (frees the most memory per preemption; ties: later
/// arrival). Stateless, thread-safe. O(n).
struct most_blocks_victim {
  std::size_t choose(std::span<const victim_candidate> c) const noexcept {
    std::size_t best = 0;
    for (std::size_t i = 1; i < c.size(); ++i)
      if (std::tie(c[i].kv_blocks, c[i].arrival_s, c[i].id) >
          std::tie(c[best].kv_blocks, c[best].arrival_s, c[best].id))
        best = i;
    return best;
  }
};

/// The lowest priority, then the latest arrival: inter-tenant preemption (FastSwitch) evicts the tenant
/// that matters least. Stateless, thread-safe. O(n).
struct lowest_priority_victim {
  std::size_t choose(std::span<const victim_candidate> c) const noexcept {
    std::size_t best = 0;
    for (std::size_t i = 1; i < c.size(); ++i) {
      const auto key_i = std::tuple(-c[i].priority, c[i].arrival_s, c[i].id);
      const auto key_b = std::tuple(-c[best].priority, c[best].arrival_s, c[best].id);
      if (key_i > key_b) best = i;
    }
    return best;
  }
};

}  // namespace weft::sched

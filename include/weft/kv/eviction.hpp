// Eviction policies for the radix prefix cache: least recently used (SGLang's default), least
// frequently used, first in first out, and user priority (any_eviction_policy.hpp holds a choice made at
// run time). Each ranks victims by a score; the smallest score goes first.
#pragma once

#include <weft/core/error.hpp>
#include <weft/kv/concepts.hpp>

#include <cstdint>
#include <utility>

namespace weft::kv {

/// The score type of the built-in policies: (primary, tie-break), compared lexicographically.
using eviction_score = std::pair<std::int64_t, std::uint64_t>;

/// Least recently used first. Thread-safe (stateless). O(1).
struct lru_eviction {
  eviction_score score(const eviction_stats& s) const noexcept { return {0, s.last_access}; }
};
/// Fewest hits first; among equals, least recently used. Thread-safe. O(1).
struct lfu_eviction {
  eviction_score score(const eviction_stats& s) const noexcept {
    return {static_cast<std::int64_t>(s.hits), s.last_access};
  }
};
/// Oldest insertion first, regardless of use. Thread-safe. O(1).
struct fifo_eviction {
  eviction_score score(const eviction_stats& s) const noexcept { return {0, s.created}; }
};
/// Lowest priority first; among equals, least recently used. Thread-safe. O(1).
struct priority_eviction {
  eviction_score score(const eviction_stats& s) const noexcept { return {s.priority, s.last_access}; }
};

static_assert(eviction_policy<lru_eviction> && eviction_policy<lfu_eviction> && eviction_policy<fifo_eviction> &&
              eviction_policy<priority_eviction>);

}  // namespace weft::kv

// any_eviction_policy was defined here; it stays reachable from this header.
#include <weft/kv/any_eviction_policy.hpp>

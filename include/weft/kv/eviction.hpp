// Eviction policies for the radix prefix cache: least recently used (SGLang's default), least
// frequently used, first in first out, and user priority; plus any_eviction_policy for a choice made
// at run time (a command-line flag). Each ranks victims by a score; the smallest score goes first.
#pragma once

#include <weft/core/error.hpp>
#include <weft/kv/concepts.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
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

/// A type-erased eviction policy over any policy whose score converts to eviction_score. Default:
/// LRU. Thread-safe to call concurrently if the wrapped policy is. O(1) plus one indirect call.
class any_eviction_policy {
 public:
  any_eviction_policy() : any_eviction_policy(lru_eviction{}) {}
  template <eviction_policy P>
  requires(!std::same_as<P, any_eviction_policy>) &&
      std::convertible_to<decltype(std::declval<const P&>().score(std::declval<const eviction_stats&>())),
                          eviction_score> explicit any_eviction_policy(P policy)
      : fn_([p = std::move(policy)](const eviction_stats& s) { return static_cast<eviction_score>(p.score(s)); }) {}

  /// "lru", "lfu", "fifo" or "priority"; throws weft::error naming the choices otherwise.
  static any_eviction_policy named(std::string_view name) {
    if (name == "lru") return any_eviction_policy(lru_eviction{});
    if (name == "lfu") return any_eviction_policy(lfu_eviction{});
    if (name == "fifo") return any_eviction_policy(fifo_eviction{});
    if (name == "priority") return any_eviction_policy(priority_eviction{});
    weft::detail::raise(errc::invalid_argument, "weft::kv::any_eviction_policy::named", "unknown eviction policy '",
                        std::string(name), "'; choose lru, lfu, fifo or priority");
  }

  eviction_score score(const eviction_stats& s) const { return fn_(s); }

 private:
  std::function<eviction_score(const eviction_stats&)> fn_;
};
static_assert(eviction_policy<any_eviction_policy>);

}  // namespace weft::kv

// weft::kv::any_eviction_policy: a radix-cache eviction policy chosen at run time (a command-line flag,
// a config file), over any policy whose score converts to eviction_score; make_eviction_policy builds
// the built-in ones by name.
#pragma once

#include <weft/core/error.hpp>
#include <weft/kv/concepts.hpp>
#include <weft/kv/eviction.hpp>

#include <concepts>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace weft::kv {

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

/// The built-in policy called `name` ("lru", "lfu", "fifo" or "priority"); throws weft::error naming
/// the choices otherwise. O(1).
inline any_eviction_policy make_eviction_policy(std::string_view name) { return any_eviction_policy::named(name); }

}  // namespace weft::kv

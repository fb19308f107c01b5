// The policy concepts of weft::moe: what an expert-cache eviction policy and an expert prefetcher
// must provide. A user's type that satisfies one plugs into expert_cache / replay unchanged.
// The requires-clauses are the whole contract; tests/moe/archetype_test.cpp proves it is enough.
#pragma once

#include <weft/moe/types.hpp>

#include <concepts>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace weft::moe {

/// An eviction policy of one cache pool (one layer under per-layer capacity, or the whole model).
/// The cache owns one copy per pool and calls, in this order of life:
///   bind(shape)            once, before anything else (size per-key arrays here);
///   on_access(k, info)     for every demand lookup of a key of the pool: hit, in-flight or miss;
///   on_insert(k, info)     k became an eviction candidate (its load completed, or it was unpinned);
///   on_remove(k)           k stopped being a candidate (evicted, erased, or pinned);
///   victim(info)           which candidate to evict now; std::nullopt only when there are none.
/// victim must return a key the policy currently holds as a candidate; the cache then calls
/// on_remove for it. Policies are copied (one per pool), so keep shared read-only data in a
/// shared_ptr<const T>.
template <class P>
concept expert_eviction_policy = std::copy_constructible<P> &&
    requires(P& p, const model_shape& shape, expert_key k, const access_info& info) {
  p.bind(shape);
  p.on_access(k, info);
  p.on_insert(k, info);
  p.on_remove(k);
  { p.victim(info) } -> std::same_as<std::optional<expert_key>>;
};

/// Deprecated spelling of expert_eviction_policy (it clashed with weft::kv::eviction_policy, a
/// different contract); kept for one release. A concept cannot carry [[deprecated]], so this note
/// and CHANGELOG.md are the notice.
template <class P>
concept eviction_policy = expert_eviction_policy<P>;

/// An expert prefetcher: it watches the routing of the current token layer by layer and predicts
/// which experts later layers will need. Call order:
///   bind(shape)                       once;
///   begin_request(id)                 when the engine starts (or switches to) a request;
///   observe(layer, experts)           the experts the router actually chose at `layer`;
///   predict(layer, depth, out)        append predicted keys for the `depth` layers that execute
///                                     after `layer` (a prefetcher may wrap to the next token's
///                                     first layers); never clear `out`.
/// A prefetcher corrects itself through observe: what it learns of the actual routing changes its
/// next predictions.
template <class P>
concept prefetcher = requires(P& p, const model_shape& shape, std::uint64_t request, std::uint32_t layer,
                              std::span<const std::uint32_t> experts, std::vector<expert_key>& out) {
  p.bind(shape);
  p.begin_request(request);
  p.observe(layer, experts);
  p.predict(layer, layer, out);
};

}  // namespace weft::moe

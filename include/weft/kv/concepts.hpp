// The kv module's policy concepts: how a full block's content key is hashed, how a radix prefix
// cache ranks eviction victims, and what a block allocator must offer to block tables. Users
// satisfy them with their own types; tests/kv/archetypes_test.cpp instantiates the weakest ones.
#pragma once

#include <weft/kv/types.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace weft::kv {

/// H computes a full block's content key from its parent's key (the chain), the block's tokens and
/// extra keys (adapter id, multimodal item hashes, the cache salt on the first block). Equal inputs
/// must give equal keys; different inputs should collide with probability ~2^-64.
template <class H>
concept block_hasher = std::default_initializable<H> && std::copy_constructible<H> &&
    requires(const H& h, block_key parent, std::span<const token_id> tokens, std::span<const std::uint64_t> extra) {
  { h(parent, tokens, extra) } -> std::convertible_to<block_key>;
};

/// What a radix prefix cache knows about a node when it ranks eviction victims. Ticks are logical
/// (one per cache operation), so eviction is deterministic.
struct eviction_stats {
  std::uint64_t last_access = 0;  ///< tick of the latest match or insert that touched the node
  std::uint64_t created = 0;      ///< tick of insertion
  std::uint64_t hits = 0;         ///< number of matches that reached the node
  std::int32_t priority = 0;      ///< user priority: higher survives longer
};

/// P ranks eviction victims: score(stats) returns a totally ordered value; the node with the
/// smallest score is evicted first (ties: lower insertion tick first).
template <class P>
concept eviction_policy = std::default_initializable<P> && requires(const P& p, const eviction_stats& s) {
  { p.score(s) } -> std::totally_ordered;
};

/// A allocates blocks for block tables all-or-nothing and manages their references: block_pool,
/// hashed_prefix_cache (which evicts cached content while allocating) and user allocators.
template <class A>
concept block_allocator = requires(A& a, const A& ca, std::size_t n, std::vector<block_id>& out, block_id b) {
  { a.allocate(n, out) } -> std::same_as<bool>;
  a.release(b);
  a.add_ref(b);
  { ca.ref_count(b) } -> std::convertible_to<std::uint32_t>;
  { ca.free_blocks() } -> std::convertible_to<std::size_t>;
};

}  // namespace weft::kv

// The kv module's policy concepts: how a full block's content key is hashed (and which fields
// enter it), how a radix prefix cache ranks eviction victims, and what a block allocator must
// offer to block tables. Users satisfy them with their own types; tests/kv/archetype_test.cpp
// instantiates the weakest ones.
#pragma once

#include <weft/kv/types.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace weft::kv {

/// The inputs of a block key besides the parent key and the tokens. Each is absorbed as its tag,
/// its word count and its 64-bit words, so no encoding of one field can equal an encoding of
/// another (a salt never collides with an adapter id of the same value).
enum class key_field : std::uint8_t {
  tenant = 1,      ///< first block only, when the cache is isolated per tenant: {tenant id}
  cache_salt = 2,  ///< first block only: {salt}
  adapter = 3,     ///< every block: {LoRA adapter id}
  media = 4,       ///< every block an item overlaps: {content hash, signed start - block start, length}
};

/// H computes a full block's content key incrementally: begin() with the parent's key (the chain)
/// and the block's tokens, absorb() each extra field in turn (any number), finish() for the key.
/// A caller keeps one H::state per thread and reuses it for every block, so a hasher can keep its
/// working memory there instead of allocating per block. Equal inputs must give equal keys;
/// different inputs should collide with probability ~2^-128 (2^-64 for a 64-bit hasher).
template <class H>
concept block_hasher = std::default_initializable<H> && std::copy_constructible<H> && requires {
  typename H::state;
} && std::default_initializable<typename H::state> &&
    requires(const H& h, typename H::state& s, block_key parent, std::span<const token_id> tokens, key_field field,
             std::span<const std::uint64_t> words) {
  h.begin(s, parent, tokens);
  h.absorb(s, field, words);
  { h.finish(s) } -> std::same_as<block_key>;
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

// Content keys for full KV blocks, chained so a block's key identifies its whole prefix (vLLM's
// automatic prefix caching, "hash of parent hash + block tokens + extra keys"), with every extra
// field (tenant, salt, adapter, each overlapping multimodal item) absorbed under its own tag. The
// default hasher is sha256_block_hasher (keyed SHA-256); fast_block_hasher is the opt-in for a
// single trust domain. docs/kv.md says what each protects against.
#pragma once

#include <weft/core/error.hpp>
#include <weft/kv/concepts.hpp>
#include <weft/kv/fast_block_hasher.hpp>
#include <weft/kv/sha256_block_hasher.hpp>
#include <weft/kv/types.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace weft::kv {

/// The block hasher weft uses unless told otherwise.
using default_block_hasher = sha256_block_hasher;
/// The name of the default hasher before 0.2 (then an unkeyed 64-bit mix), kept so code naming it
/// still compiles; it now means the keyed SHA-256 default.
using chained_block_hasher = default_block_hasher;

/// The parent key of a sequence's first block.
inline constexpr block_key root_block_key{0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL};

/// A multimodal item (image, audio clip) embedded in the prompt: its content hash and the token
/// range it occupies. Every block the item overlaps absorbs (hash, item start - block start as a
/// signed number, length), so the same tokens with a different item, or the same item placed
/// elsewhere in the block, never share a block.
struct multimodal_item {
  std::uint64_t content_hash = 0;
  std::size_t offset = 0;  ///< first token index of the item in the prompt
  std::size_t length = 0;  ///< tokens it occupies; a 0-length item belongs to the block holding `offset`
};

/// Everything besides the tokens that decides whether two blocks hold the same KV, or may be
/// shared at all.
struct key_options {
  std::uint64_t cache_salt = 0;              ///< absorbed by the first block only; 0 = no salt
  std::uint64_t adapter_id = 0;              ///< LoRA adapter, absorbed by every block; 0 = base model
  std::span<const multimodal_item> media{};  ///< must be sorted by offset
  std::optional<tenant_id> tenant{};         ///< set: absorbed by the first block (per-tenant cache)
};

/// Feeds block b's extra fields (of a sequence whose full blocks are block_size tokens) to
/// hasher.absorb in a fixed order: tenant and salt (block 0 only), adapter, then every media item
/// that overlaps the block, however many. O(media items that start before the block's end).
template <block_hasher H>
void absorb_block_fields(const H& hasher, typename H::state& s, std::size_t b, std::size_t block_size,
                         const key_options& options) {
  if (b == 0 && options.tenant) {
    const std::uint64_t t = options.tenant->value();
    hasher.absorb(s, key_field::tenant, std::span<const std::uint64_t>(&t, 1));
  }
  if (b == 0 && options.cache_salt != 0)
    hasher.absorb(s, key_field::cache_salt, std::span<const std::uint64_t>(&options.cache_salt, 1));
  if (options.adapter_id != 0)
    hasher.absorb(s, key_field::adapter, std::span<const std::uint64_t>(&options.adapter_id, 1));
  const std::size_t lo = b * block_size, hi = lo + block_size;
  for (const multimodal_item& m : options.media) {
    if (m.offset >= hi) break;  // sorted: no later item reaches this block
    const bool overlaps = m.length == 0 ? m.offset >= lo : m.offset + m.length > lo;
    if (!overlaps) continue;
    // The start relative to the block as a two's-complement word: negative when the item began in
    // an earlier block. Exact for any offset a prompt can have.
    const std::array<std::uint64_t, 3> words{m.content_hash, static_cast<std::uint64_t>(m.offset - lo),
                                             static_cast<std::uint64_t>(m.length)};
    hasher.absorb(s, key_field::media, words);
  }
}

/// Appends to `keys` the content keys of every full block of `tokens` beyond keys.size() (keys
/// already computed for this sequence are reused: decoding extends the chain one block at a time).
/// `scratch` is the hasher's working state, reused for every block. Throws when keys.size()
/// exceeds the number of full blocks or block_size is 0, changing nothing. O(new tokens + new
/// blocks x overlapping media items).
template <block_hasher H>
void extend_block_keys(std::span<const token_id> tokens, std::size_t block_size, const key_options& options,
                       std::vector<block_key>& keys, const H& hasher, typename H::state& scratch) {
  expects(block_size > 0, errc::invalid_argument, "weft::kv::extend_block_keys", "block_size must be positive");
  const std::size_t full = tokens.size() / block_size;
  expects(keys.size() <= full, errc::invalid_argument, "weft::kv::extend_block_keys", "keys.size() ", keys.size(),
          " exceeds the ", full, " full blocks of ", tokens.size(), " tokens");
  keys.reserve(full);
  for (std::size_t b = keys.size(); b < full; ++b) {
    hasher.begin(scratch, b == 0 ? root_block_key : keys[b - 1], tokens.subspan(b * block_size, block_size));
    absorb_block_fields(hasher, scratch, b, block_size, options);
    keys.push_back(hasher.finish(scratch));
  }
}

/// As above with a state of its own (one OpenSSL context for the SHA-256 hasher per call).
template <block_hasher H>
void extend_block_keys(std::span<const token_id> tokens, std::size_t block_size, const key_options& options,
                       std::vector<block_key>& keys, const H& hasher) {
  typename H::state scratch;
  extend_block_keys(tokens, block_size, options, keys, hasher, scratch);
}

}  // namespace weft::kv

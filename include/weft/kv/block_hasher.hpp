// Content keys for full KV blocks, chained so a block's key identifies its whole prefix (vLLM's
// automatic prefix caching, "hash of parent hash + block tokens + extra keys"). The default hasher
// is a fast 64-bit multiply-mix (in the style of wyhash/rapidhash); plug a cryptographic one where
// tenants must not be able to engineer collisions.
#pragma once

#include <weft/core/error.hpp>
#include <weft/kv/concepts.hpp>
#include <weft/kv/types.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace weft::kv {

namespace detail {
__extension__ typedef unsigned __int128 uint128;  // NOLINT: 64x64->128 multiply for mixing
}  // namespace detail

/// The parent key of a sequence's first block.
inline constexpr block_key root_block_key = 0x6a09e667f3bcc908ULL;

/// Default block_hasher: 64-bit multiply-mix over (parent, tokens, extra keys, lengths). Not
/// cryptographic. Thread-safe (stateless). O(tokens + extra).
struct chained_block_hasher {
  block_key operator()(block_key parent, std::span<const token_id> tokens,
                       std::span<const std::uint64_t> extra) const noexcept {
    std::uint64_t h = mix(parent ^ 0x243f6a8885a308d3ULL, tokens.size() * 0x9e3779b97f4a7c15ULL + extra.size());
    std::size_t i = 0;
    // Two tokens per 64-bit lane, two lanes per round: short dependency chains.
    for (; i + 4 <= tokens.size(); i += 4) {
      const std::uint64_t a = pack(tokens[i], tokens[i + 1]);
      const std::uint64_t b = pack(tokens[i + 2], tokens[i + 3]);
      h = mix(a ^ h ^ 0xa0761d6478bd642fULL, b ^ 0xe7037ed1a0b428dbULL);
    }
    for (; i < tokens.size(); ++i) h = mix(h ^ static_cast<std::uint32_t>(tokens[i]), 0x8ebc6af09c88c6e3ULL);
    for (const std::uint64_t e : extra) h = mix(h ^ e, 0x589965cc75374cc3ULL);
    return mix(h, 0x1d8e4e27c47d124fULL);
  }

 private:
  using uint128 = detail::uint128;
  static std::uint64_t pack(token_id a, token_id b) noexcept {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) |
           (static_cast<std::uint64_t>(static_cast<std::uint32_t>(b)) << 32);
  }
  static std::uint64_t mix(std::uint64_t a, std::uint64_t b) noexcept {
    const uint128 r = static_cast<uint128>(a) * b;
    return static_cast<std::uint64_t>(r) ^ static_cast<std::uint64_t>(r >> 64);
  }
};
static_assert(block_hasher<chained_block_hasher>);

/// A multimodal item (image, audio clip) embedded in the prompt: its content hash and the token
/// range it occupies. Blocks that overlap it get (hash, offset of the block start inside the item)
/// as extra keys, so the same tokens with a different image never share a block.
struct multimodal_item {
  std::uint64_t content_hash = 0;
  std::size_t offset = 0;  ///< first token index of the item in the prompt
  std::size_t length = 0;  ///< tokens it occupies
};

/// Everything besides the tokens that decides whether two blocks hold the same KV.
struct key_options {
  std::uint64_t cache_salt = 0;              ///< mixed into the first block only; 0 = no salt
  std::uint64_t adapter_id = 0;              ///< LoRA adapter; 0 = base model
  std::span<const multimodal_item> media{};  ///< must be sorted by offset
};

/// Appends to `keys` the content keys of every full block of `tokens` beyond keys.size() (keys
/// already computed for this sequence are reused: decoding extends the chain one block at a time).
/// Throws when keys.size() exceeds the number of full blocks or block_size is 0. O(new tokens).
template <block_hasher H = chained_block_hasher>
void extend_block_keys(std::span<const token_id> tokens, std::size_t block_size, const key_options& options,
                       std::vector<block_key>& keys, const H& hasher = H{}) {
  expects(block_size > 0, errc::invalid_argument, "weft::kv::extend_block_keys", "block_size must be positive");
  const std::size_t full = tokens.size() / block_size;
  expects(keys.size() <= full, errc::invalid_argument, "weft::kv::extend_block_keys", "keys.size() ", keys.size(),
          " exceeds the ", full, " full blocks of ", tokens.size(), " tokens");
  std::array<std::uint64_t, 16> extra{};
  for (std::size_t b = keys.size(); b < full; ++b) {
    std::size_t n = 0;
    const std::size_t lo = b * block_size, hi = lo + block_size;
    if (b == 0 && options.cache_salt != 0) extra[n++] = options.cache_salt;
    if (options.adapter_id != 0) extra[n++] = options.adapter_id ^ 0x5be0cd19137e2179ULL;
    for (const multimodal_item& m : options.media) {
      if (m.offset >= hi) break;
      if (m.offset + m.length <= lo) continue;
      if (n + 2 > extra.size()) break;
      extra[n++] = m.content_hash;
      extra[n++] = lo > m.offset ? lo - m.offset : 0;
    }
    const block_key parent = b == 0 ? root_block_key : keys[b - 1];
    keys.push_back(static_cast<block_key>(
        hasher(parent, tokens.subspan(lo, block_size), std::span<const std::uint64_t>(extra.data(), n))));
  }
}

}  // namespace weft::kv

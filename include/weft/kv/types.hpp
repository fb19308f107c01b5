// Vocabulary of the paged KV cache: block, request and tenant ids, token ids, block keys, the copy
// orders an engine executes and the physical slots its attention kernel writes (PagedAttention,
// Kwon et al., SOSP 2023, section 4).
#pragma once

#include <weft/core/ids.hpp>
#include <weft/core/strong_id.hpp>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <vector>

namespace weft::kv {

/// Index of one fixed-size KV block in the engine's cache tensor. Block 0 of every pool is the
/// reserved null block (see block_pool), so a valid data block id is in [1, capacity).
using block_id = weft::strong_id<struct block_id_tag, std::uint32_t>;

/// Index of one block in the host (CPU) tier; a different type so device and host ids never mix.
using host_block_id = weft::strong_id<struct host_block_id_tag, std::uint32_t>;

/// The scheduler's name for a request (a sequence): weft's one request id (core/ids.hpp), shared
/// with weft::sched. Any value except invalid() may be used.
using request_id = weft::request_id;

/// Tenant (user, API key, LoRA customer) that block quotas are charged to: weft's one tenant id,
/// which weft::sched calls client_id.
using tenant_id = weft::tenant_id;

/// A token id as the tokenizer produced it.
using token_id = weft::token_id;

/// Content key of a full block: 128 bits of a chained hash of its parent's key, its tokens and
/// its extra fields (see block_hasher.hpp). 128 bits so that accidental collisions stay below
/// 2^-64 even across 2^32 cached blocks, and a targeted one costs a second preimage. A plain value:
/// ordered, hashable, printable as 32 hex digits. Thread-safe to copy; every operation O(1).
struct block_key {
  std::uint64_t hi = 0;  ///< first 8 bytes of the digest (little-endian)
  std::uint64_t lo = 0;  ///< next 8 bytes; a 64-bit hasher puts its whole key here and leaves hi 0

  /// The low 64 bits, for event streams and metrics that carry 64-bit block hashes (vLLM's KV
  /// events). Not unique enough to index a cache that tenants share: keep the whole key for that.
  constexpr std::uint64_t low64() const noexcept { return lo; }

  friend constexpr bool operator==(const block_key&, const block_key&) = default;
  friend constexpr auto operator<=>(const block_key&, const block_key&) = default;
};

/// Prints a key as 32 lowercase hex digits (hi then lo), the form logs and events use.
inline std::ostream& operator<<(std::ostream& out, const block_key& k) {
  char text[33];
  constexpr char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    text[i] = digits[(k.hi >> (60 - 4 * i)) & 0xf];
    text[16 + i] = digits[(k.lo >> (60 - 4 * i)) & 0xf];
  }
  text[32] = '\0';
  return out << text;
}

/// Where token i of a sequence lives: block and offset inside it. The flat slot index an attention
/// kernel uses (vLLM's slot_mapping) is block.value() * block_size + offset.
struct slot {
  block_id block;
  std::uint32_t offset = 0;
  friend constexpr bool operator==(const slot&, const slot&) = default;
};

/// One copy-on-write order: before writing the next token, copy block src's contents into dst
/// (all block_size slots of every layer). The engine runs these; weft only decides them.
struct block_copy {
  block_id src;
  block_id dst;
  friend constexpr bool operator==(const block_copy&, const block_copy&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const block_copy& c) {
  return out << "copy " << c.src << " -> " << c.dst;
}

/// The content keys of a prompt's full blocks, computed ahead of admission by
/// kv_manager::compute_prompt_keys (a scheduler does it when a request is submitted, so admission
/// does not hash). Only the kv_manager that computed them can use them, for the prompt they were
/// computed over (or a longer one that starts with it) and the same request options; it checks
/// that through `check` and throws otherwise.
struct prompt_keys {
  std::vector<block_key> keys;    ///< keys of the first tokens / block_size full blocks (empty: caching off)
  std::vector<block_key> prints;  ///< verify_on_hit fingerprints of the same blocks (else empty)
  std::size_t tokens = 0;         ///< prompt tokens they were computed over
  std::uint64_t check = 0;        ///< fingerprint of (manager, tokens, options), checked at use
};

}  // namespace weft::kv

/// Hashing for unordered containers: the key's bits are already a hash, so fold them.
template <>
struct std::hash<weft::kv::block_key> {
  std::size_t operator()(const weft::kv::block_key& k) const noexcept {
    return static_cast<std::size_t>(k.lo ^ (k.hi * 0x9e3779b97f4a7c15ULL));
  }
};

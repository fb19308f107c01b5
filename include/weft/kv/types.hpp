// Vocabulary of the paged KV cache: block, request and tenant ids, token ids, block keys, the copy
// orders an engine executes and the physical slots its attention kernel writes (PagedAttention,
// Kwon et al., SOSP 2023, section 4).
#pragma once

#include <weft/core/ids.hpp>
#include <weft/core/strong_id.hpp>

#include <cstdint>
#include <ostream>

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

/// Content key of a full block: a chained hash of its parent's key, its tokens and extra keys.
using block_key = std::uint64_t;

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

}  // namespace weft::kv

// The tiling of weft's CUDA MoE dispatch (quant/cuda/moe_dispatch.cuh) as WEFT_HOST_DEVICE
// functions, so the CPU tests run the whole algorithm block by block and warp by warp: a stable
// counting sort of the (token, choice) slots by expert in three passes instead of a radix sort.
//
//  1. histogram: block b counts the experts of its tile of `tile_items` slots (shared-memory atomics)
//     into counts[e * tiles + b] (expert-major, so one exclusive scan orders the slots expert by
//     expert and, within an expert, tile by tile);
//  2. an exclusive scan of those counts gives each (expert, tile) its first sorted position;
//  3. scatter: each warp of block b owns `warp_items` consecutive slots of the tile and ranks them
//     round by round (32 slots a round; on the GPU with __match_any_sync) among the earlier slots of
//     the same expert in its run; the block then turns per-warp counts into per-warp bases (an
//     exclusive sum over the warps, expert by expert) and every slot lands at
//     base(expert, tile) + base(expert, warp) + its rank: the order of the slots within an expert is
//     their input order (stable), as GShard/Switch-style token permutation expects (Lepikhin et al.,
//     2021, §2).
#pragma once

#include <weft/core/config.hpp>

#include <cstdint>

namespace weft::quant::dispatch {

inline constexpr int lanes = 32;
inline constexpr int block_warps = 8;
inline constexpr int block_threads = block_warps * lanes;    ///< 256
inline constexpr int rounds = 8;                             ///< 32-slot rounds per warp
inline constexpr int warp_items = rounds * lanes;            ///< 256 consecutive slots per warp
inline constexpr int tile_items = block_warps * warp_items;  ///< 2048 slots per block
inline constexpr int max_experts = 1024;                     ///< per-warp counters: 8 x 1024 x 4 B of shared memory

/// Tiles (blocks) for `slots` slots.
WEFT_HOST_DEVICE constexpr std::int64_t tiles_for(std::int64_t slots) noexcept {
  return (slots + tile_items - 1) / tile_items;
}

/// Index of the (expert, tile) counter in the expert-major count matrix.
WEFT_HOST_DEVICE constexpr std::int64_t count_index(std::int32_t expert, std::int64_t tile,
                                                    std::int64_t tiles) noexcept {
  return static_cast<std::int64_t>(expert) * tiles + tile;
}

/// Position within the tile of lane `lane`'s slot in round `round` of warp `warp`.
WEFT_HOST_DEVICE constexpr int slot_in_tile(int warp, int round, int lane) noexcept {
  return warp * warp_items + round * lanes + lane;
}

/// The warp that owns position `j` of a tile.
WEFT_HOST_DEVICE constexpr int warp_of(int j) noexcept { return j / warp_items; }

/// Lanes below `lane` (the PTX %lanemask_lt).
WEFT_HOST_DEVICE constexpr std::uint32_t lanes_below(int lane) noexcept { return (1u << lane) - 1u; }

/// Step 3's per-warp bases for one expert: `per_warp[w]` holds warp w's count of the expert and
/// becomes the expert's first position of warp w's slots, starting from `tile_base` (the expert's
/// first position for this tile, from step 2).
WEFT_HOST_DEVICE inline void warp_bases(std::int32_t* per_warp, std::int64_t stride, std::int32_t tile_base) noexcept {
  std::int32_t at = tile_base;
  for (int w = 0; w < block_warps; ++w) {
    const std::int32_t c = per_warp[w * stride];
    per_warp[w * stride] = at;
    at += c;
  }
}

/// The three outputs of one slot: its sorted position `pos` gets the slot and its token, and the
/// slot's inverse entry gets `pos`.
WEFT_HOST_DEVICE inline void place(std::int32_t slot, std::int32_t pos, int top_k, std::int32_t* order,
                                   std::int32_t* tokens, std::int32_t* inverse) noexcept {
  order[pos] = slot;
  tokens[pos] = slot / top_k;
  inverse[slot] = pos;
}

}  // namespace weft::quant::dispatch

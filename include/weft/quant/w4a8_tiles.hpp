// The building blocks of weft's CUDA W4A8 kernels (quant/cuda/w4a8_gemm.cuh) as plain
// WEFT_HOST_DEVICE functions, so the tests run them on the CPU for every thread of a grid: int4
// codes turned into signed int8 (code - zero, in -16..15) next to int8 activations in shared
// memory for mma.m16n8k32.s8 (exact int32 per group), the fold of each group's int32 sums into
// fp32 by the group's scale, and the dp4a lane dot of the GEMV. The scheme of QServe's W4A8 GEMM
// (Lin et al., 2024) and llama.cpp's Q4_0 x Q8_0, on weft's layout.
#pragma once

#include <weft/core/config.hpp>
#include <weft/quant/device_tiles.hpp>
#include <weft/quant/tile_math.hpp>

#include <cstdint>

namespace weft::quant {

/// Arguments of the W4A8 kernels (device pointers). Y = diag(a_scales) (A W^T): A is M x K int8
/// per-token activations (row-major, quantize_activations), W weft's int4 layout
/// (quantized_matrix::packed/scales/zeros), Y M x N fp32. A plain value.
template <class Scale>
struct w4a8_params {
  const std::int8_t* a = nullptr;
  const float* a_scales = nullptr;
  const std::uint8_t* codes = nullptr;
  const Scale* scales = nullptr;
  const std::int16_t* zeros = nullptr;
  float* y = nullptr;
  std::int64_t m = 0, n = 0, k = 0, k_padded = 0, group_size = 0, groups = 0;
};

/// Thread `tid` of `threads` loads its share of the int8 A tile and of the B tile as signed
/// code - zero (exact in int8) for the 32-wide k-slice at k0. Out-of-range entries become 0.
template <class Tile, class Scale>
WEFT_HOST_DEVICE void w4a8_load_tiles(const w4a8_params<Scale>& p, std::int64_t m0, std::int64_t n0, std::int64_t k0,
                                      w8_smem<Tile>& s, int tid, int threads) noexcept {
  constexpr int bk = Tile::block_k;
  for (int i = tid; i < Tile::block_m * bk; i += threads) {
    const int r = i / bk, c = i % bk;
    const std::int64_t gm = m0 + r, gk = k0 + c;
    s.a[r][c] = (gm < p.m && gk < p.k) ? p.a[gm * p.k + gk] : std::int8_t{0};
  }
  for (int i = tid; i < Tile::block_n * bk; i += threads) {
    const int r = i / bk, c = i % bk;
    const std::int64_t gn = n0 + r, gk = k0 + c;
    std::int8_t v = 0;
    if (gn < p.n && gk < p.k) {
      const std::uint8_t* row = p.codes + gn * int4_row_bytes(p.k_padded);
      v = static_cast<std::int8_t>(int4_get(row, gk) - p.zeros[gn * p.groups + gk / p.group_size]);
    }
    s.b[r][c] = v;
  }
}

/// After the last k-slice of group g, each lane folds its int32 C fragment (rows from row0,
/// columns = weight rows from col0) into its fp32 totals by the columns' group scales, and clears
/// it: total += scale[col][g] * float(acc). Group by group in order, as reference_gemm_w4a8 sums.
template <class Scale>
WEFT_HOST_DEVICE void w4a8_fold_group(const w4a8_params<Scale>& p, std::int64_t col0, std::int64_t g, int lane,
                                      std::int32_t (&acc)[4], float (&total)[4]) noexcept {
  for (int i = 0; i < 4; ++i) {
    const std::int64_t gn = col0 + mma_c(lane, i).col;
    const float scale = gn < p.n ? static_cast<float>(p.scales[gn * p.groups + g]) : 0.0f;
    total[i] += scale * static_cast<float>(acc[i]);
    acc[i] = 0;
  }
}

/// Writes one lane's fp32 totals times the rows' token scales, skipping positions outside Y.
template <class Scale>
WEFT_HOST_DEVICE void w4a8_store(const w4a8_params<Scale>& p, std::int64_t row0, std::int64_t col0, int lane,
                                 const float (&total)[4]) noexcept {
  for (int i = 0; i < 4; ++i) {
    const frag_pos c = mma_c(lane, i);
    const std::int64_t gm = row0 + c.row, gn = col0 + c.col;
    if (gm < p.m && gn < p.n) p.y[gm * p.n + gn] = total[i] * p.a_scales[gm];
  }
}

/// Four signed bytes of a and b multiplied pairwise and added to c: __dp4a on the GPU (sm_61+),
/// the same arithmetic on the host. O(1).
WEFT_HOST_DEVICE inline std::int32_t dp4a(std::int32_t a, std::int32_t b, std::int32_t c) noexcept {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
  return __dp4a(a, b, c);
#else
  for (int i = 0; i < 4; ++i)
    c += static_cast<std::int8_t>(static_cast<std::uint32_t>(a) >> (8 * i)) *
         static_cast<std::int8_t>(static_cast<std::uint32_t>(b) >> (8 * i));
  return c;
#endif
}

/// Four bytes as one little-endian word (byte loads: no alignment needed). O(1).
WEFT_HOST_DEVICE inline std::int32_t pack4(std::int32_t b0, std::int32_t b1, std::int32_t b2,
                                           std::int32_t b3) noexcept {
  return static_cast<std::int32_t>(
      (static_cast<std::uint32_t>(b0) & 0xFFu) | ((static_cast<std::uint32_t>(b1) & 0xFFu) << 8) |
      ((static_cast<std::uint32_t>(b2) & 0xFFu) << 16) | ((static_cast<std::uint32_t>(b3) & 0xFFu) << 24));
}

/// Exact int32 sum of (code - zero) * a over one 16-byte int4 block (32 elements from k0; past K
/// the activations count as 0), by dp4a on four bytes at a time. O(1).
WEFT_HOST_DEVICE inline std::int32_t w4a8_block_dot(const std::uint8_t (&p)[16], int zero, const std::int8_t* x,
                                                    std::int64_t k0, std::int64_t k) noexcept {
  const auto xa = [&](std::int64_t i) { return i < k ? static_cast<std::int32_t>(x[i]) : 0; };
  std::int32_t dot = 0;
  for (int j = 0; j < 16; j += 4) {
    // Low nibbles are elements k0 + j.., high nibbles k0 + 16 + j..
    const std::int32_t w_lo =
        pack4((p[j] & 0xF) - zero, (p[j + 1] & 0xF) - zero, (p[j + 2] & 0xF) - zero, (p[j + 3] & 0xF) - zero);
    const std::int32_t w_hi =
        pack4((p[j] >> 4) - zero, (p[j + 1] >> 4) - zero, (p[j + 2] >> 4) - zero, (p[j + 3] >> 4) - zero);
    dot = dp4a(w_lo, pack4(xa(k0 + j), xa(k0 + j + 1), xa(k0 + j + 2), xa(k0 + j + 3)), dot);
    dot = dp4a(w_hi, pack4(xa(k0 + 16 + j), xa(k0 + 17 + j), xa(k0 + 18 + j), xa(k0 + 19 + j)), dot);
  }
  return dot;
}

/// Partial result one warp lane computes in the W4A8 GEMV: lane takes int4 blocks lane,
/// lane + lanes, ... of one weight row (`load(b, block)` fills block b's 16 bytes: a 16-byte
/// vector load on the GPU, so the codes must be 16-byte aligned), per block the exact int32 dot
/// product times the block's group scale, summed in fp32. x: the token's K int8 activations.
template <class Scale, class Load>
WEFT_HOST_DEVICE float w4a8_lane_dot(Load&& load, const Scale* scales, const std::int16_t* zeros, const std::int8_t* x,
                                     std::int64_t k, std::int64_t group_size, int lane, int lanes) noexcept {
  float total = 0.0f;
  const std::int64_t blocks = ceil_div(k, int4_block);
  for (std::int64_t b = lane; b < blocks; b += lanes) {
    const std::int64_t g = b * int4_block / group_size;
    std::uint8_t block[16];
    load(b, block);
    total += static_cast<float>(scales[g]) * static_cast<float>(w4a8_block_dot(block, zeros[g], x, b * int4_block, k));
  }
  return total;
}

}  // namespace weft::quant

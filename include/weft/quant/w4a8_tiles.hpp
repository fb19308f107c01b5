// The building blocks of weft's CUDA W4A8 kernels (quant/cuda/w4a8_gemm.cuh) as plain
// WEFT_HOST_DEVICE functions, so the tests run them on the CPU for every thread of a grid: int4
// codes turned into signed int8 (code - zero, in -16..15) next to int8 activations in shared
// memory for mma.m16n8k32.s8 (exact int32 per group), the fold of each group's int32 sums into
// fp32 by the group's scale. The decode GEMV has its own register math (gemv_fragments.hpp). The scheme of QServe's
// W4A8 GEMM (Lin et al., 2024) and llama.cpp's Q4_0 x Q8_0, on weft's layout.
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

}  // namespace weft::quant

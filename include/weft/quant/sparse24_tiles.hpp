// The building blocks of weft's CUDA 2:4 sparse W4A16 kernel (quant/cuda/w4a16_sparse24_gemm.cuh)
// as plain WEFT_HOST_DEVICE functions, run on the CPU by the tests for every thread of a grid:
// the tile load that expands Sparse-Marlin's format (kept int4 codes + 2-bit positions; Frantar,
// Castro et al., MARLIN, 2024) into a dense fp16/bf16 shared-memory tile for mma.m16n8k16.
#pragma once

#include <weft/core/config.hpp>
#include <weft/quant/device_tiles.hpp>
#include <weft/quant/sparse24_matrix.hpp>
#include <weft/quant/tile_math.hpp>

#include <cstdint>

namespace weft::quant {

/// Arguments of the 2:4 sparse W4A16 kernel (device pointers). Y = X W^T, X: M x K (row-major,
/// Act), W: sparse24_matrix's parts (values().packed(), meta(), values().scales()/zeros()),
/// Y: M x N fp32. group_size counts original inputs. A plain value.
template <class Act, class Scale>
struct sparse24_params {
  const Act* x = nullptr;
  const std::uint8_t* codes = nullptr;  // N x K/2 kept codes, weft int4 layout
  const std::uint8_t* meta = nullptr;   // N x K/8 bytes
  const Scale* scales = nullptr;
  const std::int16_t* zeros = nullptr;
  float* y = nullptr;
  std::int64_t m = 0, n = 0, k = 0, group_size = 0, groups = 0;
};

/// Dequantized weight (n, k) of the sparse matrix (0 when pruned), from device-side parts. O(1).
template <class Act, class Scale>
WEFT_HOST_DEVICE float sparse24_weight(const sparse24_params<Act, Scale>& p, std::int64_t n, std::int64_t k) noexcept {
  const std::int64_t t = k / 4;
  const std::uint8_t nibble = static_cast<std::uint8_t>((p.meta[n * (p.k / 8) + t / 2] >> (4 * (t % 2))) & 0xF);
  const std::uint8_t* row = p.codes + n * (p.k / 4);
  const std::int64_t g = k / p.group_size;
  for (int slot = 0; slot < 2; ++slot)
    if (sparse24_position(nibble, slot) == k % 4)
      return dequant(int4_get(row, 2 * t + slot), p.zeros[n * p.groups + g],
                     static_cast<float>(p.scales[n * p.groups + g]));
  return 0.0f;
}

/// Thread `tid` of `threads` loads its share of the A tile and expands its share of the sparse B
/// tile (pruned weights as 0) for the 32-wide k-slice at k0. Out-of-range entries become 0.
template <class Tile, class Act, class Scale>
WEFT_HOST_DEVICE void sparse24_load_tiles(const sparse24_params<Act, Scale>& p, std::int64_t m0, std::int64_t n0,
                                          std::int64_t k0, w4_smem<Tile>& s, int tid, int threads) noexcept {
  w4_load_a_tile(p, m0, k0, s, tid, threads);
  constexpr int bk = Tile::block_k;
  for (int i = tid; i < Tile::block_n * bk; i += threads) {
    const int r = i / bk, c = i % bk;
    const std::int64_t gn = n0 + r, gk = k0 + c;
    s.b[r][c] = detail::bits16(Act(gn < p.n && gk < p.k ? sparse24_weight(p, gn, gk) : 0.0f));
  }
}

}  // namespace weft::quant

// The building blocks of weft's CUDA GEMM kernels (quant/cuda/*.cuh) as plain WEFT_HOST_DEVICE
// functions: kernel parameters, shared-memory tile loads with fused int4 dequantization, a warp
// tile computed from mma fragments, and the stores. The kernels call them per thread; the tests
// call them on the CPU for every thread of a grid, so the GPU's index arithmetic is checked here.
// Layer ladder as in CUB (fragment -> warp tile -> block tile -> launcher).
#pragma once

#include <weft/core/config.hpp>
#include <weft/core/half.hpp>
#include <weft/quant/concepts.hpp>
#include <weft/quant/tile_math.hpp>

#include <concepts>
#include <cstdint>
#include <type_traits>

namespace weft::quant {

/// Block and warp tile of the CUDA GEMMs: a block computes block_m x block_n outputs with
/// warps_m x warps_n warps; each warp a (block_m / warps_m) x (block_n / warps_n) tile built from
/// 16 x 8 mma tiles. K advances 32 at a time (one int4 block; two k16 or one k32 mma step). Compile-time only.
template <int BlockM, int BlockN, int WarpsM, int WarpsN>
struct gemm_tile {
  static constexpr int block_m = BlockM, block_n = BlockN, warps_m = WarpsM, warps_n = WarpsN;
  static constexpr int block_k = 32;
  static constexpr int threads = 32 * WarpsM * WarpsN;
  static constexpr int warp_m = BlockM / WarpsM, warp_n = BlockN / WarpsN;
  static constexpr int mma_m = warp_m / 16, mma_n = warp_n / 8;  // mma tiles per warp
};

/// The full tile description (threads, warp tile, mma counts) of any gemm_tile_shape type.
template <gemm_tile_shape T>
using as_gemm_tile = gemm_tile<T::block_m, T::block_n, T::warps_m, T::warps_n>;

/// Default tiles. 64 x 64 with 2 x 2 warps suits M >= 64; decoding batches use 16 x 128, 1 x 4.
using default_w4_tile = gemm_tile<64, 64, 2, 2>;
using small_batch_w4_tile = gemm_tile<16, 128, 1, 4>;
using default_w8_tile = gemm_tile<64, 64, 2, 2>;

/// Arguments of the W4A16 kernels (device pointers). Y = X * W^T, X: M x K (row-major, Act),
/// W: weft int4 layout (quantized_matrix::packed/scales/zeros), Y: M x N fp32. A plain value.
template <class Act, class Scale>
struct w4a16_params {
  const Act* x = nullptr;
  const std::uint8_t* codes = nullptr;
  const Scale* scales = nullptr;
  const std::int16_t* zeros = nullptr;
  float* y = nullptr;
  std::int64_t m = 0, n = 0, k = 0, k_padded = 0, group_size = 0, groups = 0;
};

/// Arguments of the W8A8 kernel (device pointers). C = A * W^T, A: M x K int8 (row-major),
/// W: weft int8 panel layout, C: M x N int32. A plain value.
struct w8a8_params {
  const std::int8_t* a = nullptr;
  const std::int8_t* w = nullptr;
  std::int32_t* c = nullptr;
  std::int64_t m = 0, n = 0, k = 0, k_padded = 0;
};

namespace detail {

template <class T>
WEFT_HOST_DEVICE inline std::uint16_t bits16(T v) noexcept {
  return v.bits;
}
template <class T>
WEFT_HOST_DEVICE inline float from_bits16(std::uint16_t b) noexcept {
  return static_cast<float>(T::from_bits(b));
}

}  // namespace detail

/// Shared-memory tiles of the W4A16 kernel: 16-bit activations and dequantized weights, each row
/// padded by 8 elements so the fragment loads of a warp spread over the banks.
template <class Tile>
struct w4_smem {
  std::uint16_t a[Tile::block_m][Tile::block_k + 8];
  std::uint16_t b[Tile::block_n][Tile::block_k + 8];
};

/// Thread `tid` of `threads` loads its share of the A tile (activations p.x, p.m x p.k, row-major)
/// for the k-slice starting at k0, as 16-bit patterns. Out-of-range entries become 0. Shared by every
/// kernel whose A operand is 16-bit activations (W4A16, 2:4 sparse).
template <class Tile, class Params>
WEFT_HOST_DEVICE void w4_load_a_tile(const Params& p, std::int64_t m0, std::int64_t k0, w4_smem<Tile>& s, int tid,
                                     int threads) noexcept {
  constexpr int bk = Tile::block_k;
  for (int i = tid; i < Tile::block_m * bk; i += threads) {
    const int r = i / bk, c = i % bk;
    const std::int64_t gm = m0 + r, gk = k0 + c;
    s.a[r][c] = (gm < p.m && gk < p.k) ? detail::bits16(p.x[gm * p.k + gk]) : std::uint16_t{0};
  }
}

/// Thread `tid` of `threads` loads its share of the A tile and dequantizes its share of the B tile
/// for the k-slice starting at k0. Out-of-range rows and columns become 0.
template <class Tile, class Act, class Scale>
WEFT_HOST_DEVICE void w4_load_tiles(const w4a16_params<Act, Scale>& p, std::int64_t m0, std::int64_t n0,
                                    std::int64_t k0, w4_smem<Tile>& s, int tid, int threads) noexcept {
  w4_load_a_tile(p, m0, k0, s, tid, threads);
  constexpr int bk = Tile::block_k;
  for (int i = tid; i < Tile::block_n * bk; i += threads) {
    const int r = i / bk, c = i % bk;
    const std::int64_t gn = n0 + r, gk = k0 + c;
    float v = 0.0f;
    if (gn < p.n && gk < p.k) {
      const std::int64_t g = gk / p.group_size;
      const std::uint8_t* row = p.codes + gn * int4_row_bytes(p.k_padded);
      v = dequant(int4_get(row, gk), p.zeros[gn * p.groups + g], static_cast<float>(p.scales[gn * p.groups + g]));
    }
    s.b[r][c] = detail::bits16(Act(v));
  }
}

/// Fragments of one m16n8k16 step for a lane: A (4 registers of 2 halves) and B (2 registers).
template <class Tile>
WEFT_HOST_DEVICE void w4_fragments(const w4_smem<Tile>& s, int row0, int col0, int ks, int lane, std::uint32_t (&a)[4],
                                   std::uint32_t (&b)[2]) noexcept {
  for (int r = 0; r < 4; ++r) {
    const frag_pos lo = mma16_a(lane, 2 * r), hi = mma16_a(lane, 2 * r + 1);
    a[r] = static_cast<std::uint32_t>(s.a[row0 + lo.row][ks + lo.col]) |
           (static_cast<std::uint32_t>(s.a[row0 + hi.row][ks + hi.col]) << 16);
  }
  for (int r = 0; r < 2; ++r) {
    const frag_pos lo = mma16_b(lane, 2 * r), hi = mma16_b(lane, 2 * r + 1);
    b[r] = static_cast<std::uint32_t>(s.b[col0 + lo.col][ks + lo.row]) |
           (static_cast<std::uint32_t>(s.b[col0 + hi.col][ks + hi.row]) << 16);
  }
}

/// What mma.m16n8k16 (fp32 accumulate) computes for a whole warp, from the 32 lanes' fragments:
/// the reference the CPU tests hold the fragment layout to. acc[lane] is each lane's C fragment.
template <class Act>
WEFT_HOST_DEVICE void mma16_emulate(const std::uint32_t (&a)[32][4], const std::uint32_t (&b)[32][2],
                                    float (&acc)[32][4]) noexcept {
  float at[16][16] = {}, bt[16][8] = {};
  for (int l = 0; l < 32; ++l) {
    for (int e = 0; e < 8; ++e) {
      const frag_pos p = mma16_a(l, e);
      at[p.row][p.col] = detail::from_bits16<Act>(static_cast<std::uint16_t>(a[l][e / 2] >> (16 * (e % 2))));
    }
    for (int e = 0; e < 4; ++e) {
      const frag_pos p = mma16_b(l, e);
      bt[p.row][p.col] = detail::from_bits16<Act>(static_cast<std::uint16_t>(b[l][e / 2] >> (16 * (e % 2))));
    }
  }
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      const frag_pos c = mma_c(l, i);
      for (int kk = 0; kk < 16; ++kk) acc[l][i] += at[c.row][kk] * bt[kk][c.col];
    }
}

/// Direct form of one lane's m16n8k16 step from shared memory (no fragments): the fallback for
/// GPUs without mma (sm < 80). Same products and, on exact inputs, the same sums.
template <class Tile, class Act>
WEFT_HOST_DEVICE void w4_lane_step(const w4_smem<Tile>& s, int row0, int col0, int ks, int lane,
                                   float (&acc)[4]) noexcept {
  for (int i = 0; i < 4; ++i) {
    const frag_pos c = mma_c(lane, i);
    float sum = acc[i];
    for (int kk = 0; kk < 16; ++kk)
      sum +=
          detail::from_bits16<Act>(s.a[row0 + c.row][ks + kk]) * detail::from_bits16<Act>(s.b[col0 + c.col][ks + kk]);
    acc[i] = sum;
  }
}

/// Writes one lane's C fragment of the mma tile at (row0, col0) of the output, skipping outside.
template <class Out>
WEFT_HOST_DEVICE void store_c_fragment(Out* out, std::int64_t m, std::int64_t n, std::int64_t row0, std::int64_t col0,
                                       int lane, const Out (&acc)[4]) noexcept {
  for (int i = 0; i < 4; ++i) {
    const frag_pos c = mma_c(lane, i);
    const std::int64_t gm = row0 + c.row, gn = col0 + c.col;
    if (gm < m && gn < n) out[gm * n + gn] = acc[i];
  }
}

/// Shared-memory tiles of the W8A8 kernel.
template <class Tile>
struct w8_smem {
  std::int8_t a[Tile::block_m][Tile::block_k + 16];
  std::int8_t b[Tile::block_n][Tile::block_k + 16];
};

/// Thread `tid` of `threads` loads its share of the int8 A and W tiles for the k-slice at k0.
template <class Tile>
WEFT_HOST_DEVICE void w8_load_tiles(const w8a8_params& p, std::int64_t m0, std::int64_t n0, std::int64_t k0,
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
    s.b[r][c] = (gn < p.n && gk < p.k) ? p.w[int8_offset(gn, gk, p.k_padded)] : std::int8_t{0};
  }
}

/// Fragments of one m16n8k32 step: A (4 registers of 4 bytes) and B (2 registers).
template <class Tile>
WEFT_HOST_DEVICE void w8_fragments(const w8_smem<Tile>& s, int row0, int col0, int lane, std::uint32_t (&a)[4],
                                   std::uint32_t (&b)[2]) noexcept {
  for (int r = 0; r < 4; ++r) {
    a[r] = 0;
    for (int e = 0; e < 4; ++e) {
      const frag_pos p = mma32_a(lane, 4 * r + e);
      a[r] |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(s.a[row0 + p.row][p.col])) << (8 * e);
    }
  }
  for (int r = 0; r < 2; ++r) {
    b[r] = 0;
    for (int e = 0; e < 4; ++e) {
      const frag_pos p = mma32_b(lane, 4 * r + e);
      b[r] |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(s.b[col0 + p.col][p.row])) << (8 * e);
    }
  }
}

/// What mma.m16n8k32.s32.s8.s8 computes for a whole warp, from the 32 lanes' fragments.
WEFT_HOST_DEVICE inline void mma32_emulate(const std::uint32_t (&a)[32][4], const std::uint32_t (&b)[32][2],
                                           std::int32_t (&acc)[32][4]) noexcept {
  std::int8_t at[16][32] = {}, bt[32][8] = {};
  for (int l = 0; l < 32; ++l) {
    for (int e = 0; e < 16; ++e) {
      const frag_pos p = mma32_a(l, e);
      at[p.row][p.col] = static_cast<std::int8_t>(a[l][e / 4] >> (8 * (e % 4)));
    }
    for (int e = 0; e < 8; ++e) {
      const frag_pos p = mma32_b(l, e);
      bt[p.row][p.col] = static_cast<std::int8_t>(b[l][e / 4] >> (8 * (e % 4)));
    }
  }
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      const frag_pos c = mma_c(l, i);
      for (int kk = 0; kk < 32; ++kk) acc[l][i] += at[c.row][kk] * bt[kk][c.col];
    }
}

/// Direct form of one lane's m16n8k32 step from shared memory: the fallback for sm < 80.
template <class Tile>
WEFT_HOST_DEVICE void w8_lane_step(const w8_smem<Tile>& s, int row0, int col0, int lane,
                                   std::int32_t (&acc)[4]) noexcept {
  for (int i = 0; i < 4; ++i) {
    const frag_pos c = mma_c(lane, i);
    for (int kk = 0; kk < 32; ++kk) acc[i] += s.a[row0 + c.row][kk] * s.b[col0 + c.col][kk];
  }
}

}  // namespace weft::quant

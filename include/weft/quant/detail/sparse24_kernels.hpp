// Inner kernels of the 2:4 sparse W4 GEMV/GEMM (gemm_sparse24.hpp): NR sparse rows against MB
// fp32 activation rows. A 16-byte block of kept codes covers 64 original inputs (16 groups of 4);
// its 8 bytes of metadata give, for kept element j, the input 4 (j / 2) + ((meta >> 2j) & 3) of
// the 64-input window, so the AVX-512 path gathers its activations with one vpermt2ps per 16.
#pragma once

#include <weft/quant/detail/simd.hpp>
#include <weft/quant/detail/w4_kernels.hpp>

#include <cstdint>
#include <cstring>

WEFT_QUANT_KERNELS_BEGIN;  // detail/simd.hpp: GCC bug 105593

namespace weft::quant::detail {

/// Arguments of one tile. rows[r]: the row's kept codes (K / 4 bytes); meta[r]: its metadata
/// (K / 8 bytes); xs[m]: fp32 activations (K floats).
template <int NR, int MB, class Scale>
struct sparse24_tile_args {
  const std::uint8_t* rows[std::size_t{NR}];
  const std::uint8_t* meta[std::size_t{NR}];
  const std::uint8_t* prefetch[std::size_t{NR}];  // the kept codes 4 rows ahead, or null
  const Scale* scales[std::size_t{NR}];
  const std::int16_t* zeros[std::size_t{NR}];
  const float* xs[std::size_t{MB}];
  std::int64_t groups;
  std::int64_t blocks_per_group;  // 16-byte blocks of kept codes per group (group_size / 64)
  std::int64_t blocks;            // K / 64
};

/// Input (0..63) of kept element j (0..31) of a block within its 64-input window. O(1).
constexpr int sparse24_input(std::uint64_t meta, int j) noexcept {
  return 4 * (j / 2) + static_cast<int>((meta >> (2 * j)) & 3u);
}

template <int NR, int MB, class Scale>
void sparse24_tile_portable(const sparse24_tile_args<NR, MB, Scale>& a,
                            float (&out)[std::size_t{NR}][std::size_t{MB}]) noexcept {
  for (int r = 0; r < NR; ++r)
    for (int m = 0; m < MB; ++m) out[r][m] = 0.0f;
  for (std::int64_t g = 0; g < a.groups; ++g) {
    const std::int64_t b_end = (g + 1) * a.blocks_per_group < a.blocks ? (g + 1) * a.blocks_per_group : a.blocks;
    for (int r = 0; r < NR; ++r) {
      const int zero = a.zeros[r][g];
      const float scale = scale_to_float(a.scales[r][g]);
      for (int m = 0; m < MB; ++m) {
        float acc = 0.0f;
        for (std::int64_t b = g * a.blocks_per_group; b < b_end; ++b) {
          const std::uint8_t* p = a.rows[r] + b * int4_block_bytes;
          std::uint64_t meta;
          std::memcpy(&meta, a.meta[r] + b * 8, 8);
          const float* x = a.xs[m] + b * 64;
          for (int j = 0; j < 32; ++j) {
            const int code = j < 16 ? (p[j] & 0xF) : (p[j - 16] >> 4);
            acc += static_cast<float>(code - zero) * x[sparse24_input(meta, j)];
          }
        }
        out[r][m] += scale * acc;
      }
    }
  }
}

#if WEFT_QUANT_X86

/// AVX-512: kept codes minus the zero point as fp32 (exact), activations gathered from the
/// 64-input window by vpermt2ps with indices decoded from the metadata, fp32 FMA per group.
template <int NR, int MB, class Scale>
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))) void sparse24_tile_avx512(
    const sparse24_tile_args<NR, MB, Scale>& a, float (&out)[std::size_t{NR}][std::size_t{MB}]) noexcept {
  __m512 total[std::size_t{NR}][std::size_t{MB}];
#pragma GCC unroll 16
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) total[r][m] = _mm512_setzero_ps();
  const __m512i nibble = _mm512_set1_epi32(0xF), three = _mm512_set1_epi32(3);
  // Lane j: shift 2j of the metadata word, base 4 (j / 2) of the window.
  const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i base = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
  const bool fetch = a.prefetch[0] != nullptr;
  for (std::int64_t g = 0; g < a.groups; ++g) {
    __m512 acc[std::size_t{NR}][std::size_t{MB}];
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r)
#pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) acc[r][m] = _mm512_setzero_ps();
    __m512i zero[std::size_t{NR}];
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r) zero[r] = _mm512_set1_epi32(a.zeros[r][g]);
    const std::int64_t b_end = (g + 1) * a.blocks_per_group < a.blocks ? (g + 1) * a.blocks_per_group : a.blocks;
    for (std::int64_t b = g * a.blocks_per_group; b < b_end; ++b) {
      if ((b & 3) == 0 && fetch)
#pragma GCC unroll 16
        for (int r = 0; r < NR; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(a.prefetch[r] + b * int4_block_bytes), _MM_HINT_T0);
#pragma GCC unroll 16
      for (int r = 0; r < NR; ++r) {
        const __m512i v =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.rows[r] + b * int4_block_bytes)));
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(v, nibble), zero[r]));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(v, 4), zero[r]));
        std::uint32_t meta[2];
        std::memcpy(meta, a.meta[r] + b * 8, 8);
        const __m512i idx_lo = _mm512_add_epi32(
            base, _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(meta[0])), shifts), three));
        const __m512i idx_hi = _mm512_add_epi32(
            base, _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(meta[1])), shifts), three));
#pragma GCC unroll 16
        for (int m = 0; m < MB; ++m) {
          const float* x = a.xs[m] + b * 64;
          const __m512 x_lo = _mm512_permutex2var_ps(_mm512_loadu_ps(x), idx_lo, _mm512_loadu_ps(x + 16));
          const __m512 x_hi = _mm512_permutex2var_ps(_mm512_loadu_ps(x + 32), idx_hi, _mm512_loadu_ps(x + 48));
          acc[r][m] = _mm512_fmadd_ps(lo, x_lo, acc[r][m]);
          acc[r][m] = _mm512_fmadd_ps(hi, x_hi, acc[r][m]);
        }
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r) {
      const __m512 scale = _mm512_set1_ps(scale_to_float_f16c(a.scales[r][g]));
#pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) total[r][m] = _mm512_fmadd_ps(scale, acc[r][m], total[r][m]);
    }
  }
  // Horizontal sums through memory: g++ 12's _mm512_reduce_add_ps trips -Wuninitialized.
  alignas(64) float lanes[16];
  for (int r = 0; r < NR; ++r)
    for (int m = 0; m < MB; ++m) {
      _mm512_store_ps(lanes, total[r][m]);
      for (int width = 8; width > 0; width /= 2)
        for (int i = 0; i < width; ++i) lanes[i] += lanes[i + width];
      out[r][m] = lanes[0];
    }
}

#endif  // WEFT_QUANT_X86

/// Runs the tile on `path` (already resolved and supported).
template <int NR, int MB, class Scale>
void sparse24_tile(isa path, const sparse24_tile_args<NR, MB, Scale>& a,
                   float (&out)[std::size_t{NR}][std::size_t{MB}]) noexcept {
#if WEFT_QUANT_X86
  if (path == isa::avx512) return sparse24_tile_avx512(a, out);
#endif
  (void)path;
  sparse24_tile_portable(a, out);
}

}  // namespace weft::quant::detail

WEFT_QUANT_KERNELS_END;

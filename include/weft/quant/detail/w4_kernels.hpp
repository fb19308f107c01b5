// Inner kernels of the W4 GEMV/GEMM (gemm_w4.hpp): NR weight rows against MB activation rows,
// group by group, one function per instruction set. Each returns, per (row, activation),
// sum_g scale_g * sum_{k in g} code_k * x_k - sum_g scale_g * zero_g * sum_{k in g} x_k.
#pragma once

#include <weft/quant/detail/simd.hpp>

#include <weft/core/half.hpp>

#include <cstdint>
#include <type_traits>

WEFT_QUANT_KERNELS_BEGIN;  // detail/simd.hpp: GCC bug 105593

namespace weft::quant::detail {

/// A scale as fp32. The core half conversion is exact but slow in a hot loop; the vector paths
/// use F16C, which gives the same value.
template <class Scale>
inline float scale_to_float(Scale s) noexcept {
  return static_cast<float>(s);
}
#if WEFT_QUANT_X86
template <class Scale>
__attribute__((target("f16c"))) inline float scale_to_float_f16c(Scale s) noexcept {
  if constexpr (std::is_same_v<Scale, half>)
    return _cvtsh_ss(s.bits);
  else
    return static_cast<float>(s);
}
#endif

/// Arguments shared by every path. rows[r] points at a packed int4 row; xs[m] at a float
/// activation row padded to a multiple of 32 with zeros; scales[r] at the row's G scales.
template <int NR, int MB, class Scale>
struct w4_tile_args {
  const std::uint8_t* rows[std::size_t{NR}];
  const float* xs[std::size_t{MB}];
  const float* xsums[std::size_t{MB}];  // per-group sums of each activation row
  // avx512_bf16 only: bf16 activation rows, each 64-element chunk reordered as
  // [0..15, 32..47, 16..31, 48..63] to match the nibbles of two blocks widened to 32 lanes.
  const std::uint16_t* xb[std::size_t{MB}];
  const Scale* scales[std::size_t{NR}];
  const std::int16_t* zeros[std::size_t{NR}];
  // Rows to prefetch while this tile runs (the next row block), or null: the rows of a tile are
  // separate 2-8 KiB streams, too short for the hardware prefetcher to reach DRAM speed.
  const std::uint8_t* prefetch[std::size_t{NR}];
  std::int64_t groups;            // G
  std::int64_t blocks_per_group;  // group_size / 32
  std::int64_t blocks;            // k_padded / 32
};

template <int NR, int MB, class Scale>
void w4_tile_portable(const w4_tile_args<NR, MB, Scale>& a, float (&out)[std::size_t{NR}][std::size_t{MB}]) noexcept {
  float correction[std::size_t{NR}][std::size_t{MB}] = {};
  for (int r = 0; r < NR; ++r)
    for (int m = 0; m < MB; ++m) out[r][m] = 0.0f;
  for (std::int64_t g = 0; g < a.groups; ++g) {
    float acc[std::size_t{NR}][std::size_t{MB}] = {};
    const std::int64_t b_end = (g + 1) * a.blocks_per_group < a.blocks ? (g + 1) * a.blocks_per_group : a.blocks;
    for (std::int64_t b = g * a.blocks_per_group; b < b_end; ++b)
      for (int r = 0; r < NR; ++r) {
        const std::uint8_t* p = a.rows[r] + b * int4_block_bytes;
        for (int m = 0; m < MB; ++m) {
          const float* x = a.xs[m] + b * int4_block;
          float s = acc[r][m];
          for (int j = 0; j < 16; ++j) {
            s += static_cast<float>(p[j] & 0xF) * x[j];
            s += static_cast<float>(p[j] >> 4) * x[j + 16];
          }
          acc[r][m] = s;
        }
      }
    for (int r = 0; r < NR; ++r) {
      const float scale = scale_to_float(a.scales[r][g]);
      const float zero = scale * static_cast<float>(a.zeros[r][g]);
      for (int m = 0; m < MB; ++m) {
        out[r][m] += scale * acc[r][m];
        correction[r][m] += zero * a.xsums[m][g];
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int m = 0; m < MB; ++m) out[r][m] -= correction[r][m];
}

#if WEFT_QUANT_X86

template <int NR, int MB, class Scale>
__attribute__((target("avx2,fma,f16c"))) void w4_tile_avx2(const w4_tile_args<NR, MB, Scale>& a,
                                                           float (&out)[std::size_t{NR}][std::size_t{MB}]) noexcept {
  __m256 total[std::size_t{NR}][std::size_t{MB}];
  float correction[std::size_t{NR}][std::size_t{MB}] = {};
#pragma GCC unroll 16
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) total[r][m] = _mm256_setzero_ps();
  const __m256i nibble = _mm256_set1_epi32(0xF);
  for (std::int64_t g = 0; g < a.groups; ++g) {
    __m256 acc[std::size_t{NR}][std::size_t{MB}];
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r)
#pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) acc[r][m] = _mm256_setzero_ps();
    const std::int64_t b_end = (g + 1) * a.blocks_per_group < a.blocks ? (g + 1) * a.blocks_per_group : a.blocks;
    for (std::int64_t b = g * a.blocks_per_group; b < b_end; ++b) {
      // Byte j holds element j (low nibble) and j + 16 (high): two 8-byte halves give 4 vectors.
#pragma GCC unroll 16
      for (int r = 0; r < NR; ++r) {
        const std::uint8_t* p = a.rows[r] + b * int4_block_bytes;
        const __m256i v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
        const __m256i v1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)));
        const __m256 w0 = _mm256_cvtepi32_ps(_mm256_and_si256(v0, nibble));
        const __m256 w1 = _mm256_cvtepi32_ps(_mm256_and_si256(v1, nibble));
        const __m256 w2 = _mm256_cvtepi32_ps(_mm256_srli_epi32(v0, 4));
        const __m256 w3 = _mm256_cvtepi32_ps(_mm256_srli_epi32(v1, 4));
#pragma GCC unroll 16
        for (int m = 0; m < MB; ++m) {
          const float* x = a.xs[m] + b * int4_block;
          acc[r][m] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x), acc[r][m]);
          acc[r][m] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), acc[r][m]);
          acc[r][m] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x + 16), acc[r][m]);
          acc[r][m] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + 24), acc[r][m]);
        }
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r) {
      const float sf = scale_to_float_f16c(a.scales[r][g]);
      const float zf = sf * static_cast<float>(a.zeros[r][g]);
      const __m256 scale = _mm256_set1_ps(sf);
#pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) {
        total[r][m] = _mm256_fmadd_ps(scale, acc[r][m], total[r][m]);
        correction[r][m] += zf * a.xsums[m][g];
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int m = 0; m < MB; ++m) {
      const __m128 h = _mm_add_ps(_mm256_castps256_ps128(total[r][m]), _mm256_extractf128_ps(total[r][m], 1));
      const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
      out[r][m] = _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q))) - correction[r][m];
    }
}

/// The end of group g in the AVX-512 tiles: total += scale x acc, and the zero-point term
/// correction += scale x (zero + zero_offset) x sum(x) (zero_offset 128 where codes were biased by 128).
template <int NR, int MB, class Scale>
__attribute__((target("avx512f,fma,f16c"), always_inline)) inline void w4_group_end_avx512(
    const w4_tile_args<NR, MB, Scale>& a, std::int64_t g, int zero_offset,
    const __m512 (&acc)[std::size_t{NR}][std::size_t{MB}], __m512 (&total)[std::size_t{NR}][std::size_t{MB}],
    float (&correction)[std::size_t{NR}][std::size_t{MB}]) noexcept {
#pragma GCC unroll 16
  for (int r = 0; r < NR; ++r) {
    const float sf = scale_to_float_f16c(a.scales[r][g]);
    const float zf = sf * static_cast<float>(a.zeros[r][g] + zero_offset);
    const __m512 scale = _mm512_set1_ps(sf);
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) {
      total[r][m] = _mm512_fmadd_ps(scale, acc[r][m], total[r][m]);
      correction[r][m] += zf * a.xsums[m][g];
    }
  }
}

/// out = the horizontal sum of each total minus its correction. Through memory: g++ 12's
/// _mm512_reduce_add_ps trips -Wuninitialized.
template <int NR, int MB>
__attribute__((target("avx512f"), always_inline)) inline void w4_tile_sums_avx512(
    const __m512 (&total)[std::size_t{NR}][std::size_t{MB}],
    const float (&correction)[std::size_t{NR}][std::size_t{MB}],
    float (&out)[std::size_t{NR}][std::size_t{MB}]) noexcept {
  alignas(64) float lanes[16];
  for (int r = 0; r < NR; ++r)
    for (int m = 0; m < MB; ++m) {
      _mm512_store_ps(lanes, total[r][m]);
      for (int width = 8; width > 0; width /= 2)
        for (int i = 0; i < width; ++i) lanes[i] += lanes[i + width];
      out[r][m] = lanes[0] - correction[r][m];
    }
}

template <int NR, int MB, class Scale>
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))) void w4_tile_avx512(
    const w4_tile_args<NR, MB, Scale>& a, float (&out)[std::size_t{NR}][std::size_t{MB}]) noexcept {
  __m512 total[std::size_t{NR}][std::size_t{MB}];
  float correction[std::size_t{NR}][std::size_t{MB}] = {};
#pragma GCC unroll 16
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) total[r][m] = _mm512_setzero_ps();
  const __m512i nibble = _mm512_set1_epi32(0xF);
  for (std::int64_t g = 0; g < a.groups; ++g) {
    __m512 acc[std::size_t{NR}][std::size_t{MB}];
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r)
#pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) acc[r][m] = _mm512_setzero_ps();
    const std::int64_t b_end = (g + 1) * a.blocks_per_group < a.blocks ? (g + 1) * a.blocks_per_group : a.blocks;
    for (std::int64_t b = g * a.blocks_per_group; b < b_end; ++b) {
      if ((b & 3) == 0 && a.prefetch[0] != nullptr)
#pragma GCC unroll 16
        for (int r = 0; r < NR; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(a.prefetch[r] + b * int4_block_bytes), _MM_HINT_T0);
          // One 16-byte load zero-extended to 16 lanes: low nibbles are x[0..15], high x[16..31].
#pragma GCC unroll 16
      for (int r = 0; r < NR; ++r) {
        const __m512i v =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.rows[r] + b * int4_block_bytes)));
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, nibble));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
#pragma GCC unroll 16
        for (int m = 0; m < MB; ++m) {
          const float* x = a.xs[m] + b * int4_block;
          acc[r][m] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x), acc[r][m]);
          acc[r][m] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + 16), acc[r][m]);
        }
      }
    }
    w4_group_end_avx512(a, g, 0, acc, total, correction);
  }
  w4_tile_sums_avx512<NR, MB>(total, correction, out);
}

/// AVX-512 BF16 path (bf16 activations, groups a multiple of 64): codes become the bf16 numbers
/// 128 + code by OR-ing 0x4300 into the 16-bit lanes (exact), vdpbf16ps multiplies pairs of lanes
/// with the activations, and the 128 goes into the zero-point term: sum (c - z) x =
/// sum (128 + c) x - (128 + z) sum x.
template <int NR, int MB, class Scale>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma,f16c"))) void w4_tile_avx512_bf16(
    const w4_tile_args<NR, MB, Scale>& a, float (&out)[std::size_t{NR}][std::size_t{MB}]) noexcept {
  __m512 total[std::size_t{NR}][std::size_t{MB}];
  float correction[std::size_t{NR}][std::size_t{MB}] = {};
#pragma GCC unroll 16
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) total[r][m] = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi16(0xF), bias = _mm512_set1_epi16(0x4300);
  const __m256i low_h = _mm256_set1_epi16(0xF), bias_h = _mm256_set1_epi16(0x4300);
  for (std::int64_t g = 0; g < a.groups; ++g) {
    __m512 acc[std::size_t{NR}][std::size_t{MB}];
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r)
#pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) acc[r][m] = _mm512_setzero_ps();
    const std::int64_t b0 = g * a.blocks_per_group;
    const std::int64_t b_end = b0 + a.blocks_per_group < a.blocks ? b0 + a.blocks_per_group : a.blocks;
    std::int64_t b = b0;
    for (; b + 2 <= b_end; b += 2) {
      if ((b & 3) == 0 && a.prefetch[0] != nullptr)
#pragma GCC unroll 16
        for (int r = 0; r < NR; ++r)
          _mm_prefetch(reinterpret_cast<const char*>(a.prefetch[r] + b * int4_block_bytes), _MM_HINT_T0);
#pragma GCC unroll 16
      for (int r = 0; r < NR; ++r) {
        const __m512i v = _mm512_cvtepu8_epi16(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.rows[r] + b * int4_block_bytes)));
        const __m512i lo = _mm512_or_si512(_mm512_and_si512(v, low), bias);
        const __m512i hi = _mm512_or_si512(_mm512_srli_epi16(v, 4), bias);
#pragma GCC unroll 16
        for (int m = 0; m < MB; ++m) {
          const std::uint16_t* x = a.xb[m] + b * int4_block;
          acc[r][m] = _mm512_dpbf16_ps(acc[r][m], (__m512bh)lo, (__m512bh)_mm512_loadu_si512(x));
          acc[r][m] = _mm512_dpbf16_ps(acc[r][m], (__m512bh)hi, (__m512bh)_mm512_loadu_si512(x + 32));
        }
      }
    }
    if (b < b_end) {  // a last single block (K padded to an odd number of blocks): x in plain order
#pragma GCC unroll 16
      for (int r = 0; r < NR; ++r) {
        const __m256i v =
            _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.rows[r] + b * int4_block_bytes)));
        const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, low_h), bias_h);
        const __m256i hi = _mm256_or_si256(_mm256_srli_epi16(v, 4), bias_h);
#pragma GCC unroll 16
        for (int m = 0; m < MB; ++m) {
          const std::uint16_t* x = a.xb[m] + b * int4_block;
          __m256 part = _mm256_dpbf16_ps(_mm256_setzero_ps(), (__m256bh)lo,
                                         (__m256bh)_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
          part = _mm256_dpbf16_ps(part, (__m256bh)hi,
                                  (__m256bh)_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16)));
          acc[r][m] = _mm512_add_ps(acc[r][m], _mm512_zextps256_ps512(part));
        }
      }
    }
    w4_group_end_avx512(a, g, 128, acc, total, correction);
  }
  w4_tile_sums_avx512<NR, MB>(total, correction, out);
}

#endif  // WEFT_QUANT_X86

/// Runs the tile on `path` (already resolved and supported).
template <int NR, int MB, class Scale>
void w4_tile(isa path, const w4_tile_args<NR, MB, Scale>& a, float (&out)[std::size_t{NR}][std::size_t{MB}]) noexcept {
#if WEFT_QUANT_X86
  if (path == isa::avx512_bf16) return w4_tile_avx512_bf16(a, out);
  if (path == isa::avx512) return w4_tile_avx512(a, out);
  if (path == isa::avx2) return w4_tile_avx2(a, out);
#endif
  (void)path;
  w4_tile_portable(a, out);
}

}  // namespace weft::quant::detail

WEFT_QUANT_KERNELS_END;

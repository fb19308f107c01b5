// Inner kernels of the W4A8 GEMV/GEMM (gemm_w4a8.hpp): NR int4 weight rows against MB int8
// activation rows, int32 dot products per group (vpdpbusd on AVX-512 VNNI, vpmaddubsw + vpmaddwd
// on AVX2), then one fp32 multiply-add by the group's scale. Each tile returns, per (row, token),
//   sum_g scale_g * (sum_{k in g} code_k * a_k)  -  sum_g scale_g * zero_g * (sum_{k in g} a_k),
// the integer form of llama.cpp's Q4_0 x Q8_0 dot product and of QServe's W4A8 (Lin et al., 2024).
#pragma once

#include <weft/quant/detail/simd.hpp>
#include <weft/quant/detail/w4_kernels.hpp>

#include <cstdint>

WEFT_QUANT_KERNELS_BEGIN;  // detail/simd.hpp: GCC bug 105593

namespace weft::quant::detail {

/// Arguments of one W4A8 tile. The activations are int8, reordered per chunk of 2 * CB elements so
/// that a CB-byte load of packed weights lines up with them: first the low nibbles' elements of
/// the chunk's CB / 16 blocks (elements 0..15 of each), then the high nibbles' (16..31 of each);
/// with CB = 16 that is the natural order. Rows are padded with zero activations to whole chunks.
template <int NR, int MB, class Scale>
struct w4a8_tile_args {
  const std::uint8_t* rows[std::size_t{NR}];
  const std::uint8_t* prefetch[std::size_t{NR}];  // the next row block (see w4_tile_args), or null
  const Scale* scales[std::size_t{NR}];
  const std::int16_t* zeros[std::size_t{NR}];
  const std::int8_t* xa[std::size_t{MB}];  // reordered activations of each token
  const float* asum[std::size_t{MB}];      // per-group sums of each token's int8 activations (exact in fp32)
  std::int64_t row_bytes;                  // bytes of one packed row (k_padded / 2)
  std::int64_t groups;                     // G
  std::int64_t chunks_per_group;           // group_size / (2 CB), or all chunks when G = 1
  std::int64_t chunks;                     // ceil(row_bytes / CB)
};

/// Reordered position of element i of a row for chunks of `chunk_bytes` (16, 32 or 64). O(1).
constexpr std::int64_t w4a8_position(std::int64_t i, std::int64_t chunk_bytes) noexcept {
  const std::int64_t chunk = i / (2 * chunk_bytes), j = i % (2 * chunk_bytes);
  const std::int64_t block = j / int4_block, e = j % int4_block;
  return chunk * 2 * chunk_bytes + (e < 16 ? 0 : chunk_bytes) + block * 16 + e % 16;
}

/// Plain C++ (CB = 16: natural order). The zero-point term is subtracted per group.
template <int NR, int MB, class Scale>
void w4a8_tile_portable(const w4a8_tile_args<NR, MB, Scale>& a,
                        float (&out)[std::size_t{NR}][std::size_t{MB}]) noexcept {
  for (int r = 0; r < NR; ++r)
    for (int m = 0; m < MB; ++m) out[r][m] = 0.0f;
  for (std::int64_t g = 0; g < a.groups; ++g) {
    const std::int64_t c0 = g * a.chunks_per_group;
    const std::int64_t c1 = c0 + a.chunks_per_group < a.chunks ? c0 + a.chunks_per_group : a.chunks;
    for (int r = 0; r < NR; ++r) {
      const float scale = scale_to_float(a.scales[r][g]);
      for (int m = 0; m < MB; ++m) {
        std::int32_t dot = 0;
        for (std::int64_t c = c0; c < c1; ++c) {
          const std::uint8_t* p = a.rows[r] + c * 16;
          const std::int8_t* x = a.xa[m] + c * 32;
          for (int j = 0; j < 16; ++j) dot += (p[j] & 0xF) * x[j] + (p[j] >> 4) * x[j + 16];
        }
        out[r][m] += scale * static_cast<float>(dot);
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int m = 0; m < MB; ++m) {
      float correction = 0.0f;
      for (std::int64_t g = 0; g < a.groups; ++g)
        correction += scale_to_float(a.scales[r][g]) * static_cast<float>(a.zeros[r][g]) * a.asum[m][g];
      out[r][m] -= correction;
    }
}

#if WEFT_QUANT_X86

#define WEFT_QUANT_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c"), always_inline))
#define WEFT_QUANT_AVX2_TARGET __attribute__((target("avx2,fma,f16c"), always_inline))

/// The operations of the 32- and 16-byte VNNI and AVX2 tiles that are the same on both (everything
/// but load and dot): AVX2 instructions, which the VNNI target includes.
struct ymm_lane_ops {
  using vi = __m256i;
  using vf = __m256;
  WEFT_QUANT_AVX2_TARGET static vi nibbles() noexcept { return _mm256_set1_epi8(0x0F); }
  WEFT_QUANT_AVX2_TARGET static vi low(vi v, vi mask) noexcept { return _mm256_and_si256(v, mask); }
  WEFT_QUANT_AVX2_TARGET static vi high(vi v, vi mask) noexcept {
    return _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
  }
  WEFT_QUANT_AVX2_TARGET static vi zero() noexcept { return _mm256_setzero_si256(); }
  WEFT_QUANT_AVX2_TARGET static vf zero_f() noexcept { return _mm256_setzero_ps(); }
  WEFT_QUANT_AVX2_TARGET static vf scaled_add(vf total, float s, vi acc) noexcept {
    return _mm256_fmadd_ps(_mm256_set1_ps(s), _mm256_cvtepi32_ps(acc), total);
  }
  WEFT_QUANT_AVX2_TARGET static float sum(vf v) noexcept {
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 d = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)));
  }
};
struct xmm_lane_ops {
  using vi = __m128i;
  using vf = __m128;
  WEFT_QUANT_AVX2_TARGET static vi nibbles() noexcept { return _mm_set1_epi8(0x0F); }
  WEFT_QUANT_AVX2_TARGET static vi low(vi v, vi mask) noexcept { return _mm_and_si128(v, mask); }
  WEFT_QUANT_AVX2_TARGET static vi high(vi v, vi mask) noexcept { return _mm_and_si128(_mm_srli_epi16(v, 4), mask); }
  WEFT_QUANT_AVX2_TARGET static vi zero() noexcept { return _mm_setzero_si128(); }
  WEFT_QUANT_AVX2_TARGET static vf zero_f() noexcept { return _mm_setzero_ps(); }
  WEFT_QUANT_AVX2_TARGET static vf scaled_add(vf total, float s, vi acc) noexcept {
    return _mm_fmadd_ps(_mm_set1_ps(s), _mm_cvtepi32_ps(acc), total);
  }
  WEFT_QUANT_AVX2_TARGET static float sum(vf q) noexcept {
    const __m128 d = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)));
  }
};

/// Vector operations of the VNNI kernel for one chunk width: CB = 64 (zmm), 32 (ymm) or 16 (xmm).
template <int CB>
struct vnni_ops;

template <>
struct vnni_ops<64> {
  using vi = __m512i;
  using vf = __m512;
  WEFT_QUANT_VNNI_TARGET static vi load(const std::uint8_t* p, std::int64_t bytes) noexcept {
    if (bytes >= 64) return _mm512_loadu_si512(p);
    return _mm512_maskz_loadu_epi8((~std::uint64_t{0}) >> (64 - bytes), p);  // never reads past the row
  }
  WEFT_QUANT_VNNI_TARGET static vi nibbles() noexcept { return _mm512_set1_epi8(0x0F); }
  WEFT_QUANT_VNNI_TARGET static vi low(vi v, vi mask) noexcept { return _mm512_and_si512(v, mask); }
  WEFT_QUANT_VNNI_TARGET static vi high(vi v, vi mask) noexcept {
    return _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
  }
  WEFT_QUANT_VNNI_TARGET static vi zero() noexcept { return _mm512_setzero_si512(); }
  WEFT_QUANT_VNNI_TARGET static vi dot(vi acc, vi codes, const std::int8_t* x) noexcept {
    return _mm512_dpbusd_epi32(acc, codes, _mm512_loadu_si512(x));
  }
  WEFT_QUANT_VNNI_TARGET static vf zero_f() noexcept { return _mm512_setzero_ps(); }
  WEFT_QUANT_VNNI_TARGET static vf scaled_add(vf total, float s, vi acc) noexcept {
    return _mm512_fmadd_ps(_mm512_set1_ps(s), _mm512_cvtepi32_ps(acc), total);
  }
  WEFT_QUANT_VNNI_TARGET static float sum(vf v) noexcept {
    const __m256 h =
        _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 d = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)));
  }
};

template <>
struct vnni_ops<32> : ymm_lane_ops {
  WEFT_QUANT_VNNI_TARGET static vi load(const std::uint8_t* p, std::int64_t bytes) noexcept {
    if (bytes >= 32) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm256_maskz_loadu_epi8((~std::uint32_t{0}) >> (32 - bytes), p);
  }
  WEFT_QUANT_VNNI_TARGET static vi dot(vi acc, vi codes, const std::int8_t* x) noexcept {
    return _mm256_dpbusd_epi32(acc, codes, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  }
};

template <>
struct vnni_ops<16> : xmm_lane_ops {
  WEFT_QUANT_VNNI_TARGET static vi load(const std::uint8_t* p, std::int64_t) noexcept {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));  // rows are whole 16-byte blocks
  }
  WEFT_QUANT_VNNI_TARGET static vi dot(vi acc, vi codes, const std::int8_t* x) noexcept {
    return _mm_dpbusd_epi32(acc, codes, _mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
  }
};

/// 16 scales of one row as fp32 lanes (masked to `count` < 16 at the end of a row).
template <class Scale>
WEFT_QUANT_VNNI_TARGET inline __m512 load_scales16(const Scale* s, int count) noexcept {
  const auto mask = static_cast<__mmask16>((1u << count) - 1u);
  if constexpr (std::is_same_v<Scale, float>) {
    return _mm512_maskz_loadu_ps(mask, s);
  } else if constexpr (std::is_same_v<Scale, half>) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, s));
  } else {  // bf16: the upper half of an fp32
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, s)), 16));
  }
}

/// The zero-point term of one (row, token) pair, 16 groups at a time:
/// sum_g scale_g * zero_g * asum_g, summed across lanes by the caller.
template <class Scale>
WEFT_QUANT_VNNI_TARGET inline __m512 zero_term_avx512(const Scale* scales, const std::int16_t* zeros, const float* asum,
                                                      std::int64_t groups) noexcept {
  __m512 acc = _mm512_setzero_ps();
  for (std::int64_t g = 0; g < groups; g += 16) {
    const int count = groups - g < 16 ? static_cast<int>(groups - g) : 16;
    const auto mask = static_cast<__mmask16>((1u << count) - 1u);
    const __m512 z = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm256_maskz_loadu_epi16(mask, zeros + g)));
    acc =
        _mm512_fmadd_ps(_mm512_mul_ps(load_scales16(scales + g, count), z), _mm512_maskz_loadu_ps(mask, asum + g), acc);
  }
  return acc;
}

#undef WEFT_QUANT_VNNI_TARGET

/// AVX-512 VNNI tile: CB-byte loads of NR rows, vpdpbusd against MB tokens, int32 per group.
template <int CB, int NR, int MB, class Scale>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c"))) void w4a8_tile_vnni(
    const w4a8_tile_args<NR, MB, Scale>& a, float (&out)[std::size_t{NR}][std::size_t{MB}]) noexcept {
  using ops = vnni_ops<CB>;
  using vi = typename ops::vi;
  // Local copies keep the pointers in registers across the loops.
  const std::uint8_t* rows[std::size_t{NR}];
  const std::uint8_t* prefetch[std::size_t{NR}];
  const Scale* scales[std::size_t{NR}];
  const std::int8_t* xa[std::size_t{MB}];
#pragma GCC unroll 16
  for (int r = 0; r < NR; ++r) {
    rows[r] = a.rows[r];
    prefetch[r] = a.prefetch[r];
    scales[r] = a.scales[r];
  }
#pragma GCC unroll 16
  for (int m = 0; m < MB; ++m) xa[m] = a.xa[m];
  const bool fetch = prefetch[0] != nullptr;
  const std::int64_t whole = a.row_bytes / CB, chunks = a.chunks, per_group = a.chunks_per_group;
  typename ops::vf total[std::size_t{NR}][std::size_t{MB}];
#pragma GCC unroll 16
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) total[r][m] = ops::zero_f();
  const vi mask = ops::nibbles();
  std::int64_t c = 0;
  for (std::int64_t g = 0; g < a.groups; ++g) {
    vi acc[std::size_t{NR}][std::size_t{MB}];
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r)
#pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) acc[r][m] = ops::zero();
    const std::int64_t c_end = c + per_group < chunks ? c + per_group : chunks;
    for (; c < c_end; ++c) {
      if (fetch && ((c * CB) & 63) == 0)
#pragma GCC unroll 16
        for (int r = 0; r < NR; ++r) _mm_prefetch(reinterpret_cast<const char*>(prefetch[r] + c * CB), _MM_HINT_T0);
      const std::int64_t bytes = c < whole ? CB : a.row_bytes - c * CB;
#pragma GCC unroll 16
      for (int r = 0; r < NR; ++r) {
        const vi v = ops::load(rows[r] + c * CB, bytes);
        const vi lo = ops::low(v, mask), hi = ops::high(v, mask);
#pragma GCC unroll 16
        for (int m = 0; m < MB; ++m) {
          const std::int8_t* x = xa[m] + c * 2 * CB;
          acc[r][m] = ops::dot(ops::dot(acc[r][m], lo, x), hi, x + CB);
        }
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r) {
      const float s = scale_to_float_f16c(scales[r][g]);
#pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) total[r][m] = ops::scaled_add(total[r][m], s, acc[r][m]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m)
      out[r][m] =
          ops::sum(total[r][m]) - vnni_ops<64>::sum(zero_term_avx512(scales[r], a.zeros[r], a.asum[m], a.groups));
}

/// Vector operations of the AVX2 kernel: vpmaddubsw multiplies u8 codes (0..15) by s8 activations
/// and adds pairs into int16 (at most 2 * 15 * 127, no saturation); vpmaddwd by ones widens to int32.
template <int CB>
struct avx2_ops;

template <>
struct avx2_ops<32> : ymm_lane_ops {
  WEFT_QUANT_AVX2_TARGET static vi load(const std::uint8_t* p, std::int64_t bytes) noexcept {
    if (bytes >= 32) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));  // last 16 bytes
  }
  WEFT_QUANT_AVX2_TARGET static vi dot(vi acc, vi codes, const std::int8_t* x) noexcept {
    const __m256i pairs = _mm256_maddubs_epi16(codes, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

template <>
struct avx2_ops<16> : xmm_lane_ops {
  WEFT_QUANT_AVX2_TARGET static vi load(const std::uint8_t* p, std::int64_t) noexcept {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
  WEFT_QUANT_AVX2_TARGET static vi dot(vi acc, vi codes, const std::int8_t* x) noexcept {
    const __m128i pairs = _mm_maddubs_epi16(codes, _mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
    return _mm_add_epi32(acc, _mm_madd_epi16(pairs, _mm_set1_epi16(1)));
  }
};

#undef WEFT_QUANT_AVX2_TARGET

/// AVX2 tile: the VNNI tile's structure with vpmaddubsw + vpmaddwd for the dot products.
template <int CB, int NR, int MB, class Scale>
__attribute__((target("avx2,fma,f16c"))) void w4a8_tile_avx2(const w4a8_tile_args<NR, MB, Scale>& a,
                                                             float (&out)[std::size_t{NR}][std::size_t{MB}]) noexcept {
  using ops = avx2_ops<CB>;
  typename ops::vf total[std::size_t{NR}][std::size_t{MB}];
  float correction[std::size_t{NR}][std::size_t{MB}] = {};
#pragma GCC unroll 16
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) total[r][m] = ops::zero_f();
  const typename ops::vi mask = ops::nibbles();
  for (std::int64_t g = 0; g < a.groups; ++g) {
    typename ops::vi acc[std::size_t{NR}][std::size_t{MB}];
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r)
#pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) acc[r][m] = ops::zero();
    const std::int64_t c0 = g * a.chunks_per_group;
    const std::int64_t c1 = c0 + a.chunks_per_group < a.chunks ? c0 + a.chunks_per_group : a.chunks;
    for (std::int64_t c = c0; c < c1; ++c) {
      if (((c * CB) & 63) == 0 && a.prefetch[0] != nullptr)
#pragma GCC unroll 16
        for (int r = 0; r < NR; ++r) _mm_prefetch(reinterpret_cast<const char*>(a.prefetch[r] + c * CB), _MM_HINT_T0);
      const std::int64_t bytes = a.row_bytes - c * CB;
#pragma GCC unroll 16
      for (int r = 0; r < NR; ++r) {
        const typename ops::vi v = ops::load(a.rows[r] + c * CB, bytes);
        const typename ops::vi lo = ops::low(v, mask), hi = ops::high(v, mask);
#pragma GCC unroll 16
        for (int m = 0; m < MB; ++m) {
          const std::int8_t* x = a.xa[m] + c * 2 * CB;
          acc[r][m] = ops::dot(ops::dot(acc[r][m], lo, x), hi, x + CB);
        }
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r) {
      const float s = scale_to_float_f16c(a.scales[r][g]);
      const float sz = s * static_cast<float>(a.zeros[r][g]);
#pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) {
        total[r][m] = ops::scaled_add(total[r][m], s, acc[r][m]);
        correction[r][m] += sz * a.asum[m][g];
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int m = 0; m < MB; ++m) out[r][m] = ops::sum(total[r][m]) - correction[r][m];
}

#endif  // WEFT_QUANT_X86

/// Runs the tile on `path` (already resolved and supported) with chunks of `chunk_bytes`.
template <int NR, int MB, class Scale>
void w4a8_tile(isa path, int chunk_bytes, const w4a8_tile_args<NR, MB, Scale>& a,
               float (&out)[std::size_t{NR}][std::size_t{MB}]) noexcept {
#if WEFT_QUANT_X86
  if (path == isa::avx512_vnni) {
    if (chunk_bytes == 64) return w4a8_tile_vnni<64>(a, out);
    if (chunk_bytes == 32) return w4a8_tile_vnni<32>(a, out);
    return w4a8_tile_vnni<16>(a, out);
  }
  if (path == isa::avx2) {
    if (chunk_bytes == 32) return w4a8_tile_avx2<32>(a, out);
    return w4a8_tile_avx2<16>(a, out);
  }
#endif
  (void)path;
  (void)chunk_bytes;
  w4a8_tile_portable(a, out);
}

}  // namespace weft::quant::detail

WEFT_QUANT_KERNELS_END;

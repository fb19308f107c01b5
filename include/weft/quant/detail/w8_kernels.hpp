// Inner kernels of the W8A8 GEMM (gemm_w8a8.hpp): int8 activations x int8 weights in weft's panel
// layout [n / 16][k / 4][n % 16][k % 4], int32 accumulation. The VNNI kernel follows the register
// blocking of Goto & van de Geijn (2008); the AMX kernel uses a 2 x 2 grid of 16 x 16 C tiles
// (Intel Architecture Instruction Set Extensions Programming Reference, ch. 3, "AMX").
#pragma once

#include <weft/quant/detail/simd.hpp>

#include <cstdint>

WEFT_QUANT_KERNELS_BEGIN;  // detail/simd.hpp: GCC bug 105593

namespace weft::quant::detail {

/// One 16-row panel of weights against one activation row, plain C++. acc[j] = sum_k a[k] * w[j][k].
inline void w8_panel_portable(const std::int8_t* a, const std::int8_t* panel, std::int64_t k_steps,
                              std::int32_t (&acc)[16]) noexcept {
  for (int j = 0; j < 16; ++j) acc[j] = 0;
  for (std::int64_t s = 0; s < k_steps; ++s) {
    const std::int8_t* w = panel + s * 64;
    const std::int8_t* x = a + s * 4;
    for (int j = 0; j < 16; ++j)
      acc[j] += x[0] * w[j * 4] + x[1] * w[j * 4 + 1] + x[2] * w[j * 4 + 2] + x[3] * w[j * 4 + 3];
  }
}

#if WEFT_QUANT_X86

/// AVX2: bytes widened to int16 and multiplied with vpmaddwd (exact; vpmaddubsw would saturate).
__attribute__((target("avx2"))) inline void w8_panel_avx2(const std::int8_t* a, const std::int8_t* panel,
                                                          std::int64_t k_steps, std::int32_t (&acc)[16]) noexcept {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  for (std::int64_t s = 0; s < k_steps; ++s) {
    const std::int8_t* w = panel + s * 64;
    std::int64_t packed = 0;
    for (int i = 0; i < 4; ++i)
      packed |= static_cast<std::int64_t>(static_cast<std::uint16_t>(static_cast<std::int16_t>(a[s * 4 + i])))
                << (16 * i);
    const __m256i x = _mm256_set1_epi64x(packed);  // (a0 a1 a2 a3) as int16, repeated
    // Each 16-byte slice is 4 rows x 4 k; widened: 16 int16; madd: 8 int32 = 4 rows x 2 partial sums.
    s0 = _mm256_add_epi32(
        s0, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w))), x));
    s1 = _mm256_add_epi32(
        s1, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16))), x));
    s2 = _mm256_add_epi32(
        s2, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 32))), x));
    s3 = _mm256_add_epi32(
        s3, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 48))), x));
  }
  // hadd pairs within 128-bit lanes gives rows [0 1 4 5 | 2 3 6 7]; the permute restores 0..7.
  const __m256i r0 = _mm256_permute4x64_epi64(_mm256_hadd_epi32(s0, s1), 0xD8);
  const __m256i r1 = _mm256_permute4x64_epi64(_mm256_hadd_epi32(s2, s3), 0xD8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc), r0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + 8), r1);
}

/// AVX-512 VNNI micro-kernel: MR activation rows (unsigned: a + 128, row stride lda) x NV panels
/// of 16 weight rows, K in 4-byte k-steps. vpdpbusd multiplies u8 by s8, so each accumulator
/// starts at `correction` (-128 x the weight row's code sum, computed once at packing), which
/// makes the result exact: sum (a + 128) w - 128 sum w = sum a w. The tile goes straight to the
/// output with masked stores: `rows` x `cols` of it, int32 (Scaled = false) or
/// float(c) x a_scales[i] x w_scales[j] (Scaled = true). Register blocking after Goto and van de
/// Geijn (2008): MR x NV zmm accumulators, NV weight loads and MR broadcasts per k-step.
template <int MR, int NV, bool Scaled, class Out>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void w8_tile_vnni(
    const std::uint8_t* a, std::int64_t lda, const std::int8_t* panels, std::int64_t panel_stride, std::int64_t k_steps,
    const std::int32_t* correction, Out* out, std::int64_t ldo, std::int64_t rows, std::int64_t cols,
    const float* a_scales, const float* w_scales) noexcept {
  __m512i acc[std::size_t{MR}][std::size_t{NV}];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    const __m512i start = _mm512_loadu_si512(correction + v * 16);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) acc[i][v] = start;
  }
  for (std::int64_t s = 0; s < k_steps; ++s) {
    __m512i w[std::size_t{NV}];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) w[v] = _mm512_loadu_si512(panels + v * panel_stride + s * 64);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      std::int32_t four;
      __builtin_memcpy(&four, a + i * lda + s * 4, 4);
      const __m512i x = _mm512_set1_epi32(four);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], x, w[v]);
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    const std::int64_t left = cols - v * 16;
    if (left <= 0) break;
    const auto mask = static_cast<__mmask16>(left >= 16 ? 0xFFFFu : (1u << left) - 1u);
    if constexpr (Scaled) {
      const __m512 ws = _mm512_maskz_loadu_ps(mask, w_scales + v * 16);
#pragma GCC unroll 32
      for (int i = 0; i < MR; ++i)
        if (i < rows)
          _mm512_mask_storeu_ps(
              out + i * ldo + v * 16, mask,
              _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[i][v]), _mm512_set1_ps(a_scales[i])), ws));
    } else {
      (void)a_scales;
      (void)w_scales;
#pragma GCC unroll 32
      for (int i = 0; i < MR; ++i)
        if (i < rows) _mm512_mask_storeu_epi32(out + i * ldo + v * 16, mask, acc[i][v]);
    }
  }
}

/// AMX tile configuration (palette 1): tiles 0-3 are C (16 x 16 int32), 4-5 A (16 x 64 int8),
/// 6-7 B (16 k-steps x 16 rows x 4 int8).
struct alignas(64) amx_config {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

__attribute__((target("amx-tile"))) inline void amx_begin() noexcept {
  static const amx_config config{};
  _tile_loadconfig(&config);
}
__attribute__((target("amx-tile"))) inline void amx_end() noexcept { _tile_release(); }

/// C (32 x 32, row stride 32) = A (32 rows, stride lda, K padded to 64) x two weight panels.
/// Between amx_begin() and amx_end() on the same thread.
__attribute__((target("amx-tile,amx-int8"))) inline void w8_tile_amx(const std::int8_t* a, std::int64_t lda,
                                                                     const std::int8_t* panel0,
                                                                     const std::int8_t* panel1, std::int64_t k_padded,
                                                                     std::int32_t* c) noexcept {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (std::int64_t k = 0; k < k_padded; k += 64) {
    _tile_loadd(4, a + k, lda);
    _tile_loadd(5, a + 16 * lda + k, lda);
    _tile_loadd(6, panel0 + k * 16, 64);
    _tile_loadd(7, panel1 + k * 16, 64);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  _tile_stored(0, c, 128);
  _tile_stored(1, c + 16, 128);
  _tile_stored(2, c + 16 * 32, 128);
  _tile_stored(3, c + 16 * 32 + 16, 128);
}

#endif  // WEFT_QUANT_X86

}  // namespace weft::quant::detail

WEFT_QUANT_KERNELS_END;

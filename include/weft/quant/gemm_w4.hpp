// W4A16 / W4A32 GEMV and GEMM on the CPU: int4 weights dequantized on the fly, fp16/bf16/fp32
// activations, fp32 accumulation. Per group it computes scale * sum(code * x) and subtracts
// scale * zero * sum(x) once per group (the zero-point factoring used by llama.cpp's Q4_1 and by
// Marlin, Frantar et al. 2024), so the inner loop is convert + FMA only.
#pragma once

#include <weft/core/error.hpp>
#include <weft/quant/concepts.hpp>
#include <weft/quant/cpu_features.hpp>
#include <weft/quant/detail/aligned_buffer.hpp>
#include <weft/quant/detail/w4_kernels.hpp>
#include <weft/quant/format.hpp>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

namespace weft::quant {

/// The paths the W4 kernels have, best last.
/// avx512_bf16 serves bf16 activations with groups a multiple of 64; other calls that resolve to
/// it run the avx512 path.
inline constexpr isa w4_paths[] = {isa::portable, isa::avx2, isa::avx512, isa::avx512_bf16};

/// The path gemm_w4 would run for `requested` on this CPU. Throws weft::error (unsupported) when a
/// specific path is requested that the CPU lacks. Thread-safe. O(1).
inline isa w4_path(isa requested = isa::automatic) {
  return detail::resolve_path(requested, w4_paths, "weft::quant::w4_path");
}

namespace detail {

template <class Act>
std::uint16_t bit_cast16(Act v) noexcept {
  if constexpr (std::is_same_v<Act, bfloat16>)
    return v.bits;
  else
    return 0;  // only bf16 activations take the bf16 path
}

template <int NR, int MB, class Scale>
void w4_rows(isa path, const quantized_matrix<Scale>& w, const float* xf, const float* xsum, const std::uint16_t* xb,
             std::int64_t m0, std::int64_t n0, float* y, std::int64_t n_total) {
  const std::int64_t kp = w.k_padded(), groups = w.groups();
  const auto row_bytes = int4_row_bytes(kp);
  w4_tile_args<NR, MB, Scale> a{};
  for (int r = 0; r < NR; ++r) {
    // Prefetch 4 rows ahead (8 KiB at K = 4096) on the first pass over a row only; a row past the
    // end prefetches itself, which costs nothing.
    const std::int64_t ahead = n0 + 4 + r;
    a.prefetch[r] = m0 != 0 ? nullptr : w.packed().data() + (ahead < w.rows() ? ahead : n0 + r) * row_bytes;
    a.rows[r] = w.packed().data() + (n0 + r) * row_bytes;
    a.scales[r] = w.scales().data() + (n0 + r) * groups;
    a.zeros[r] = w.zeros().data() + (n0 + r) * groups;
  }
  for (int m = 0; m < MB; ++m) {
    a.xs[m] = xf + (m0 + m) * kp;
    a.xsums[m] = xsum + (m0 + m) * groups;
    a.xb[m] = xb == nullptr ? nullptr : xb + (m0 + m) * kp;
  }
  a.groups = groups;
  a.blocks_per_group = w.group_size() / int4_block;
  a.blocks = kp / int4_block;
  float out[NR][MB];
  w4_tile(path, a, out);
  for (int r = 0; r < NR; ++r)
    for (int m = 0; m < MB; ++m) y[(m0 + m) * n_total + n0 + r] = out[r][m];
}

template <int NR, class Scale>
void w4_row_block(isa path, const quantized_matrix<Scale>& w, const float* xf, const float* xsum,
                  const std::uint16_t* xb, std::int64_t m_total, std::int64_t n0, float* y) {
  // NR x MB accumulators plus totals must fit the 32 (AVX-512) or 16 (AVX2) vector registers.
  constexpr int mb = NR >= 4 ? 2 : 4;
  std::int64_t m = 0;
  for (; m + mb <= m_total; m += mb) w4_rows<NR, mb>(path, w, xf, xsum, xb, m, n0, y, w.rows());
  switch (m_total - m) {
    case 3:
      w4_rows<NR, 3>(path, w, xf, xsum, xb, m, n0, y, w.rows());
      break;
    case 2:
      w4_rows<NR, 2>(path, w, xf, xsum, xb, m, n0, y, w.rows());
      break;
    case 1:
      w4_rows<NR, 1>(path, w, xf, xsum, xb, m, n0, y, w.rows());
      break;
    default:
      break;
  }
}

}  // namespace detail

/// Y = X * W^T: X is M x K (row-major, fp32/fp16/bf16), W an int4 quantized_matrix (N x K), Y is
/// M x N fp32 (row-major). Throws weft::error for int8 weights, a size mismatch, or a requested
/// path the CPU lacks; Y is untouched then. O(M N K) work, O(M K) extra memory; reads the weights
/// once per call. Thread-safe for distinct Y (W and X are only read); runs on oneTBB's arena.
template <scale_value Scale, activation_value Act>
void gemm_w4(const quantized_matrix<Scale>& w, std::span<const Act> x, std::int64_t m, std::span<float> y,
             kernel_options options = {}) {
  constexpr const char* where = "weft::quant::gemm_w4";
  expects(!w.empty() && w.bits() == 4, errc::invalid_argument, where, "weights must be a non-empty int4 matrix (got ",
          w.bits(), "-bit, ", w.rows(), " x ", w.cols(), ")");
  expects(m > 0, errc::invalid_argument, where, "M = ", m, " must be positive");
  expects(x.size() == static_cast<std::size_t>(m * w.cols()), errc::invalid_argument, where, "activations have ",
          x.size(), " elements but M x K = ", m, " x ", w.cols(), " = ", m * w.cols());
  expects(y.size() == static_cast<std::size_t>(m * w.rows()), errc::invalid_argument, where, "output has ", y.size(),
          " elements but M x N = ", m, " x ", w.rows(), " = ", m * w.rows());
  isa path = detail::resolve_path(options.path, w4_paths, where);
  const std::int64_t k = w.cols(), kp = w.k_padded(), n = w.rows(), groups = w.groups(), gs = w.group_size();
  if (path == isa::avx512_bf16 && (!std::is_same_v<Act, bfloat16> || gs % 64 != 0)) path = isa::avx512;
  // Activations as fp32, padded with zeros to whole blocks, and their per-group sums.
  // Rows of kp elements: 64-byte aligned when the first is (kp is a multiple of 32).
  detail::aligned_buffer<float> xf(static_cast<std::size_t>(m * kp), 0.0f);
  std::vector<float> xsum(static_cast<std::size_t>(m * groups), 0.0f);
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t i = 0; i < k; ++i) {
      const float v = static_cast<float>(x[static_cast<std::size_t>(r * k + i)]);
      xf[static_cast<std::size_t>(r * kp + i)] = v;
      xsum[static_cast<std::size_t>(r * groups + i / gs)] += v;
    }
  // bf16 path: activations reordered per 64-element chunk to match two widened blocks.
  detail::aligned_buffer<std::uint16_t> xb;
  if (path == isa::avx512_bf16) {
    xb = detail::aligned_buffer<std::uint16_t>(static_cast<std::size_t>(m * kp));
    for (std::int64_t r = 0; r < m; ++r)
      for (std::int64_t i = 0; i < k; ++i) {
        const std::int64_t chunk = i / 64 * 64, j = i % 64;
        const bool whole = chunk + 64 <= kp;
        const std::int64_t pos =
            whole ? chunk + (j % 32 < 16 ? (j / 32) * 16 + j % 16 : 32 + (j / 32) * 16 + j % 16) : i;
        xb[static_cast<std::size_t>(r * kp + pos)] = detail::bit_cast16(x[static_cast<std::size_t>(r * k + i)]);
      }
  }
  const std::uint16_t* xbp = xb.empty() ? nullptr : xb.data();
  constexpr std::int64_t nr = 4;
  const std::int64_t full = n / nr * nr;
  const auto body = [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t n0 = b * nr;
      if (n0 + nr <= full) {
        detail::w4_row_block<4>(path, w, xf.data(), xsum.data(), xbp, m, n0, y.data());
      } else {
        for (std::int64_t r = n0; r < n; ++r)
          detail::w4_row_block<1>(path, w, xf.data(), xsum.data(), xbp, m, r, y.data());
      }
    }
  };
  const std::int64_t row_blocks = ceil_div(n, nr);
  if (options.parallel && row_blocks > 1) {
    // About 64 KiB of weights per task: large enough to amortise scheduling, small enough to balance.
    const std::int64_t grain = std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(1, nr * kp / 2));
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, row_blocks, grain),
                      [&](const tbb::blocked_range<std::int64_t>& r) { body(r.begin(), r.end()); });
  } else {
    body(0, row_blocks);
  }
}

/// y = W x for one activation vector (batch 1); see gemm_w4. O(N K). Thread-safe for distinct y.
template <scale_value Scale, activation_value Act>
void gemv_w4(const quantized_matrix<Scale>& w, std::span<const Act> x, std::span<float> y,
             kernel_options options = {}) {
  gemm_w4(w, x, 1, y, options);
}

}  // namespace weft::quant

// Plain reference implementations of the quantized products: straightforward loops over the
// dequantized values, written for clarity, not speed. The tests hold every fast path to them.
#pragma once

#include <weft/core/error.hpp>
#include <weft/quant/concepts.hpp>
#include <weft/quant/format.hpp>
#include <weft/quant/quantized_activations.hpp>
#include <weft/quant/sparse24_matrix.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace weft::quant {

/// Y = X * W^T with W dequantized element by element ((code - zero) * scale) and fp32 sums in k
/// order. Works for int4 and int8 weights. Throws weft::error on a size mismatch. O(M N K).
/// Thread-safe.
template <scale_value Scale, activation_value Act>
std::vector<float> reference_gemm(const quantized_matrix<Scale>& w, std::span<const Act> x, std::int64_t m) {
  expects(m > 0 && x.size() == static_cast<std::size_t>(m * w.cols()), errc::invalid_argument,
          "weft::quant::reference_gemm", "activations have ", x.size(), " elements but M x K = ", m, " x ", w.cols());
  std::vector<float> y(static_cast<std::size_t>(m * w.rows()));
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t n = 0; n < w.rows(); ++n) {
      float s = 0.0f;
      for (std::int64_t k = 0; k < w.cols(); ++k)
        s += w.value(n, k) * static_cast<float>(x[static_cast<std::size_t>(r * w.cols() + k)]);
      y[static_cast<std::size_t>(r * w.rows() + n)] = s;
    }
  return y;
}

/// Y = X * W^T for 2:4 sparse weights, element by element (pruned weights are 0), fp32 sums in k
/// order. Throws weft::error on a size mismatch. O(M N K). Thread-safe.
template <scale_value Scale, activation_value Act>
std::vector<float> reference_gemm(const sparse24_matrix<Scale>& w, std::span<const Act> x, std::int64_t m) {
  expects(m > 0 && x.size() == static_cast<std::size_t>(m * w.cols()), errc::invalid_argument,
          "weft::quant::reference_gemm", "activations have ", x.size(), " elements but M x K = ", m, " x ", w.cols());
  std::vector<float> y(static_cast<std::size_t>(m * w.rows()));
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t n = 0; n < w.rows(); ++n) {
      float s = 0.0f;
      for (std::int64_t k = 0; k < w.cols(); ++k)
        s += w.value(n, k) * static_cast<float>(x[static_cast<std::size_t>(r * w.cols() + k)]);
      y[static_cast<std::size_t>(r * w.rows() + n)] = s;
    }
  return y;
}

/// C = A * W^T over the int8 codes, int32 accumulation. O(M N K). Thread-safe.
template <scale_value Scale>
std::vector<std::int32_t> reference_gemm_w8a8_i32(const quantized_matrix<Scale>& w, std::span<const std::int8_t> a,
                                                  std::int64_t m) {
  expects(w.bits() == 8 && m > 0 && a.size() == static_cast<std::size_t>(m * w.cols()), errc::invalid_argument,
          "weft::quant::reference_gemm_w8a8_i32", "need int8 weights and M x K = ", m, " x ", w.cols(),
          " activations; got ", w.bits(), "-bit weights and ", a.size(), " activations");
  std::vector<std::int32_t> c(static_cast<std::size_t>(m * w.rows()));
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t n = 0; n < w.rows(); ++n) {
      std::int32_t s = 0;
      for (std::int64_t k = 0; k < w.cols(); ++k)
        s += (w.code_unchecked(n, k) - w.zero(n, k / w.group_size())) * a[static_cast<std::size_t>(r * w.cols() + k)];
      c[static_cast<std::size_t>(r * w.rows() + n)] = s;
    }
  return c;
}

/// Y = A * W^T for int4 weights and per-token int8 activations (quantized_activations): per
/// group the exact integer sum of (code - zero) * a, then y[m][n] = a.scales[m] * sum_g scale_g *
/// group sum, in fp32, groups in order. Throws weft::error for int8 weights or mismatched shapes.
/// O(M N K). Thread-safe.
template <scale_value Scale>
std::vector<float> reference_gemm_w4a8(const quantized_matrix<Scale>& w, const quantized_activations& a) {
  expects(w.bits() == 4 && a.rows > 0 && a.cols == w.cols() &&
              a.values.size() == static_cast<std::size_t>(a.rows * a.cols) &&
              a.scales.size() == static_cast<std::size_t>(a.rows),
          errc::invalid_argument, "weft::quant::reference_gemm_w4a8", "need int4 weights and M x K = ", a.rows, " x ",
          w.cols(), " activations; got ", w.bits(), "-bit weights and ", a.rows, " x ", a.cols, " activations");
  std::vector<float> y(static_cast<std::size_t>(a.rows * w.rows()));
  for (std::int64_t r = 0; r < a.rows; ++r)
    for (std::int64_t n = 0; n < w.rows(); ++n) {
      float s = 0.0f;
      for (std::int64_t g = 0; g < w.groups(); ++g) {
        std::int64_t dot = 0;
        for (std::int64_t k = g * w.group_size(); k < std::min(w.cols(), (g + 1) * w.group_size()); ++k)
          dot += (w.code_unchecked(n, k) - w.zero(n, g)) * a.values[static_cast<std::size_t>(r * a.cols + k)];
        s += w.scale(n, g) * static_cast<float>(dot);
      }
      y[static_cast<std::size_t>(r * w.rows() + n)] = s * a.scales[static_cast<std::size_t>(r)];
    }
  return y;
}

}  // namespace weft::quant

// Plain reference implementations of the quantized products: straightforward loops over the
// dequantized values, written for clarity, not speed. The tests hold every fast path to them.
#pragma once

#include <weft/core/error.hpp>
#include <weft/quant/concepts.hpp>
#include <weft/quant/format.hpp>

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

}  // namespace weft::quant

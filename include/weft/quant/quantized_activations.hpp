// Per-token (per-row) symmetric int8 activations for the integer kernels (W8A8, W4A8): each row
// scaled by max|x| / 127 and rounded to nearest, as in LLM.int8() (Dettmers et al., 2022) and
// SmoothQuant (Xiao et al., 2023); the same per-token rule llama.cpp's Q8_0 and QServe use.
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/quant/concepts.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace weft::quant {

/// Activations quantized per row: x[m][k] ~ values[m][k] * scales[m]. A plain value.
struct quantized_activations {
  std::int64_t rows = 0, cols = 0;
  std::vector<std::int8_t> values;  ///< rows x cols, row-major, in [-127, 127]
  std::vector<float> scales;        ///< one per row
};

/// Per-row symmetric int8 quantization of an M x K matrix (fp32, fp16 or bf16): scale = max|x| /
/// 127 (1 for an all-zero row), values rounded to nearest even and clamped to [-127, 127]. Throws
/// weft::error on a non-positive shape, a size mismatch (checked, so M x K cannot wrap) or a
/// non-finite value. O(M K). Thread-safe.
template <activation_value Act>
quantized_activations quantize_activations(std::span<const Act> x, std::int64_t m, std::int64_t k) {
  constexpr const char* where = "weft::quant::quantize_activations";
  expects(m > 0 && k > 0, errc::invalid_argument, where, "shape ", m, " x ", k, " must be positive");
  const auto count = checked_mul(m, k, where);
  expects(std::cmp_equal(x.size(), count), errc::invalid_argument, where, "input has ", x.size(),
          " elements but M x K = ", m, " x ", k, " = ", count);
  quantized_activations q{m, k, std::vector<std::int8_t>(x.size()), std::vector<float>(static_cast<std::size_t>(m))};
  for (std::int64_t r = 0; r < m; ++r) {
    float amax = 0.0f;
    for (std::int64_t i = 0; i < k; ++i) {
      const float v = static_cast<float>(x[static_cast<std::size_t>(r * k + i)]);
      expects(std::isfinite(v), errc::invalid_argument, where, "x[", r, "][", i, "] = ", v, " is not finite");
      amax = std::max(amax, std::fabs(v));
    }
    const float scale = amax > 0.0f ? amax / 127.0f : 1.0f;
    q.scales[static_cast<std::size_t>(r)] = scale;
    for (std::int64_t i = 0; i < k; ++i) {
      const float c = std::nearbyint(static_cast<float>(x[static_cast<std::size_t>(r * k + i)]) / scale);
      q.values[static_cast<std::size_t>(r * k + i)] = static_cast<std::int8_t>(std::clamp(c, -127.0f, 127.0f));
    }
  }
  return q;
}

/// fp32 overload, so a std::vector<float> converts without naming the type. Same contract.
inline quantized_activations quantize_activations(std::span<const float> x, std::int64_t m, std::int64_t k) {
  return quantize_activations<float>(x, m, k);
}

}  // namespace weft::quant

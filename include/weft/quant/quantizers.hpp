// Quantizers: the range rules that choose each group's scale and zero point (absmax for
// symmetric, min-max for asymmetric), round-to-nearest coding of a float matrix into weft's format,
// and the error report. RTN baseline as in GPTQ (Frantar et al., 2023) and AWQ (Lin et al., 2024).
#pragma once

#include <weft/core/error.hpp>
#include <weft/quant/concepts.hpp>
#include <weft/quant/format.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace weft::quant {

/// Symmetric range rule: scale = max|w| / qmax (qmax = 7 for int4, 127 for int8), zero at the
/// midpoint. Nothing is clipped. Thread-safe (stateless). O(group).
struct absmax_quantizer {
  group_params choose(std::span<const float> group, int bits) const noexcept {
    float amax = 0.0f;
    for (float v : group) amax = std::max(amax, std::fabs(v));
    const float qmax = bits == 4 ? 7.0f : 127.0f;
    return {amax > 0.0f ? amax / qmax : 1.0f, symmetric_zero(bits)};
  }
  constexpr bool symmetric() const noexcept { return true; }
};

/// Asymmetric range rule: [min(w, 0), max(w, 0)] mapped onto all 2^bits codes, zero point the code
/// of 0.0 (so zero stays exact). Thread-safe (stateless). O(group).
struct minmax_quantizer {
  group_params choose(std::span<const float> group, int bits) const noexcept {
    float lo = 0.0f, hi = 0.0f;
    for (float v : group) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    const float levels = bits == 4 ? 15.0f : 255.0f;
    const float scale = hi > lo ? (hi - lo) / levels : 1.0f;
    const int zero = code_min(bits) + static_cast<int>(std::nearbyint(-lo / scale));
    return {scale, std::clamp(zero, code_min(bits), code_max(bits))};
  }
  constexpr bool symmetric() const noexcept { return false; }
};

/// A quantizer chosen at run time (a flag or config value). Thread-safety: like the wrapped
/// quantizer. choose() costs one indirect call plus the wrapped rule.
class any_quantizer {
 public:
  template <quantizer Q>
  requires(!std::same_as<std::remove_cvref_t<Q>, any_quantizer>)
      any_quantizer(Q q)  // NOLINT: implicit by design, like std::function
      : choose_([q](std::span<const float> g, int bits) { return q.choose(g, bits); }), symmetric_(q.symmetric()) {}

  group_params choose(std::span<const float> group, int bits) const { return choose_(group, bits); }
  bool symmetric() const noexcept { return symmetric_; }

 private:
  std::function<group_params(std::span<const float>, int)> choose_;
  bool symmetric_;
};

/// How far the dequantized matrix is from the original. A plain value.
struct quant_error {
  double max_abs = 0;   ///< max |w - dequant(q(w))|
  double mean_abs = 0;  ///< mean |w - dequant(q(w))|
  double rmse = 0;      ///< root mean square error
  double relative = 0;  ///< ||w - dequant(q(w))||_F / ||w||_F
  double sqnr_db = 0;   ///< 10 log10(||w||^2 / ||w - dequant||^2); infinity when exact
};

/// Error of `q` against the original row-major N x K matrix `w`. O(N K).
template <scale_value Scale>
quant_error measure_error(std::span<const float> w, const quantized_matrix<Scale>& q) {
  expects(w.size() == static_cast<std::size_t>(q.rows() * q.cols()), errc::invalid_argument,
          "weft::quant::measure_error", "original has ", w.size(), " elements but the quantized matrix is ", q.rows(),
          " x ", q.cols());
  quant_error e;
  double sum_abs = 0, sum_sq = 0, ref_sq = 0;
  for (std::int64_t n = 0; n < q.rows(); ++n)
    for (std::int64_t k = 0; k < q.cols(); ++k) {
      const double ref = w[static_cast<std::size_t>(n * q.cols() + k)];
      const double d = std::fabs(ref - static_cast<double>(q.value(n, k)));
      e.max_abs = std::max(e.max_abs, d);
      sum_abs += d;
      sum_sq += d * d;
      ref_sq += ref * ref;
    }
  const double count = static_cast<double>(w.size());
  e.mean_abs = sum_abs / count;
  e.rmse = std::sqrt(sum_sq / count);
  e.relative = ref_sq > 0 ? std::sqrt(sum_sq / ref_sq) : 0.0;
  e.sqnr_db = sum_sq > 0 ? 10.0 * std::log10(ref_sq / sum_sq) : std::numeric_limits<double>::infinity();
  return e;
}

/// A quantized matrix with the error it was made with. A plain value (thread-safety as quantized_matrix).
template <scale_value Scale>
struct quantize_result {
  quantized_matrix<Scale> weights;
  quant_error error;
};

/// Quantizes row-major N x K fp32 weights group by group: the quantizer picks (scale, zero), the
/// scale is rounded to Scale first, then each code = clamp(round(w / scale) + zero) (round to
/// nearest, ties to even). The quantizer's symmetry must match the scheme's. O(N K).
/// Thread-safe (no shared state).
template <scale_value Scale = half, quantizer Q = absmax_quantizer>
quantize_result<Scale> quantize(std::span<const float> w, std::int64_t n, std::int64_t k, quant_scheme scheme,
                                const Q& q = Q{}) {
  constexpr const char* where = "weft::quant::quantize";
  const packed_sizes z = quantized_matrix<Scale>::check_scheme(n, k, scheme, where);
  expects(std::cmp_equal(w.size(), z.elements), errc::invalid_argument, where, "weights have ", w.size(),
          " elements but N x K = ", n, " x ", k, " = ", z.elements);
  expects(static_cast<bool>(q.symmetric()) == scheme.symmetric, errc::invalid_argument, where, "the quantizer is ",
          q.symmetric() ? "symmetric" : "asymmetric", " but the scheme is ",
          scheme.symmetric ? "symmetric" : "asymmetric");
  for (std::size_t i = 0; i < w.size(); ++i)
    expects(std::isfinite(w[i]), errc::invalid_argument, where, "weight ", i, " is ", w[i], " (not finite)");
  const std::int64_t gs = z.group_size, groups = z.groups;
  std::vector<std::int32_t> codes(w.size());
  std::vector<Scale> scales(static_cast<std::size_t>(n * groups));
  std::vector<std::int16_t> zeros(static_cast<std::size_t>(n * groups));
  const int lo = code_min(scheme.bits), hi = code_max(scheme.bits);
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t k0 = g * gs, k1 = std::min(k, k0 + gs);
      const auto group = w.subspan(static_cast<std::size_t>(r * k + k0), static_cast<std::size_t>(k1 - k0));
      group_params p = q.choose(group, scheme.bits);
      // Round the scale to its storage type first so codes match what the kernels will use; a
      // scale that underflows the storage type is replaced by the smallest positive one, one that
      // overflows it (weights beyond fp16's range) is an error rather than a silent clamp.
      float stored = static_cast<float>(Scale(p.scale));
      expects(std::isfinite(stored) && std::isfinite(p.scale), errc::out_of_range, where, "row ", r, " group ", g,
              " needs scale ", p.scale, ", which the scale type cannot hold (largest finite fp16 is 65504)");
      if (!(stored > 0.0f)) stored = static_cast<float>(Scale(std::is_same_v<Scale, half> ? 6.104e-05f : 1.2e-38f));
      scales[static_cast<std::size_t>(r * groups + g)] = Scale(stored);
      zeros[static_cast<std::size_t>(r * groups + g)] = static_cast<std::int16_t>(p.zero);
      for (std::int64_t i = k0; i < k1; ++i) {
        const float v = w[static_cast<std::size_t>(r * k + i)];
        const auto c = static_cast<long>(std::nearbyint(v / stored)) + p.zero;
        codes[static_cast<std::size_t>(r * k + i)] = static_cast<std::int32_t>(std::clamp<long>(c, lo, hi));
      }
    }
  quantize_result<Scale> out{quantized_matrix<Scale>::from_codes(n, k, scheme, codes, scales, zeros), {}};
  out.error = measure_error(w, out.weights);
  return out;
}

}  // namespace weft::quant

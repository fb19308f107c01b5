// 2:4 structured-sparse int4 weights, the format of Sparse-Marlin (Castro, Frantar et al.,
// "MARLIN: Mixed-Precision Auto-Regressive Parallel Inference on Large Language Models", 2024,
// section 5, and the Sparse-Marlin kernels in IST-DASLab/Sparse-Marlin): in every aligned group of
// 4 consecutive inputs of a row at most 2 weights are non-zero; only those 2 are stored, as int4
// codes, with two 2-bit positions per group (the metadata layout of NVIDIA's sparse tensor cores).
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/quant/concepts.hpp>
#include <weft/quant/format.hpp>
#include <weft/quant/quantizers.hpp>
#include <weft/quant/tile_math.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace weft::quant {

/// Inputs per sparsity group (2 of every 4 kept).
inline constexpr int sparse24_group = 4;

/// Position (0..3) of kept slot `slot` (0 or 1) of a 4-group from its metadata nibble. O(1).
WEFT_HOST_DEVICE constexpr int sparse24_position(std::uint8_t nibble, int slot) noexcept {
  return (nibble >> (2 * slot)) & 3;
}

/// An N x K int4 weight matrix with 2:4 structured sparsity.
///   values: the kept codes, a dense int4 matrix of N x K/2 in weft's block layout
///           (format.hpp): kept element j of a row belongs to 4-group j / 2 (slot j % 2);
///   meta:   per row K/8 bytes, the nibble of 4-group t in byte t / 2 (low nibble for even t):
///           bits 0-1 = position of slot 0, bits 2-3 = position of slot 1, slot 0 < slot 1;
///   scales, zeros: [N][groups] as in quantized_matrix, groups over the original K.
/// A pruned weight is exactly 0 (it has no code); a kept one is (code - zero) * scale.
/// K must be a multiple of 64 and group_size a multiple of 64 (or 0 for per-channel), so a group's
/// kept codes are whole 16-byte blocks. Thread-safety: const members may be called concurrently.
/// Memory: N K / 4 bytes of codes + N K / 8 of metadata + scales: 3 bits per weight plus scales,
/// against 4 for dense int4.
template <scale_value Scale = half>
class sparse24_matrix {
 public:
  using scale_type = Scale;

  sparse24_matrix() = default;

  /// Builds the matrix from its parts: `codes` N x K/2 kept codes (row-major, 0..15), `positions`
  /// N x K/2 positions (0..3, strictly increasing within each 4-group), scales and zeros [N][groups]
  /// (zeros empty for a symmetric scheme). Throws weft::error naming the first bad value. O(N K).
  static sparse24_matrix from_parts(std::int64_t n, std::int64_t k, quant_scheme scheme,
                                    std::span<const std::int32_t> codes, std::span<const std::uint8_t> positions,
                                    std::span<const Scale> scales, std::span<const std::int16_t> zeros = {}) {
    constexpr const char* where = "weft::quant::sparse24_matrix::from_parts";
    check_shape(n, k, scheme, where);
    const auto kept = checked_mul(n, k / 2, where);
    expects(std::cmp_equal(positions.size(), kept), errc::invalid_argument, where, "positions has ", positions.size(),
            " entries but N x K/2 = ", n, " x ", k / 2, " = ", kept);
    // The kept codes are a dense N x K/2 int4 matrix with groups of half the size.
    const quant_scheme half_scheme{4, scheme.group_size / 2, scheme.symmetric};
    sparse24_matrix m;
    m.values_ = quantized_matrix<Scale>::from_codes(n, k / 2, half_scheme, codes, scales, zeros);
    m.k_ = k;
    m.scheme_ = scheme;
    m.meta_.assign(static_cast<std::size_t>(n * (k / 8)), 0);
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t t = 0; t < k / 4; ++t) {
        const std::uint8_t p0 = positions[static_cast<std::size_t>(r * (k / 2) + 2 * t)];
        const std::uint8_t p1 = positions[static_cast<std::size_t>(r * (k / 2) + 2 * t + 1)];
        expects(p0 < p1 && p1 < 4, errc::invalid_argument, where, "row ", r, " group of 4 at input ", 4 * t,
                " keeps positions ", +p0, " and ", +p1, " (need 0 <= first < second <= 3)");
        m.meta_[static_cast<std::size_t>(r * (k / 8) + t / 2)] |=
            static_cast<std::uint8_t>((p0 | (p1 << 2)) << (4 * (t % 2)));
      }
    return m;
  }

  std::int64_t rows() const noexcept { return values_.rows(); }  ///< N
  std::int64_t cols() const noexcept { return k_; }              ///< K (original inputs)
  const quant_scheme& scheme() const noexcept { return scheme_; }
  std::int64_t groups() const noexcept { return values_.groups(); }
  /// Original inputs per group (group_size of the scheme, or K for per-channel).
  std::int64_t group_size() const noexcept { return 2 * values_.group_size(); }
  bool empty() const noexcept { return values_.empty(); }

  /// The kept codes as a dense N x K/2 int4 matrix (its scales and zeros are this matrix's).
  const quantized_matrix<Scale>& values() const noexcept { return values_; }
  /// Metadata, K/8 bytes per row (see the class comment).
  std::span<const std::uint8_t> meta() const noexcept { return meta_; }
  /// Bytes a GEMV reads: kept codes, metadata, scales (and zeros when asymmetric).
  std::size_t weight_bytes() const noexcept { return values_.weight_bytes() + meta_.size(); }

  /// Metadata nibble of 4-group t of row n. O(1).
  std::uint8_t nibble(std::int64_t n, std::int64_t t) const noexcept {
    return static_cast<std::uint8_t>((meta_[static_cast<std::size_t>(n * (k_ / 8) + t / 2)] >> (4 * (t % 2))) & 0xF);
  }
  /// Dequantized element (n, k): 0 when pruned. O(1). Precondition: indices in range (unchecked).
  float value(std::int64_t n, std::int64_t k) const noexcept {
    const std::int64_t t = k / 4;
    const std::uint8_t nb = nibble(n, t);
    for (int slot = 0; slot < 2; ++slot)
      if (sparse24_position(nb, slot) == k % 4) return values_.value(n, 2 * t + slot);
    return 0.0f;
  }
  /// All elements dequantized, row-major N x K (zeros where pruned). O(N K).
  std::vector<float> dequantize() const {
    std::vector<float> out(static_cast<std::size_t>(rows() * k_), 0.0f);
    for (std::int64_t n = 0; n < rows(); ++n)
      for (std::int64_t k = 0; k < k_; ++k) out[static_cast<std::size_t>(n * k_ + k)] = value(n, k);
    return out;
  }

  friend bool operator==(const sparse24_matrix& a, const sparse24_matrix& b) {
    return a.k_ == b.k_ && a.values_ == b.values_ && a.meta_ == b.meta_;
  }

  /// Validates a shape for the 2:4 format; throws weft::error. O(1).
  static void check_shape(std::int64_t n, std::int64_t k, const quant_scheme& s, const char* where) {
    expects(s.bits == 4, errc::invalid_argument, where, "2:4 sparse weights are int4; bits = ", s.bits);
    expects(n > 0 && k > 0 && k % 64 == 0, errc::invalid_argument, where, "shape ", n, " x ", k,
            " needs N > 0 and K a positive multiple of 64 (16 groups of 4 fill one 16-byte block of kept codes)");
    expects(s.group_size == 0 || (s.group_size > 0 && s.group_size % 64 == 0), errc::invalid_argument, where,
            "group_size = ", s.group_size, " must be 0 (per-channel) or a positive multiple of 64 for 2:4 weights");
    (void)checked_mul(n, k, where);
  }

 private:
  // Invariants: values_ is N x K/2 with group_size / 2 (or per-channel); meta_ holds N x K/8 bytes
  // whose nibbles have first position < second position.
  quantized_matrix<Scale> values_;
  std::int64_t k_ = 0;
  quant_scheme scheme_{4, 128, true};
  std::vector<std::uint8_t> meta_;
};

/// Magnitude pruning to 2:4: in every aligned group of 4 inputs of each row, keeps the 2 weights of
/// largest magnitude (the lower index on ties) and zeroes the others, as SparseGPT's magnitude
/// baseline does. Throws weft::error on a shape that is not N x K with K a multiple of 4, or on
/// non-finite weights. O(N K). Thread-safe.
inline std::vector<float> prune_2_4(std::span<const float> w, std::int64_t n, std::int64_t k) {
  constexpr const char* where = "weft::quant::prune_2_4";
  expects(n > 0 && k > 0 && k % 4 == 0, errc::invalid_argument, where, "shape ", n, " x ", k,
          " needs positive N and K a multiple of 4");
  const auto count = checked_mul(n, k, where);
  expects(std::cmp_equal(w.size(), count), errc::invalid_argument, where, "weights have ", w.size(),
          " elements but N x K = ", n, " x ", k, " = ", count);
  std::vector<float> out(w.begin(), w.end());
  for (std::size_t g = 0; g < out.size(); g += 4) {
    for (std::size_t i = 0; i < 4; ++i)
      expects(std::isfinite(out[g + i]), errc::invalid_argument, where, "weight ", g + i, " is ", out[g + i],
              " (not finite)");
    // Rank the four by magnitude; zero the two smallest.
    int order[4] = {0, 1, 2, 3};
    std::stable_sort(order, order + 4, [&](int a, int b) { return std::fabs(out[g + a]) > std::fabs(out[g + b]); });
    out[g + static_cast<std::size_t>(order[2])] = 0.0f;
    out[g + static_cast<std::size_t>(order[3])] = 0.0f;
  }
  return out;
}

/// A 2:4 sparse matrix with the error of its quantization. A plain value.
template <scale_value Scale>
struct sparse24_result {
  sparse24_matrix<Scale> weights;
  quant_error error;  ///< against the (already 2:4) input, so it is the quantization error alone
};

/// Quantizes a 2:4-sparse row-major N x K fp32 matrix (each aligned group of 4 inputs has at most 2
/// non-zeros; prune_2_4 makes one) into sparse24_matrix: the kept weights of each group of
/// scheme.group_size inputs get a scale and zero from the quantizer and round-to-nearest codes,
/// as quantize() does for dense weights. A 4-group with fewer than 2 non-zeros keeps zeros in
/// its free slots (stored as exact zeros). Throws weft::error for a shape or scheme the format does
/// not take, non-finite weights, or a 4-group with more than 2 non-zeros (naming it). O(N K).
/// Thread-safe.
template <scale_value Scale = half, quantizer Q = absmax_quantizer>
sparse24_result<Scale> quantize_2_4(std::span<const float> w, std::int64_t n, std::int64_t k, quant_scheme scheme,
                                    const Q& q = Q{}) {
  constexpr const char* where = "weft::quant::quantize_2_4";
  sparse24_matrix<Scale>::check_shape(n, k, scheme, where);
  expects(std::cmp_equal(w.size(), n * k), errc::invalid_argument, where, "weights have ", w.size(),
          " elements but N x K = ", n, " x ", k, " = ", n * k);
  const std::int64_t kc = k / 2;
  std::vector<float> kept(static_cast<std::size_t>(n * kc));
  std::vector<std::uint8_t> positions(kept.size());
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t t = 0; t < k / 4; ++t) {
      const float* g = w.data() + r * k + 4 * t;
      int nonzero = 0;
      for (int i = 0; i < 4; ++i) {
        expects(std::isfinite(g[i]), errc::invalid_argument, where, "weight (", r, ", ", 4 * t + i, ") is ", g[i],
                " (not finite)");
        nonzero += g[i] != 0.0f ? 1 : 0;
      }
      expects(nonzero <= 2, errc::invalid_argument, where, "row ", r, " inputs ", 4 * t, "..", 4 * t + 3, " hold ",
              nonzero, " non-zeros; 2:4 sparsity allows 2 (prune_2_4 makes a matrix 2:4)");
      // Slots take the non-zeros in order, then the lowest free positions.
      int slot = 0;
      bool used[4] = {};
      for (int i = 0; i < 4 && slot < 2; ++i)
        if (g[i] != 0.0f) {
          used[i] = true;
          positions[static_cast<std::size_t>(r * kc + 2 * t + slot++)] = static_cast<std::uint8_t>(i);
        }
      for (int i = 0; i < 4 && slot < 2; ++i)
        if (!used[i]) {
          used[i] = true;
          positions[static_cast<std::size_t>(r * kc + 2 * t + slot++)] = static_cast<std::uint8_t>(i);
        }
      auto* p = positions.data() + r * kc + 2 * t;
      if (p[0] > p[1]) std::swap(p[0], p[1]);
      kept[static_cast<std::size_t>(r * kc + 2 * t)] = g[p[0]];
      kept[static_cast<std::size_t>(r * kc + 2 * t + 1)] = g[p[1]];
    }
  // The kept values form a dense N x K/2 matrix with half-size groups: quantize it as such.
  const quant_scheme half_scheme{4, scheme.group_size / 2, scheme.symmetric};
  auto dense = quantize<Scale>(kept, n, kc, half_scheme, q);
  const auto codes = dense.weights.codes();
  sparse24_result<Scale> out{
      sparse24_matrix<Scale>::from_parts(n, k, scheme, codes, positions, dense.weights.scales(),
                                         scheme.symmetric ? std::span<const std::int16_t>{} : dense.weights.zeros()),
      {}};
  // Error against the input itself: pruned entries are exact zeros on both sides.
  out.error = dense.error;
  const double count = static_cast<double>(n * k), kept_count = static_cast<double>(n * kc);
  out.error.mean_abs *= kept_count / count;
  out.error.rmse *= std::sqrt(kept_count / count);
  return out;
}

}  // namespace weft::quant

// Lossless conversion between AWQ checkpoint tensors (Lin et al., "AWQ", MLSys 2024; the AutoAWQ
// GEMM layout) and weft's quantized_matrix.
//   qweight int32 [K][N/8]: packed along N; column 8c + j of row k sits in nibble awq_nibble(j)
//                           of word (k, c), nibble order 0,4,1,5,2,6,3,7
//   qzeros  int32 [G][N/8]: the same packing for zero points (stored as is)
//   scales        [G][N]
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/quant/format.hpp>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace weft::quant {

/// Non-owning view of one linear layer's AWQ tensors. A plain value; the viewed memory must
/// outlive it.
template <scale_value Scale = half>
struct awq_view {
  std::int64_t k = 0;  ///< input features
  std::int64_t n = 0;  ///< output features
  int group_size = 128;
  std::span<const std::int32_t> qweight;  ///< [K][N/8]
  std::span<const std::int32_t> qzeros;   ///< [G][N/8]
  std::span<const Scale> scales;          ///< [G][N]
};

/// Owning AWQ tensors, as written by to_awq(). A plain value.
template <scale_value Scale = half>
struct awq_tensors {
  std::int64_t k = 0, n = 0;
  int group_size = 128;
  std::vector<std::int32_t> qweight, qzeros;
  std::vector<Scale> scales;
  awq_view<Scale> view() const { return {k, n, group_size, qweight, qzeros, scales}; }
};

/// Converts AWQ tensors into weft's layout, losslessly. Throws weft::error when N is not a multiple
/// of the packing factor 8, a tensor has the wrong size (sizes are overflow-checked, so a crafted
/// shape cannot pass), the group size is not a multiple of 32, or a scale is NaN or infinite.
/// O(N K). Thread-safe.
template <scale_value Scale>
quantized_matrix<Scale> from_awq(const awq_view<Scale>& t) {
  constexpr const char* where = "weft::quant::from_awq";
  expects(t.k > 0 && t.n > 0, errc::invalid_argument, where, "shape K x N = ", t.k, " x ", t.n, " must be positive");
  expects(t.n % 8 == 0, errc::invalid_argument, where, "N = ", t.n,
          " is not divisible by 8, the number of int4 codes AWQ packs into one int32 along N");
  expects(t.group_size > 0 && t.group_size % int4_block == 0, errc::invalid_argument, where,
          "group_size = ", t.group_size, " must be a positive multiple of ", int4_block);
  // Shapes come from a checkpoint's metadata: every product is checked, so none can wrap to a
  // size that matches the (small) tensors and let the loops below run past them.
  const std::int64_t groups = checked_ceil_div<std::int64_t>(t.k, t.group_size, where), words = t.n / 8;
  const auto qweight_words = checked_mul(t.k, words, where), qzeros_words = checked_mul(groups, words, where),
             scale_count = checked_mul(groups, t.n, where);
  expects(std::cmp_equal(t.qweight.size(), qweight_words), errc::invalid_argument, where, "qweight has ",
          t.qweight.size(), " words but [K][N/8] needs ", qweight_words, " (K = ", t.k, ", N = ", t.n, ")");
  expects(std::cmp_equal(t.qzeros.size(), qzeros_words), errc::invalid_argument, where, "qzeros has ", t.qzeros.size(),
          " words but [G][N/8] needs ", qzeros_words, " (G = ", groups, ", N = ", t.n, ")");
  expects(std::cmp_equal(t.scales.size(), scale_count), errc::invalid_argument, where, "scales has ", t.scales.size(),
          " elements but [G][N] needs ", scale_count, " (G = ", groups, ", N = ", t.n, ")");
  const auto nibble = [](std::int32_t word, std::int64_t col) {
    return static_cast<std::int32_t>((static_cast<std::uint32_t>(word) >> (4 * awq_nibble(static_cast<int>(col % 8)))) &
                                     0xF);
  };
  std::vector<std::int32_t> codes(static_cast<std::size_t>(t.n * t.k));
  for (std::int64_t k = 0; k < t.k; ++k)
    for (std::int64_t n = 0; n < t.n; ++n)
      codes[static_cast<std::size_t>(n * t.k + k)] = nibble(t.qweight[static_cast<std::size_t>(k * words + n / 8)], n);
  std::vector<Scale> scales(static_cast<std::size_t>(t.n * groups));
  std::vector<std::int16_t> zeros(scales.size());
  for (std::int64_t g = 0; g < groups; ++g)
    for (std::int64_t n = 0; n < t.n; ++n) {
      scales[static_cast<std::size_t>(n * groups + g)] = t.scales[static_cast<std::size_t>(g * t.n + n)];
      zeros[static_cast<std::size_t>(n * groups + g)] =
          static_cast<std::int16_t>(nibble(t.qzeros[static_cast<std::size_t>(g * words + n / 8)], n));
    }
  return quantized_matrix<Scale>::from_codes(t.n, t.k, quant_scheme{4, t.group_size, false}, codes, scales, zeros);
}

/// Writes weft int4 group-wise weights as AWQ tensors (the inverse of from_awq). Throws weft::error
/// for int8 or per-channel weights, N not divisible by 8, or a zero point above 15. O(N K).
template <scale_value Scale>
awq_tensors<Scale> to_awq(const quantized_matrix<Scale>& w) {
  constexpr const char* where = "weft::quant::to_awq";
  expects(w.bits() == 4, errc::unsupported, where, "AWQ's layout holds int4 weights, not ", w.bits(), "-bit");
  expects(w.scheme().group_size != 0, errc::unsupported, where, "AWQ checkpoints are group-wise; got per-channel");
  expects(w.rows() % 8 == 0, errc::invalid_argument, where, "N = ", w.rows(),
          " is not divisible by 8, the number of int4 codes AWQ packs into one int32 along N");
  const std::int64_t k = w.cols(), n = w.rows(), groups = w.groups(), words = n / 8;
  awq_tensors<Scale> t;
  t.k = k;
  t.n = n;
  t.group_size = static_cast<int>(w.group_size());
  t.qweight.assign(static_cast<std::size_t>(k * words), 0);
  t.qzeros.assign(static_cast<std::size_t>(groups * words), 0);
  t.scales.resize(static_cast<std::size_t>(groups * n));
  const auto put = [](std::int32_t& word, std::int64_t col, int code) {
    word = static_cast<std::int32_t>(static_cast<std::uint32_t>(word) |
                                     (static_cast<std::uint32_t>(code) << (4 * awq_nibble(static_cast<int>(col % 8)))));
  };
  for (std::int64_t i = 0; i < k; ++i)
    for (std::int64_t r = 0; r < n; ++r)
      put(t.qweight[static_cast<std::size_t>(i * words + r / 8)], r, w.code_unchecked(r, i));
  for (std::int64_t g = 0; g < groups; ++g)
    for (std::int64_t r = 0; r < n; ++r) {
      t.scales[static_cast<std::size_t>(g * n + r)] = w.scales()[static_cast<std::size_t>(r * groups + g)];
      expects(w.zero(r, g) >= 0 && w.zero(r, g) <= 15, errc::out_of_range, where, "zero point ", w.zero(r, g),
              " of row ", r, " group ", g, " does not fit AWQ's 4-bit zeros");
      put(t.qzeros[static_cast<std::size_t>(g * words + r / 8)], r, w.zero(r, g));
    }
  return t;
}

}  // namespace weft::quant

// Lossless conversion between GPTQ checkpoint tensors (Frantar et al., "GPTQ", ICLR 2023; the
// AutoGPTQ/GPTQ-for-LLaMa int4 layout) and weft's quantized_matrix, including act-order (g_idx).
//   qweight int32 [K/8][N]: packed along K, element k = 8i + j of column n in bits 4j..4j+3 of (i, n)
//   qzeros  int32 [G][N/8]: packed along N, zero of column 8c + j in bits 4j..4j+3 of (g, c)
//   scales        [G][N];  g_idx int32 [K] (optional): the group of each input channel
// v1 checkpoints store zero - 1 in qzeros (the "zero - 1" quirk); v2 stores the zero itself.
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/quant/format.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

namespace weft::quant {

enum class gptq_version { v1, v2 };

/// Non-owning view of one linear layer's GPTQ tensors. group_size -1 means per-channel.
/// A plain value; the viewed memory must outlive it.
template <scale_value Scale = half>
struct gptq_view {
  std::int64_t k = 0;  ///< input features (rows of the unpacked weight)
  std::int64_t n = 0;  ///< output features
  int group_size = 128;
  std::span<const std::int32_t> qweight;  ///< [K/8][N]
  std::span<const std::int32_t> qzeros;   ///< [G][N/8]
  std::span<const Scale> scales;          ///< [G][N]
  std::span<const std::int32_t> g_idx;    ///< [K] or empty (then g_idx[k] = k / group_size)
  gptq_version version = gptq_version::v1;
};

/// Owning GPTQ tensors, as written by to_gptq(). A plain value.
template <scale_value Scale = half>
struct gptq_tensors {
  std::int64_t k = 0, n = 0;
  int group_size = 128;
  std::vector<std::int32_t> qweight, qzeros, g_idx;
  std::vector<Scale> scales;
  gptq_version version = gptq_version::v1;
  gptq_view<Scale> view() const { return {k, n, group_size, qweight, qzeros, scales, g_idx, version}; }
};

/// weft weights made from GPTQ tensors. With act-order the input channels are reordered so groups
/// are contiguous: the layer computes y = weights * x[input_perm]. input_perm is empty exactly when
/// the checkpoint had no g_idx (then it is the identity), so to_gptq can write g_idx back.
template <scale_value Scale = half>
struct gptq_import {
  quantized_matrix<Scale> weights;
  std::vector<std::int32_t> input_perm;
};

/// Converts GPTQ tensors into weft's layout, losslessly. Throws weft::error when K or N is not a
/// multiple of the packing factor 8, a tensor has the wrong size (sizes are overflow-checked, so a
/// crafted shape cannot pass), g_idx does not describe groups of group_size channels, or a scale
/// is NaN or infinite. O(N K). Thread-safe.
template <scale_value Scale>
gptq_import<Scale> from_gptq(const gptq_view<Scale>& t) {
  constexpr const char* where = "weft::quant::from_gptq";
  expects(t.k > 0 && t.n > 0, errc::invalid_argument, where, "shape K x N = ", t.k, " x ", t.n, " must be positive");
  expects(t.k % 8 == 0, errc::invalid_argument, where, "K = ", t.k,
          " is not divisible by 8, the number of int4 codes GPTQ packs into one int32 along K");
  expects(t.n % 8 == 0, errc::invalid_argument, where, "N = ", t.n,
          " is not divisible by 8, the number of zero points GPTQ packs into one int32 along N");
  expects(t.group_size == -1 || (t.group_size > 0 && t.group_size % int4_block == 0), errc::invalid_argument, where,
          "group_size = ", t.group_size, " must be -1 (per-channel) or a positive multiple of ", int4_block);
  // g_idx and the input permutation are int32, as in the checkpoints.
  check_limit(t.k, std::numeric_limits<std::int32_t>::max(), where, "K");
  const std::int64_t gs = t.group_size == -1 ? t.k : t.group_size;
  // Shapes come from a checkpoint's metadata: every product is checked, so none can wrap to a
  // size that matches the (small) tensors and let the loops below read past them.
  const std::int64_t groups = checked_ceil_div(t.k, gs, where);
  const auto qweight_words = checked_mul(t.k / 8, t.n, where), qzeros_words = checked_mul(groups, t.n / 8, where),
             scale_count = checked_mul(groups, t.n, where);
  expects(std::cmp_equal(t.qweight.size(), qweight_words), errc::invalid_argument, where, "qweight has ",
          t.qweight.size(), " words but [K/8][N] needs ", qweight_words, " (K = ", t.k, ", N = ", t.n, ")");
  expects(std::cmp_equal(t.qzeros.size(), qzeros_words), errc::invalid_argument, where, "qzeros has ", t.qzeros.size(),
          " words but [G][N/8] needs ", qzeros_words, " (G = ", groups, ", N = ", t.n, ")");
  expects(std::cmp_equal(t.scales.size(), scale_count), errc::invalid_argument, where, "scales has ", t.scales.size(),
          " elements but [G][N] needs ", scale_count, " (G = ", groups, ", N = ", t.n, ")");
  expects(t.g_idx.empty() || std::cmp_equal(t.g_idx.size(), t.k), errc::invalid_argument, where, "g_idx has ",
          t.g_idx.size(), " entries but K = ", t.k);

  // Order input channels by group (stable, so an identity g_idx gives the identity order).
  std::vector<std::int32_t> perm(static_cast<std::size_t>(t.k));
  std::iota(perm.begin(), perm.end(), 0);
  if (!t.g_idx.empty()) {
    for (std::int64_t k = 0; k < t.k; ++k)
      expects(t.g_idx[k] >= 0 && t.g_idx[k] < groups, errc::out_of_range, where, "g_idx[", k, "] = ", t.g_idx[k],
              " is not a group index in [0, ", groups, ")");
    std::stable_sort(perm.begin(), perm.end(), [&](std::int32_t a, std::int32_t b) { return t.g_idx[a] < t.g_idx[b]; });
    for (std::int64_t k = 0; k < t.k; ++k) {
      expects(t.g_idx[perm[k]] == k / gs, errc::invalid_argument, where, "g_idx does not put exactly ", gs,
              " input channels in each group (group ", t.g_idx[perm[k]], " is at sorted position ", k, ")");
    }
  }
  const auto code_at = [&](std::int64_t n, std::int64_t k) {
    const auto word = static_cast<std::uint32_t>(t.qweight[static_cast<std::size_t>((k / 8) * t.n + n)]);
    return static_cast<std::int32_t>((word >> (4 * (k % 8))) & 0xF);
  };
  std::vector<std::int32_t> codes(static_cast<std::size_t>(t.n * t.k));
  for (std::int64_t n = 0; n < t.n; ++n)
    for (std::int64_t k = 0; k < t.k; ++k) codes[static_cast<std::size_t>(n * t.k + k)] = code_at(n, perm[k]);
  std::vector<Scale> scales(static_cast<std::size_t>(t.n * groups));
  std::vector<std::int16_t> zeros(scales.size());
  const int bias = t.version == gptq_version::v1 ? 1 : 0;
  for (std::int64_t g = 0; g < groups; ++g)
    for (std::int64_t n = 0; n < t.n; ++n) {
      scales[static_cast<std::size_t>(n * groups + g)] = t.scales[static_cast<std::size_t>(g * t.n + n)];
      const auto word = static_cast<std::uint32_t>(t.qzeros[static_cast<std::size_t>(g * (t.n / 8) + n / 8)]);
      zeros[static_cast<std::size_t>(n * groups + g)] =
          static_cast<std::int16_t>(((word >> (4 * (n % 8))) & 0xF) + bias);
    }
  quant_scheme scheme{4, t.group_size == -1 ? 0 : t.group_size, false};
  gptq_import<Scale> out{quantized_matrix<Scale>::from_codes(t.n, t.k, scheme, codes, scales, zeros), {}};
  if (!t.g_idx.empty()) out.input_perm = std::move(perm);
  return out;
}

/// Writes weft int4 weights as GPTQ tensors (the inverse of from_gptq: from_gptq(to_gptq(w, p))
/// gives w and p back). input_perm (empty or a permutation of K) becomes g_idx. Throws weft::error
/// for int8 weights, K or N not divisible by 8, or a zero point the version cannot store
/// (v1 stores zero - 1, so zeros must be 1..16; v2 needs 0..15). O(N K). Thread-safe.
template <scale_value Scale>
gptq_tensors<Scale> to_gptq(const quantized_matrix<Scale>& w, std::span<const std::int32_t> input_perm = {},
                            gptq_version version = gptq_version::v1) {
  constexpr const char* where = "weft::quant::to_gptq";
  expects(w.bits() == 4, errc::unsupported, where, "GPTQ's layout holds int4 weights, not ", w.bits(), "-bit");
  expects(w.cols() % 8 == 0, errc::invalid_argument, where, "K = ", w.cols(),
          " is not divisible by 8, the number of int4 codes GPTQ packs into one int32 along K");
  expects(w.rows() % 8 == 0, errc::invalid_argument, where, "N = ", w.rows(),
          " is not divisible by 8, the number of zero points GPTQ packs into one int32 along N");
  const bool per_channel = w.scheme().group_size == 0;
  const std::int64_t k = w.cols(), n = w.rows(), groups = w.groups();
  expects(per_channel || k > (groups - 1) * w.group_size(), errc::invalid_argument, where, "inconsistent groups");
  expects(input_perm.empty() || input_perm.size() == static_cast<std::size_t>(k), errc::invalid_argument, where,
          "input_perm has ", input_perm.size(), " entries but K = ", k);
  std::vector<std::int32_t> perm(static_cast<std::size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  if (!input_perm.empty()) {
    std::vector<char> seen(static_cast<std::size_t>(k), 0);
    for (std::int64_t i = 0; i < k; ++i) {
      const auto p = input_perm[static_cast<std::size_t>(i)];
      expects(p >= 0 && p < k && !seen[static_cast<std::size_t>(p)], errc::invalid_argument, where, "input_perm[", i,
              "] = ", p, " makes it not a permutation of [0, ", k, ")");
      seen[static_cast<std::size_t>(p)] = 1;
      perm[static_cast<std::size_t>(i)] = p;
    }
  }
  const int bias = version == gptq_version::v1 ? 1 : 0;
  gptq_tensors<Scale> t;
  t.k = k;
  t.n = n;
  t.group_size = per_channel ? -1 : static_cast<int>(w.group_size());
  t.version = version;
  t.qweight.assign(static_cast<std::size_t>(k / 8 * n), 0);
  t.qzeros.assign(static_cast<std::size_t>(groups * n / 8), 0);
  t.scales.resize(static_cast<std::size_t>(groups * n));
  if (!input_perm.empty()) t.g_idx.assign(static_cast<std::size_t>(k), 0);
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t i = 0; i < k; ++i) {
      const std::int64_t orig = perm[static_cast<std::size_t>(i)];
      auto& word = t.qweight[static_cast<std::size_t>((orig / 8) * n + r)];
      word = static_cast<std::int32_t>(static_cast<std::uint32_t>(word) |
                                       (static_cast<std::uint32_t>(w.code_unchecked(r, i)) << (4 * (orig % 8))));
    }
  if (!input_perm.empty())
    for (std::int64_t i = 0; i < k; ++i)
      t.g_idx[static_cast<std::size_t>(perm[static_cast<std::size_t>(i)])] =
          static_cast<std::int32_t>(i / w.group_size());
  for (std::int64_t g = 0; g < groups; ++g)
    for (std::int64_t r = 0; r < n; ++r) {
      t.scales[static_cast<std::size_t>(g * n + r)] = w.scales()[static_cast<std::size_t>(r * groups + g)];
      const int stored = w.zero(r, g) - bias;
      expects(stored >= 0 && stored <= 15, errc::out_of_range, where, "zero point ", w.zero(r, g), " of row ", r,
              " group ", g, " cannot be stored by GPTQ ",
              version == gptq_version::v1 ? "v1 (zero - 1 in 0..15)" : "v2");
      auto& word = t.qzeros[static_cast<std::size_t>(g * (n / 8) + r / 8)];
      word = static_cast<std::int32_t>(static_cast<std::uint32_t>(word) |
                                       (static_cast<std::uint32_t>(stored) << (4 * (r % 8))));
    }
  return t;
}

}  // namespace weft::quant

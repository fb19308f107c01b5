// weft's quantized weight format: int4 or int8 codes of an N x K weight matrix (N outputs, K
// inputs), group-wise or per-channel, symmetric or asymmetric, with fp32/fp16/bf16 scales, stored
// in a layout the CPU vector kernels and the CUDA kernels read directly (see tile_math.hpp).
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/quant/concepts.hpp>
#include <weft/quant/tile_math.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

namespace weft::quant {

/// How a matrix is quantized. group_size 0 means per-channel (one group spans all of K); otherwise
/// it must be a positive multiple of 32 (one int4 block), 128 by default. A plain value.
struct quant_scheme {
  int bits = 4;           ///< 4 or 8
  int group_size = 128;   ///< multiple of 32, or 0 for per-channel
  bool symmetric = true;  ///< zero point fixed at 8 (int4) or 0 (int8)
};

/// Smallest and largest code of a bit width (int4: 0..15, int8: -128..127).
constexpr int code_min(int bits) noexcept { return bits == 4 ? 0 : -128; }
constexpr int code_max(int bits) noexcept { return bits == 4 ? 15 : 127; }
/// Zero point of symmetric quantization.
constexpr int symmetric_zero(int bits) noexcept { return bits == 4 ? 8 : 0; }

/// Every size of an N x K matrix in weft's layout, computed with overflow checks (see
/// quantized_matrix::check_scheme), so no later product of these can wrap. A plain value.
struct packed_sizes {
  std::int64_t k_padded = 0;      ///< K rounded up to 32 (int4) or 64 (int8)
  std::int64_t group_size = 0;    ///< elements per group (round_up(K, 32) when per-channel)
  std::int64_t groups = 0;        ///< ceil(K / group_size)
  std::int64_t elements = 0;      ///< N x K
  std::int64_t cells = 0;         ///< N x groups (scales, zeros)
  std::int64_t packed_bytes = 0;  ///< bytes of packed codes, padding included
};

/// An N x K weight matrix in weft's packed layout.
///   int4: rows of round_up(K, 32) codes, 16 bytes per 32-element block; byte j of a block holds
///         element j (low nibble) and j + 16 (high nibble). Padding codes equal the group's zero.
///   int8: panels of 16 rows, [n / 16][k / 4][n % 16][k % 4], K padded to 64, N padded to 16
///         with zeros; also the per-row code sums the VNNI kernel needs.
///   scales and zeros: [N][groups], zeros as int16 so GPTQ v1's zero + 1 (up to 16) is exact.
/// Thread-safety: const member functions may be called concurrently; construction and assignment
/// are not synchronised. Memory O(N K bits / 8 + N groups).
template <scale_value Scale = half>
class quantized_matrix {
 public:
  using scale_type = Scale;

  quantized_matrix() = default;

  /// Builds the matrix from unpacked codes (row-major N x K), scales and zeros ([N][groups];
  /// zeros may be empty for a symmetric scheme). Validates every size and range and throws
  /// weft::error naming the offending value. O(N K).
  static quantized_matrix from_codes(std::int64_t n, std::int64_t k, quant_scheme scheme,
                                     std::span<const std::int32_t> codes, std::span<const Scale> scales,
                                     std::span<const std::int16_t> zeros = {}) {
    constexpr const char* where = "weft::quant::quantized_matrix::from_codes";
    const packed_sizes z = check_scheme(n, k, scheme, where);
    const std::int64_t groups = z.groups;
    const auto cells = static_cast<std::size_t>(z.cells);
    expects(codes.size() == static_cast<std::size_t>(z.elements), errc::invalid_argument, where, "codes has ",
            codes.size(), " elements but N x K = ", n, " x ", k, " = ", z.elements);
    expects(scales.size() == cells, errc::invalid_argument, where, "scales has ", scales.size(),
            " elements but N x groups = ", n, " x ", groups, " = ", cells);
    expects(zeros.empty() ? scheme.symmetric : zeros.size() == cells, errc::invalid_argument, where, "zeros has ",
            zeros.size(), " elements but N x groups = ", cells, " (zeros may be empty only for a symmetric scheme)");
    const int lo = code_min(scheme.bits), hi = code_max(scheme.bits);
    for (std::size_t i = 0; i < codes.size(); ++i)
      expects(codes[i] >= lo && codes[i] <= hi, errc::out_of_range, where, "code ", codes[i], " at index ", i,
              " is outside [", lo, ", ", hi, "] for ", scheme.bits, "-bit weights");
    quantized_matrix m;
    m.init_shape(n, k, scheme, z);
    m.set_scales_and_zeros(scales, zeros, where);
    m.pack(codes);
    return m;
  }

  /// Builds the matrix from weft's own packed layout: `packed`, `scales` and `zeros` as packed(),
  /// scales() and zeros() return them for a matrix of this shape and scheme (e.g. written to a
  /// file; zeros may be empty for a symmetric scheme). Every size is checked (with overflow-safe
  /// arithmetic) against the shape, scales must be finite, zero points valid, and int8 padding
  /// bytes zero; the int8 row sums are recomputed. Throws weft::error naming the shape and the
  /// sizes. O(N K).
  static quantized_matrix from_packed(std::int64_t n, std::int64_t k, quant_scheme scheme,
                                      std::span<const std::uint8_t> packed, std::span<const Scale> scales,
                                      std::span<const std::int16_t> zeros = {}) {
    constexpr const char* where = "weft::quant::quantized_matrix::from_packed";
    const packed_sizes z = check_scheme(n, k, scheme, where);
    expects(std::cmp_equal(packed.size(), z.packed_bytes), errc::invalid_argument, where, "packed has ", packed.size(),
            " bytes but a ", n, " x ", k, " ", scheme.bits, "-bit matrix (K padded to ", z.k_padded,
            scheme.bits == 8 ? ", N to whole 16-row panels" : "", ") packs into ", z.packed_bytes);
    expects(std::cmp_equal(scales.size(), z.cells), errc::invalid_argument, where, "scales has ", scales.size(),
            " elements but N x groups = ", n, " x ", z.groups, " = ", z.cells);
    expects(zeros.empty() ? scheme.symmetric : std::cmp_equal(zeros.size(), z.cells), errc::invalid_argument, where,
            "zeros has ", zeros.size(), " elements but N x groups = ", z.cells,
            " (zeros may be empty only for a symmetric scheme)");
    quantized_matrix m;
    m.init_shape(n, k, scheme, z);
    m.set_scales_and_zeros(scales, zeros, where);
    m.packed_.assign(packed.begin(), packed.end());
    if (scheme.bits == 8) {
      const auto n_pad = round_up(n, int8_panel_rows);
      m.row_sums_.assign(static_cast<std::size_t>(n_pad), 0);
      for (std::int64_t r = 0; r < n_pad; ++r)
        for (std::int64_t i = 0; i < z.k_padded; ++i) {
          const auto c = static_cast<std::int8_t>(m.packed_[static_cast<std::size_t>(int8_offset(r, i, z.k_padded))]);
          expects(c == 0 || (r < n && i < k), errc::invalid_argument, where, "padding byte of row ", r, ", input ", i,
                  " is ", +c, " but must be 0 (the ", n, " x ", k, " matrix is padded to ", n_pad, " x ", z.k_padded,
                  ")");
          m.row_sums_[static_cast<std::size_t>(r)] += c;
        }
    }
    return m;
  }

  std::int64_t rows() const noexcept { return n_; }  ///< N (outputs)
  std::int64_t cols() const noexcept { return k_; }  ///< K (inputs)
  std::int64_t k_padded() const noexcept { return k_padded_; }
  std::int64_t groups() const noexcept { return groups_; }
  /// Elements per group (round_up(K, 32) when per-channel).
  std::int64_t group_size() const noexcept { return group_size_; }
  const quant_scheme& scheme() const noexcept { return scheme_; }
  int bits() const noexcept { return scheme_.bits; }
  bool empty() const noexcept { return n_ == 0; }

  /// Packed codes in weft's layout (see the class comment).
  std::span<const std::uint8_t> packed() const noexcept { return packed_; }
  std::span<const Scale> scales() const noexcept { return scales_; }
  std::span<const std::int16_t> zeros() const noexcept { return zeros_; }
  /// int8 only: sum over k of the codes of each row (padded to a multiple of 16 rows).
  std::span<const std::int32_t> row_sums() const noexcept { return row_sums_; }
  /// Bytes of codes, scales and zeros: what a GEMV must read.
  std::size_t weight_bytes() const noexcept {
    return packed_.size() + scales_.size() * sizeof(Scale) + (scheme_.symmetric ? 0 : zeros_.size() * 2);
  }

  /// Code of element (n, k). O(1). Precondition: indices in range (checked).
  int code(std::int64_t n, std::int64_t k) const {
    expects(n >= 0 && n < n_ && k >= 0 && k < k_, errc::out_of_range, "weft::quant::quantized_matrix::code",
            "element (", n, ", ", k, ") is outside the ", n_, " x ", k_, " matrix");
    return code_unchecked(n, k);
  }
  int code_unchecked(std::int64_t n, std::int64_t k) const noexcept {
    if (scheme_.bits == 4) return int4_get(packed_.data() + n * int4_row_bytes(k_padded_), k);
    return static_cast<std::int8_t>(packed_[static_cast<std::size_t>(int8_offset(n, k, k_padded_))]);
  }
  float scale(std::int64_t n, std::int64_t g) const noexcept {
    return static_cast<float>(scales_[static_cast<std::size_t>(n * groups_ + g)]);
  }
  int zero(std::int64_t n, std::int64_t g) const noexcept { return zeros_[static_cast<std::size_t>(n * groups_ + g)]; }
  /// Dequantized element (n, k) = (code - zero) * scale. O(1).
  float value(std::int64_t n, std::int64_t k) const noexcept {
    const auto g = k / group_size_;
    return dequant(code_unchecked(n, k), zero(n, g), scale(n, g));
  }
  /// All elements dequantized, row-major N x K. O(N K).
  std::vector<float> dequantize() const {
    std::vector<float> out(static_cast<std::size_t>(n_ * k_));
    for (std::int64_t n = 0; n < n_; ++n)
      for (std::int64_t k = 0; k < k_; ++k) out[static_cast<std::size_t>(n * k_ + k)] = value(n, k);
    return out;
  }
  /// All codes, row-major N x K. O(N K).
  std::vector<std::int32_t> codes() const {
    std::vector<std::int32_t> out(static_cast<std::size_t>(n_ * k_));
    for (std::int64_t n = 0; n < n_; ++n)
      for (std::int64_t k = 0; k < k_; ++k) out[static_cast<std::size_t>(n * k_ + k)] = code_unchecked(n, k);
    return out;
  }

  friend bool operator==(const quantized_matrix& a, const quantized_matrix& b) {
    return a.n_ == b.n_ && a.k_ == b.k_ && a.scheme_.bits == b.scheme_.bits &&
           a.scheme_.symmetric == b.scheme_.symmetric && a.group_size_ == b.group_size_ && a.packed_ == b.packed_ &&
           a.zeros_ == b.zeros_ &&
           std::equal(a.scales_.begin(), a.scales_.end(), b.scales_.begin(), b.scales_.end(),
                      [](Scale x, Scale y) { return bits_of(x) == bits_of(y); });
  }

  /// Validates shape and scheme and returns every size of the layout, each computed with checked
  /// arithmetic: throws weft::error for a non-positive shape, an unknown bit width or group size,
  /// or a shape whose sizes do not fit in 64 bits. O(1).
  static packed_sizes check_scheme(std::int64_t n, std::int64_t k, const quant_scheme& s, const char* where) {
    expects(n > 0 && k > 0, errc::invalid_argument, where, "matrix shape ", n, " x ", k, " must be positive");
    expects(s.bits == 4 || s.bits == 8, errc::invalid_argument, where, "bits = ", s.bits, " but only 4 and 8 exist");
    expects(s.group_size == 0 || (s.group_size > 0 && s.group_size % int4_block == 0), errc::invalid_argument, where,
            "group_size = ", s.group_size, " must be 0 (per-channel) or a positive multiple of ", int4_block);
    const auto round = [&](std::int64_t x, std::int64_t m) {
      return checked_add<std::int64_t>(x, m - 1, where) / m * m;
    };
    packed_sizes z;
    z.k_padded = round(k, s.bits == 4 ? int4_block : int8_k_align);
    z.group_size = s.group_size == 0 ? round(k, int4_block) : s.group_size;
    z.groups = checked_ceil_div(k, z.group_size, where);
    z.elements = checked_mul(n, k, where);
    z.cells = checked_mul(n, z.groups, where);
    z.packed_bytes =
        s.bits == 4 ? checked_mul(n, z.k_padded / 2, where) : checked_mul(round(n, int8_panel_rows), z.k_padded, where);
    return z;
  }

 private:
  static std::uint32_t bits_of(Scale x) {
    if constexpr (std::is_same_v<Scale, float>)
      return std::bit_cast<std::uint32_t>(x);
    else
      return x.bits;
  }

  // Scales must be finite; zeros empty (symmetric: the fixed midpoint) or valid codes (GPTQ v1's
  // zero + 1 allows 16 for int4).
  void set_scales_and_zeros(std::span<const Scale> scales, std::span<const std::int16_t> zeros, const char* where) {
    for (std::size_t i = 0; i < scales.size(); ++i)
      expects(std::isfinite(static_cast<float>(scales[i])), errc::invalid_argument, where, "scale ", i, " (row ",
              static_cast<std::int64_t>(i) / groups_, ", group ", static_cast<std::int64_t>(i) % groups_, ") is ",
              static_cast<float>(scales[i]), ", not finite");
    const int lo = code_min(scheme_.bits), hi = code_max(scheme_.bits);
    if (zeros.empty()) {
      zeros_.assign(scales.size(), static_cast<std::int16_t>(symmetric_zero(scheme_.bits)));
    } else {
      for (std::size_t i = 0; i < zeros.size(); ++i) {
        const bool ok = scheme_.symmetric ? zeros[i] == symmetric_zero(scheme_.bits)
                                          : zeros[i] >= lo && zeros[i] <= hi + (scheme_.bits == 4 ? 1 : 0);
        expects(ok, errc::out_of_range, where, "zero point ", zeros[i], " at index ", i, " is not valid for a ",
                scheme_.symmetric ? "symmetric " : "asymmetric ", scheme_.bits, "-bit scheme");
      }
      zeros_.assign(zeros.begin(), zeros.end());
    }
    scales_.assign(scales.begin(), scales.end());
  }

  void init_shape(std::int64_t n, std::int64_t k, quant_scheme s, const packed_sizes& z) {
    n_ = n;
    k_ = k;
    scheme_ = s;
    k_padded_ = z.k_padded;
    group_size_ = z.group_size;
    groups_ = z.groups;
  }

  void pack(std::span<const std::int32_t> codes) {
    if (scheme_.bits == 4) {
      const auto row_bytes = int4_row_bytes(k_padded_);
      packed_.assign(static_cast<std::size_t>(n_ * row_bytes), 0);
      for (std::int64_t n = 0; n < n_; ++n) {
        std::uint8_t* row = packed_.data() + n * row_bytes;
        for (std::int64_t k = 0; k < k_padded_; ++k) {
          // Padding takes the group's zero point (clamped to a code); kernels pair it with zero activations.
          const int c = k < k_ ? codes[static_cast<std::size_t>(n * k_ + k)] : std::clamp(zero(n, groups_ - 1), 0, 15);
          int4_set(row, k, static_cast<std::uint8_t>(c));
        }
      }
    } else {
      const auto n_pad = round_up(n_, int8_panel_rows);
      packed_.assign(static_cast<std::size_t>(n_pad * k_padded_), 0);
      row_sums_.assign(static_cast<std::size_t>(n_pad), 0);
      for (std::int64_t n = 0; n < n_; ++n)
        for (std::int64_t k = 0; k < k_; ++k) {
          const auto c = codes[static_cast<std::size_t>(n * k_ + k)];
          packed_[static_cast<std::size_t>(int8_offset(n, k, k_padded_))] =
              static_cast<std::uint8_t>(static_cast<std::int8_t>(c));
          row_sums_[static_cast<std::size_t>(n)] += c;
        }
    }
  }

  // Invariants: packed_ holds N x k_padded_ codes in the layout above; scales_ and zeros_ hold
  // N x groups_ entries; groups_ = ceil(K / group_size_); int8 padding bytes are 0.
  std::int64_t n_ = 0, k_ = 0, k_padded_ = 0, group_size_ = 0, groups_ = 0;
  quant_scheme scheme_{};
  std::vector<std::uint8_t> packed_;
  std::vector<Scale> scales_;
  std::vector<std::int16_t> zeros_;
  std::vector<std::int32_t> row_sums_;
};

}  // namespace weft::quant

// What weft's GPU weight layouts (gpu_w4_matrix, gpu_sparse24_matrix) share: the shape, the tile
// and chunk counts, and the scales and zero points stored per tile of 16 rows and group as pairs
// (row g, row g + 8), so the lane that holds rows g and g + 8 reads both with one load.
#pragma once

#include <weft/core/checked.hpp>
#include <weft/quant/format.hpp>
#include <weft/quant/tile_math.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace weft::quant {

/// Version of weft's GPU layouts. Kernels check it; a future layout gets a new number.
inline constexpr int gpu_w4_layout_version = 1;
/// Output rows per tile (the M side of one swapped mma: weights are the A operand).
inline constexpr int gpu_w4_tile_rows = 16;

namespace detail {

/// The shape and the scale cells of a GPU layout: scales [tiles][groups][8][2] and zeros in the
/// same order (one byte each; empty when symmetric); padded rows have scale 0 and zero 8. A base
/// class: the layouts derive from it and fill it with init(). Thread-safety: const members may be
/// called concurrently.
template <class Scale>
class gpu_layout_base {
 public:
  std::int64_t rows() const noexcept { return n_; }         ///< N
  std::int64_t cols() const noexcept { return k_; }         ///< K (original inputs)
  std::int64_t tiles() const noexcept { return tiles_; }    ///< ceil(N / 16)
  std::int64_t chunks() const noexcept { return chunks_; }  ///< ceil(K / the layout's chunk)
  std::int64_t group_size() const noexcept { return group_size_; }
  std::int64_t groups() const noexcept { return groups_; }
  bool symmetric() const noexcept { return symmetric_; }
  static constexpr int layout_version() noexcept { return gpu_w4_layout_version; }

  std::span<const Scale> scales() const noexcept { return scales_; }
  /// Empty for a symmetric matrix (every zero point is 8).
  std::span<const std::uint8_t> zeros() const noexcept { return zeros_; }
  /// Index of (row n, group) in scales() and zeros(). O(1).
  std::int64_t cell_of(std::int64_t n, std::int64_t group) const noexcept {
    const std::int64_t r = n % gpu_w4_tile_rows;
    return ((n / gpu_w4_tile_rows) * groups_ + group) * gpu_w4_tile_rows + 2 * (r % 8) + r / 8;
  }
  Scale scale(std::int64_t n, std::int64_t group) const noexcept {
    return scales_[static_cast<std::size_t>(cell_of(n, group))];
  }
  int zero(std::int64_t n, std::int64_t group) const noexcept {
    return symmetric_ ? 8 : zeros_[static_cast<std::size_t>(cell_of(n, group))];
  }

 protected:
  /// Takes the shape (K original inputs, `chunk` inputs a chunk) and the scales and zeros of
  /// `values` ([N][groups]; for 2:4 the kept codes, whose groups are the original ones). O(N groups).
  void init(std::int64_t n, std::int64_t k, std::int64_t group_size, std::int64_t chunk,
            const quantized_matrix<Scale>& values, const char* where) {
    n_ = n;
    k_ = k;
    group_size_ = group_size;
    groups_ = values.groups();
    symmetric_ = values.scheme().symmetric;
    tiles_ = ceil_div(n, gpu_w4_tile_rows);
    chunks_ = ceil_div(k, chunk);
    const auto count = static_cast<std::size_t>(checked_mul(tiles_ * gpu_w4_tile_rows, groups_, where));
    scales_.assign(count, Scale(0.0f));
    zeros_.assign(symmetric_ ? 0 : count, 8);
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t g = 0; g < groups_; ++g) {
        const auto i = static_cast<std::size_t>(cell_of(r, g));
        scales_[i] = values.scales()[static_cast<std::size_t>(r * groups_ + g)];
        if (!symmetric_) zeros_[i] = static_cast<std::uint8_t>(values.zero(r, g));
      }
  }
  std::size_t cell_bytes() const noexcept { return scales_.size() * sizeof(Scale) + zeros_.size(); }

  // Invariant: scales_ (and zeros_ unless symmetric_) hold tiles_ * 16 * groups_ cells in cell_of order.
  std::int64_t n_ = 0, k_ = 0, tiles_ = 0, chunks_ = 0, group_size_ = 0, groups_ = 0;
  bool symmetric_ = true;
  std::vector<Scale> scales_;
  std::vector<std::uint8_t> zeros_;
};

}  // namespace detail

}  // namespace weft::quant

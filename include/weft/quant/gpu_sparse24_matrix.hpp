// weft's GPU layout of 2:4 sparse int4 weights (version 1): the kept codes re-permuted once into
// the A fragments of the sparse tensor cores' mma.sp.m16n8k32, and the 2-bit positions into their
// metadata registers, so the 2:4 decode GEMV reads only kept codes and metadata (3 bits a weight)
// with 16-byte loads. Sparse-Marlin's idea (Castro, Frantar et al., 2024); the metadata layout was
// measured on an H200 (bench/quant/gpu/probe_mma_sp.cu), since the PTX ISA gives it as a figure.
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/quant/concepts.hpp>
#include <weft/quant/detail/gpu_layout_base.hpp>
#include <weft/quant/gpu_w4_matrix.hpp>
#include <weft/quant/sparse24_matrix.hpp>
#include <weft/quant/tile_math.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace weft::quant {

/// Original inputs per chunk of the 2:4 layout: four mma.sp k32 steps.
inline constexpr int gpu_sparse24_chunk_k = 128;
/// Metadata word of a sparsity group that keeps positions 0 and 1: what padding holds (the
/// hardware refuses 0b0000, 0b0101, 0b1010 and 0b1111).
inline constexpr std::uint8_t gpu_sparse24_padding_nibble = 0x4;

/// Where kept code j (0 .. K/2 - 1) of row n lives: word and nibble, as gpu_w4_position. The codes
/// are [tile = n / 16][chunk = 2j / 128][lane][step 0..3] words; step s of a chunk covers inputs
/// 32 s .. 32 s + 31, i.e. 16 kept codes per row = the compressed 16 x 16 A operand of
/// mma.sp.m16n8k32, whose fragment is laid out like the dense m16n8k16 one: lane (g, t) holds rows
/// g and g + 8, compressed columns 2t, 2t + 1 (sparsity group t of the step, slots 0 and 1) and
/// 2t + 8, 2t + 9 (group t + 4). Nibble order as in the dense layout: j = 0, 4 -> row g, group t;
/// j = 1, 5 -> row g + 8, group t; j = 2, 6 -> row g, group t + 4; j = 3, 7 -> row g + 8, group
/// t + 4 (slot 0, then slot 1). O(1).
WEFT_HOST_DEVICE constexpr gpu_w4_position gpu_sparse24_position_of(std::int64_t n, std::int64_t j,
                                                                    std::int64_t chunks) noexcept {
  const std::int64_t tile = n / gpu_w4_tile_rows, chunk = j / (gpu_sparse24_chunk_k / 2);
  const int r = static_cast<int>(n % gpu_w4_tile_rows), jj = static_cast<int>(j % (gpu_sparse24_chunk_k / 2));
  const int step = jj / 16, c = jj % 16;  // compressed column of the step
  const int group = c / 2, slot = c % 2;  // sparsity group 0..7 of the step
  const int t = group % 4, high = group / 4;
  const int lane = 4 * (r % 8) + t;
  const int nibble = r / 8 + 2 * high + 4 * slot;
  return {((tile * chunks + chunk) * 32 + lane) * 4 + step, nibble};
}

/// Where the metadata of sparsity group q (inputs 4q .. 4q + 3) of row n lives: word of the meta
/// array and bit offset of its 4 bits. The array is [tile][chunk][16 lanes (g, t = 0 or 1)][step]
/// words: lane (g, t) of step s holds groups 4t .. 4t + 3 of the step for row g in bits 0-15 and
/// for row g + 8 in bits 16-31 (the layout mma.sp.m16n8k32 f16 reads with sparsity selector 0; the
/// other two lanes of each quad hold none). O(1).
WEFT_HOST_DEVICE constexpr gpu_w4_position gpu_sparse24_meta_of(std::int64_t n, std::int64_t q,
                                                                std::int64_t chunks) noexcept {
  const std::int64_t tile = n / gpu_w4_tile_rows, chunk = q / (gpu_sparse24_chunk_k / 4);
  const int r = static_cast<int>(n % gpu_w4_tile_rows), qq = static_cast<int>(q % (gpu_sparse24_chunk_k / 4));
  const int step = qq / 8, group = qq % 8;
  const int lane = 2 * (r % 8) + group / 4;
  return {((tile * chunks + chunk) * 16 + lane) * 4 + step, 16 * (r / 8) + 4 * (group % 4)};
}

/// A 2:4 sparse int4 matrix in the GPU layout, built from a sparse24_matrix whose groups are a
/// multiple of 128 inputs or one per row; lossless (code(), position(), scale(), zero()).
///   words:  [tiles][chunks][32 lanes][4 steps] uint32, kept codes (gpu_sparse24_position_of);
///   meta:   [tiles][chunks][16 lanes][4 steps] uint32 (gpu_sparse24_meta_of);
///   scales, zeros: as gpu_w4_matrix ([tiles][groups][8][2], groups over the original K).
/// N is padded to 16 rows and K to 128 inputs; padding keeps positions 0 and 1 with the row's zero
/// point as code (so it contributes 0), padded rows code 8. Thread-safety: const members may be
/// called concurrently. Memory: 3 bits a weight plus scales.
template <scale_value Scale = half>
class gpu_sparse24_matrix : public detail::gpu_layout_base<Scale> {
 public:
  using scale_type = Scale;

  gpu_sparse24_matrix() = default;

  /// Re-lays out a sparse24_matrix. Throws weft::error for an empty matrix or groups that are
  /// not a multiple of 128 inputs (with more than one group per row). O(N K).
  static gpu_sparse24_matrix from(const sparse24_matrix<Scale>& w) {
    constexpr const char* where = "weft::quant::gpu_sparse24_matrix::from";
    expects(!w.empty(), errc::invalid_argument, where, "the matrix is empty");
    expects(w.groups() == 1 || w.group_size() % gpu_sparse24_chunk_k == 0, errc::invalid_argument, where,
            "group_size = ", w.group_size(), " for K = ", w.cols(),
            ": the 2:4 GPU layout needs groups of a multiple of 128 inputs (a lane's step spans a whole "
            "128-input chunk) or one group per row");
    gpu_sparse24_matrix g;
    const auto& v = w.values();
    g.init(w.rows(), w.cols(), w.group_size(), gpu_sparse24_chunk_k, v, where);
    const auto n_pad = g.tiles_ * gpu_w4_tile_rows, k_pad = g.chunks_ * gpu_sparse24_chunk_k;
    g.words_.assign(static_cast<std::size_t>(checked_mul(n_pad, k_pad / 16, where)), 0u);
    g.meta_.assign(static_cast<std::size_t>(checked_mul(n_pad, k_pad / 32, where)), 0u);
    for (std::int64_t n = 0; n < n_pad; ++n) {
      const int pad_code = n < w.rows() ? std::clamp(v.zero(n, v.groups() - 1), 0, 15) : 8;
      for (std::int64_t j = 0; j < k_pad / 2; ++j) {
        const int c = n < g.n_ && j < g.k_ / 2 ? v.code_unchecked(n, j) : pad_code;
        const auto p = gpu_sparse24_position_of(n, j, g.chunks_);
        g.words_[static_cast<std::size_t>(p.word)] |= static_cast<std::uint32_t>(c) << (4 * p.nibble);
      }
      for (std::int64_t q = 0; q < k_pad / 4; ++q) {
        const std::uint8_t nib = n < g.n_ && q < g.k_ / 4 ? w.nibble(n, q) : gpu_sparse24_padding_nibble;
        const auto p = gpu_sparse24_meta_of(n, q, g.chunks_);
        g.meta_[static_cast<std::size_t>(p.word)] |= static_cast<std::uint32_t>(nib) << p.nibble;
      }
    }
    return g;
  }

  std::span<const std::uint32_t> words() const noexcept { return words_; }
  std::span<const std::uint32_t> meta() const noexcept { return meta_; }
  /// Bytes a GEMV reads: kept codes, metadata, scales and zeros, padding included.
  std::size_t weight_bytes() const noexcept { return (words_.size() + meta_.size()) * 4 + this->cell_bytes(); }

  /// Kept code j (0 .. K/2 - 1) of row n. Precondition (checked): in range. O(1).
  int code(std::int64_t n, std::int64_t j) const {
    expects(n >= 0 && n < this->n_ && j >= 0 && j < this->k_ / 2, errc::out_of_range,
            "weft::quant::gpu_sparse24_matrix::code", "kept code (", n, ", ", j, ") is outside the ", this->n_, " x ",
            this->k_ / 2, " kept codes");
    const auto p = gpu_sparse24_position_of(n, j, this->chunks_);
    return static_cast<int>((words_[static_cast<std::size_t>(p.word)] >> (4 * p.nibble)) & 0xFu);
  }
  /// Metadata nibble of sparsity group q of row n (as sparse24_matrix::nibble). Checked. O(1).
  std::uint8_t nibble(std::int64_t n, std::int64_t q) const {
    expects(n >= 0 && n < this->n_ && q >= 0 && q < this->k_ / 4, errc::out_of_range,
            "weft::quant::gpu_sparse24_matrix::nibble", "group (", n, ", ", q, ") is outside the ", this->n_, " x ",
            this->k_ / 4, " groups of 4");
    const auto p = gpu_sparse24_meta_of(n, q, this->chunks_);
    return static_cast<std::uint8_t>((meta_[static_cast<std::size_t>(p.word)] >> p.nibble) & 0xFu);
  }

 private:
  // Invariant: words_ and meta_ hold tiles_ * 16 rows x chunks_ * 128 inputs in the orders of
  // gpu_sparse24_position_of and gpu_sparse24_meta_of.
  std::vector<std::uint32_t> words_, meta_;
};

}  // namespace weft::quant

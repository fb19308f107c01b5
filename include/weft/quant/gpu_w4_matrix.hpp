// weft's GPU layout of int4 weights (version 1): codes re-permuted once, at packing time, into the
// order in which the lanes of a warp consume them as tensor-core fragments, so the decode kernels
// issue only 16-byte coalesced loads and register-level dequantization (the idea of Marlin, Frantar
// et al., 2024, section 4; the layout itself is weft's own). One layout serves the W4A16 GEMV
// (mma.m16n8k16) and the W4A8 GEMV (mma.m16n8k32.s8) alike.
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/quant/concepts.hpp>
#include <weft/quant/detail/gpu_layout_base.hpp>
#include <weft/quant/format.hpp>
#include <weft/quant/tile_math.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace weft::quant {

/// Inputs per chunk: one 16-byte load per lane covers 16 rows x 64 inputs (4 mma k16 steps).
inline constexpr int gpu_w4_chunk_k = 64;
/// Bytes of one chunk of one tile: 32 lanes x 16 bytes.
inline constexpr int gpu_w4_chunk_bytes = 512;

/// Where one weight lives in the GPU layout: 32-bit word `word` (of the codes array), nibble
/// `nibble` (bits 4 * nibble .. 4 * nibble + 3). A plain value.
struct gpu_w4_position {
  std::int64_t word;
  int nibble;
};

/// Position of weight (n, k) for a matrix of `chunks` chunks per tile (k_padded / 64). The codes
/// are [tile = n / 16][chunk = k / 64][lane 0..31][step 0..3] words. Lane (g = lane / 4,
/// t = lane % 4) holds rows g and g + 8 of the tile at the chunk's inputs 16 t .. 16 t + 15, four
/// per step: step s covers inputs 16 t + 4 s + e, e = 0..3. The mma.m16n8k16 A fragment (PTX ISA,
/// "Matrix fragments for mma.m16n8k16") takes e = 0, 1 as its columns 2t, 2t + 1 and e = 2, 3 as
/// 2t + 8, 2t + 9; a dot product only needs the weights and the activations to agree on which
/// input each column is, so the kernels read a lane's 16 activations as one contiguous run
/// (two 16-byte loads in fp16, one in int8). Nibble j of the word: j = 0, 4 -> row g, e = 0, 1;
/// j = 1, 5 -> row g + 8, e = 0, 1; j = 2, 6 -> row g, e = 2, 3; j = 3, 7 -> row g + 8, e = 2, 3.
/// So masking nibbles (j, j + 4) gives fragment register j as two 16-bit lanes. O(1).
WEFT_HOST_DEVICE constexpr gpu_w4_position gpu_w4_position_of(std::int64_t n, std::int64_t k,
                                                              std::int64_t chunks) noexcept {
  const std::int64_t tile = n / gpu_w4_tile_rows, chunk = k / gpu_w4_chunk_k;
  const int r = static_cast<int>(n % gpu_w4_tile_rows), kk = static_cast<int>(k % gpu_w4_chunk_k);
  const int t = kk / 16, step = (kk % 16) / 4, e = kk % 4;
  const int g = r % 8, upper_row = r / 8;  // row g or g + 8
  const int lane = 4 * g + t;
  const int nibble = upper_row + 2 * (e / 2) + 4 * (e % 2);
  return {((tile * chunks + chunk) * 32 + lane) * 4 + step, nibble};
}

/// An int4 weight matrix in the GPU layout, built from a quantized_matrix whose groups are a
/// multiple of 64 inputs (64, 128 as GPTQ and AWQ use, 256, ...) or one per row; lossless: code(),
/// scale() and zero() give back every value. Host-side storage; copy words(), scales() and zeros()
/// to the device once and pass them to the GEMV launchers (quant/cuda/w4_gemv.cuh).
///   words:  [tiles][chunks][32 lanes][4 steps] uint32, N padded to 16 rows, K to 64 inputs;
///           padding codes equal the row's zero point clamped to 0..15 (the kernels pair them
///           with zero activations), padded rows hold code 8.
///   scales: [tiles][groups][8][2]: pair (g, 0/1) = rows g and g + 8 of the tile, so one lane
///           reads both of its rows' scales with one load; padded rows have scale 0.
///   zeros:  same order as scales, one byte each (0..16); empty for a symmetric matrix (8).
/// Thread-safety: const members may be called concurrently. Memory: N K / 2 bytes of codes plus
/// N groups (sizeof(Scale) + 1) bytes, padding included.
template <scale_value Scale = half>
class gpu_w4_matrix : public detail::gpu_layout_base<Scale> {
 public:
  using scale_type = Scale;

  gpu_w4_matrix() = default;

  /// Re-lays out an int4 quantized_matrix. Throws weft::error for int8 weights. O(N K).
  static gpu_w4_matrix from(const quantized_matrix<Scale>& w) {
    constexpr const char* where = "weft::quant::gpu_w4_matrix::from";
    expects(!w.empty(), errc::invalid_argument, where, "the matrix is empty");
    expects(w.bits() == 4, errc::invalid_argument, where, "weights are ", w.bits(),
            "-bit; the GPU layout holds int4 codes");
    expects(w.groups() == 1 || w.group_size() % gpu_w4_chunk_k == 0, errc::invalid_argument, where,
            "group_size = ", w.group_size(), " for K = ", w.cols(),
            ": the GPU layout needs groups of a multiple of 64 inputs (a lane's step spans a whole 64-input chunk) "
            "or one group per row");
    gpu_w4_matrix g;
    g.init(w.rows(), w.cols(), w.group_size(), gpu_w4_chunk_k, w, where);
    const auto n_pad = g.tiles_ * gpu_w4_tile_rows, k_pad = g.chunks_ * gpu_w4_chunk_k;
    g.words_.assign(static_cast<std::size_t>(checked_mul(n_pad, k_pad / 8, where)), 0u);
    for (std::int64_t n = 0; n < n_pad; ++n)
      for (std::int64_t k = 0; k < k_pad; ++k) {
        int c = 8;
        if (n < g.n_) c = k < g.k_ ? w.code_unchecked(n, k) : std::clamp(w.zero(n, w.groups() - 1), 0, 15);
        const auto p = gpu_w4_position_of(n, k, g.chunks_);
        g.words_[static_cast<std::size_t>(p.word)] |= static_cast<std::uint32_t>(c) << (4 * p.nibble);
      }
    return g;
  }

  std::span<const std::uint32_t> words() const noexcept { return words_; }
  /// Bytes a GEMV reads: codes, scales and zeros, padding included.
  std::size_t weight_bytes() const noexcept { return words_.size() * 4 + this->cell_bytes(); }

  /// Code of element (n, k), read back from the layout. Precondition (checked): in range. O(1).
  int code(std::int64_t n, std::int64_t k) const {
    expects(n >= 0 && n < this->n_ && k >= 0 && k < this->k_, errc::out_of_range, "weft::quant::gpu_w4_matrix::code",
            "element (", n, ", ", k, ") is outside the ", this->n_, " x ", this->k_, " matrix");
    const auto p = gpu_w4_position_of(n, k, this->chunks_);
    return static_cast<int>((words_[static_cast<std::size_t>(p.word)] >> (4 * p.nibble)) & 0xFu);
  }

 private:
  // Invariant: words_ holds tiles_ * 16 rows x chunks_ * 64 inputs of codes in the order of
  // gpu_w4_position_of.
  std::vector<std::uint32_t> words_;
};

}  // namespace weft::quant

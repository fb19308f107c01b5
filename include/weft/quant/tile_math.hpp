// Index and dequantization arithmetic shared by the CPU kernels, the CUDA kernels (quant/cuda/) and
// the tests: every function is WEFT_HOST_DEVICE, so the same code runs on the host and in a kernel.
// Fragment layouts follow the PTX ISA, "Matrix fragments for mma.m16n8k16 / mma.m16n8k32".
#pragma once

#include <weft/core/config.hpp>

#include <cstddef>
#include <cstdint>

namespace weft::quant {

/// Weights per int4 block in weft's layout: a block is 16 bytes, byte j holds element j in its low
/// nibble and element j + 16 in its high nibble, so one 16-byte load feeds two 16-lane vectors.
inline constexpr int int4_block = 32;
/// Bytes per int4 block.
inline constexpr int int4_block_bytes = 16;
/// int8 weights are stored in panels of 16 output rows, each k-step of 4 bytes contiguous: the
/// operand layout of VNNI (vpdpbusd) and of AMX (tdpbssd) B tiles.
inline constexpr int int8_panel_rows = 16;
/// K is padded to this many bytes for int8 weights (one AMX tile row).
inline constexpr int int8_k_align = 64;

/// x rounded up to a multiple of m (m > 0). O(1).
WEFT_HOST_DEVICE constexpr std::int64_t round_up(std::int64_t x, std::int64_t m) noexcept {
  return (x + m - 1) / m * m;
}
/// Ceiling of a / b (b > 0). O(1).
WEFT_HOST_DEVICE constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept { return (a + b - 1) / b; }

/// Bytes one int4 row of k_padded elements occupies (k_padded a multiple of int4_block). O(1).
WEFT_HOST_DEVICE constexpr std::int64_t int4_row_bytes(std::int64_t k_padded) noexcept { return k_padded / 2; }

/// Byte of element k within its int4 row, and the shift (0 or 4) of its nibble. O(1).
WEFT_HOST_DEVICE constexpr std::int64_t int4_byte_of(std::int64_t k) noexcept {
  return (k / int4_block) * int4_block_bytes + (k % int4_block) % 16;
}
WEFT_HOST_DEVICE constexpr int int4_shift_of(std::int64_t k) noexcept { return (k % int4_block) >= 16 ? 4 : 0; }

/// Code (0..15) of element k of an int4 row. O(1).
WEFT_HOST_DEVICE constexpr std::uint8_t int4_get(const std::uint8_t* row, std::int64_t k) noexcept {
  return static_cast<std::uint8_t>((row[int4_byte_of(k)] >> int4_shift_of(k)) & 0xF);
}
/// Stores code (0..15) as element k of an int4 row. O(1).
WEFT_HOST_DEVICE constexpr void int4_set(std::uint8_t* row, std::int64_t k, std::uint8_t code) noexcept {
  const auto byte = int4_byte_of(k);
  const int shift = int4_shift_of(k);
  row[byte] = static_cast<std::uint8_t>((row[byte] & ~(0xF << shift)) | ((code & 0xF) << shift));
}

/// Offset of int8 weight (n, k) in weft's panel layout [n / 16][k / 4][n % 16][k % 4], with K
/// padded to k_padded (a multiple of 64). O(1).
WEFT_HOST_DEVICE constexpr std::int64_t int8_offset(std::int64_t n, std::int64_t k, std::int64_t k_padded) noexcept {
  return ((n / int8_panel_rows) * (k_padded / 4) + k / 4) * (int8_panel_rows * 4) + (n % int8_panel_rows) * 4 + k % 4;
}

/// Dequantized value of a code: (code - zero) * scale, in this order everywhere (CPU and GPU), so
/// exact inputs give bit-identical results on every path. O(1).
WEFT_HOST_DEVICE constexpr float dequant(int code, int zero, float scale) noexcept {
  return static_cast<float>(code - zero) * scale;
}

/// AWQ packs 8 output columns into a 32-bit word; column j of the 8 lives in nibble awq_nibble(j),
/// i.e. nibble order 0,4,1,5,2,6,3,7 (AutoAWQ's AWQ_REVERSE_ORDER). O(1).
WEFT_HOST_DEVICE constexpr int awq_nibble(int j) noexcept {
  constexpr int order[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  return order[j & 7];
}

/// Position of one element of an mma fragment inside its tile.
struct frag_pos {
  int row;
  int col;
};

// mma.m16n8k16 with 16-bit inputs (f16/bf16): lane = 32 lanes of a warp, i = element in the lane.
/// A (16x16, row-major), i in 0..7. O(1).
WEFT_HOST_DEVICE constexpr frag_pos mma16_a(int lane, int i) noexcept {
  return {lane / 4 + 8 * ((i / 2) % 2), (lane % 4) * 2 + (i % 2) + 8 * (i / 4)};
}
/// B (16x8, k x n, "col"), i in 0..3; row = k, col = n. O(1).
WEFT_HOST_DEVICE constexpr frag_pos mma16_b(int lane, int i) noexcept {
  return {(lane % 4) * 2 + (i % 2) + 8 * (i / 2), lane / 4};
}
/// C/D (16x8 f32 or s32), i in 0..3; also the accumulator layout of m16n8k32. O(1).
WEFT_HOST_DEVICE constexpr frag_pos mma_c(int lane, int i) noexcept {
  return {lane / 4 + 8 * (i / 2), (lane % 4) * 2 + (i % 2)};
}
// mma.m16n8k32 with 8-bit inputs (s8).
/// A (16x32, row-major), i in 0..15. O(1).
WEFT_HOST_DEVICE constexpr frag_pos mma32_a(int lane, int i) noexcept {
  return {lane / 4 + 8 * ((i / 4) % 2), (lane % 4) * 4 + (i % 4) + 16 * (i / 8)};
}
/// B (32x8, k x n), i in 0..7; row = k, col = n. O(1).
WEFT_HOST_DEVICE constexpr frag_pos mma32_b(int lane, int i) noexcept {
  return {(lane % 4) * 4 + (i % 4) + 16 * (i / 4), lane / 4};
}

}  // namespace weft::quant

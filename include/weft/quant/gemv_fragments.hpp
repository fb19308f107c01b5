// Register-level math of weft's decode GEMV kernels (quant/cuda/w4_gemv.cuh) as WEFT_HOST_DEVICE
// functions, so the CPU tests run each lane's part on the host: int4 codes of the GPU layout
// (gpu_w4_matrix.hpp) turned into mma A fragments with the magic-number trick (an int4 code OR-ed
// into the mantissa of 1024.0 in fp16, or of 128.0 in bf16, is 1024 + code; Kim et al., "Who Says
// Elephants Can't Run", 2022, and Marlin), activations into B fragments, and the per-group fold.
// The product is swapped, Y^T = W X^T: weights are the 16-row A operand, the M <= 16 tokens the B.
#pragma once

#include <weft/core/config.hpp>
#include <weft/core/half.hpp>
#include <weft/quant/tile_math.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace weft::quant {

namespace detail {

/// (a & b) | c: one lop3 on the GPU.
WEFT_HOST_DEVICE inline std::uint32_t and_or(std::uint32_t a, std::uint32_t b, std::uint32_t c) noexcept {
#if defined(__CUDA_ARCH__)
  std::uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  return (a & b) | c;
#endif
}

/// a * b + c on two 16-bit lanes (fp16 or bf16), one fma.rn.{f16,bf16}x2 on sm_80+. The host form
/// rounds once from fp32, which is exact for every operand the decode uses (small integers and
/// powers of two), so host and device agree bit for bit there.
template <class Act>
WEFT_HOST_DEVICE inline std::uint32_t fma_x2(std::uint32_t a, std::uint32_t b, std::uint32_t c) noexcept {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  std::uint32_t d;
  if constexpr (std::is_same_v<Act, bfloat16>)
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  else
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  const auto lane = [](std::uint32_t v, int i) {
    return static_cast<float>(Act::from_bits(static_cast<std::uint16_t>(v >> (16 * i))));
  };
  std::uint32_t d = 0;
  for (int i = 0; i < 2; ++i)
    d |= static_cast<std::uint32_t>(Act(lane(a, i) * lane(b, i) + lane(c, i)).bits) << (16 * i);
  return d;
#endif
}

/// A scale as fp32: hardware conversion in a kernel, the exact software one on the host.
template <class Scale>
WEFT_HOST_DEVICE inline float scale_as_float(Scale s) noexcept {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<Scale, half>) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(s.bits));
    return f;
  } else if constexpr (std::is_same_v<Scale, bfloat16>) {
    return __uint_as_float(static_cast<unsigned>(s.bits) << 16);
  } else {
    return s;
  }
#else
  return static_cast<float>(s);
#endif
}

/// The bytes at p as a T: one aligned load in a kernel (the caller guarantees the alignment),
/// memcpy on the host.
template <class T, class Src>
WEFT_HOST_DEVICE inline T load_bits(const Src* p) noexcept {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const T*>(p);
#else
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
#endif
}

}  // namespace detail

/// The per-row constants that turn a magic-number code into code - zero, for the two rows a lane
/// holds (g and g + 8). fp16: low nibbles decode to 1024 + q and take -(1024 + z); nibbles in the
/// high half of a byte decode to 1024 + 16 q and take -(64 + z) after a multiply by 1/16.
/// bf16: every nibble is shifted down and decodes to 128 + q, taking -(128 + z). A plain value.
struct w4a16_zero_terms {
  std::uint32_t low[2];
  std::uint32_t high[2];
};

/// Zero terms for zero points z0 (row g) and z1 (row g + 8), each 0..16, built with integer
/// arithmetic (the bit patterns of -(1024 + z), -(64 + z) in fp16 and -(128 + z) in bf16). O(1).
template <class Act>
WEFT_HOST_DEVICE constexpr w4a16_zero_terms w4a16_zero_terms_for(int z0, int z1) noexcept {
  const auto pair = [](std::uint32_t bits) { return bits | (bits << 16); };
  w4a16_zero_terms t{};
  const int z[2] = {z0, z1};
  for (int r = 0; r < 2; ++r) {
    const auto zr = static_cast<std::uint32_t>(z[r]);
    if constexpr (std::is_same_v<Act, bfloat16>) {
      t.low[r] = t.high[r] = pair(0xC300u + zr);  // -(128 + z): ulp 1 in [128, 256)
    } else {
      t.low[r] = pair(0xE400u + zr);         // -(1024 + z): ulp 1 in [1024, 2048)
      t.high[r] = pair(0xD400u + 16u * zr);  // -(64 + z): ulp 1/16 in [64, 128)
    }
  }
  return t;
}

/// The A fragment of one mma.m16n8k16 step from one 32-bit word of the GPU layout: register j
/// holds nibbles j and j + 4 as two 16-bit values code - zero (exact in fp16 and bf16), rows g
/// for j = 0, 2 and g + 8 for j = 1, 3. Two integer and one fma instruction per register. O(1).
template <class Act>
WEFT_HOST_DEVICE inline void w4a16_decode(std::uint32_t word, const w4a16_zero_terms& z,
                                          std::uint32_t (&a)[4]) noexcept {
  if constexpr (std::is_same_v<Act, bfloat16>) {
    constexpr std::uint32_t magic = 0x43004300u, mask = 0x000F000Fu, one = 0x3F803F80u;
    a[0] = detail::fma_x2<Act>(detail::and_or(word, mask, magic), one, z.low[0]);
    a[1] = detail::fma_x2<Act>(detail::and_or(word >> 4, mask, magic), one, z.low[1]);
    a[2] = detail::fma_x2<Act>(detail::and_or(word >> 8, mask, magic), one, z.low[0]);
    a[3] = detail::fma_x2<Act>(detail::and_or(word >> 12, mask, magic), one, z.low[1]);
  } else {
    constexpr std::uint32_t magic = 0x64006400u, low = 0x000F000Fu, high = 0x00F000F0u;
    constexpr std::uint32_t one = 0x3C003C00u, sixteenth = 0x2C002C00u;
    const std::uint32_t upper = word >> 8;
    a[0] = detail::fma_x2<Act>(detail::and_or(word, low, magic), one, z.low[0]);
    a[1] = detail::fma_x2<Act>(detail::and_or(word, high, magic), sixteenth, z.high[1]);
    a[2] = detail::fma_x2<Act>(detail::and_or(upper, low, magic), one, z.low[0]);
    a[3] = detail::fma_x2<Act>(detail::and_or(upper, high, magic), sixteenth, z.high[1]);
  }
}

/// Half of the A fragment of one mma.m16n8k32.s8 step from one word: signed bytes code - zero for
/// row g (nibbles 0, 2, 4, 6) and row g + 8 (nibbles 1, 3, 5, 7). A k32 step takes two words (two
/// k16 steps of the layout); its fragment columns 4t .. 4t + 3 are then the inputs e = 0, 2, 1, 3
/// of the first word's step (the order the bytes come out in), and the activations are read in
/// the same order (w4a8_b_chunk), so one layout serves both kernels. z0x4, z1x4: the zero point
/// in every byte.
/// Each byte is (code | 0x80) - zero, never borrowing, then ^ 0x80: code - zero in two's complement.
WEFT_HOST_DEVICE inline void w4a8_decode(std::uint32_t word, std::uint32_t z0x4, std::uint32_t z1x4,
                                         std::uint32_t (&a)[2]) noexcept {
  constexpr std::uint32_t mask = 0x0F0F0F0Fu, bias = 0x80808080u;
  a[0] = (((word & mask) | bias) - z0x4) ^ bias;
  a[1] = ((((word >> 4) & mask) | bias) - z1x4) ^ bias;
}

/// The two middle bytes of a word swapped (bytes 0, 2, 1, 3): one prmt on the GPU.
WEFT_HOST_DEVICE inline std::uint32_t swap_middle_bytes(std::uint32_t v) noexcept {
#if defined(__CUDA_ARCH__)
  return __byte_perm(v, 0u, 0x3120u);
#else
  return (v & 0xFF0000FFu) | ((v >> 8) & 0x0000FF00u) | ((v << 8) & 0x00FF0000u);
#endif
}

/// B fragments (the activations as the k x n operand) of one chunk for the W4A16 kernel: lane
/// (g, t) takes x_row's inputs k0 + 16 t .. k0 + 16 t + 15 (x_row: the lane's token, row m0 + g),
/// step s getting k0 + 16 t + 4 s + {0, 1} (register 0) and + {2, 3} (register 1), the inputs its
/// weights hold (gpu_w4_position_of). Zero when the lane has no token (active false) and past K.
/// `vector`: the 16 inputs lie inside K and x_row + k0 is 16-byte aligned: two 16-byte loads. O(1).
template <class Act>
WEFT_HOST_DEVICE inline void w4a16_b_chunk(const Act* x_row, bool active, std::int64_t k, std::int64_t k0, int lane,
                                           bool vector, std::uint32_t (&b)[4][2]) noexcept {
  const std::int64_t first = k0 + 16 * (lane % 4);
  // `vector` is the same for the whole warp and `active` is not: lanes without a token take the
  // vector branch too (with zeros), so the warp never splits over the element-wise path.
  if (vector) {
    std::uint32_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (active)
      for (int h = 0; h < 2; ++h) {
#if defined(__CUDA_ARCH__)
        const uint4 q = reinterpret_cast<const uint4*>(x_row + first)[h];
        v[4 * h] = q.x, v[4 * h + 1] = q.y, v[4 * h + 2] = q.z, v[4 * h + 3] = q.w;
#else
        std::memcpy(&v[4 * h], x_row + first + 8 * h, 16);
#endif
      }
    for (int s = 0; s < 4; ++s) b[s][0] = v[2 * s], b[s][1] = v[2 * s + 1];
    return;
  }
  for (int s = 0; s < 4; ++s)
    for (int r = 0; r < 2; ++r) {
      const std::int64_t kk = first + 4 * s + 2 * r;
      const std::uint32_t lo = active && kk < k ? x_row[kk].bits : 0u,
                          hi = active && kk + 1 < k ? x_row[kk + 1].bits : 0u;
      b[s][r] = lo | (hi << 16);
    }
}

/// B fragments of one chunk for the W4A8 kernel: lane (g, t) takes the int8 inputs
/// k0 + 16 t .. k0 + 16 t + 15 of its token; k32 step j gets bytes 8 j .. 8 j + 3 (register 0) and
/// 8 j + 4 .. 8 j + 7 (register 1), each word in the order 0, 2, 1, 3 that w4a8_decode's bytes
/// come in. `vector`: one 16-byte load (inside K, 16-byte aligned). O(1).
WEFT_HOST_DEVICE inline void w4a8_b_chunk(const std::int8_t* x_row, bool active, std::int64_t k, std::int64_t k0,
                                          int lane, bool vector, std::uint32_t (&b)[2][2]) noexcept {
  const std::int64_t first = k0 + 16 * (lane % 4);
  std::uint32_t v[4] = {0, 0, 0, 0};
  if (vector) {  // warp-uniform, as in w4a16_b_chunk
    if (active) {
#if defined(__CUDA_ARCH__)
      const uint4 q = *reinterpret_cast<const uint4*>(x_row + first);
      v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
#else
      std::memcpy(v, x_row + first, 16);
#endif
    }
  } else if (active) {
    for (int i = 0; i < 16; ++i)
      if (first + i < k)
        v[i / 4] |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(x_row[first + i])) << (8 * (i % 4));
  }
  for (int j = 0; j < 2; ++j)
    for (int r = 0; r < 2; ++r) b[j][r] = swap_middle_bytes(v[2 * j + r]);
}

/// B fragment of one mma.sp.m16n8k32 step (2:4 GEMV) for inputs k0 .. k0 + 31: lane (g, t) holds
/// x_row's inputs k0 + 2t + 8i and + 1 in register i = 0..3 (the dense 32 x 8 operand; the sparse
/// tensor core picks the rows the metadata names). Zero for lanes without a token and past K.
/// `vector`: the 32 inputs lie inside K and x_row is 4-byte aligned (one 32-bit load a register).
template <class Act>
WEFT_HOST_DEVICE inline void sparse24_b_step(const Act* x_row, bool active, std::int64_t k, std::int64_t k0, int lane,
                                             bool vector, std::uint32_t (&b)[4]) noexcept {
  for (int i = 0; i < 4; ++i) {
    const std::int64_t kk = k0 + 2 * (lane % 4) + 8 * i;
    if (vector) {
      b[i] = active ? detail::load_bits<std::uint32_t>(x_row + kk) : 0u;
    } else {
      const std::uint32_t lo = active && kk < k ? x_row[kk].bits : 0u,
                          hi = active && kk + 1 < k ? x_row[kk + 1].bits : 0u;
      b[i] = lo | (hi << 16);
    }
  }
}

/// What mma.sp.m16n8k32 (f16/bf16, fp32 accumulate, sparsity selector 0) computes for a warp:
/// A is 16 x 32 with two kept values per aligned group of 4, given as the compressed 16 x 16 in the
/// m16n8k16 A fragment layout (a), their positions in `meta` (lanes 4g and 4g + 1 hold rows g and
/// g + 8, groups 0-3 and 4-7: the layout measured on an H200), B 32 x 8 (b: 4 registers, inputs
/// 2t + 8i, 2t + 8i + 1). The reference the CPU tests hold the 2:4 GEMV's fragments to.
template <class Act>
WEFT_HOST_DEVICE void mma_sp16832_emulate(const std::uint32_t (&a)[32][4], const std::uint32_t (&b)[32][4],
                                          const std::uint32_t (&meta)[32], float (&acc)[32][4]) noexcept {
  const auto half_of = [](std::uint32_t v, int i) {
    return static_cast<float>(Act::from_bits(static_cast<std::uint16_t>(v >> (16 * i))));
  };
  float dense[16][32] = {}, bt[32][8] = {};
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) {
      bt[2 * t + 8 * i][g] = half_of(b[l][i], 0);
      bt[2 * t + 8 * i + 1][g] = half_of(b[l][i], 1);
    }
    for (int r = 0; r < 4; ++r) {
      const int row = g + 8 * (r % 2), group = t + 4 * (r / 2);  // compressed columns 2 group, + 1
      const int lane_meta = 4 * (row % 8) + group / 4;
      const std::uint32_t nib = (meta[lane_meta] >> (16 * (row / 8) + 4 * (group % 4))) & 0xFu;
      for (int slot = 0; slot < 2; ++slot) dense[row][4 * group + ((nib >> (2 * slot)) & 3u)] = half_of(a[l][r], slot);
    }
  }
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      const frag_pos c = mma_c(l, i);
      for (int kk = 0; kk < 32; ++kk) acc[l][i] += dense[c.row][kk] * bt[kk][c.col];
    }
}

/// Adds a lane's partial sums of one group (its C fragment: entries 0, 1 are row g, 2, 3 row g + 8)
/// into its accumulator, each times its row's scale: the group scale applied once per group in
/// fp32, after exact products code - zero times x. O(1).
template <class Partial>
WEFT_HOST_DEVICE inline void gemv_fold(const Partial (&part)[4], float scale_g, float scale_g8,
                                       float (&acc)[4]) noexcept {
  acc[0] = fmaf(scale_g, static_cast<float>(part[0]), acc[0]);
  acc[1] = fmaf(scale_g, static_cast<float>(part[1]), acc[1]);
  acc[2] = fmaf(scale_g8, static_cast<float>(part[2]), acc[2]);
  acc[3] = fmaf(scale_g8, static_cast<float>(part[3]), acc[3]);
}

/// Output element of entry i (0..3) of lane's C fragment in the swapped product: row n0 + g (+ 8
/// for i >= 2) of W, token m0 + 2t + i % 2. A plain value.
struct gemv_out_pos {
  std::int64_t n;
  std::int64_t m;
};
WEFT_HOST_DEVICE constexpr gemv_out_pos gemv_out_of(std::int64_t n0, std::int64_t m0, int lane, int i) noexcept {
  return {n0 + lane / 4 + 8 * (i / 2), m0 + 2 * (lane % 4) + i % 2};
}

}  // namespace weft::quant

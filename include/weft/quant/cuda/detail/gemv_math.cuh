// The per-format arithmetic of the decode GEMV kernel (detail/gemv_kernel.cuh) as traits: W4A16
// (mma.m16n8k16), W4A8 (mma.m16n8k32.s8) and 2:4 sparse W4A16 (mma.sp.m16n8k32), each built on
// the host-testable register math of gemv_fragments.hpp; plus the kernel's global-memory loads.
#pragma once

#include <weft/core/half.hpp>
#include <weft/quant/gemv_fragments.hpp>
#include <weft/quant/gpu_sparse24_matrix.hpp>
#include <weft/quant/gpu_w4_matrix.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace weft::quant::cuda::detail {

/// Product traits of the W4A16 kernel: four k16 steps per chunk, fp32 partial sums.
template <class Act>
struct w4a16_math {
  using act = Act;
  using partial = float;
  using zero_state = w4a16_zero_terms;
  static constexpr int steps = 4, step_k = 16, chunk_k = gpu_w4_chunk_k, b_regs = 2;
  static constexpr bool has_meta = false;
  /// A lane reads its 16 activations of a chunk as vectors when K is a multiple of
  /// vector_elements and x is x_align-byte aligned.
  static constexpr int vector_elements = 8, x_align = 16;

  __device__ static zero_state zeros(int z0, int z1) { return w4a16_zero_terms_for<Act>(z0, z1); }
  __device__ static void b_chunk(const Act* x_row, bool active, std::int64_t k, std::int64_t k0, int lane, bool vector,
                                 std::uint32_t (&b)[steps][2]) {
    w4a16_b_chunk(x_row, active, k, k0, lane, vector, b);
  }
  __device__ static void a_fragment(const std::uint32_t (&w)[4], int step, const zero_state& z, std::uint32_t (&a)[4]) {
    w4a16_decode<Act>(w[step], z, a);
  }
  __device__ static void mma(const std::uint32_t (&a)[4], const std::uint32_t (&b)[2], std::uint32_t, float (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<Act, bfloat16>)
      asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
      asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)a, (void)b, (void)c;
#endif
  }
  template <class P>
  __device__ static float token_scale(const P&, std::int64_t) {
    return 1.0f;
  }
};

/// Product traits of the W4A8 kernel: two k32 steps per chunk, exact int32 partial sums.
struct w4a8_math {
  using act = std::int8_t;
  using partial = std::int32_t;
  struct zero_state {
    std::uint32_t z0x4, z1x4;
  };
  static constexpr int steps = 2, step_k = 32, chunk_k = gpu_w4_chunk_k, b_regs = 2;
  static constexpr bool has_meta = false;
  static constexpr int vector_elements = 16, x_align = 16;

  __device__ static zero_state zeros(int z0, int z1) {
    return {static_cast<std::uint32_t>(z0) * 0x01010101u, static_cast<std::uint32_t>(z1) * 0x01010101u};
  }
  __device__ static void b_chunk(const std::int8_t* x_row, bool active, std::int64_t k, std::int64_t k0, int lane,
                                 bool vector, std::uint32_t (&b)[steps][2]) {
    w4a8_b_chunk(x_row, active, k, k0, lane, vector, b);
  }
  __device__ static void a_fragment(const std::uint32_t (&w)[4], int step, const zero_state& z, std::uint32_t (&a)[4]) {
    std::uint32_t lo[2], hi[2];
    w4a8_decode(w[2 * step], z.z0x4, z.z1x4, lo);
    w4a8_decode(w[2 * step + 1], z.z0x4, z.z1x4, hi);
    a[0] = lo[0];
    a[1] = lo[1];
    a[2] = hi[0];
    a[3] = hi[1];
  }
  __device__ static void mma(const std::uint32_t (&a)[4], const std::uint32_t (&b)[2], std::uint32_t,
                             std::int32_t (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)a, (void)b, (void)c;
#endif
  }
  template <class P>
  __device__ static float token_scale(const P& p, std::int64_t m) {
    return p.x_scales[m];
  }
};

/// Product traits of the 2:4 sparse W4A16 kernel: four mma.sp.m16n8k32 steps per 128-input chunk,
/// fp32 partial sums; the A operand is the kept codes (decoded as W4A16's), the metadata says
/// where each sits in its group of 4. What it does not redefine is W4A16's.
template <class Act>
struct sparse24_math : w4a16_math<Act> {  // act, partial, zeros, a_fragment, token_scale as W4A16
  static constexpr int steps = 4, step_k = 32, chunk_k = gpu_sparse24_chunk_k, b_regs = 4;
  static constexpr bool has_meta = true;
  static constexpr int vector_elements = 2, x_align = 4;

  __device__ static void b_chunk(const Act* x_row, bool active, std::int64_t k, std::int64_t k0, int lane,
                                 bool vector, std::uint32_t (&b)[steps][b_regs]) {
#pragma unroll
    for (int s = 0; s < steps; ++s) sparse24_b_step(x_row, active, k, k0 + s * step_k, lane, vector, b[s]);
  }
  __device__ static void mma(const std::uint32_t (&a)[4], const std::uint32_t (&b)[4], std::uint32_t meta,
                             float (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<Act, bfloat16>)
      asm("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
          "{%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;\n"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(meta));
    else
      asm("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
          "{%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;\n"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(meta));
#else
    (void)a, (void)b, (void)meta, (void)c;
#endif
  }
};

/// 16 bytes of weights that are read once: no L1 allocation (read-only path).
__device__ __forceinline__ uint4 load_weights(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

/// Scales of rows g and g + 8 of a tile for one group (adjacent in the layout: one load).
template <class Scale>
__device__ __forceinline__ void load_scale_pair(const Scale* cell, float& s0, float& s1) {
  if constexpr (std::is_same_v<Scale, float>) {
    const float2 v = *reinterpret_cast<const float2*>(cell);
    s0 = v.x;
    s1 = v.y;
  } else {
    const std::uint32_t v = *reinterpret_cast<const std::uint32_t*>(cell);
    s0 = weft::quant::detail::scale_as_float(Scale::from_bits(static_cast<std::uint16_t>(v & 0xFFFFu)));
    s1 = weft::quant::detail::scale_as_float(Scale::from_bits(static_cast<std::uint16_t>(v >> 16)));
  }
}

}  // namespace weft::quant::cuda::detail

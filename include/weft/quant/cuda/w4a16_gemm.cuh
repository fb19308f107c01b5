// W4A16 GEMM for NVIDIA GPUs (the decode GEMV, M <= 32, is quant/cuda/w4_gemv.cuh): int4 weights in weft's layout
// dequantized into shared memory and multiplied with fp16/bf16 activations by tensor-core mma.m16n8k16 (sm_80+), fp32
// accumulation. Templates the user instantiates (tile shape a parameter); layering as in CUB,
// dequant-fused like Marlin (Frantar et al., 2024) but without its asynchronous pipelining.
#pragma once

#include <weft/core/error.hpp>
#include <weft/quant/cuda/launch_check.cuh>
#include <weft/quant/device_tiles.hpp>
#include <weft/quant/format.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace weft::quant::cuda {

namespace detail {

template <class Act>
__device__ inline void mma16(const std::uint32_t (&a)[4], const std::uint32_t (&b)[2], float (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<Act, bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#else
  (void)a;
  (void)b;
  (void)c;
#endif
}

/// The main loop every W4A16 kernel shares (dense and 2:4): for each block_k slice of K,
/// `load(m0, n0, k0, tid)` stages A and the dequantized weights into `s`, then the block's warps
/// multiply them (mma.sync on sm_80+, the lane-exact scalar step elsewhere); Y is stored once.
template <class Tile, class Act, class Out, class Load>
__device__ void w4_block_gemm(w4_smem<Tile>& s, std::int64_t k_end, Out* y, std::int64_t m, std::int64_t n,
                              Load&& load) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.y) * Tile::block_m;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * Tile::block_n;
  const int wm0 = (warp / Tile::warps_n) * Tile::warp_m, wn0 = (warp % Tile::warps_n) * Tile::warp_n;
  float acc[Tile::mma_m][Tile::mma_n][4] = {};
  for (std::int64_t k0 = 0; k0 < k_end; k0 += Tile::block_k) {
    load(m0, n0, k0, tid);
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < Tile::block_k; ks += 16)
#pragma unroll
      for (int i = 0; i < Tile::mma_m; ++i)
#pragma unroll
        for (int j = 0; j < Tile::mma_n; ++j) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
          std::uint32_t a[4], b[2];
          w4_fragments<Tile>(s, wm0 + 16 * i, wn0 + 8 * j, ks, lane, a, b);
          mma16<Act>(a, b, acc[i][j]);
#else
          w4_lane_step<Tile, Act>(s, wm0 + 16 * i, wn0 + 8 * j, ks, lane, acc[i][j]);
#endif
        }
    __syncthreads();
  }
  for (int i = 0; i < Tile::mma_m; ++i)
    for (int j = 0; j < Tile::mma_n; ++j)
      store_c_fragment(y, m, n, m0 + wm0 + 16 * i, n0 + wn0 + 8 * j, lane, acc[i][j]);
}

/// One block computes a Tile::block_m x Tile::block_n tile of Y, 32 values of K at a time.
template <class Tile, class Act, class Scale>
__global__ void __launch_bounds__(Tile::threads) w4a16_gemm_kernel(w4a16_params<Act, Scale> p) {
  __shared__ w4_smem<Tile> s;
  w4_block_gemm<Tile, Act>(s, p.k_padded, p.y, p.m, p.n,
                           [&](std::int64_t m0, std::int64_t n0, std::int64_t k0, int tid) {
                             w4_load_tiles<Tile>(p, m0, n0, k0, s, tid, Tile::threads);
                           });
}

template <class Act, class Scale>
void check_w4a16(const w4a16_params<Act, Scale>& p, const char* where) {
  static_assert(std::is_same_v<Act, half> || std::is_same_v<Act, bfloat16>, "W4A16 activations are half or bfloat16");
  expects(p.m > 0 && p.n > 0 && p.k > 0, errc::invalid_argument, where, "shape M x N x K = ", p.m, " x ", p.n, " x ",
          p.k, " must be positive");
  expects(p.k_padded == round_up(p.k, int4_block), errc::invalid_argument, where, "k_padded = ", p.k_padded,
          " but weft's int4 layout pads K = ", p.k, " to ", round_up(p.k, int4_block));
  expects(p.group_size > 0 && p.group_size % int4_block == 0 && p.groups == ceil_div(p.k, p.group_size),
          errc::invalid_argument, where, "group_size = ", p.group_size, " and groups = ", p.groups,
          " do not describe K = ", p.k, " (group_size a multiple of 32, groups = ceil(K / group_size))");
  weft::quant::cuda::detail::check_device_pointer(p.x, "x", where);
  weft::quant::cuda::detail::check_device_pointer(p.codes, "codes", where);
  weft::quant::cuda::detail::check_device_pointer(p.scales, "scales", where);
  weft::quant::cuda::detail::check_device_pointer(p.zeros, "zeros", where);
  weft::quant::cuda::detail::check_device_pointer(p.y, "y", where);
}

}  // namespace detail

/// Parameters for weights already copied to the device: the shape fields come from the host-side
/// quantized_matrix `w`, the pointers are the device copies of w.packed(), w.scales(), w.zeros().
template <class Act, class Scale>
w4a16_params<Act, Scale> make_w4a16_params(const quantized_matrix<Scale>& w, const Act* x, const std::uint8_t* codes,
                                           const Scale* scales, const std::int16_t* zeros, float* y, std::int64_t m) {
  expects(w.bits() == 4, errc::invalid_argument, "weft::quant::cuda::make_w4a16_params", "weights are ", w.bits(),
          "-bit, not int4");
  return {x, codes, scales, zeros, y, m, w.rows(), w.cols(), w.k_padded(), w.group_size(), w.groups()};
}

/// Launches Y = X W^T on `stream` without synchronising. Checks the arguments first (weft::error);
/// returns the launch status (cudaGetLastError). Tile: a gemm_tile_shape. The kernel needs
/// sm_80+ for tensor cores; older GPUs run the same tiles on CUDA cores.
template <gemm_tile_shape Tile = default_w4_tile, class Act, class Scale>
cudaError_t launch_w4a16_gemm(const w4a16_params<Act, Scale>& p, cudaStream_t stream = nullptr) {
  constexpr const char* where = "weft::quant::cuda::launch_w4a16_gemm";
  detail::check_w4a16(p, where);
  weft::quant::cuda::detail::check_grid<Tile>(p.m, p.n, where);
  using tile = as_gemm_tile<Tile>;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.n, Tile::block_n)),
                  static_cast<unsigned>(ceil_div(p.m, Tile::block_m)));
  detail::w4a16_gemm_kernel<tile, Act, Scale><<<grid, tile::threads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace weft::quant::cuda

// W8A8 int8 GEMM for NVIDIA GPUs: int8 activations times int8 weights in weft's panel layout with
// tensor-core mma.m16n8k32.s32.s8.s8 (sm_80+), exact int32 accumulation. Templates the user
// instantiates; tile shape a parameter.
#pragma once

#include <weft/core/error.hpp>
#include <weft/quant/cuda/launch_check.cuh>
#include <weft/quant/device_tiles.hpp>
#include <weft/quant/format.hpp>

#include <cuda_runtime.h>

#include <cstdint>

namespace weft::quant::cuda {

namespace detail {

__device__ inline void mma32(const std::uint32_t (&a)[4], const std::uint32_t (&b)[2], std::int32_t (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  (void)a;
  (void)b;
  (void)c;
#endif
}

/// One k-slice of a warp's int8 tile: every 16 x 8 output fragment of the warp (rows from wm0,
/// columns from wn0) accumulates the slice in shared memory, with mma.sync on sm_80+ and the
/// lane-level emulation elsewhere. Shared by the W8A8 and W4A8 kernels.
template <class Tile>
__device__ __forceinline__ void w8_warp_mma(const w8_smem<Tile>& s, int wm0, int wn0, int lane,
                                            std::int32_t (&acc)[Tile::mma_m][Tile::mma_n][4]) {
#pragma unroll
  for (int i = 0; i < Tile::mma_m; ++i)
#pragma unroll
    for (int j = 0; j < Tile::mma_n; ++j) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
      std::uint32_t a[4], b[2];
      w8_fragments<Tile>(s, wm0 + 16 * i, wn0 + 8 * j, lane, a, b);
      mma32(a, b, acc[i][j]);
#else
      w8_lane_step<Tile>(s, wm0 + 16 * i, wn0 + 8 * j, lane, acc[i][j]);
#endif
    }
}

template <class Tile>
__global__ void __launch_bounds__(Tile::threads) w8a8_gemm_kernel(w8a8_params p) {
  __shared__ w8_smem<Tile> s;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.y) * Tile::block_m;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * Tile::block_n;
  const int wm0 = (warp / Tile::warps_n) * Tile::warp_m, wn0 = (warp % Tile::warps_n) * Tile::warp_n;
  std::int32_t acc[Tile::mma_m][Tile::mma_n][4] = {};
  for (std::int64_t k0 = 0; k0 < p.k_padded; k0 += Tile::block_k) {
    w8_load_tiles<Tile>(p, m0, n0, k0, s, tid, Tile::threads);
    __syncthreads();
    w8_warp_mma<Tile>(s, wm0, wn0, lane, acc);
    __syncthreads();
  }
  for (int i = 0; i < Tile::mma_m; ++i)
    for (int j = 0; j < Tile::mma_n; ++j)
      store_c_fragment(p.c, p.m, p.n, m0 + wm0 + 16 * i, n0 + wn0 + 8 * j, lane, acc[i][j]);
}

}  // namespace detail

/// Parameters for weights already on the device: the shape from the host-side matrix `w`
/// (symmetric int8), the pointer the device copy of w.packed().
template <class Scale>
w8a8_params make_w8a8_params(const quantized_matrix<Scale>& w, const std::int8_t* a, const std::int8_t* packed,
                             std::int32_t* c, std::int64_t m) {
  expects(w.bits() == 8 && w.scheme().symmetric, errc::invalid_argument, "weft::quant::cuda::make_w8a8_params",
          "weights must be symmetric int8");
  return {a, packed, c, m, w.rows(), w.cols(), w.k_padded()};
}

/// Launches C = A W^T (int32) on `stream` without synchronising. Checks the arguments first
/// (weft::error); returns the launch status.
template <gemm_tile_shape Tile = default_w8_tile>
cudaError_t launch_w8a8_gemm(const w8a8_params& p, cudaStream_t stream = nullptr) {
  constexpr const char* where = "weft::quant::cuda::launch_w8a8_gemm";
  expects(p.m > 0 && p.n > 0 && p.k > 0, errc::invalid_argument, where, "shape M x N x K = ", p.m, " x ", p.n, " x ",
          p.k, " must be positive");
  expects(p.k_padded == round_up(p.k, int8_k_align), errc::invalid_argument, where, "k_padded = ", p.k_padded,
          " but weft's int8 layout pads K = ", p.k, " to ", round_up(p.k, int8_k_align));
  detail::check_device_pointer(p.a, "a", where);
  detail::check_device_pointer(p.w, "w", where);
  detail::check_device_pointer(p.c, "c", where);
  detail::check_grid<Tile>(p.m, p.n, where);
  using tile = as_gemm_tile<Tile>;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.n, Tile::block_n)),
                  static_cast<unsigned>(ceil_div(p.m, Tile::block_m)));
  detail::w8a8_gemm_kernel<tile><<<grid, tile::threads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace weft::quant::cuda

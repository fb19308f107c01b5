// 2:4 structured-sparse W4A16 GEMM for NVIDIA GPUs, on Sparse-Marlin's format (Frantar, Castro et
// al., MARLIN, 2024): kept int4 codes and 2-bit positions expanded into a dense fp16/bf16 tile in
// shared memory, then tensor-core mma.m16n8k16 (sm_80+) as in the dense W4A16 kernel. It reads 3
// bits per weight instead of 4; it does not yet use the sparse tensor cores (mma.sp), which is
// where Sparse-Marlin's further 2x of compute comes from.
#pragma once

#include <weft/core/error.hpp>
#include <weft/quant/cuda/launch_check.cuh>
#include <weft/quant/cuda/w4a16_gemm.cuh>
#include <weft/quant/sparse24_matrix.hpp>
#include <weft/quant/sparse24_tiles.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace weft::quant::cuda {

namespace detail {

template <class Tile, class Act, class Scale>
__global__ void __launch_bounds__(Tile::threads) w4a16_sparse24_kernel(sparse24_params<Act, Scale> p) {
  __shared__ w4_smem<Tile> s;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.y) * Tile::block_m;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * Tile::block_n;
  const int wm0 = (warp / Tile::warps_n) * Tile::warp_m, wn0 = (warp % Tile::warps_n) * Tile::warp_n;
  float acc[Tile::mma_m][Tile::mma_n][4] = {};
  for (std::int64_t k0 = 0; k0 < p.k; k0 += Tile::block_k) {
    sparse24_load_tiles<Tile>(p, m0, n0, k0, s, tid, Tile::threads);
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
      store_c_fragment(p.y, p.m, p.n, m0 + wm0 + 16 * i, n0 + wn0 + 8 * j, lane, acc[i][j]);
}

}  // namespace detail

/// Parameters for a sparse matrix already copied to the device: the shape from the host-side
/// `w`, the pointers the device copies of w.values().packed(), w.meta(), w.values().scales() and
/// w.values().zeros().
template <class Act, class Scale>
sparse24_params<Act, Scale> make_sparse24_params(const sparse24_matrix<Scale>& w, const Act* x,
                                                 const std::uint8_t* codes, const std::uint8_t* meta,
                                                 const Scale* scales, const std::int16_t* zeros, float* y,
                                                 std::int64_t m) {
  return {x, codes, meta, scales, zeros, y, m, w.rows(), w.cols(), w.group_size(), w.groups()};
}

/// Launches Y = X W^T on `stream` without synchronising, for 2:4 sparse W. Checks the arguments
/// first (weft::error naming the shape or pointer); returns the launch status.
template <gemm_tile_shape Tile = default_w4_tile, class Act, class Scale>
cudaError_t launch_w4a16_sparse24_gemm(const sparse24_params<Act, Scale>& p, cudaStream_t stream = nullptr) {
  static_assert(std::is_same_v<Act, half> || std::is_same_v<Act, bfloat16>, "W4A16 activations are half or bfloat16");
  constexpr const char* where = "weft::quant::cuda::launch_w4a16_sparse24_gemm";
  expects(p.m > 0 && p.n > 0 && p.k > 0 && p.k % 64 == 0, errc::invalid_argument, where, "shape M x N x K = ", p.m,
          " x ", p.n, " x ", p.k, " needs positive sizes and K a multiple of 64");
  expects(p.group_size > 0 && p.group_size % 64 == 0 && p.groups == ceil_div(p.k, p.group_size), errc::invalid_argument,
          where, "group_size = ", p.group_size, " and groups = ", p.groups, " do not describe K = ", p.k,
          " (group_size a multiple of 64, groups = ceil(K / group_size))");
  detail::check_device_pointer(p.x, "x", where);
  detail::check_device_pointer(p.codes, "codes", where);
  detail::check_device_pointer(p.meta, "meta", where);
  detail::check_device_pointer(p.scales, "scales", where);
  detail::check_device_pointer(p.zeros, "zeros", where);
  detail::check_device_pointer(p.y, "y", where);
  detail::check_grid<Tile>(p.m, p.n, where);
  using tile = as_gemm_tile<Tile>;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.n, Tile::block_n)),
                  static_cast<unsigned>(ceil_div(p.m, Tile::block_m)));
  detail::w4a16_sparse24_kernel<tile, Act, Scale><<<grid, tile::threads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace weft::quant::cuda

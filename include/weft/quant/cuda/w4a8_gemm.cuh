// W4A8 GEMM for NVIDIA GPUs (the decode GEMV is quant/cuda/w4_gemv.cuh): int4 weights in weft's layout turned into
// signed int8 (code - zero) in shared memory and multiplied with per-token int8 activations by tensor-core
// mma.m16n8k32.s32.s8.s8 (sm_80+), exact int32 per group, fp32 across groups.
// The W4A8 scheme of QServe (Lin et al., 2024) without its register-level tricks; layered as in
// CUB (fragment -> warp tile -> block tile -> launcher), building blocks in w4a8_tiles.hpp.
#pragma once

#include <weft/core/error.hpp>
#include <weft/quant/cuda/launch_check.cuh>
#include <weft/quant/cuda/w8a8_gemm.cuh>
#include <weft/quant/device_tiles.hpp>
#include <weft/quant/format.hpp>
#include <weft/quant/w4a8_tiles.hpp>

#include <cuda_runtime.h>

#include <cstdint>

namespace weft::quant::cuda {

namespace detail {

/// One block computes a Tile::block_m x Tile::block_n tile of Y, 32 values of K at a time; after
/// the last slice of each group the int32 fragments fold into fp32 by the group's scales.
template <class Tile, class Scale>
__global__ void __launch_bounds__(Tile::threads) w4a8_gemm_kernel(w4a8_params<Scale> p) {
  __shared__ w8_smem<Tile> s;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.y) * Tile::block_m;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * Tile::block_n;
  const int wm0 = (warp / Tile::warps_n) * Tile::warp_m, wn0 = (warp % Tile::warps_n) * Tile::warp_n;
  std::int32_t acc[Tile::mma_m][Tile::mma_n][4] = {};
  float total[Tile::mma_m][Tile::mma_n][4] = {};
  for (std::int64_t k0 = 0; k0 < p.k_padded; k0 += Tile::block_k) {
    w4a8_load_tiles<Tile>(p, m0, n0, k0, s, tid, Tile::threads);
    __syncthreads();
    w8_warp_mma<Tile>(s, wm0, wn0, lane, acc);
    __syncthreads();
    const std::int64_t next = k0 + Tile::block_k;
    if (next % p.group_size == 0 || next >= p.k_padded)
      for (int i = 0; i < Tile::mma_m; ++i)
        for (int j = 0; j < Tile::mma_n; ++j)
          w4a8_fold_group(p, n0 + wn0 + 8 * j, k0 / p.group_size, lane, acc[i][j], total[i][j]);
  }
  for (int i = 0; i < Tile::mma_m; ++i)
    for (int j = 0; j < Tile::mma_n; ++j) w4a8_store(p, m0 + wm0 + 16 * i, n0 + wn0 + 8 * j, lane, total[i][j]);
}

template <class Scale>
void check_w4a8(const w4a8_params<Scale>& p, const char* where) {
  expects(p.m > 0 && p.n > 0 && p.k > 0, errc::invalid_argument, where, "shape M x N x K = ", p.m, " x ", p.n, " x ",
          p.k, " must be positive");
  expects(p.k_padded == round_up(p.k, int4_block), errc::invalid_argument, where, "k_padded = ", p.k_padded,
          " but weft's int4 layout pads K = ", p.k, " to ", round_up(p.k, int4_block));
  expects(p.group_size > 0 && p.group_size % int4_block == 0 && p.groups == ceil_div(p.k, p.group_size),
          errc::invalid_argument, where, "group_size = ", p.group_size, " and groups = ", p.groups,
          " do not describe K = ", p.k, " (group_size a multiple of 32, groups = ceil(K / group_size))");
  check_device_pointer(p.a, "a", where);
  check_device_pointer(p.a_scales, "a_scales", where);
  check_device_pointer(p.codes, "codes", where);
  check_device_pointer(p.scales, "scales", where);
  check_device_pointer(p.zeros, "zeros", where);
  check_device_pointer(p.y, "y", where);
}

}  // namespace detail

/// Parameters for weights already on the device: the shape from the host-side int4 matrix `w`,
/// the pointers the device copies of w.packed(), w.scales(), w.zeros(), the activations' int8
/// values and per-token scales (quantize_activations), and Y.
template <class Scale>
w4a8_params<Scale> make_w4a8_params(const quantized_matrix<Scale>& w, const std::int8_t* a, const float* a_scales,
                                    const std::uint8_t* codes, const Scale* scales, const std::int16_t* zeros, float* y,
                                    std::int64_t m) {
  expects(w.bits() == 4, errc::invalid_argument, "weft::quant::cuda::make_w4a8_params", "weights are ", w.bits(),
          "-bit, not int4");
  return {a, a_scales, codes, scales, zeros, y, m, w.rows(), w.cols(), w.k_padded(), w.group_size(), w.groups()};
}

/// Launches Y = diag(a_scales) A W^T on `stream` without synchronising. Checks the arguments first
/// (weft::error naming the shape or pointer); returns the launch status (cudaGetLastError). Tile:
/// a gemm_tile_shape. Tensor cores on sm_80+; older GPUs run the same tiles on CUDA cores.
template <gemm_tile_shape Tile = default_w8_tile, class Scale>
cudaError_t launch_w4a8_gemm(const w4a8_params<Scale>& p, cudaStream_t stream = nullptr) {
  constexpr const char* where = "weft::quant::cuda::launch_w4a8_gemm";
  detail::check_w4a8(p, where);
  detail::check_grid<Tile>(p.m, p.n, where);
  using tile = as_gemm_tile<Tile>;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.n, Tile::block_n)),
                  static_cast<unsigned>(ceil_div(p.m, Tile::block_m)));
  detail::w4a8_gemm_kernel<tile, Scale><<<grid, tile::threads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace weft::quant::cuda

// The vocabulary of weft's decode GEMVs (quant/cuda/w4_gemv.cuh): their arguments, the tuning
// policy as a value (CUB's form) and the compiled kernel shapes as a type list. Plain types; nvcc.
#pragma once

#include <cstdint>
#include <tuple>

namespace weft::quant::cuda {

/// Arguments of the decode GEMVs (device pointers). Y = X W^T: X is M x K row-major (half or
/// bfloat16 for W4A16, int8 for W4A8), W an N x K gpu_w4_matrix copied to the device, Y M x N
/// row-major (float, or the activation type for W4A16). A plain value; make_gemv_params fills the
/// shape from the host matrix.
template <class Act, class Scale, class Out>
struct w4_gemv_params {
  const Act* x = nullptr;
  const float* x_scales = nullptr;       ///< W4A8: per-token scales (quantized_activations::scales)
  const std::uint32_t* words = nullptr;  ///< gpu_w4_matrix::words() on the device
  const Scale* scales = nullptr;         ///< gpu_w4_matrix::scales() on the device
  const std::uint8_t* zeros = nullptr;   ///< gpu_w4_matrix::zeros(); null for a symmetric matrix
  const std::uint32_t* meta = nullptr;   ///< 2:4 only: gpu_sparse24_matrix::meta() on the device
  Out* y = nullptr;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t tiles = 0, chunks = 0, group_size = 0, groups = 0;
  /// w4_gemv_workspace_bytes() bytes of device memory, zero-filled once before its first use (the
  /// kernel leaves it so); may be null when that size is 0. One launch at a time may use a
  /// workspace: launches on different streams need workspaces of their own.
  void* workspace = nullptr;
};

/// Tuning of the decode GEMV as a value (CUB's policy form); 0 = chosen by the launcher. A plain value.
struct gemv_policy {
  int tiles_per_warp = 0;    ///< 16-row tiles a warp multiplies with one activation fragment (1, 2, 4)
  int chunks_in_flight = 0;  ///< 512-byte chunks per tile a lane loads before using the first
  int warps = 0;             ///< warps per block; they split K and reduce through shared memory
  int splits = 0;            ///< blocks along K (their partial sums meet in the workspace)
};

/// One compiled shape of the kernel: T tiles per warp, U chunks in flight per tile, W warps.
template <int T, int U, int W>
struct gemv_config {
  static constexpr int tiles = T, unroll = U, warps = W;
};

/// The shapes launch_* may run; a gemv_policy may name any of them. The launcher's own choice
/// (detail::default_config) is one of the first three entries, by position. Measured on an H200:
/// docs/quant.md, "Decode GEMV on the GPU". A user may pass another list: longer (compiles more
/// shapes for gemv_policy to name; keep these three first) or shorter (compiles less; its last
/// entry stands in for the missing ones).
using default_gemv_configs = std::tuple<gemv_config<2, 2, 8>, gemv_config<2, 1, 8>, gemv_config<1, 4, 8>>;

}  // namespace weft::quant::cuda

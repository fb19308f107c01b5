// Decode GEMVs for NVIDIA GPUs (sm_80+), M <= 32 tokens: Y = X W^T with int4 weights in weft's GPU
// layout (gpu_w4_matrix.hpp), read once per call whatever M is. Each lane streams 16-byte words
// that already hold its tensor-core fragment, dequantizes them in registers (gemv_fragments.hpp)
// and multiplies with mma.sync in the swapped form Y^T = W X^T (weights are the 16-row operand, the
// tokens the 8-wide one), so M = 1 and M = 8 cost the same MMAs; warps and blocks split K, reduced
// in a fixed order (deterministic). W4A16 (fp16/bf16 activations, m16n8k16), W4A8 (int8 per-token
// activations, m16n8k32.s8) and 2:4 sparse W4A16 (mma.sp.m16n8k32) share one kernel. After Marlin
// and Sparse-Marlin (Frantar, Castro et al., 2024). The parts: gemv_params.cuh (arguments, policy,
// kernel shapes), detail/gemv_math.cuh (per-format traits), detail/gemv_kernel.cuh (the kernel),
// detail/gemv_launch.cuh (planning, checks, dispatch); this header has what a user calls.
#pragma once

#include <weft/core/error.hpp>
#include <weft/quant/cuda/detail/gemv_launch.cuh>
#include <weft/quant/cuda/gemv_params.cuh>
#include <weft/quant/gpu_sparse24_matrix.hpp>
#include <weft/quant/gpu_w4_matrix.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace weft::quant::cuda {

namespace detail {

/// The parameters every GPU-layout matrix shares (shape, codes, scales, zeros, output), checked
/// against the matrix: zeros must be given exactly when it has zero points.
template <class Matrix, class Act, class Scale, class Out>
w4_gemv_params<Act, Scale, Out> layout_params(const Matrix& w, const Act* x, const std::uint32_t* words,
                                              const Scale* scales, const std::uint8_t* zeros, Out* y,
                                              std::int64_t m, void* workspace) {
  expects(w.symmetric() == (zeros == nullptr), errc::invalid_argument, "weft::quant::cuda::make_gemv_params",
          w.symmetric() ? "the matrix is symmetric: pass zeros = nullptr"
                        : "the matrix has zero points: pass the device copy of w.zeros()");
  w4_gemv_params<Act, Scale, Out> p;
  p.x = x;
  p.words = words;
  p.scales = scales;
  p.zeros = zeros;
  p.y = y;
  p.m = m;
  p.n = w.rows();
  p.k = w.cols();
  p.tiles = w.tiles();
  p.chunks = w.chunks();
  p.group_size = w.group_size();
  p.groups = w.groups();
  p.workspace = workspace;
  return p;
}

}  // namespace detail

/// Parameters for a gpu_w4_matrix `w` already copied to the device (words, scales and zeros: the
/// device copies of w.words(), w.scales(), w.zeros(); zeros null for a symmetric matrix; x_scales:
/// W4A8's per-token scales). Throws weft::error when zeros do not match the matrix.
template <class Act, class Scale, class Out>
w4_gemv_params<Act, Scale, Out> make_gemv_params(const gpu_w4_matrix<Scale>& w, const Act* x,
                                                 const std::uint32_t* words, const Scale* scales,
                                                 const std::uint8_t* zeros, Out* y, std::int64_t m,
                                                 void* workspace = nullptr, const float* x_scales = nullptr) {
  auto p = detail::layout_params(w, x, words, scales, zeros, y, m, workspace);
  p.x_scales = x_scales;
  return p;
}

/// Parameters for a 2:4 sparse gpu_sparse24_matrix `w` on the device (meta: the device copy of
/// w.meta()); otherwise as the dense overload.
template <class Act, class Scale, class Out>
w4_gemv_params<Act, Scale, Out> make_gemv_params(const gpu_sparse24_matrix<Scale>& w, const Act* x,
                                                 const std::uint32_t* words, const std::uint32_t* meta,
                                                 const Scale* scales, const std::uint8_t* zeros, Out* y, std::int64_t m,
                                                 void* workspace = nullptr) {
  auto p = detail::layout_params(w, x, words, scales, zeros, y, m, workspace);
  p.meta = meta;
  return p;
}

/// Bytes of workspace a launch with these arguments and policy needs (0: none). Call it with the
/// same arguments as the launch (a set `meta` means the 2:4 GEMV). Host only; throws weft::error
/// as the launcher does.
template <class Configs = default_gemv_configs, class Act, class Scale, class Out>
std::size_t w4_gemv_workspace_bytes(const w4_gemv_params<Act, Scale, Out>& p, const gemv_policy& policy = {}) {
  constexpr const char* where = "weft::quant::cuda::w4_gemv_workspace_bytes";
  const auto bytes = [&]<class Math>() {
    detail::check_gemv<Math>(p, where);
    return detail::plan_gemv<Configs, Math>(p, policy, where).workspace_bytes;
  };
  if constexpr (std::is_same_v<Act, std::int8_t>)
    return bytes.template operator()<detail::w4a8_math>();
  else if (p.meta != nullptr)
    return bytes.template operator()<detail::sparse24_math<Act>>();
  else
    return bytes.template operator()<detail::w4a16_math<Act>>();
}

/// Launches Y = X W^T (W4A16: X half or bfloat16, Y float or X's type) on `stream` without
/// synchronising. Checks every argument first (weft::error, nothing launched); returns the launch
/// status. Deterministic: the same inputs give the same bits on every run. M <= 32.
template <class Configs = default_gemv_configs, class Act, class Scale, class Out>
cudaError_t launch_w4a16_gemv(const w4_gemv_params<Act, Scale, Out>& p, const gemv_policy& policy = {},
                              cudaStream_t stream = nullptr) {
  static_assert(std::is_same_v<Act, half> || std::is_same_v<Act, bfloat16>, "W4A16 activations are half or bfloat16");
  static_assert(std::is_same_v<Out, float> || std::is_same_v<Out, Act>, "the output is float or the activation type");
  return detail::launch_gemv<Configs, detail::w4a16_math<Act>>(p, policy, stream,
                                                               "weft::quant::cuda::launch_w4a16_gemv");
}

/// Launches Y = diag(x_scales) (X W^T) with int8 per-token activations X (quantize_activations) and
/// exact int32 sums per group (W4A8). Same contract as launch_w4a16_gemv; Y is float.
template <class Configs = default_gemv_configs, class Scale>
cudaError_t launch_w4a8_gemv(const w4_gemv_params<std::int8_t, Scale, float>& p, const gemv_policy& policy = {},
                             cudaStream_t stream = nullptr) {
  return detail::launch_gemv<Configs, detail::w4a8_math>(p, policy, stream, "weft::quant::cuda::launch_w4a8_gemv");
}

/// Launches Y = X W^T for 2:4 sparse int4 weights (gpu_sparse24_matrix; p.meta set) through the
/// sparse tensor cores (mma.sp.m16n8k32, sm_80+): reads 3 bits a weight. Same contract as
/// launch_w4a16_gemv. Compiled and tested on the CPU lane by lane; not yet run on a GPU.
template <class Configs = default_gemv_configs, class Act, class Scale, class Out>
cudaError_t launch_w4a16_sparse24_gemv(const w4_gemv_params<Act, Scale, Out>& p, const gemv_policy& policy = {},
                                       cudaStream_t stream = nullptr) {
  static_assert(std::is_same_v<Act, half> || std::is_same_v<Act, bfloat16>, "2:4 activations are half or bfloat16");
  static_assert(std::is_same_v<Out, float> || std::is_same_v<Out, Act>, "the output is float or the activation type");
  return detail::launch_gemv<Configs, detail::sparse24_math<Act>>(p, policy, stream,
                                                                  "weft::quant::cuda::launch_w4a16_sparse24_gemv");
}

}  // namespace weft::quant::cuda

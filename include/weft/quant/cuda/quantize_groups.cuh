// Group-wise symmetric quantization on the GPU in one kernel: one warp per group finds max|x| with
// shuffles, writes the group's scale and encodes the group it has just read (the second read hits
// the cache), so the matrix leaves HBM once. The same codes and scales as weft::quant::quantize and
// quantize_groups (quantize_thrust.hpp, which takes a reduce_by_key pass and a transform pass).
#pragma once

#include <weft/core/error.hpp>
#include <weft/quant/cuda/launch_check.cuh>
#include <weft/quant/quantize_thrust.hpp>

#include <cuda_runtime.h>

#include <cstdint>

namespace weft::quant::cuda {

namespace detail {

inline constexpr int quantize_threads = 256;

// One warp per (row, group); Vec4: cols % 4 == 0 and 16-byte aligned rows, loads of 4 floats.
template <bool Vec4>
__global__ void __launch_bounds__(quantize_threads)
    quantize_groups_kernel(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t group_size,
                           std::int64_t groups, float qmax, int lo, int hi, int zero, std::int8_t* codes,
                           float* scales) {
  constexpr int lanes = 32;
  const std::int64_t cell = static_cast<std::int64_t>(blockIdx.x) * (quantize_threads / lanes) + threadIdx.x / lanes;
  if (cell >= rows * groups) return;  // a whole warp leaves together
  const int lane = threadIdx.x % lanes;
  const std::int64_t row = cell / groups, c0 = (cell % groups) * group_size;
  const std::int64_t c1 = c0 + group_size < cols ? c0 + group_size : cols;
  const float* in = x + row * cols;
  std::int8_t* out = codes + row * cols;
  constexpr int step = Vec4 ? 4 * lanes : lanes;
  const std::int64_t start = c0 + (Vec4 ? 4 : 1) * lane;
  float amax = 0.0f;
  for (std::int64_t c = start; c < c1; c += step) {
    if constexpr (Vec4) {
      const float4 v = *reinterpret_cast<const float4*>(in + c);
      amax = fmaxf(fmaxf(amax, fmaxf(fabsf(v.x), fabsf(v.y))), fmaxf(fabsf(v.z), fabsf(v.w)));
    } else {
      amax = fmaxf(amax, fabsf(in[c]));
    }
  }
  for (int o = lanes / 2; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float scale = weft::quant::detail::scale_of{qmax}(amax);
  if (lane == 0) scales[cell] = scale;
  using weft::quant::detail::encode_value;
  for (std::int64_t c = start; c < c1; c += step) {
    if constexpr (Vec4) {
      const float4 v = *reinterpret_cast<const float4*>(in + c);
      char4 q;
      q.x = encode_value(v.x, scale, lo, hi, zero);
      q.y = encode_value(v.y, scale, lo, hi, zero);
      q.z = encode_value(v.z, scale, lo, hi, zero);
      q.w = encode_value(v.w, scale, lo, hi, zero);
      *reinterpret_cast<char4*>(out + c) = q;
    } else {
      out[c] = encode_value(in[c], scale, lo, hi, zero);
    }
  }
}

}  // namespace detail

/// Quantizes a row-major rows x cols fp32 matrix on the device symmetrically in groups of group_size
/// columns (0: one group per row), as quantize_groups (quantize_thrust.hpp) does: codes (rows x cols,
/// one per int8; int4 codes 0..15 with zero point 8) and scales (rows x groups, groups =
/// ceil(cols / group_size)). Throws weft::error (before any launch) on a bad shape, bits other than
/// 4 or 8, a null or non-device pointer; returns the launch's error. One kernel, one read of x from
/// memory (each group's second read is a cache hit). Deterministic.
inline cudaError_t launch_quantize_groups(const float* x, std::int64_t rows, std::int64_t cols, int group_size,
                                          int bits, std::int8_t* codes, float* scales, cudaStream_t stream = nullptr) {
  constexpr const char* where = "weft::quant::cuda::launch_quantize_groups";
  expects(rows > 0 && cols > 0 && rows <= (std::int64_t{1} << 40) / cols, errc::invalid_argument, where,
          "rows x cols = ", rows, " x ", cols, " must be positive and at most 2^40 elements");
  const auto g =
      weft::quant::detail::check_groups(static_cast<std::size_t>(rows * cols), rows, cols, group_size, bits, where);
  detail::check_device_pointer(x, "x", where);
  detail::check_device_pointer(codes, "codes", where);
  detail::check_device_pointer(scales, "scales", where);
  const std::int64_t warps_per_block = detail::quantize_threads / 32;
  const std::int64_t blocks = (rows * g.groups + warps_per_block - 1) / warps_per_block;
  expects(blocks <= 0x7fffffff, errc::invalid_argument, where, rows, " x ", g.groups,
          " groups need more blocks than a grid holds");
  const bool vec4 = cols % 4 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0 &&
                    reinterpret_cast<std::uintptr_t>(codes) % 4 == 0;
  const float qmax = bits == 4 ? 7.0f : 127.0f;
  const auto grid = static_cast<unsigned>(blocks);
  if (vec4)
    detail::quantize_groups_kernel<true>
        <<<grid, detail::quantize_threads, 0, stream>>>(x, rows, cols, g.group_size, g.groups, qmax, code_min(bits),
                                                        code_max(bits), symmetric_zero(bits), codes, scales);
  else
    detail::quantize_groups_kernel<false>
        <<<grid, detail::quantize_threads, 0, stream>>>(x, rows, cols, g.group_size, g.groups, qmax, code_min(bits),
                                                        code_max(bits), symmetric_zero(bits), codes, scales);
  return cudaGetLastError();
}

}  // namespace weft::quant::cuda

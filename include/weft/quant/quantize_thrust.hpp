// Group-wise symmetric quantization and dequantization of device vectors with Thrust: the same
// absmax rule and round-to-nearest codes as weft::quant::quantize (quantizers.hpp), so codes made
// on a GPU (or on Thrust's CPP/OMP/TBB back ends) equal the CPU's. Needs the CCCL headers.
#pragma once

#include <weft/core/error.hpp>
#include <weft/quant/format.hpp>

#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/discard_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/reduce.h>
#include <thrust/transform.h>

#include <math.h>

#include <cstdint>

namespace weft::quant {

namespace detail {

// Element index -> group index of a rows x cols matrix quantized in groups of group_size columns.
struct group_of {
  std::int64_t cols, group_size, groups;
  WEFT_HOST_DEVICE std::int64_t operator()(std::int64_t i) const noexcept {
    return (i / cols) * groups + (i % cols) / group_size;
  }
};

struct abs_at {
  const float* x;
  WEFT_HOST_DEVICE float operator()(std::int64_t i) const noexcept { return fabsf(x[i]); }
};

struct maximum_f {
  WEFT_HOST_DEVICE float operator()(float a, float b) const noexcept { return a < b ? b : a; }
};

struct scale_of {
  float qmax;
  WEFT_HOST_DEVICE float operator()(float amax) const noexcept { return amax > 0.0f ? amax / qmax : 1.0f; }
};

/// One code of the symmetric rule (quantizers.hpp): round(x / scale) + zero, clamped to [lo, hi].
/// Shared with the one-pass CUDA quantizer (quant/cuda/quantize_groups.cuh), so both give the CPU's codes.
WEFT_HOST_DEVICE inline std::int8_t encode_value(float x, float scale, int lo, int hi, int zero) noexcept {
  const float c = nearbyintf(x / scale) + static_cast<float>(zero);
  return static_cast<std::int8_t>(c < static_cast<float>(lo) ? lo : c > static_cast<float>(hi) ? hi : c);
}

struct encode {
  const float* x;
  const float* scales;
  group_of group;
  int lo, hi, zero;
  WEFT_HOST_DEVICE std::int8_t operator()(std::int64_t i) const noexcept {
    return encode_value(x[i], scales[group(i)], lo, hi, zero);
  }
};

struct decode {
  const std::int8_t* codes;
  const float* scales;
  group_of group;
  int zero;
  WEFT_HOST_DEVICE float operator()(std::int64_t i) const noexcept { return dequant(codes[i], zero, scales[group(i)]); }
};

inline group_of check_groups(std::size_t size, std::int64_t rows, std::int64_t cols, int group_size, int bits,
                             const char* where) {
  expects(rows > 0 && cols > 0 && size == static_cast<std::size_t>(rows * cols), errc::invalid_argument, where,
          "input has ", size, " elements but rows x cols = ", rows, " x ", cols);
  expects(bits == 4 || bits == 8, errc::invalid_argument, where, "bits = ", bits, " but only 4 and 8 exist");
  expects(group_size == 0 || (group_size > 0 && group_size % int4_block == 0), errc::invalid_argument, where,
          "group_size = ", group_size, " must be 0 (per-row) or a positive multiple of ", int4_block);
  const std::int64_t gs = group_size == 0 ? round_up(cols, int4_block) : group_size;
  return {cols, gs, ceil_div(cols, gs)};
}

}  // namespace detail

/// Quantizes a row-major rows x cols fp32 device matrix symmetrically in groups of group_size
/// columns (0: one group per row): scales[row][g] = max|x| / (7 or 127), codes unpacked one per
/// int8 (int4: 0..15 with zero point 8; int8: -128..127 with zero 0), equal to the codes of
/// weft::quant::quantize<float>(..., {bits, group_size, true}). Resizes codes and scales.
/// Throws weft::error on bad shapes. O(rows cols) work, two passes. Runs on `exec`.
template <class DerivedPolicy>
void quantize_groups(const thrust::detail::execution_policy_base<DerivedPolicy>& exec,
                     const thrust::device_vector<float>& x, std::int64_t rows, std::int64_t cols, int group_size,
                     int bits, thrust::device_vector<std::int8_t>& codes, thrust::device_vector<float>& scales) {
  const auto group = detail::check_groups(x.size(), rows, cols, group_size, bits, "weft::quant::quantize_groups");
  codes.resize(x.size());
  scales.resize(static_cast<std::size_t>(rows * group.groups));
  const float* xp = thrust::raw_pointer_cast(x.data());
  const thrust::counting_iterator<std::int64_t> first(0);
  // Group keys are contiguous along each row, so reduce_by_key yields one maximum per group.
  thrust::reduce_by_key(exec, thrust::make_transform_iterator(first, group),
                        thrust::make_transform_iterator(first + static_cast<std::int64_t>(x.size()), group),
                        thrust::make_transform_iterator(first, detail::abs_at{xp}), thrust::make_discard_iterator(),
                        scales.begin(), thrust::equal_to<std::int64_t>(), detail::maximum_f{});
  thrust::transform(exec, scales.begin(), scales.end(), scales.begin(), detail::scale_of{bits == 4 ? 7.0f : 127.0f});
  thrust::transform(exec, first, first + static_cast<std::int64_t>(x.size()), codes.begin(),
                    detail::encode{xp, thrust::raw_pointer_cast(scales.data()), group, code_min(bits), code_max(bits),
                                   symmetric_zero(bits)});
}

/// The inverse: out[i] = (code - zero) * scale of i's group. Resizes out. O(rows cols).
template <class DerivedPolicy>
void dequantize_groups(const thrust::detail::execution_policy_base<DerivedPolicy>& exec,
                       const thrust::device_vector<std::int8_t>& codes, const thrust::device_vector<float>& scales,
                       std::int64_t rows, std::int64_t cols, int group_size, int bits,
                       thrust::device_vector<float>& out) {
  const auto group = detail::check_groups(codes.size(), rows, cols, group_size, bits, "weft::quant::dequantize_groups");
  expects(scales.size() == static_cast<std::size_t>(rows * group.groups), errc::invalid_argument,
          "weft::quant::dequantize_groups", "scales has ", scales.size(), " elements but rows x groups = ", rows, " x ",
          group.groups);
  out.resize(codes.size());
  const thrust::counting_iterator<std::int64_t> first(0);
  thrust::transform(exec, first, first + static_cast<std::int64_t>(codes.size()), out.begin(),
                    detail::decode{thrust::raw_pointer_cast(codes.data()), thrust::raw_pointer_cast(scales.data()),
                                   group, symmetric_zero(bits)});
}

/// quantize_groups on thrust::device (the configured device system).
inline void quantize_groups(const thrust::device_vector<float>& x, std::int64_t rows, std::int64_t cols, int group_size,
                            int bits, thrust::device_vector<std::int8_t>& codes, thrust::device_vector<float>& scales) {
  quantize_groups(thrust::device, x, rows, cols, group_size, bits, codes, scales);
}

/// dequantize_groups on thrust::device.
inline void dequantize_groups(const thrust::device_vector<std::int8_t>& codes,
                              const thrust::device_vector<float>& scales, std::int64_t rows, std::int64_t cols,
                              int group_size, int bits, thrust::device_vector<float>& out) {
  dequantize_groups(thrust::device, codes, scales, rows, cols, group_size, bits, out);
}

}  // namespace weft::quant

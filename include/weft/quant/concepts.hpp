// The policy concepts of weft::quant: which element types may be scales and activations, and what
// a quantizer (the rule that picks a group's scale and zero point) must provide.
// Round-to-nearest group quantization as in GPTQ's baseline (Frantar et al., 2023, section 2).
#pragma once

#include <weft/core/half.hpp>

#include <concepts>
#include <span>
#include <type_traits>

namespace weft::quant {

/// Scale and zero point of one quantization group: value = (code - zero) * scale. A plain value.
struct group_params {
  float scale = 1.0f;
  int zero = 0;
};

/// A type scales may be stored in: fp32, fp16 or bf16.
template <class T>
concept scale_value = std::same_as<T, float> || std::same_as<T, half> || std::same_as<T, bfloat16>;

/// A type activations may come in: fp32 (W4A32) or fp16/bf16 (W4A16).
template <class T>
concept activation_value = std::same_as<T, float> || std::same_as<T, half> || std::same_as<T, bfloat16>;

/// A quantizer picks the scale and zero point of one group of weights for codes of `bits` bits
/// (4: codes 0..15; 8: codes -128..127). Codes are then rounded to nearest by quantize().
/// symmetric() says whether its zero point is the fixed midpoint (8 for int4, 0 for int8).
template <class Q>
concept quantizer = requires(const Q& q, std::span<const float> group, int bits) {
  { q.choose(group, bits) } -> std::same_as<group_params>;
  { q.symmetric() } -> std::convertible_to<bool>;
};

/// A CUDA GEMM tile shape (quant/cuda/*.cuh): a block computes block_m x block_n outputs with
/// warps_m x warps_n warps, so each warp's tile must be whole 16 x 8 mma tiles and a block at most
/// 32 warps. gemm_tile<...> in device_tiles.hpp is the ready-made one.
template <class T>
concept gemm_tile_shape = requires {
  { T::block_m } -> std::convertible_to<int>;
  { T::block_n } -> std::convertible_to<int>;
  { T::warps_m } -> std::convertible_to<int>;
  { T::warps_n } -> std::convertible_to<int>;
}
&&T::warps_m > 0 && T::warps_n > 0 && T::block_m % (16 * T::warps_m) == 0 && T::block_n % (8 * T::warps_n) == 0 &&
    T::block_m > 0 && T::block_n > 0 && T::warps_m* T::warps_n <= 32;

}  // namespace weft::quant

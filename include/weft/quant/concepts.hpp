// The policy concepts of weft::quant: which element types may be scales and activations, and what
// a quantizer (the rule that picks a group's scale and zero point) must provide.
// Round-to-nearest group quantization as in GPTQ's baseline (Frantar et al., 2023, section 2).
#pragma once

#include <weft/core/half.hpp>

#include <concepts>
#include <span>
#include <type_traits>

namespace weft::quant {

/// Scale and zero point of one quantization group: value = (code - zero) * scale.
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

}  // namespace weft::quant

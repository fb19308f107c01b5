// IEEE 754 binary16 (weft::half) and bfloat16 (weft::bfloat16) value types for host and CUDA
// device code. Conversion from float rounds to nearest, ties to even, with subnormals, infinities
// and NaN handled as IEEE 754-2008 §4.3.1 prescribes; conversion to float is exact.
#pragma once

#include <weft/core/config.hpp>

#include <cstdint>

namespace weft {

namespace detail {

template <class To, class From>
WEFT_HOST_DEVICE constexpr To bit_cast(const From& from) noexcept {
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs equal sizes");
  return __builtin_bit_cast(To, from);
}

/// float -> binary16 bits, round to nearest even. NaN stays NaN (quieted, high payload kept).
WEFT_HOST_DEVICE constexpr std::uint16_t float_to_half_bits(float value) noexcept {
  const std::uint32_t f = bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((f >> 16) & 0x8000u);
  const std::uint32_t magnitude = f & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity or NaN
    if (magnitude == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u)  // >= 65520: halfway above 65504 ties to even, which is infinity
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x38800000u) {   // below 2^-14: a binary16 subnormal or zero
    if (magnitude <= 0x33000000u)  // <= 2^-25: rounds to zero (2^-25 itself ties to even 0)
      return sign;
    const std::uint32_t exponent = magnitude >> 23;                      // 102..112
    const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;  // implicit one
    const std::uint32_t shift = 126u - exponent;                         // 14..24: to units of 2^-24
    std::uint32_t result = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (result & 1u))) ++result;  // may carry into 0x400
    return static_cast<std::uint16_t>(sign | result);
  }
  // Normal: rebias the exponent (127 -> 15) and drop 13 mantissa bits with rounding; a carry
  // out of the mantissa correctly bumps the exponent.
  std::uint32_t result = (magnitude - 0x38000000u) >> 13;
  const std::uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) ++result;
  return static_cast<std::uint16_t>(sign | result);
}

/// binary16 bits -> float, exact.
WEFT_HOST_DEVICE constexpr float half_bits_to_float(std::uint16_t bits) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  std::int32_t exponent = (bits >> 10) & 0x1f;
  std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return bit_cast<float>(sign);
    exponent = 1;  // subnormal: normalise so the implicit one is explicit
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    mantissa &= 0x3ffu;
  }
  return bit_cast<float>(sign | (static_cast<std::uint32_t>(exponent + 112) << 23) | (mantissa << 13));
}

/// float -> bfloat16 bits, round to nearest even; NaN is quieted.
WEFT_HOST_DEVICE constexpr std::uint16_t float_to_bfloat16_bits(float value) noexcept {
  const std::uint32_t f = bit_cast<std::uint32_t>(value);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((f >> 16) | 0x40u);
  const std::uint32_t rounding_bias = 0x7fffu + ((f >> 16) & 1u);
  return static_cast<std::uint16_t>((f + rounding_bias) >> 16);
}

WEFT_HOST_DEVICE constexpr float bfloat16_bits_to_float(std::uint16_t bits) noexcept {
  return bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

}  // namespace detail

/// IEEE 754 binary16. Construct explicitly from float (round to nearest even); converts
/// implicitly to float, where all arithmetic happens. Trivially copyable, 2 bytes.
/// Thread-safety: a plain value. Every operation is O(1).
struct half {
  std::uint16_t bits;

  half() = default;
  WEFT_HOST_DEVICE explicit constexpr half(float value) noexcept : bits(detail::float_to_half_bits(value)) {}
  WEFT_HOST_DEVICE static constexpr half from_bits(std::uint16_t raw) noexcept {
    half h{};
    h.bits = raw;
    return h;
  }
  WEFT_HOST_DEVICE constexpr operator float() const noexcept { return detail::half_bits_to_float(bits); }
};

/// bfloat16: the upper half of an IEEE binary32. Same conventions as weft::half.
struct bfloat16 {
  std::uint16_t bits;

  bfloat16() = default;
  WEFT_HOST_DEVICE explicit constexpr bfloat16(float value) noexcept : bits(detail::float_to_bfloat16_bits(value)) {}
  WEFT_HOST_DEVICE static constexpr bfloat16 from_bits(std::uint16_t raw) noexcept {
    bfloat16 b{};
    b.bits = raw;
    return b;
  }
  WEFT_HOST_DEVICE constexpr operator float() const noexcept { return detail::bfloat16_bits_to_float(bits); }
};

using float16 = half;

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);

}  // namespace weft

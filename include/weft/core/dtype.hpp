// Element types weft moves and reduces: a runtime tag (weft::dtype) for values that cross process
// boundaries or come from configuration, the compile-time mapping to C++ types, and the type each
// one accumulates in (half and bfloat16 accumulate in float).
#pragma once

#include <weft/core/error.hpp>
#include <weft/core/half.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace weft {

enum class dtype : std::uint8_t { f16, bf16, f32, f64, i8, u8, i32, i64 };

template <class T>
struct type_tag {
  using type = T;
};

namespace detail {
template <class T>
struct dtype_of_impl;
template <>
struct dtype_of_impl<half> {
  static constexpr dtype value = dtype::f16;
};
template <>
struct dtype_of_impl<bfloat16> {
  static constexpr dtype value = dtype::bf16;
};
template <>
struct dtype_of_impl<float> {
  static constexpr dtype value = dtype::f32;
};
template <>
struct dtype_of_impl<double> {
  static constexpr dtype value = dtype::f64;
};
template <>
struct dtype_of_impl<std::int8_t> {
  static constexpr dtype value = dtype::i8;
};
template <>
struct dtype_of_impl<std::uint8_t> {
  static constexpr dtype value = dtype::u8;
};
template <>
struct dtype_of_impl<std::int32_t> {
  static constexpr dtype value = dtype::i32;
};
template <>
struct dtype_of_impl<std::int64_t> {
  static constexpr dtype value = dtype::i64;
};
}  // namespace detail

/// The element types weft's collectives and kernels accept.
template <class T>
concept element_type = requires {
  detail::dtype_of_impl<std::remove_cv_t<T>>::value;
};

template <element_type T>
inline constexpr dtype dtype_of = detail::dtype_of_impl<std::remove_cv_t<T>>::value;

/// The type reductions over T accumulate in: float for half and bfloat16, T otherwise.
template <class T>
using accumulator_t = std::conditional_t<std::is_same_v<T, half> || std::is_same_v<T, bfloat16>, float, T>;

/// Bytes per element. O(1), thread-safe.
constexpr std::size_t size_of(dtype t) noexcept {
  switch (t) {
    case dtype::f16:
    case dtype::bf16:
      return 2;
    case dtype::f32:
    case dtype::i32:
      return 4;
    case dtype::f64:
    case dtype::i64:
      return 8;
    case dtype::i8:
    case dtype::u8:
      return 1;
  }
  return 0;
}

/// Short name ("f32", "bf16", ...). O(1), thread-safe.
constexpr std::string_view to_string(dtype t) noexcept {
  switch (t) {
    case dtype::f16:
      return "f16";
    case dtype::bf16:
      return "bf16";
    case dtype::f32:
      return "f32";
    case dtype::f64:
      return "f64";
    case dtype::i8:
      return "i8";
    case dtype::u8:
      return "u8";
    case dtype::i32:
      return "i32";
    case dtype::i64:
      return "i64";
  }
  return "?";
}

/// Calls fn(type_tag<T>{}) for the C++ type T of a runtime dtype and returns its result.
/// Throws weft::error(invalid_argument) for a value outside the enumeration.
template <class Fn>
decltype(auto) visit(dtype t, Fn&& fn) {
  switch (t) {
    case dtype::f16:
      return fn(type_tag<half>{});
    case dtype::bf16:
      return fn(type_tag<bfloat16>{});
    case dtype::f32:
      return fn(type_tag<float>{});
    case dtype::f64:
      return fn(type_tag<double>{});
    case dtype::i8:
      return fn(type_tag<std::int8_t>{});
    case dtype::u8:
      return fn(type_tag<std::uint8_t>{});
    case dtype::i32:
      return fn(type_tag<std::int32_t>{});
    case dtype::i64:
      return fn(type_tag<std::int64_t>{});
  }
  detail::raise(errc::invalid_argument, "weft::visit(dtype)", "unknown dtype value ", static_cast<int>(t));
}

}  // namespace weft

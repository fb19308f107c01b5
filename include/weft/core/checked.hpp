// Overflow-checked size arithmetic: every size, count or offset that comes from a caller, a file,
// a socket or the environment is combined through these, so a crafted value can never wrap a
// product to something small that then passes a bounds check. Standard library only.
#pragma once

#include <weft/core/error.hpp>

#include <concepts>
#include <cstddef>
#include <limits>
#include <type_traits>
#include <utility>

namespace weft {

/// a + b, or weft::error(out_of_range) naming `where` and both operands when the sum does not fit
/// in T. Thread-safe. O(1).
template <std::integral T>
constexpr T checked_add(T a, T b, const char* where) {
  T out{};
  if (__builtin_add_overflow(a, b, &out)) [[unlikely]]
    detail::raise(errc::out_of_range, where, "size arithmetic overflows: ", +a, " + ", +b, " does not fit in ",
                  sizeof(T) * 8, "-bit ", std::is_signed_v<T> ? "signed" : "unsigned");
  return out;
}

/// a - b, or weft::error(out_of_range) when the difference does not fit in T (for unsigned T:
/// when b > a). Thread-safe. O(1).
template <std::integral T>
constexpr T checked_sub(T a, T b, const char* where) {
  T out{};
  if (__builtin_sub_overflow(a, b, &out)) [[unlikely]]
    detail::raise(errc::out_of_range, where, "size arithmetic overflows: ", +a, " - ", +b, " does not fit in ",
                  sizeof(T) * 8, "-bit ", std::is_signed_v<T> ? "signed" : "unsigned");
  return out;
}

/// a * b, or weft::error(out_of_range) naming `where` and both operands when the product does
/// not fit in T. Thread-safe. O(1).
template <std::integral T>
constexpr T checked_mul(T a, T b, const char* where) {
  T out{};
  if (__builtin_mul_overflow(a, b, &out)) [[unlikely]]
    detail::raise(errc::out_of_range, where, "size arithmetic overflows: ", +a, " * ", +b, " does not fit in ",
                  sizeof(T) * 8, "-bit ", std::is_signed_v<T> ? "signed" : "unsigned");
  return out;
}

/// value converted to To, or weft::error(out_of_range) naming `where` and the value when To cannot
/// represent it exactly (negative into unsigned, too large, and so on). Thread-safe. O(1).
template <std::integral To, std::integral From>
constexpr To checked_cast(From value, const char* where) {
  if (!std::in_range<To>(value)) [[unlikely]]
    detail::raise(errc::out_of_range, where, "value ", +value, " does not fit in ", sizeof(To) * 8, "-bit ",
                  std::is_signed_v<To> ? "signed" : "unsigned");
  return static_cast<To>(value);
}

/// The product of all factors in T, each factor converted as checked_cast and each step checked
/// as checked_mul. Thread-safe. O(factors).
template <std::integral T, std::integral... Ts>
constexpr T checked_product(const char* where, Ts... factors) {
  T out = 1;
  ((out = checked_mul(out, checked_cast<T>(factors, where), where)), ...);
  return out;
}

/// ceil(a / b) for a >= 0 and b > 0 without the a + b - 1 overflow; weft::error(invalid_argument)
/// for b <= 0 or a < 0. Thread-safe. O(1).
template <std::integral T>
constexpr T checked_ceil_div(T a, T b, const char* where) {
  if (b <= 0 || a < 0) [[unlikely]]
    detail::raise(errc::invalid_argument, where, "ceil_div(", +a, ", ", +b, ") needs a >= 0 and b > 0");
  return a / b + (a % b != 0 ? 1 : 0);
}

/// Throws weft::error(capacity) naming `what`, the value and the limit unless value <= limit: the
/// one shape of every "this count read from outside is too large" check. Thread-safe. O(1).
template <std::integral T, std::integral L>
constexpr void check_limit(T value, L limit, const char* where, const char* what) {
  if (!std::cmp_less_equal(value, limit)) [[unlikely]]
    detail::raise(errc::capacity, where, what, " ", +value, " exceeds the limit ", +limit);
}

/// Throws weft::error(out_of_range) naming `what`, the index and the size unless index < size: the
/// one shape of every public accessor's bounds check (std::out_of_range never escapes weft).
/// Thread-safe. O(1).
template <std::integral T, std::integral S>
constexpr void check_index(T index, S size, const char* where, const char* what) {
  if (!std::cmp_less(index, size)) [[unlikely]]
    detail::raise(errc::out_of_range, where, what, " ", +index, " is out of range (size ", +size, ")");
}

}  // namespace weft

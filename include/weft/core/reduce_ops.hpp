// Reduction operators (weft::op::sum, prod, min, max, avg, bit_and, bit_or, bit_xor) as function
// objects over accumulator values, the weft::reduce_op concept every collective and kernel checks,
// and a runtime tag (weft::reduce_kind) for operators chosen from configuration. Integer sum and
// prod wrap around (two's complement, as NCCL's and MPI's integer reductions do in practice), and
// that is defined behaviour here: the arithmetic runs in the unsigned type of the same width.
#pragma once

#include <weft/core/config.hpp>
#include <weft/core/dtype.hpp>
#include <weft/core/error.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

namespace weft {
namespace detail {
/// The unsigned type integer A's sum and product are computed in: at least unsigned int, so the
/// operands are not promoted back to (signed) int first (u16 * u16 overflows int), and wide enough
/// for A. Unsigned arithmetic wraps by definition, and converting back to A keeps the low bits
/// (C++20 [conv.integral]), which is two's-complement wrap-around without undefined behaviour.
template <class A>
using wrap_unsigned_t = std::conditional_t<(sizeof(A) < sizeof(unsigned)), unsigned, std::make_unsigned_t<A>>;

template <class A>
inline constexpr bool wraps = std::is_integral_v<A> && !std::is_same_v<A, bool>;
}  // namespace detail

namespace op {

/// a + b; identity 0. Integers wrap around on overflow (defined: see the header's first lines).
struct sum {
  static constexpr std::string_view name = "sum";
  template <class A>
  WEFT_HOST_DEVICE constexpr A operator()(A a, A b) const noexcept {
    if constexpr (detail::wraps<A>) {
      using U = detail::wrap_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return static_cast<A>(a + b);
    }
  }
  template <class A>
  WEFT_HOST_DEVICE static constexpr A identity() noexcept {
    return A(0);
  }
};

/// a * b; identity 1. Integers wrap around on overflow (defined: see the header's first lines).
struct prod {
  static constexpr std::string_view name = "prod";
  template <class A>
  WEFT_HOST_DEVICE constexpr A operator()(A a, A b) const noexcept {
    if constexpr (detail::wraps<A>) {
      using U = detail::wrap_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return static_cast<A>(a * b);
    }
  }
  template <class A>
  WEFT_HOST_DEVICE static constexpr A identity() noexcept {
    return A(1);
  }
};

/// The smaller of a and b (b when a is NaN, so the order of operands is part of the result; weft's
/// reductions fix that order, so every rank still agrees bit for bit).
struct min {
  static constexpr std::string_view name = "min";
  template <class A>
  WEFT_HOST_DEVICE constexpr A operator()(A a, A b) const noexcept {
    return a < b ? a : b;
  }
  template <class A>
  WEFT_HOST_DEVICE static constexpr A identity() noexcept {
    if constexpr (std::numeric_limits<A>::has_infinity)
      return std::numeric_limits<A>::infinity();
    else
      return std::numeric_limits<A>::max();
  }
};

/// The larger of a and b (see min for NaN).
struct max {
  static constexpr std::string_view name = "max";
  template <class A>
  WEFT_HOST_DEVICE constexpr A operator()(A a, A b) const noexcept {
    return a > b ? a : b;
  }
  template <class A>
  WEFT_HOST_DEVICE static constexpr A identity() noexcept {
    if constexpr (std::numeric_limits<A>::has_infinity)
      return -std::numeric_limits<A>::infinity();
    else
      return std::numeric_limits<A>::lowest();
  }
};

/// Sum (wrapping for integers), then divided by the number of contributions (> 0) in finalize
/// (integer division, rounding toward zero, for integers: the wrapped sum divided).
struct avg : sum {
  static constexpr std::string_view name = "avg";
  template <class A>
  WEFT_HOST_DEVICE constexpr A finalize(A total, std::size_t contributions) const noexcept {
    if constexpr (detail::wraps<A>) {
      // In 64 unsigned bits: contributions may not fit A (200 ranks of i8) and must not wrap to a
      // negative divisor; |total| is exact there even for the most negative value.
      const auto n = static_cast<std::uint64_t>(contributions);
      if constexpr (std::is_signed_v<A>) {
        const bool negative = total < 0;
        const auto magnitude = negative ? 0 - static_cast<std::uint64_t>(total) : static_cast<std::uint64_t>(total);
        const std::uint64_t q = magnitude / n;
        return static_cast<A>(negative ? 0 - q : q);
      } else {
        return static_cast<A>(static_cast<std::uint64_t>(total) / n);
      }
    } else {
      return static_cast<A>(total / static_cast<A>(contributions));
    }
  }
};

/// Bitwise operators, for integer types only.
struct bit_and {
  static constexpr std::string_view name = "bit_and";
  template <std::integral A>
  WEFT_HOST_DEVICE constexpr A operator()(A a, A b) const noexcept {
    return static_cast<A>(a & b);
  }
  template <std::integral A>
  WEFT_HOST_DEVICE static constexpr A identity() noexcept {
    return static_cast<A>(~A(0));
  }
};
struct bit_or {
  static constexpr std::string_view name = "bit_or";
  template <std::integral A>
  WEFT_HOST_DEVICE constexpr A operator()(A a, A b) const noexcept {
    return static_cast<A>(a | b);
  }
  template <std::integral A>
  WEFT_HOST_DEVICE static constexpr A identity() noexcept {
    return A(0);
  }
};
struct bit_xor {
  static constexpr std::string_view name = "bit_xor";
  template <std::integral A>
  WEFT_HOST_DEVICE constexpr A operator()(A a, A b) const noexcept {
    return static_cast<A>(a ^ b);
  }
  template <std::integral A>
  WEFT_HOST_DEVICE static constexpr A identity() noexcept {
    return A(0);
  }
};

}  // namespace op

/// Op reduces elements of type T: it combines two accumulator values (accumulator_t<T>: float for
/// half/bfloat16) associatively and has an identity. A user-written operator satisfies this by
/// providing `A operator()(A, A) const` and `static A identity<A>()`.
template <class Op, class T>
concept reduce_op = std::default_initializable<Op> && std::copy_constructible<Op> &&
    requires(const Op op, accumulator_t<T> a) {
  { op(a, a) } -> std::same_as<accumulator_t<T>>;
  { Op::template identity<accumulator_t<T>>() } -> std::same_as<accumulator_t<T>>;
};

/// An operator with a final step after all contributions are combined (avg divides by their number).
template <class Op, class A>
concept finalizing_reduce_op = requires(const Op op, A a, std::size_t n) {
  { op.finalize(a, n) } -> std::same_as<A>;
};

/// Applies Op's final step, if it has one, to a fully combined value. O(1).
template <class Op, class A>
WEFT_HOST_DEVICE constexpr A finalize(const Op& op, A total, std::size_t contributions) noexcept {
  if constexpr (finalizing_reduce_op<Op, A>)
    return op.finalize(total, contributions);
  else
    return total;
}

/// Runtime tag for a reduce operator, for values that come from configuration or the wire.
enum class reduce_kind : std::uint8_t { sum, prod, min, max, avg, bit_and, bit_or, bit_xor };

constexpr std::string_view to_string(reduce_kind k) noexcept {
  switch (k) {
    case reduce_kind::sum:
      return op::sum::name;
    case reduce_kind::prod:
      return op::prod::name;
    case reduce_kind::min:
      return op::min::name;
    case reduce_kind::max:
      return op::max::name;
    case reduce_kind::avg:
      return op::avg::name;
    case reduce_kind::bit_and:
      return op::bit_and::name;
    case reduce_kind::bit_or:
      return op::bit_or::name;
    case reduce_kind::bit_xor:
      return op::bit_xor::name;
  }
  return "?";
}

/// Calls fn(Op{}) for the operator a runtime tag names. Throws weft::error(invalid_argument) for
/// a value outside the enumeration.
template <class Fn>
decltype(auto) visit(reduce_kind k, Fn&& fn) {
  switch (k) {
    case reduce_kind::sum:
      return fn(op::sum{});
    case reduce_kind::prod:
      return fn(op::prod{});
    case reduce_kind::min:
      return fn(op::min{});
    case reduce_kind::max:
      return fn(op::max{});
    case reduce_kind::avg:
      return fn(op::avg{});
    case reduce_kind::bit_and:
      return fn(op::bit_and{});
    case reduce_kind::bit_or:
      return fn(op::bit_or{});
    case reduce_kind::bit_xor:
      return fn(op::bit_xor{});
  }
  detail::raise(errc::invalid_argument, "weft::visit(reduce_kind)", "unknown reduce_kind value ", static_cast<int>(k));
}

/// Like visit(reduce_kind, fn), but instantiates fn only with operators that reduce T (so a
/// generic lambda over double never sees bit_and). Throws weft::error(invalid_argument) when the
/// runtime tag names an operator T does not support, e.g. bit_xor on float.
template <class T, class Fn>
decltype(auto) visit(reduce_kind k, Fn&& fn) {
  return visit(k, [&fn, k](auto op) -> decltype(fn(op::sum{})) {
    if constexpr (reduce_op<decltype(op), T>) {
      return fn(op);
    } else {
      detail::raise(errc::invalid_argument, "weft::visit<T>(reduce_kind)", "operator ", to_string(k),
                    " does not apply to element type ", sizeof(T), "-byte non-integer");
    }
  });
}

/// Reduces b into a element-wise (a[i] = op(a[i], b[i])) through the accumulator type. The
/// building block every collective uses; O(n). Not thread-safe for overlapping ranges.
template <class T, class Op>
requires reduce_op<Op, T>
constexpr void reduce_into(T* a, const T* b, std::size_t n, const Op& op = {}) noexcept {
  using A = accumulator_t<T>;
  for (std::size_t i = 0; i < n; ++i) a[i] = static_cast<T>(op(static_cast<A>(a[i]), static_cast<A>(b[i])));
}

}  // namespace weft

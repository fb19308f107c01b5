#include <weft/core/reduce_ops.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace {
// Archetype: the weakest operator reduce_op accepts — a call operator and an identity, nothing else.
struct saturating_add {
  template <class A>
  A operator()(A a, A b) const {
    return a + b > A(100) ? A(100) : A(a + b);
  }
  template <class A>
  static A identity() {
    return A(0);
  }
};
}  // namespace

TEST_CASE("reduce operators satisfy the concept for the types they support", "[core][reduce]") {
  STATIC_REQUIRE(weft::reduce_op<weft::op::sum, float>);
  STATIC_REQUIRE(weft::reduce_op<weft::op::max, weft::half>);
  STATIC_REQUIRE(weft::reduce_op<weft::op::bit_xor, std::int32_t>);
  STATIC_REQUIRE(!weft::reduce_op<weft::op::bit_and, float>);
  STATIC_REQUIRE(weft::reduce_op<saturating_add, std::int64_t>);
  STATIC_REQUIRE(!weft::reduce_op<int, float>);
}

TEST_CASE("reduce operators compute and finalize", "[core][reduce]") {
  using namespace weft::op;
  CHECK(sum{}(2, 3) == 5);
  CHECK(prod{}(2.0, 3.5) == 7.0);
  CHECK(min{}(4, -1) == -1);
  CHECK(max{}(4u, 9u) == 9u);
  CHECK(bit_and{}(0b1100, 0b1010) == 0b1000);
  CHECK(bit_or{}(0b1100, 0b1010) == 0b1110);
  CHECK(bit_xor{}(0b1100, 0b1010) == 0b0110);
  CHECK(weft::finalize(avg{}, 10.0, 4) == 2.5);
  CHECK(weft::finalize(sum{}, 10.0, 4) == 10.0);
  CHECK(min::identity<float>() > 1e38f);
  CHECK(max::identity<std::int8_t>() == -128);
  CHECK(bit_and::identity<std::uint8_t>() == 0xff);

  std::vector<weft::half> a{weft::half(1.0f), weft::half(2.0f)}, b{weft::half(0.5f), weft::half(-4.0f)};
  weft::reduce_into(a.data(), b.data(), a.size(), sum{});
  CHECK(static_cast<float>(a[0]) == 1.5f);
  CHECK(static_cast<float>(a[1]) == -2.0f);

  std::vector<std::int64_t> x{1, 2, 3}, y{10, 20, 30};
  weft::reduce_into(x.data(), y.data(), x.size(), saturating_add{});
  CHECK(x == std::vector<std::int64_t>{11, 22, 33});
}

TEST_CASE("runtime reduce_kind dispatches to the operator", "[core][reduce]") {
  for (auto k :
       {weft::reduce_kind::sum, weft::reduce_kind::prod, weft::reduce_kind::min, weft::reduce_kind::max,
        weft::reduce_kind::avg, weft::reduce_kind::bit_and, weft::reduce_kind::bit_or, weft::reduce_kind::bit_xor}) {
    const auto name = weft::visit(k, [](auto op) { return decltype(op)::name; });
    CHECK(name == weft::to_string(k));
  }
  const int r = weft::visit(weft::reduce_kind::max, [](auto op) { return op(3, 8); });
  CHECK(r == 8);
  CHECK_THROWS_AS(weft::visit(static_cast<weft::reduce_kind>(42), [](auto) { return 0; }), weft::error);

  // Typed dispatch: only operators valid for the element type are instantiated.
  const double m = weft::visit<double>(weft::reduce_kind::min, [](auto op) { return op(2.5, -1.0); });
  CHECK(m == -1.0);
  CHECK_THROWS_WITH(weft::visit<float>(weft::reduce_kind::bit_xor, [](auto op) { return op(1.0f, 2.0f); }),
                    Catch::Contains("operator bit_xor does not apply"));
}

namespace {
// The wrapped result computed independently: in the unsigned type of the same width, where
// overflow is defined, then reinterpreted bit for bit.
template <class T>
T wrapped_sum(T a, T b) {
  using U = std::make_unsigned_t<T>;
  const auto u = static_cast<U>(static_cast<std::uint64_t>(static_cast<U>(a)) + static_cast<U>(b));
  T out;
  std::memcpy(&out, &u, sizeof(T));
  return out;
}
template <class T>
T wrapped_prod(T a, T b) {
  using U = std::make_unsigned_t<T>;
  const auto u = static_cast<U>(static_cast<std::uint64_t>(static_cast<U>(a)) * static_cast<U>(b));
  T out;
  std::memcpy(&out, &u, sizeof(T));
  return out;
}

template <class T>
void check_wraps_at_the_limits() {
  using L = std::numeric_limits<T>;
  const std::vector<T> edge{L::max(), L::min(), static_cast<T>(L::max() - 1),    static_cast<T>(L::min() + 1),
                            T(0),     T(1),     static_cast<T>(L::max() / 2 + 1)};
  for (T a : edge)
    for (T b : edge) {
      INFO(sizeof(T) << "-byte " << (L::is_signed ? "signed" : "unsigned") << ": " << +a << ", " << +b);
      CHECK(weft::op::sum{}(a, b) == wrapped_sum(a, b));
      CHECK(weft::op::prod{}(a, b) == wrapped_prod(a, b));
      CHECK(weft::op::avg{}(a, b) == wrapped_sum(a, b));
    }
  // Named cases, so a reader sees what wrap-around means.
  CHECK(weft::op::sum{}(L::max(), T(1)) == L::min());
  CHECK(weft::op::sum{}(L::min(), static_cast<T>(-1)) == L::max());  // -1 is all ones: L::max() when unsigned
  CHECK(weft::op::prod{}(L::max(), L::max()) == T(1));               // (2^k - 1)^2 = 1 mod 2^k, and (2^(k-1) - 1)^2 too
  // reduce_into over a whole buffer: every element wraps the same way.
  std::vector<T> acc(33, L::max()), in(33, L::max());
  weft::reduce_into(acc.data(), in.data(), acc.size(), weft::op::sum{});
  for (T x : acc) CHECK(x == wrapped_sum(L::max(), L::max()));
  // avg divides the wrapped sum; contribution counts the type cannot hold do not wrap the divisor.
  CHECK(weft::finalize(weft::op::avg{}, L::max(), 1) == L::max());
  CHECK(weft::finalize(weft::op::avg{}, L::min(), 1) == L::min());
  CHECK(weft::finalize(weft::op::avg{}, static_cast<T>(L::max() - 1), 2) == static_cast<T>((L::max() - 1) / 2));
  CHECK(weft::finalize(weft::op::avg{}, L::max(), std::size_t{1} << 40) ==
        static_cast<T>(static_cast<std::uint64_t>(L::max()) >> 40));
  if constexpr (L::is_signed) {
    // The most negative value over 2^(k-1) contributions is exactly -1, even for 64 bits.
    CHECK(weft::finalize(weft::op::avg{}, L::min(), static_cast<std::size_t>(L::max()) + 1) == T(-1));
    CHECK(weft::finalize(weft::op::avg{}, L::min(), std::size_t{1} << 40) ==
          (sizeof(T) == 8 ? static_cast<T>(-(std::int64_t{1} << 23)) : T(0)));  // -2^63 / 2^40; |min| < 2^40
    CHECK(weft::finalize(weft::op::avg{}, T(-7), 2) == T(-3));                  // toward zero, as C++ division
  }
}
}  // namespace

TEST_CASE("integer sum, prod and avg wrap around at the limits of every integer dtype, without UB", "[core][reduce]") {
  check_wraps_at_the_limits<std::int8_t>();
  check_wraps_at_the_limits<std::uint8_t>();
  check_wraps_at_the_limits<std::int32_t>();
  check_wraps_at_the_limits<std::int64_t>();
  // Not dtypes, but operators of the library all the same: the types integer promotion would turn
  // into a signed int overflow (u16 * u16), and the unsigned 32/64-bit ones.
  check_wraps_at_the_limits<std::uint16_t>();
  check_wraps_at_the_limits<std::int16_t>();
  check_wraps_at_the_limits<std::uint32_t>();
  check_wraps_at_the_limits<std::uint64_t>();
  STATIC_REQUIRE(weft::op::sum{}(std::int32_t{2147483647}, std::int32_t{2147483647}) == -2);  // the UBSan finding
  STATIC_REQUIRE(weft::op::prod{}(std::int64_t{1} << 62, std::int64_t{4}) == 0);
}

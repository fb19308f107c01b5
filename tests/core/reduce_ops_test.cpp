#include <weft/core/reduce_ops.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
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

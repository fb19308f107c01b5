#include <weft/core/dtype.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <type_traits>

TEST_CASE("dtype maps to C++ types and sizes", "[core][dtype]") {
  STATIC_REQUIRE(weft::dtype_of<float> == weft::dtype::f32);
  STATIC_REQUIRE(weft::dtype_of<const weft::bfloat16> == weft::dtype::bf16);
  STATIC_REQUIRE(std::is_same_v<weft::accumulator_t<weft::half>, float>);
  STATIC_REQUIRE(std::is_same_v<weft::accumulator_t<std::int32_t>, std::int32_t>);
  STATIC_REQUIRE(!weft::element_type<char16_t>);
  for (auto t : {weft::dtype::f16, weft::dtype::bf16, weft::dtype::f32, weft::dtype::f64, weft::dtype::i8,
                 weft::dtype::u8, weft::dtype::i32, weft::dtype::i64}) {
    const std::size_t size = weft::visit(t, [](auto tag) { return sizeof(typename decltype(tag)::type); });
    CHECK(size == weft::size_of(t));
    const weft::dtype round = weft::visit(t, [](auto tag) { return weft::dtype_of<typename decltype(tag)::type>; });
    CHECK(round == t);
    CHECK(weft::to_string(t) != "?");
  }
  CHECK_THROWS_WITH(weft::visit(static_cast<weft::dtype>(99), [](auto) { return 0; }),
                    "weft::visit(dtype): unknown dtype value 99");
}

#include <weft/core/checked.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>

using weft::errc;

TEST_CASE("checked arithmetic returns exact results when they fit", "[core][checked]") {
  CHECK(weft::checked_add<std::int64_t>(40, 2, "t") == 42);
  CHECK(weft::checked_sub<std::size_t>(5, 5, "t") == 0);
  CHECK(weft::checked_mul<std::int64_t>(-3, 7, "t") == -21);
  CHECK(weft::checked_product<std::int64_t>("t", 2, 3, 7) == 42);
  CHECK(weft::checked_cast<std::uint32_t>(std::int64_t{4000000000}, "t") == 4000000000u);
  CHECK(weft::checked_ceil_div<std::int64_t>(17, 16, "t") == 2);
  CHECK(weft::checked_ceil_div<std::int64_t>(0, 16, "t") == 0);
  CHECK(weft::checked_ceil_div<std::uint64_t>(~std::uint64_t{0}, 2, "t") == (std::uint64_t{1} << 63));
  CHECK_NOTHROW(weft::check_limit(10, 10u, "t", "count"));
}

TEST_CASE("checked arithmetic throws weft::error naming the operands on overflow", "[core][checked]") {
  constexpr auto i64max = std::numeric_limits<std::int64_t>::max();
  // The converter attack of the hardening review: k * n with n = 2^62 + 64 wraps in int64.
  try {
    (void)weft::checked_mul<std::int64_t>(1024, (std::int64_t{1} << 62) + 64, "quant::from_awq");
    FAIL("must throw");
  } catch (const weft::error& e) {
    CHECK(e.code() == errc::out_of_range);
    CHECK(std::string(e.what()).find("quant::from_awq: size arithmetic overflows: 1024 * 4611686018427387968") == 0);
  }
  CHECK_THROWS_AS(weft::checked_add<std::int64_t>(i64max, 1, "t"), weft::error);
  CHECK_THROWS_AS(weft::checked_sub<std::size_t>(3, 4, "t"), weft::error);
  CHECK_THROWS_AS(weft::checked_product<std::int64_t>("t", 1 << 30, 1 << 30, 1 << 30), weft::error);
  CHECK_THROWS_AS(weft::checked_cast<std::uint32_t>(-1, "t"), weft::error);
  CHECK_THROWS_AS(weft::checked_cast<std::int32_t>(std::uint64_t{1} << 31, "t"), weft::error);
  CHECK_THROWS_AS(weft::checked_ceil_div<std::int64_t>(5, 0, "t"), weft::error);
  CHECK_THROWS_AS(weft::checked_ceil_div<std::int64_t>(-5, 2, "t"), weft::error);
  CHECK_THROWS_WITH(weft::check_limit(std::uint64_t{1} << 40, 1024, "moe::read_trace", "top_k"),
                    "moe::read_trace: top_k 1099511627776 exceeds the limit 1024");
}

#include <weft/core/result.hpp>

#include <catch2/catch.hpp>

#include <memory>
#include <string>

namespace {
weft::result<int> parse_positive(int x) {
  if (x <= 0) return weft::fail(weft::errc::invalid_argument, "got ", x);
  return x * 2;
}
}  // namespace

TEST_CASE("result holds a value or a failure", "[core][result]") {
  auto ok = parse_positive(4);
  REQUIRE(ok);
  CHECK(ok.value() == 8);
  CHECK(*ok == 8);
  CHECK_THROWS_AS(ok.error(), weft::error);

  auto bad = parse_positive(-1);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == weft::errc::invalid_argument);
  CHECK(bad.error().message == "got -1");
  CHECK(bad.value_or(3) == 3);
  CHECK_THROWS_WITH(bad.value(), "weft::result::value: got -1");
}

TEST_CASE("result works with move-only values and void", "[core][result]") {
  weft::result<std::unique_ptr<int>> p = std::make_unique<int>(5);
  REQUIRE(p.has_value());
  std::unique_ptr<int> owned = std::move(p).value();
  CHECK(*owned == 5);

  weft::result<void> done;
  CHECK(done.has_value());
  CHECK_NOTHROW(done.value());
  weft::result<void> failed = weft::fail(weft::errc::timeout, "rank ", 3, " silent");
  CHECK_FALSE(failed);
  CHECK(failed.error().code == weft::errc::timeout);
  CHECK_THROWS_AS(failed.value(), weft::error);
}

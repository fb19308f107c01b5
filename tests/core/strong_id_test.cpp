#include <weft/core/strong_id.hpp>

#include <catch2/catch.hpp>

#include <sstream>
#include <type_traits>
#include <unordered_set>

namespace {
using block_id = weft::strong_id<struct block_tag>;
using rank_id = weft::strong_id<struct rank_tag, int>;
}  // namespace

TEST_CASE("strong ids do not mix and behave like values", "[core][strong_id]") {
  STATIC_REQUIRE(!std::is_convertible_v<block_id, rank_id>);
  STATIC_REQUIRE(!std::is_convertible_v<unsigned, block_id>);
  block_id a(3), b(5);
  CHECK(a < b);
  CHECK(a == block_id(3));
  CHECK_FALSE(block_id{}.valid());
  CHECK(block_id::invalid() == block_id{});
  std::unordered_set<block_id> set{a, b, block_id(3)};
  CHECK(set.size() == 2);
  std::ostringstream out;
  out << a << ' ' << block_id{};
  CHECK(out.str() == "3 <invalid>");
}

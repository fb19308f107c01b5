#include <weft/kv/block_pool.hpp>
#include <weft/kv/block_table.hpp>
#include <weft/kv/concepts.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <set>
#include <vector>

using weft::kv::block_id;
using weft::kv::block_pool;
using weft::kv::block_table;

namespace {
std::vector<block_id> free_list(const block_pool& p) {
  std::vector<block_id> out;
  p.for_each_free([&](block_id b) { out.push_back(b); });
  return out;
}
}  // namespace

TEST_CASE("block pool hands out every data block once and never the null block", "[kv][pool]") {
  STATIC_REQUIRE(weft::kv::block_allocator<block_pool>);
  block_pool pool(8);
  CHECK(pool.usable_blocks() == 7);
  CHECK(pool.free_blocks() == 7);
  std::set<block_id> seen;
  while (auto b = pool.allocate()) {
    CHECK(*b != block_pool::null_block);
    CHECK(pool.ref_count(*b) == 1);
    CHECK(seen.insert(*b).second);
  }
  CHECK(seen.size() == 7);
  CHECK(pool.used_blocks() == 7);
  CHECK(pool.peek_free() == block_id::invalid());
  CHECK(pool.ref_count(block_pool::null_block) == 0);
  CHECK_FALSE(pool.is_free(block_pool::null_block));
}

TEST_CASE("block pool n-block allocation is all-or-nothing", "[kv][pool]") {
  block_pool pool(5);
  std::vector<block_id> out;
  CHECK(pool.allocate(3, out));
  CHECK(out.size() == 3);
  CHECK_FALSE(pool.allocate(2, out));
  CHECK(out.size() == 3);
  CHECK(pool.free_blocks() == 1);
  CHECK(pool.allocate(1, out));
  CHECK(pool.free_blocks() == 0);
  CHECK(pool.allocate(0, out));
}

TEST_CASE("block pool free list: front and back release, take from the middle", "[kv][pool]") {
  block_pool pool(5);
  std::vector<block_id> b;
  REQUIRE(pool.allocate(4, b));
  pool.release(b[0], weft::kv::free_position::back);
  pool.release(b[1], weft::kv::free_position::back);
  pool.release(b[2], weft::kv::free_position::front);
  CHECK(free_list(pool) == std::vector<block_id>{b[2], b[0], b[1]});
  pool.take(b[0]);
  CHECK(pool.ref_count(b[0]) == 1);
  CHECK(free_list(pool) == std::vector<block_id>{b[2], b[1]});
  pool.touch_free(b[2]);
  CHECK(free_list(pool) == std::vector<block_id>{b[1], b[2]});
  CHECK(*pool.allocate() == b[1]);
}

TEST_CASE("block pool reference counts", "[kv][pool]") {
  block_pool pool(3);
  const block_id b = *pool.allocate();
  pool.add_ref(b);
  pool.add_ref(b);
  CHECK(pool.ref_count(b) == 3);
  CHECK_FALSE(pool.release(b));
  CHECK_FALSE(pool.release(b));
  CHECK(pool.release(b));
  CHECK(pool.is_free(b));
}

TEST_CASE("block pool rejects bad input and stays unchanged", "[kv][pool][errors]") {
  CHECK_THROWS_AS(block_pool(1), weft::error);
  CHECK_THROWS_AS(block_pool(0), weft::error);
  block_pool pool(4);
  const block_id a = *pool.allocate();
  const auto before = free_list(pool);
  // never allocated
  const block_id never = before.front();
  CHECK_THROWS_WITH(pool.release(never), Catch::Contains("never allocated") && Catch::Contains("double free"));
  CHECK_THROWS_AS(pool.add_ref(never), weft::error);
  // double free
  CHECK(pool.release(a));
  const auto after_free = free_list(pool);
  try {
    pool.release(a);
    FAIL("double free accepted");
  } catch (const weft::error& e) {
    CHECK(e.code() == weft::errc::invalid_argument);
  }
  CHECK(free_list(pool) == after_free);
  CHECK(pool.free_blocks() == 3);
  // null block and out of range
  CHECK_THROWS_AS(pool.release(block_pool::null_block), weft::error);
  CHECK_THROWS_AS(pool.add_ref(block_pool::null_block), weft::error);
  CHECK_THROWS_AS(pool.release(block_id(4)), weft::error);
  CHECK_THROWS_AS(pool.release(block_id::invalid()), weft::error);
  CHECK_THROWS_AS(pool.ref_count(block_id(99)), weft::error);
  // take/touch on a block in use
  const block_id c = *pool.allocate();
  CHECK_THROWS_AS(pool.take(c), weft::error);
  CHECK_THROWS_AS(pool.touch_free(c), weft::error);
  CHECK(pool.ref_count(c) == 1);
  CHECK(pool.free_blocks() == 2);
}

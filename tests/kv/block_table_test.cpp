#include <weft/kv/block_pool.hpp>
#include <weft/kv/block_table.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <numeric>
#include <type_traits>
#include <vector>

using weft::kv::block_id;
using weft::kv::block_pool;
using weft::kv::block_table;

TEST_CASE("block table append, ensure room and slot mapping", "[kv][table]") {
  block_pool pool(16);
  block_table t(4);
  CHECK(t.blocks_needed(9) == 3);
  REQUIRE(t.append(pool, 9));
  CHECK(t.num_blocks() == 3);
  CHECK(t.num_tokens() == 9);
  CHECK(t.slot_of(5) == weft::kv::slot{t.blocks()[1], 1});
  std::array<std::int64_t, 3> slots{};
  t.slot_mapping(7, slots);
  CHECK(slots[0] == static_cast<std::int64_t>(t.blocks()[1].value()) * 4 + 3);
  CHECK(slots[1] == static_cast<std::int64_t>(t.blocks()[2].value()) * 4 + 0);
  CHECK(slots[2] == static_cast<std::int64_t>(t.blocks()[2].value()) * 4 + 1);
  CHECK(t.blocks_needed(3) == 0);
  CHECK(t.blocks_needed(4) == 1);
  REQUIRE(t.ensure_room(pool, 7));
  CHECK(t.num_blocks() == 4);
  CHECK(t.num_tokens() == 9);
  t.advance(7);
  CHECK(t.num_tokens() == 16);
  CHECK_THROWS_AS(t.advance(1), weft::error);
  CHECK_THROWS_AS(t.slot_of(16), weft::error);
  std::array<std::int64_t, 2> too_far{};
  CHECK_THROWS_AS(t.slot_mapping(15, too_far), weft::error);
  t.release(pool);
  CHECK(pool.free_blocks() == 15);
  CHECK_THROWS_AS(block_table(0), weft::error);
}

TEST_CASE("block table append is all-or-nothing", "[kv][table]") {
  block_pool pool(3);  // two data blocks
  block_table t(4);
  REQUIRE(t.append(pool, 5));
  const auto r = t.append(pool, 4);  // needs a third block
  CHECK_FALSE(r.fits);
  CHECK(t.num_tokens() == 5);
  CHECK(t.num_blocks() == 2);
  CHECK(pool.free_blocks() == 0);
}

TEST_CASE("copy-on-write: fork shares, first append to a shared partial block copies", "[kv][cow]") {
  block_pool pool(16);
  block_table parent(4);
  REQUIRE(parent.append(pool, 6));  // blocks p0 (full), p1 (2 of 4)
  const auto free_before = pool.free_blocks();
  block_table child = parent.fork(pool);
  CHECK(pool.free_blocks() == free_before);  // forking allocates nothing
  CHECK(std::ranges::equal(child.blocks(), parent.blocks()));
  CHECK(pool.ref_count(parent.blocks()[0]) == 2);
  const block_id shared_partial = parent.blocks()[1];

  const auto r = child.append(pool, 1);
  REQUIRE(r.fits);
  REQUIRE(r.copy.has_value());
  CHECK(r.copy->src == shared_partial);
  CHECK(r.copy->dst == child.blocks()[1]);
  CHECK(child.blocks()[1] != shared_partial);
  CHECK(child.blocks()[0] == parent.blocks()[0]);  // the full block stays shared
  CHECK(pool.ref_count(shared_partial) == 1);
  // now the parent owns its partial block alone: no copy
  const auto rp = parent.append(pool, 1);
  CHECK(rp.fits);
  CHECK_FALSE(rp.copy.has_value());
  // appending at a block boundary never copies even when shared
  block_table a(4);
  REQUIRE(a.append(pool, 4));
  block_table b = a.fork(pool);
  const auto rb = b.append(pool, 1);
  CHECK(rb.fits);
  CHECK_FALSE(rb.copy.has_value());
  a.release(pool);
  b.release(pool);
  child.release(pool);
  parent.release(pool);
  CHECK(pool.free_blocks() == pool.usable_blocks());
}

TEST_CASE("copy-on-write: forking and freeing in every order returns every block exactly once", "[kv][cow]") {
  // Three sequences: a root, a fork of it, and a fork of the fork, with appends between; then
  // every permutation of the three releases (and of when appends happen). release() throws on a
  // double free, so finishing with a full pool proves each block came back exactly once.
  for (int appends_first = 0; appends_first < 2; ++appends_first) {
    std::array<int, 3> order{0, 1, 2};
    do {
      block_pool pool(32);
      std::vector<block_table> seqs;
      seqs.emplace_back(4);
      REQUIRE(seqs[0].append(pool, 7));
      seqs.push_back(seqs[0].fork(pool));
      if (appends_first) REQUIRE(seqs[1].append(pool, 3));
      seqs.push_back(seqs[1].fork(pool));
      if (appends_first) {
        REQUIRE(seqs[2].append(pool, 5));
        REQUIRE(seqs[0].append(pool, 1));
      }
      for (const int i : order) {
        seqs[static_cast<std::size_t>(i)].release(pool);
        // survivors still see valid, referenced blocks
        for (const auto& s : seqs)
          for (const block_id b : s.blocks()) CHECK(pool.ref_count(b) >= 1);
      }
      CHECK(pool.free_blocks() == pool.usable_blocks());
    } while (std::next_permutation(order.begin(), order.end()));
  }
}

static_assert(!std::is_copy_constructible_v<block_table> && !std::is_copy_assignable_v<block_table>,
              "a copied table would hold blocks without references of its own");
static_assert(std::is_nothrow_move_constructible_v<block_table>);

TEST_CASE("block table sizes that would wrap throw and change nothing", "[kv][table][overflow]") {
  block_pool pool(16);
  block_table t(4);
  REQUIRE(t.append(pool, 5));
  CHECK_THROWS_WITH(t.append(pool, SIZE_MAX - 3), Catch::Contains("overflow"));
  CHECK_THROWS_AS(t.blocks_needed(SIZE_MAX), weft::error);
  CHECK_THROWS_AS(t.ensure_room(pool, SIZE_MAX - 1), weft::error);
  CHECK(t.num_tokens() == 5);
  CHECK(t.num_blocks() == 2);
  CHECK(pool.free_blocks() == 13);
  CHECK_THROWS_AS(t.slot_of(5), weft::error);  // still bounded by the real token count
  CHECK_THROWS_AS(block_table(std::size_t{1} << 32), weft::error);
  // A moved-from table holds nothing, so releasing both hands no block out twice.
  block_table moved = std::move(t);
  t.release(pool);  // NOLINT(bugprone-use-after-move): the moved-from table is empty by contract
  CHECK(pool.free_blocks() == 13);
  moved.release(pool);
  CHECK(pool.free_blocks() == 15);
}

TEST_CASE("block table truncate keeps a prefix and releases the tail", "[kv][table]") {
  block_pool pool(16);
  block_table t(4);
  REQUIRE(t.append(pool, 10));  // 3 blocks
  const block_id last = t.blocks()[2];
  t.truncate(pool, 8);
  CHECK(t.num_tokens() == 8);
  CHECK(t.num_blocks() == 2);
  CHECK(pool.is_free(last));
  t.truncate(pool, 5);
  CHECK(t.num_blocks() == 2);
  CHECK_THROWS_AS(t.truncate(pool, 6), weft::error);
  t.release(pool);
  CHECK(pool.free_blocks() == 15);
}

#include <weft/sched/block_kv_manager.hpp>

#include <catch2/catch.hpp>

using namespace weft::sched;

namespace {
request make(std::uint64_t id, std::int64_t prompt, std::uint64_t prefix = 0, std::int64_t prefix_tokens = 0) {
  request r;
  r.id = request_id(id);
  r.client = client_id(0);
  r.prompt_tokens = prompt;
  r.prefix_id = prefix;
  r.prefix_tokens = prefix_tokens;
  return r;
}
block_kv_manager small(std::int64_t device, std::int64_t host = 0) {
  block_kv_manager::options o;
  o.device_blocks = device;
  o.host_blocks = host;
  o.block_tokens = 16;
  o.bytes_per_token = 100;
  o.copy_unit_blocks = 4;
  return block_kv_manager(o);
}
}  // namespace

TEST_CASE("block kv manager grows in blocks and refuses without side effects", "[sched][kv]") {
  auto kv = small(10);
  const request a = make(1, 100);
  CHECK(kv.blocks_to_grow(a, 100) == 7);
  CHECK(kv.grow(a, 100));
  CHECK(kv.free_blocks() == 3);
  CHECK(kv.grow(a, 112));  // still 7 blocks
  CHECK(kv.free_blocks() == 3);
  const request b = make(2, 80);
  CHECK_FALSE(kv.grow(b, 80));  // needs 5
  CHECK(kv.free_blocks() == 3);
  CHECK(kv.held_blocks(b.id) == 0);
  kv.release(a.id);
  CHECK(kv.free_blocks() == 10);
  CHECK_THROWS_AS(kv.release(a.id), weft::error);
  CHECK_THROWS_AS(kv.blocks_to_grow(a, -1), weft::error);
  block_kv_manager::options bad;
  bad.block_tokens = 0;
  CHECK_THROWS_AS(block_kv_manager(bad), weft::error);
}

TEST_CASE("block kv manager swaps private blocks in coarse copy units", "[sched][kv]") {
  auto kv = small(10, 8);
  const request a = make(1, 100);
  REQUIRE(kv.grow(a, 100));
  auto out = kv.swap_out(a.id);
  REQUIRE(out);
  CHECK(out->blocks == 7);
  CHECK(out->copy_units == 2);  // 4 blocks per unit
  CHECK(out->bytes == 7 * 16 * 100);
  CHECK(kv.free_blocks() == 10);
  CHECK(kv.host_free_blocks() == 1);
  CHECK(kv.held_blocks(a.id) == 0);
  CHECK_THROWS_AS(kv.swap_out(a.id), weft::error);  // already out
  const request b = make(2, 100);
  REQUIRE(kv.grow(b, 100));
  CHECK_FALSE(kv.swap_out(b.id));  // host full: nothing moved
  CHECK(kv.held_blocks(b.id) == 7);
  CHECK_FALSE(kv.swap_in(a.id));  // device has 3 free
  kv.release(b.id);
  auto in = kv.swap_in(a.id);
  REQUIRE(in);
  CHECK(in->blocks == 7);
  CHECK(kv.held_blocks(a.id) == 7);
  CHECK(kv.host_free_blocks() == 8);
  kv.release(a.id);
  CHECK(kv.free_blocks() == 10);
}

TEST_CASE("block kv manager shares cached prefixes and evicts them LRU", "[sched][kv][prefix]") {
  auto kv = small(20);
  const request a = make(1, 100, 7, 64);  // 4 shared blocks + 3 own
  CHECK(kv.cached_prefix_tokens(a) == 0);
  REQUIRE(kv.grow(a, 100));
  CHECK(kv.free_blocks() == 13);
  const request b = make(2, 100, 7, 64);
  CHECK(kv.cached_prefix_tokens(b) == 64);
  CHECK(kv.blocks_to_grow(b, 100) == 3);
  REQUIRE(kv.grow(b, 100));
  CHECK(kv.free_blocks() == 10);
  kv.release(a.id);
  kv.release(b.id);
  // The prefix stays cached but counts as free.
  CHECK(kv.free_blocks() == 20);
  CHECK(kv.cached_prefixes() == 1);
  const request c = make(3, 100, 7, 64);
  CHECK(kv.cached_prefix_tokens(c) == 64);
  // A big request evicts the unused prefix.
  const request big = make(4, 320);
  REQUIRE(kv.grow(big, 320));
  CHECK(kv.cached_prefixes() == 0);
  CHECK(kv.evictions() == 1);
  CHECK(kv.cached_prefix_tokens(c) == 0);
  CHECK_FALSE(kv.grow(c, 100));
  kv.release(big.id);
  CHECK(kv.free_blocks() == 20);
}

#include <weft/kv/block_hasher.hpp>
#include <weft/kv/host_tier.hpp>

#include <catch2/catch.hpp>

#include <numeric>
#include <set>
#include <vector>

using namespace weft::kv;

namespace {
std::vector<token_id> seq(std::size_t n, token_id start = 1) {
  std::vector<token_id> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}
}  // namespace

TEST_CASE("block keys chain: a key names the whole prefix", "[kv][hasher]") {
  const auto t = seq(64);
  std::vector<block_key> all;
  extend_block_keys(t, 16, {}, all);
  REQUIRE(all.size() == 4);
  CHECK(std::set<block_key>(all.begin(), all.end()).size() == 4);
  // Incremental extension (decode) gives the same keys as computing at once.
  std::vector<block_key> inc;
  for (std::size_t n = 0; n <= t.size(); n += 5) extend_block_keys(std::span<const token_id>(t).first(n), 16, {}, inc);
  extend_block_keys(t, 16, {}, inc);
  CHECK(inc == all);
  // Changing one token of block 0 changes every later key (the chain).
  auto u = t;
  u[3] = 999;
  std::vector<block_key> other;
  extend_block_keys(u, 16, {}, other);
  for (std::size_t i = 0; i < 4; ++i) CHECK(other[i] != all[i]);
  // Changing a token of block 2 keeps keys 0 and 1.
  u = t;
  u[40] = 999;
  other.clear();
  extend_block_keys(u, 16, {}, other);
  CHECK(other[0] == all[0]);
  CHECK(other[1] == all[1]);
  CHECK(other[2] != all[2]);
  // A trailing partial block has no key.
  std::vector<block_key> partial;
  extend_block_keys(std::span<const token_id>(t).first(47), 16, {}, partial);
  CHECK(partial.size() == 2);
}

TEST_CASE("extra keys: salt on the first block, adapter everywhere, media where it overlaps", "[kv][hasher]") {
  const auto t = seq(48);
  std::vector<block_key> plain, salted, lora, image;
  extend_block_keys(t, 16, {}, plain);
  extend_block_keys(t, 16, key_options{42, 0, {}}, salted);
  extend_block_keys(t, 16, key_options{0, 3, {}}, lora);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(salted[i] != plain[i]);  // via the chain
    CHECK(lora[i] != plain[i]);
  }
  const multimodal_item img{77, 20, 8};  // tokens 20..27: block 1 only
  extend_block_keys(t, 16, key_options{0, 0, std::span<const multimodal_item>(&img, 1)}, image);
  CHECK(image[0] == plain[0]);
  CHECK(image[1] != plain[1]);
  // The salt enters block 0's hash only; block 1 chains from block 0's key with no extra key.
  const chained_block_hasher h;
  const std::uint64_t salt = 42;
  const block_key k0 =
      h(root_block_key, std::span<const token_id>(t).first(16), std::span<const std::uint64_t>(&salt, 1));
  CHECK(k0 == salted[0]);
  CHECK(h(k0, std::span<const token_id>(t).subspan(16, 16), {}) == salted[1]);
}

TEST_CASE("extend_block_keys rejects bad input", "[kv][hasher][errors]") {
  const auto t = seq(20);
  std::vector<block_key> keys;
  CHECK_THROWS_AS(extend_block_keys(t, 0, {}, keys), weft::error);
  keys.assign(3, 0);  // more keys than the 1 full block
  CHECK_THROWS_WITH(extend_block_keys(t, 16, {}, keys), Catch::Contains("exceeds the 1 full blocks"));
  CHECK(keys.size() == 3);
}

TEST_CASE("host tier allocates all-or-nothing and rejects bad frees", "[kv][tier]") {
  host_tier host(5);
  CHECK(host.capacity() == 5);
  std::vector<host_block_id> hb;
  CHECK(host.allocate(3, hb));
  CHECK(hb == std::vector<host_block_id>{host_block_id(1), host_block_id(2), host_block_id(3)});
  CHECK_FALSE(host.allocate(2, hb));
  CHECK(hb.size() == 3);
  CHECK(host.used_blocks() == 3);
  host.release(hb[1]);
  CHECK_THROWS_AS(host.release(hb[1]), weft::error);
  CHECK_THROWS_AS(host.release(host_block_id(0)), weft::error);
  CHECK(host.free_blocks() == 2);
  CHECK(host.ref_count(hb[0]) == 1);
  CHECK_THROWS_AS(host_tier(1), weft::error);
}

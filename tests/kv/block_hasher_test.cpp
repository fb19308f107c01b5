#include <weft/kv/block_hasher.hpp>
#include <weft/kv/host_tier.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <numeric>
#include <set>
#include <string>
#include <vector>

using namespace weft::kv;

namespace {
std::vector<token_id> seq(std::size_t n, token_id start = 1) {
  std::vector<token_id> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

const sha256_block_hasher& known_answer_hasher() {
  static const sha256_block_hasher h(std::string_view("weft-kv-known-answer-secret-0001"));
  return h;
}

template <class H>
block_key key_of(const H& h, block_key parent, std::span<const token_id> tokens) {
  typename H::state s;
  h.begin(s, parent, tokens);
  return h.finish(s);
}
}  // namespace

// The expected values were computed outside weft (Python's hashlib) from the encoding documented in
// sha256_block_hasher.hpp, so a change of the encoding, the key derivation or the byte order fails
// here: instances that share a secret must keep computing the same keys across releases.
TEST_CASE("sha256 block keys match an independent implementation of the documented encoding", "[kv][hasher]") {
  const sha256_block_hasher& h = known_answer_hasher();
  const auto t = seq(32);
  const block_key k0 = key_of(h, root_block_key, std::span<const token_id>(t).first(16));
  CHECK(k0 == block_key{0x2acfce573ada34c5ULL, 0x4fbe560eae90a4f9ULL});
  CHECK(key_of(h, k0, std::span<const token_id>(t).subspan(16)) ==
        block_key{0xbce1921d780d0b22ULL, 0x731ec3c00598b8eaULL});
  std::vector<block_key> chain;
  extend_block_keys(t, 16, {}, chain, h);
  CHECK(chain == std::vector<block_key>{k0, block_key{0xbce1921d780d0b22ULL, 0x731ec3c00598b8eaULL}});

  std::vector<block_key> salted;
  extend_block_keys(std::span<const token_id>(t).first(16), 16, key_options{42, 0, {}, {}}, salted, h);
  CHECK(salted.at(0) == block_key{0x1d6416322250a732ULL, 0x5be674683de6d5c0ULL});

  // Tokens outside [0, 2^18) switch to 4-byte tokens.
  std::vector<token_id> raw = seq(16);
  raw[3] = -5;
  raw[4] = 1 << 20;
  CHECK(key_of(h, root_block_key, raw) == block_key{0xa14b231e09a9ed7aULL, 0xfeb5af012329be45ULL});

  // Fields in order: adapter 7, then an item of hash 0xabc starting 3 tokens before the block.
  sha256_block_hasher::state s;
  h.begin(s, root_block_key, std::span<const token_id>(t).first(16));
  const std::uint64_t adapter = 7;
  h.absorb(s, key_field::adapter, std::span<const std::uint64_t>(&adapter, 1));
  const std::array<std::uint64_t, 3> item{0xabc, static_cast<std::uint64_t>(-3), 10};
  h.absorb(s, key_field::media, item);
  CHECK(h.finish(s) == block_key{0xc3f8731b0a82f5a1ULL, 0x660c90f2dd1c460cULL});

  // A short block (5 tokens: the packing tail) and the public id of the secret.
  CHECK(key_of(h, root_block_key, std::span<const token_id>(t).first(5)) ==
        block_key{0xc3c5097fbc692be0ULL, 0xf7a2e93dec4d0384ULL});
  CHECK(h.secret_id() == 0x9837c1399ce9967fULL);
}

TEST_CASE("the sha256 hasher is keyed: a fresh one per deployment, an explicit one reproducible", "[kv][hasher]") {
  const auto t = seq(16);
  const sha256_block_hasher a, b;
  CHECK(key_of(a, root_block_key, t) != key_of(b, root_block_key, t));  // random secrets
  CHECK(a.secret_id() != b.secret_id());
  const sha256_block_hasher a_copy = a;  // copies share the secret
  CHECK(key_of(a_copy, root_block_key, t) == key_of(a, root_block_key, t));
  const std::string secret(32, 'x');
  CHECK(key_of(sha256_block_hasher(secret), root_block_key, t) ==
        key_of(sha256_block_hasher(secret), root_block_key, t));
  CHECK(sha256_block_hasher(secret).secret_id() == sha256_block_hasher(secret).secret_id());
  CHECK(key_of(sha256_block_hasher(secret), root_block_key, t) !=
        key_of(sha256_block_hasher(std::string(32, 'y')), root_block_key, t));
  // The state is reusable: the same state, used again, gives the same key.
  sha256_block_hasher::state s;
  a.begin(s, root_block_key, t);
  const block_key first = a.finish(s);
  a.begin(s, root_block_key, t);
  CHECK(a.finish(s) == first);
}

TEST_CASE("the sha256 hasher rejects an empty or too short secret", "[kv][hasher][errors]") {
  CHECK_THROWS_WITH(sha256_block_hasher(std::string_view()), Catch::Contains("has 0 bytes; at least 16"));
  CHECK_THROWS_WITH(sha256_block_hasher(std::string(15, 'k')), Catch::Contains("has 15 bytes; at least 16"));
  CHECK_NOTHROW(sha256_block_hasher(std::string(16, 'k')));
}

TEST_CASE("the fast hasher is seeded: random by default, reproducible with a seed", "[kv][hasher]") {
  const auto t = seq(16);
  CHECK(key_of(fast_block_hasher(), root_block_key, t) != key_of(fast_block_hasher(), root_block_key, t));
  CHECK(key_of(fast_block_hasher(9), root_block_key, t) == key_of(fast_block_hasher(9), root_block_key, t));
  CHECK(key_of(fast_block_hasher(9), root_block_key, t) != key_of(fast_block_hasher(10), root_block_key, t));
  CHECK(key_of(fast_block_hasher(9), root_block_key, t).hi == 0);  // a 64-bit key
}

TEMPLATE_TEST_CASE("block keys chain: a key names the whole prefix", "[kv][hasher]", sha256_block_hasher,
                   fast_block_hasher) {
  const TestType h{};
  const auto t = seq(64);
  std::vector<block_key> all;
  extend_block_keys(t, 16, {}, all, h);
  REQUIRE(all.size() == 4);
  CHECK(std::set<block_key>(all.begin(), all.end()).size() == 4);
  // Incremental extension (decode) gives the same keys as computing at once.
  std::vector<block_key> inc;
  for (std::size_t n = 0; n <= t.size(); n += 5)
    extend_block_keys(std::span<const token_id>(t).first(n), 16, {}, inc, h);
  extend_block_keys(t, 16, {}, inc, h);
  CHECK(inc == all);
  // Changing one token of block 0 changes every later key (the chain).
  auto u = t;
  u[3] = 999;
  std::vector<block_key> other;
  extend_block_keys(u, 16, {}, other, h);
  for (std::size_t i = 0; i < 4; ++i) CHECK(other[i] != all[i]);
  // Changing a token of block 2 keeps keys 0 and 1.
  u = t;
  u[40] = 999;
  other.clear();
  extend_block_keys(u, 16, {}, other, h);
  CHECK(other[0] == all[0]);
  CHECK(other[1] == all[1]);
  CHECK(other[2] != all[2]);
  // A trailing partial block has no key.
  std::vector<block_key> partial;
  extend_block_keys(std::span<const token_id>(t).first(47), 16, {}, partial, h);
  CHECK(partial.size() == 2);
}

TEMPLATE_TEST_CASE("extra fields: tenant and salt on the first block, adapter everywhere, media where it overlaps",
                   "[kv][hasher]", sha256_block_hasher, fast_block_hasher) {
  const TestType h{};
  const auto t = seq(48);
  std::vector<block_key> plain, salted, lora, image, tenant;
  extend_block_keys(t, 16, {}, plain, h);
  extend_block_keys(t, 16, key_options{42, 0, {}, {}}, salted, h);
  extend_block_keys(t, 16, key_options{0, 3, {}, {}}, lora, h);
  extend_block_keys(t, 16, key_options{0, 0, {}, tenant_id(5)}, tenant, h);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(salted[i] != plain[i]);  // via the chain
    CHECK(lora[i] != plain[i]);
    CHECK(tenant[i] != plain[i]);
  }
  const multimodal_item img{77, 20, 8};  // tokens 20..27: block 1 only
  extend_block_keys(t, 16, key_options{0, 0, std::span<const multimodal_item>(&img, 1), {}}, image, h);
  CHECK(image[0] == plain[0]);
  CHECK(image[1] != plain[1]);
  // The salt enters block 0's key only; block 1 chains from block 0's key with no field.
  typename TestType::state s;
  const std::uint64_t salt = 42;
  h.begin(s, root_block_key, std::span<const token_id>(t).first(16));
  h.absorb(s, key_field::cache_salt, std::span<const std::uint64_t>(&salt, 1));
  const block_key k0 = h.finish(s);
  CHECK(k0 == salted[0]);
  CHECK(key_of(h, k0, std::span<const token_id>(t).subspan(16, 16)) == salted[1]);
}

TEST_CASE("extend_block_keys rejects bad input", "[kv][hasher][errors]") {
  const auto t = seq(20);
  const fast_block_hasher h(1);
  std::vector<block_key> keys;
  CHECK_THROWS_AS(extend_block_keys(t, 0, {}, keys, h), weft::error);
  keys.assign(3, block_key{});  // more keys than the 1 full block
  CHECK_THROWS_WITH(extend_block_keys(t, 16, {}, keys, h), Catch::Contains("exceeds the 1 full blocks"));
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

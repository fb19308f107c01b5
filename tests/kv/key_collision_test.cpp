// Key collisions on purpose: hashers that map every block to one key, or forget the parent or the
// fields, prove that verify on hit never serves foreign KV and counts every collision; per-tenant
// isolation keeps tenants' caches apart.
#include <weft/core/random.hpp>
#include <weft/kv/hashed_prefix_cache.hpp>
#include <weft/kv/kv_manager.hpp>

#include <catch2/catch.hpp>

#include <map>
#include <numeric>
#include <tuple>
#include <vector>

using namespace weft::kv;

namespace {

// Every block gets the same key: the worst hasher there is.
struct one_key_hasher {
  struct state {};
  void begin(state&, block_key, std::span<const token_id>) const {}
  void absorb(state&, key_field, std::span<const std::uint64_t>) const {}
  block_key finish(state&) const { return block_key{1, 1}; }
};
static_assert(block_hasher<one_key_hasher>);

// Keys from the block's own tokens only: the same block after different prefixes, or with a
// different salt, adapter or tenant, collides.
struct blind_hasher {
  struct state {
    std::uint64_t h = 0;
  };
  void begin(state& s, block_key, std::span<const token_id> tokens) const {
    s.h = 1469598103934665603ULL;
    for (const token_id t : tokens) s.h = (s.h ^ static_cast<std::uint32_t>(t)) * 1099511628211ULL;
  }
  void absorb(state&, key_field, std::span<const std::uint64_t>) const {}
  block_key finish(state& s) const { return block_key{0, s.h}; }
};
static_assert(block_hasher<blind_hasher>);

std::vector<token_id> seq(std::size_t n, token_id start) {
  std::vector<token_id> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

// What a block's KV depends on (or which namespace may share it): every token up to its end and the
// request's salt, adapter and (isolated) tenant.
using content = std::tuple<std::vector<token_id>, std::uint64_t, std::uint64_t, std::uint32_t>;

// The KV each block holds, as far as the test can tell: device and host blocks' content.
struct kv_model {
  std::map<std::uint32_t, content> device, host;

  // Runs a plan's copies: the destination holds what the source held.
  void copy(const swap_plan& plan) {
    for (const copy_unit& u : plan.units) {
      for (std::uint32_t k = 0; k < u.count; ++k) {
        auto& from = plan.direction == swap_direction::in ? host : device;
        auto& to = plan.direction == swap_direction::in ? device : host;
        const std::uint32_t src =
            (plan.direction == swap_direction::in ? u.host_first.value() : u.device_first.value()) + k;
        const std::uint32_t dst =
            (plan.direction == swap_direction::in ? u.device_first.value() : u.host_first.value()) + k;
        if (const auto it = from.find(src); it != from.end())
          to[dst] = it->second;
        else
          to.erase(dst);
      }
    }
  }
};

content content_of(const std::vector<token_id>& prompt, std::size_t blocks, std::size_t bs, const request_options& o,
                   bool isolated) {
  return content{std::vector<token_id>(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(blocks * bs)),
                 o.cache_salt, o.adapter_id, isolated ? o.tenant.value() : 0};
}

// Drives a kv_manager like an engine: copies in what the plan says, computes every other block
// (writes the request's content into it); every block that came from the cache must already hold
// exactly that content. Returns the number of blocks whose KV was foreign (0: the cache never lied).
template <class H>
std::size_t foreign_hits(kv_manager<H>& kv, kv_model& m, std::uint64_t id, const std::vector<token_id>& prompt,
                         const request_options& o) {
  const auto a = kv.allocate_prompt(request_id(id), prompt, o);
  REQUIRE(a);
  m.copy(a->host_to_device);
  const auto blocks = kv.blocks(request_id(id));
  const std::size_t bs = kv.block_size();
  std::size_t foreign = 0;
  for (std::size_t i = 0; i < prompt.size() / bs; ++i) {
    const content c = content_of(prompt, i + 1, bs, o, kv.config().isolate_tenants);
    if (i < a->hit_blocks + a->host_hit_blocks)
      foreign += m.device.at(blocks[i].value()) == c ? 0 : 1;
    else
      m.device[blocks[i].value()] = c;
  }
  return foreign;
}

// Swaps a request out and back in through the model; returns blocks whose KV came back foreign.
template <class H>
std::size_t foreign_after_swap(kv_manager<H>& kv, kv_model& m, std::uint64_t id, const std::vector<token_id>& prompt,
                               const request_options& o) {
  const auto out = kv.swap_out(request_id(id));
  if (!out) return 0;
  m.copy(*out);
  const auto in = kv.swap_in(request_id(id));
  REQUIRE(in);
  m.copy(*in);
  const auto blocks = kv.blocks(request_id(id));
  std::size_t foreign = 0;
  for (std::size_t i = 0; i < prompt.size() / kv.block_size(); ++i) {
    const auto it = m.device.find(blocks[i].value());
    foreign +=
        it != m.device.end() && it->second == content_of(prompt, i + 1, kv.block_size(), o, kv.config().isolate_tenants)
            ? 0
            : 1;
  }
  return foreign;
}

}  // namespace

TEST_CASE("verify on hit: a one-key hasher never serves a foreign block, and every collision is counted",
          "[kv][collision]") {
  hashed_prefix_cache<one_key_hasher> cache(8, 4, {}, hit_check::verify_content);
  std::vector<key_collision> reported;
  cache.set_collision_handler([&](const key_collision& c) { reported.push_back(c); });
  const auto a = seq(8, 1), b = seq(8, 100);
  std::vector<block_key> ka, pa, kb, pb, kc, pc;
  cache.extend_keys(a, {}, ka);
  cache.extend_prints(a, {}, pa);
  cache.extend_keys(b, {}, kb);
  cache.extend_prints(b, {}, pb);
  REQUIRE(ka == kb);  // every key is the same
  std::vector<block_id> blocks;
  REQUIRE(cache.allocate(2, blocks));
  const block_chain chain_a{ka, a, pa};
  CHECK(cache.commit(blocks[0], chain_a, 0));
  CHECK_FALSE(cache.commit(blocks[1], chain_a, 1));  // its key is taken (by block 0's content)

  std::vector<block_id> hits;
  CHECK(cache.match(chain_a, &hits) == 1);  // the real owner is served its first block...
  CHECK(hits == std::vector<block_id>{blocks[0]});
  CHECK(cache.collisions() == 1);  // ...and not as its second block, which has the same key
  hits.clear();
  CHECK(cache.match(block_chain{kb, b, pb}, &hits) == 0);  // other tokens: refused
  CHECK(hits.empty());
  CHECK(cache.collisions() == 2);
  CHECK_FALSE(cache.find(block_chain{kb, b, pb}, 1));
  CHECK(cache.collisions() == 3);
  // Same tokens, another salt: the fingerprint (prefix and fields) differs.
  cache.extend_keys(a, key_options{9, 0, {}, {}}, kc);
  cache.extend_prints(a, key_options{9, 0, {}, {}}, pc);
  CHECK(cache.match(block_chain{kc, a, pc}) == 0);
  CHECK(cache.collisions() == 4);
  REQUIRE(reported.size() == 4);
  CHECK(reported[0].block == blocks[0]);
  CHECK(reported[0].block_index == 1);
  CHECK(reported[1].block_index == 0);
  CHECK(reported[1].tokens_differ);
  CHECK(reported[2].block_index == 1);
  CHECK_FALSE(reported[3].tokens_differ);
  CHECK(reported[3].key == block_key{1, 1});
}

TEST_CASE("without verify on hit the same collision serves foreign KV (what the mode prevents)", "[kv][collision]") {
  kv_config c;
  c.num_blocks = 32;
  c.block_size = 4;
  c.watermark = 0;
  kv_manager<one_key_hasher> kv(c);
  kv_model m;
  CHECK(foreign_hits(kv, m, 1, seq(9, 1), {}) == 0);
  CHECK(foreign_hits(kv, m, 2, seq(9, 500), {}) == 2);  // both blocks served from request 1's first
}

TEMPLATE_TEST_CASE("verify on hit in kv_manager: colliding hashers never hand out foreign KV", "[kv][collision]",
                   one_key_hasher, blind_hasher) {
  kv_config c;
  c.num_blocks = 64;
  c.block_size = 4;
  c.watermark = 0;
  c.host_blocks = 64;
  c.verify_on_hit = true;
  c.isolate_tenants = true;
  kv_manager<TestType> kv(c);
  std::uint64_t reported = 0;
  kv.set_collision_handler([&](const key_collision&) { ++reported; });
  kv_model m;
  weft::rng r(77);
  // Prompts built from a few shared pieces in different orders, salts, adapters and tenants, so
  // equal blocks appear after different prefixes and under different fields.
  const std::vector<std::vector<token_id>> pieces{seq(4, 1), seq(4, 1), seq(4, 50), seq(8, 90)};
  std::uint64_t served = 0;
  std::vector<std::uint64_t> live;
  for (std::uint64_t id = 1; id <= 300; ++id) {
    std::vector<token_id> prompt;
    const std::size_t n = 1 + r.below(4);
    for (std::size_t i = 0; i < n; ++i) {
      const auto& p = pieces[r.below(pieces.size())];
      prompt.insert(prompt.end(), p.begin(), p.end());
    }
    prompt.push_back(7);
    request_options o;
    o.cache_salt = r.below(2);
    o.adapter_id = r.below(2);
    o.tenant = tenant_id(static_cast<std::uint32_t>(r.below(2)));
    if (!kv.can_allocate_prompt(prompt, o)) {
      for (const auto x : live) kv.free(request_id(x));
      live.clear();
    }
    CHECK(foreign_hits(kv, m, id, prompt, o) == 0);
    if (r.bernoulli(0.3)) CHECK(foreign_after_swap(kv, m, id, prompt, o) == 0);
    live.push_back(id);
  }
  served = kv.stats().hit_tokens;
  CHECK(kv.cache().collisions() > 0);  // the hashers did collide, and were caught
  CHECK(reported == kv.cache().collisions() + kv.host_cache()->collisions());
  CHECK(served > 0);  // and real hits were still served
}

TEST_CASE("verify on hit with the default hasher: same hits as without, no collisions", "[kv][collision]") {
  auto run = [](bool verify) {
    kv_config c;
    c.num_blocks = 128;
    c.block_size = 4;
    c.watermark = 0;
    c.host_blocks = 64;
    c.verify_on_hit = verify;
    kv_manager<> kv(c);
    weft::rng r(5);
    std::vector<std::size_t> cached;
    std::vector<std::uint64_t> live;
    for (std::uint64_t id = 1; id <= 200; ++id) {
      std::vector<token_id> prompt = seq(4 * (1 + r.below(6)), 1);
      prompt.push_back(static_cast<token_id>(r.below(3)));
      prompt.insert(prompt.end(), prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(r.below(9)));
      request_options o;
      o.cache_salt = r.below(2);
      if (!kv.can_allocate_prompt(prompt, o)) {
        for (const auto x : live) kv.free(request_id(x));
        live.clear();
      }
      const auto a = kv.allocate_prompt(request_id(id), prompt, o);
      REQUIRE(a);
      cached.push_back(a->cached_tokens + 1000 * a->host_hit_blocks);
      if (r.bernoulli(0.3)) {
        REQUIRE(kv.swap_out(request_id(id)));
        if (r.bernoulli(0.5)) REQUIRE(kv.swap_in(request_id(id)));
      }
      live.push_back(id);
    }
    CHECK(kv.cache().collisions() == 0);
    CHECK(kv.host_cache()->collisions() == 0);
    return cached;
  };
  const auto plain = run(false), verified = run(true);
  CHECK(plain == verified);
  CHECK(std::accumulate(plain.begin(), plain.end(), std::size_t{0}) > 0);
}

TEST_CASE("tenant isolation: one tenant never hits another's blocks", "[kv][tenant]") {
  kv_config c;
  c.num_blocks = 32;
  c.block_size = 4;
  c.watermark = 0;
  const auto prompt = seq(13, 1);
  auto opts = [](std::uint32_t t) {
    request_options o;
    o.tenant = tenant_id(t);
    return o;
  };
  for (const bool isolate : {false, true}) {
    c.isolate_tenants = isolate;
    kv_manager<> kv(c);
    REQUIRE(kv.allocate_prompt(request_id(1), prompt, opts(1)));
    const auto other = kv.allocate_prompt(request_id(2), prompt, opts(2));
    const auto same = kv.allocate_prompt(request_id(3), prompt, opts(1));
    const auto none = kv.allocate_prompt(request_id(4), prompt, request_options{});  // uncharged
    REQUIRE((other && same && none));
    CHECK(other->cached_tokens == (isolate ? 0 : 12));
    CHECK(same->cached_tokens == 12);
    CHECK(none->cached_tokens == (isolate ? 0 : 12));
  }
}

TEST_CASE("verify on hit rejects calls that cannot be verified and states its memory", "[kv][collision][errors]") {
  hashed_prefix_cache<fast_block_hasher> plain(16, 4, fast_block_hasher(1));
  hashed_prefix_cache<fast_block_hasher> checked(16, 4, fast_block_hasher(1), hit_check::verify_content);
  CHECK(checked.bytes_per_block() == plain.bytes_per_block() + 4 * 4 + 8);
  CHECK(hashed_prefix_cache<>::verify_bytes_per_block(16) == 72);
  const auto t = seq(8, 1);
  std::vector<block_key> keys, prints;
  checked.extend_keys(t, {}, keys);
  std::vector<block_id> b;
  REQUIRE(checked.allocate(1, b));
  CHECK_THROWS_WITH(checked.commit(b[0], keys[0]), Catch::Contains("verifies hits"));
  CHECK_THROWS_WITH(checked.match(std::span<const block_key>(keys)), Catch::Contains("verifies hits"));
  CHECK_THROWS_WITH(checked.commit(b[0], block_chain{keys, t, prints}, 0), Catch::Contains("fingerprints of 1 blocks"));
  CHECK_THROWS_WITH(checked.match(block_chain{keys, {}, prints}), Catch::Contains("fingerprints of 2 blocks"));
  CHECK_THROWS_WITH(checked.find(block_chain{keys, t, prints}, 2), Catch::Contains("outside the chain"));
  CHECK_FALSE(checked.key_of(b[0]));  // nothing changed
  checked.extend_prints(t, {}, prints);
  CHECK(checked.commit(b[0], block_chain{keys, t, prints}, 0));
  CHECK(checked.match(block_chain{keys, t, prints}) == 1);
}

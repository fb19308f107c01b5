// Scenario tests for kv_manager, in the spirit of a production engine's prefix-caching suite.
#include <weft/kv/kv_manager.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <numeric>
#include <set>
#include <vector>

using namespace weft::kv;

namespace {
std::vector<token_id> iota_tokens(std::size_t n, token_id start = 1) {
  std::vector<token_id> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}
kv_config cfg(std::size_t blocks, std::size_t host = 0) {
  kv_config c;
  c.num_blocks = blocks;
  c.block_size = 16;
  c.watermark = 0.0;
  c.host_blocks = host;
  return c;
}
// Allocates a prompt and reports its KV computed, as an engine does once the prefill step ran: only
// then do its full blocks enter the prefix cache.
std::optional<prompt_allocation> admit(kv_manager<>& kv, request_id id, std::span<const token_id> prompt,
                                       const request_options& o = {}) {
  auto a = kv.allocate_prompt(id, prompt, o);
  if (a) kv.computed(id, prompt.size());
  return a;
}
// Appends decoded tokens and reports them computed.
append_result decode(kv_manager<>& kv, request_id id, std::span<const token_id> tokens) {
  const auto r = kv.append(id, tokens);
  if (r.fits) kv.computed(id, kv.num_tokens(id));
  return r;
}
std::vector<block_id> free_list(const kv_manager<>& kv) {
  std::vector<block_id> out;
  kv.cache().pool().for_each_free([&](block_id b) { out.push_back(b); });
  return out;
}
}  // namespace

TEST_CASE("a 55-token prompt gets 4 blocks, 3 cached; a prompt sharing 48 tokens shares them", "[kv][prefix]") {
  kv_manager<> kv(cfg(12));
  const auto a_tokens = iota_tokens(55);
  const auto a = admit(kv, request_id(1), a_tokens);
  REQUIRE(a);
  CHECK(a->cached_tokens == 0);
  CHECK(a->new_blocks == 4);
  const auto ab = std::vector<block_id>(kv.blocks(request_id(1)).begin(), kv.blocks(request_id(1)).end());
  REQUIRE(ab.size() == 4);
  CHECK(kv.cache().cached_blocks() == 3);
  for (int i = 0; i < 3; ++i) CHECK(kv.cache().key_of(ab[static_cast<std::size_t>(i)]).has_value());
  CHECK_FALSE(kv.cache().key_of(ab[3]).has_value());  // partial block: not cached

  auto b_tokens = iota_tokens(60);
  std::fill(b_tokens.begin() + 48, b_tokens.end(), 7777);  // shares exactly 48 tokens
  const auto b = admit(kv, request_id(2), b_tokens);
  REQUIRE(b);
  CHECK(b->cached_tokens == 48);
  CHECK(b->hit_blocks == 3);
  CHECK(b->new_blocks == 1);
  const auto bb = kv.blocks(request_id(2));
  for (int i = 0; i < 3; ++i) {
    CHECK(bb[static_cast<std::size_t>(i)] == ab[static_cast<std::size_t>(i)]);
    CHECK(kv.cache().ref_count(ab[static_cast<std::size_t>(i)]) == 2);
  }
  CHECK(bb[3] != ab[3]);
  CHECK(kv.used_blocks() == 5);
  CHECK(kv.stats().hit_tokens == 48);

  SECTION("free order and eviction order") {
    const block_id b3 = bb[3];
    kv.free(request_id(1));  // a3 freed (uncached: front); a0..a2 still held by request 2
    CHECK(kv.cache().ref_count(ab[0]) == 1);
    kv.free(request_id(2));  // b3 front; then a2, a1, a0 to the back (tail first)
    const auto fl = free_list(kv);
    REQUIRE(fl.size() == 11);
    CHECK(fl[0] == b3);
    CHECK(fl[1] == ab[3]);
    CHECK(std::vector<block_id>(fl.end() - 3, fl.end()) == std::vector<block_id>{ab[2], ab[1], ab[0]});
    CHECK(kv.cache().cached_blocks() == 3);  // freed cached blocks stay reusable

    const block_key old_a2 = *kv.cache().key_of(ab[2]);
    // Allocate 9 blocks: 8 uncached ones go first, then the tail of the cached prefix (a2).
    const auto big = iota_tokens(9 * 16, 100000);
    REQUIRE(admit(kv, request_id(3), big));
    CHECK(kv.cache().evictions() == 1);
    // The reused evicted block carries no stale key: the old key is gone and the block now holds
    // (and is cached under) request 3's content.
    CHECK_FALSE(kv.cache().find(old_a2).has_value());
    CHECK(kv.cache().key_of(ab[2]) != old_a2);
    CHECK(kv.cache().key_of(ab[1]).has_value());
    const auto blocks3 = kv.blocks(request_id(3));
    CHECK(std::find(blocks3.begin(), blocks3.end(), ab[2]) != blocks3.end());
    kv.free(request_id(3));
    // The prefix is still cached up to a1: a re-run of prompt A hits 2 blocks.
    const auto again = admit(kv, request_id(4), a_tokens);
    REQUIRE(again);
    CHECK(again->cached_tokens == 32);
  }
}

TEST_CASE("a lookup never returns the final prompt token as cached", "[kv][prefix]") {
  kv_manager<> kv(cfg(16));
  const auto t48 = iota_tokens(48);
  REQUIRE(admit(kv, request_id(1), t48));
  CHECK(kv.cache().cached_blocks() == 3);
  const auto same = admit(kv, request_id(2), t48);
  REQUIRE(same);
  CHECK(same->cached_tokens == 32);  // block 3 holds the last token: recomputed
  const auto t49 = iota_tokens(49);
  const auto longer = admit(kv, request_id(3), t49);
  REQUIRE(longer);
  CHECK(longer->cached_tokens == 48);
}

TEST_CASE("allocating for a request never evicts the blocks that same request just hit", "[kv][prefix]") {
  kv_manager<> kv(cfg(7));                             // 6 data blocks
  REQUIRE(admit(kv, request_id(1), iota_tokens(49)));  // blocks 1,2,3 cached + 4 partial
  kv.free(request_id(1));
  REQUIRE(admit(kv, request_id(2), iota_tokens(32, 5000)));  // takes 4, 5 (caches them)
  kv.free(request_id(2));
  // Free list now starts with 6 and the hits 1,2,3 sit before 5 and 4: a request hitting 1,2,3 and
  // needing 3 fresh blocks fits only if the hits are taken before allocating.
  auto c = iota_tokens(88);
  std::fill(c.begin() + 48, c.end(), 42);
  const auto r = admit(kv, request_id(3), c);
  REQUIRE(r);
  CHECK(r->cached_tokens == 48);
  const auto blocks = kv.blocks(request_id(3));
  std::set<block_id> distinct(blocks.begin(), blocks.end());
  CHECK(distinct.size() == 6);
  for (const block_id b : blocks) CHECK(kv.cache().ref_count(b) == 1);
  for (std::size_t i = 0; i < 3; ++i) CHECK(kv.cache().key_of(blocks[i]).has_value());
  CHECK(kv.free_blocks() == 0);
}

TEST_CASE("a failed allocation changes no reference count", "[kv][prefix]") {
  kv_manager<> kv(cfg(6));  // 5 data blocks
  const auto a = iota_tokens(40);
  REQUIRE(admit(kv, request_id(1), a));  // 3 blocks, 2 cached
  const auto held = std::vector<block_id>(kv.blocks(request_id(1)).begin(), kv.blocks(request_id(1)).end());
  auto b = iota_tokens(100);  // hits 2, needs 5 more: only 2 free
  const auto free_before = kv.free_blocks();
  CHECK_FALSE(kv.can_allocate_prompt(b));
  CHECK_FALSE(admit(kv, request_id(2), b));
  CHECK_FALSE(kv.contains(request_id(2)));
  for (const block_id x : held) CHECK(kv.cache().ref_count(x) == 1);
  CHECK(kv.free_blocks() == free_before);
  // The same with the hits on the free list: reviving them must not happen on failure.
  kv.free(request_id(1));
  const auto fl = free_list(kv);
  CHECK_FALSE(admit(kv, request_id(2), iota_tokens(6 * 16)));
  CHECK(free_list(kv) == fl);
  CHECK(kv.cache().cached_blocks() == 2);
}

TEST_CASE("resetting the prefix cache fails while blocks are in use and clears every key after", "[kv][prefix]") {
  kv_manager<> kv(cfg(16));
  const auto a = iota_tokens(70);
  REQUIRE(admit(kv, request_id(1), a));
  CHECK_FALSE(kv.reset_prefix_cache());
  CHECK(kv.cache().cached_blocks() == 4);
  kv.free(request_id(1));
  CHECK(kv.reset_prefix_cache());
  CHECK(kv.cache().cached_blocks() == 0);
  for (std::uint32_t b = 1; b < 16; ++b) CHECK_FALSE(kv.cache().key_of(block_id(b)).has_value());
  const auto r = admit(kv, request_id(2), a);
  REQUIRE(r);
  CHECK(r->cached_tokens == 0);
}

TEST_CASE("a different salt misses entirely; adapters and media separate content too", "[kv][prefix]") {
  kv_manager<> kv(cfg(64));
  const auto a = iota_tokens(70);
  REQUIRE(admit(kv, request_id(1), a));
  request_options salted;
  salted.cache_salt = 12345;
  const auto r = admit(kv, request_id(2), a, salted);
  REQUIRE(r);
  CHECK(r->cached_tokens == 0);
  const auto r2 = admit(kv, request_id(3), a, salted);  // same salt: hits
  REQUIRE(r2);
  CHECK(r2->cached_tokens == 64);
  request_options lora;
  lora.adapter_id = 9;
  CHECK(admit(kv, request_id(4), a, lora)->cached_tokens == 0);
  const multimodal_item img{0xabcdef, 20, 10};  // image tokens in block 1
  request_options mm;
  mm.media = std::span<const multimodal_item>(&img, 1);
  CHECK(admit(kv, request_id(5), a, mm)->cached_tokens == 16);  // block 0 unaffected
  const multimodal_item img2{0x123456, 20, 10};
  mm.media = std::span<const multimodal_item>(&img2, 1);
  CHECK(admit(kv, request_id(6), a, mm)->cached_tokens == 16);
}

TEST_CASE("decode appends fill and cache blocks; fork copies on write", "[kv][manager]") {
  kv_manager<> kv(cfg(32));
  REQUIRE(admit(kv, request_id(1), iota_tokens(20)));
  CHECK(kv.fork(request_id(1), request_id(2)));
  CHECK(kv.used_blocks() == 2);
  const block_id shared = kv.blocks(request_id(1))[1];
  const token_id t1 = 500;
  const auto r = kv.append(request_id(2), std::span<const token_id>(&t1, 1));
  REQUIRE(r.fits);
  REQUIRE(r.copy);
  CHECK(r.copy->src == shared);
  CHECK(kv.blocks(request_id(2))[1] == r.copy->dst);
  CHECK(kv.num_tokens(request_id(2)) == 21);
  // Fill block 1 of request 1 with 12 more tokens: it becomes full and cached.
  const auto more = iota_tokens(12, 21);
  const auto r1 = decode(kv, request_id(1), more);
  REQUIRE(r1.fits);
  CHECK_FALSE(r1.copy);
  CHECK(kv.cache().key_of(kv.blocks(request_id(1))[1]).has_value());
  // A new prompt equal to request 1's 32 tokens + 1 hits both blocks (decode blocks are cached).
  const auto r3 = admit(kv, request_id(3), iota_tokens(33));
  REQUIRE(r3);
  CHECK(r3->cached_tokens == 32);
  // Count-only appends work and stop caching.
  const auto before = kv.cache().cached_blocks();
  REQUIRE(kv.append(request_id(3), 40).fits);
  CHECK(kv.cache().cached_blocks() == before);
  CHECK(kv.can_append(request_id(3), 16));
  kv.free(request_id(1));
  kv.free(request_id(2));
  kv.free(request_id(3));
  CHECK(kv.used_blocks() == 0);
}

TEST_CASE("append is all-or-nothing and decode may use the watermark", "[kv][manager]") {
  kv_config c = cfg(11);  // 10 data blocks
  c.watermark = 0.2;      // 2 blocks
  kv_manager<> kv(c);
  CHECK(kv.watermark_blocks() == 2);
  CHECK(kv.can_fit(10 * 16));  // an idle machine waives the watermark
  REQUIRE(admit(kv, request_id(1), iota_tokens(16)));
  CHECK(kv.can_fit(7 * 16));  // 9 free, 2 kept for the running request's growth
  CHECK_FALSE(kv.can_fit(7 * 16 + 1));
  CHECK_FALSE(admit(kv, request_id(2), iota_tokens(8 * 16, 500)));
  REQUIRE(admit(kv, request_id(2), iota_tokens(7 * 16, 500)));
  CHECK(kv.append(request_id(2), 32).fits);  // into the watermark
  CHECK_FALSE(kv.append(request_id(2), 1).fits);
  CHECK(kv.num_tokens(request_id(2)) == 144);
  CHECK(kv.free_blocks() == 0);
}

TEST_CASE("per-tenant quotas", "[kv][admission]") {
  kv_manager<> kv(cfg(64));
  const tenant_id t(7);
  kv.admission().set_quota(t, 5);
  request_options o;
  o.tenant = t;
  REQUIRE(admit(kv, request_id(1), iota_tokens(64, 1), o));  // 4 blocks
  CHECK(kv.admission().usage(t) == 4);
  CHECK_FALSE(admit(kv, request_id(2), iota_tokens(32, 900), o));
  REQUIRE(kv.append(request_id(1), 16).fits);  // 5th block
  CHECK_FALSE(kv.append(request_id(1), 1).fits);
  CHECK_FALSE(kv.fork(request_id(1), request_id(3)));
  CHECK_THROWS_AS(kv.admission().set_quota(t, 3), weft::error);
  kv.free(request_id(1));
  CHECK(kv.admission().usage(t) == 0);
  REQUIRE(admit(kv, request_id(2), iota_tokens(32, 900), o));
}

TEST_CASE("swap out and in produce coarse copy plans and reuse still-cached blocks", "[kv][tier]") {
  kv_manager<> kv(cfg(32, 32));
  REQUIRE(admit(kv, request_id(1), iota_tokens(100)));  // 7 blocks, contiguous 1..7
  const auto dev = std::vector<block_id>(kv.blocks(request_id(1)).begin(), kv.blocks(request_id(1)).end());
  const auto out = kv.swap_out(request_id(1));
  REQUIRE(out);
  CHECK(out->direction == swap_direction::out);
  CHECK(out->blocks == 7);
  REQUIRE(out->units.size() == 1);  // fresh pools: one coarse unit
  CHECK(out->units[0] == copy_unit{dev[0], host_block_id(1), 7});
  CHECK(kv.is_swapped(request_id(1)));
  CHECK(kv.used_blocks() == 0);
  CHECK(kv.host_free_blocks() == 31 - 7);
  CHECK(kv.num_tokens(request_id(1)) == 100);
  CHECK_THROWS_AS(kv.append(request_id(1), 1), weft::error);
  CHECK_THROWS_AS(kv.swap_out(request_id(1)), weft::error);
  // Nothing overwrote the device copies: the 6 cached full blocks are shared back, 1 copied.
  const auto in = kv.swap_in(request_id(1));
  REQUIRE(in);
  CHECK(in->direction == swap_direction::in);
  CHECK(in->blocks == 1);
  CHECK(kv.num_tokens(request_id(1)) == 100);
  CHECK(kv.host_free_blocks() == 31);
  CHECK_THROWS_AS(kv.swap_in(request_id(1)), weft::error);
  // Now evict the device copies by swapping out and filling the device.
  REQUIRE(kv.swap_out(request_id(1)));
  REQUIRE(admit(kv, request_id(2), iota_tokens(31 * 16, 10000)));
  CHECK_FALSE(kv.swap_in(request_id(1)));  // no room: unchanged
  CHECK(kv.is_swapped(request_id(1)));
  kv.free(request_id(2));
  const auto in2 = kv.swap_in(request_id(1));
  REQUIRE(in2);
  CHECK(in2->blocks == 7);
  CHECK(in2->units.size() <= 2);
  kv.free(request_id(1));
  CHECK(kv.used_blocks() == 0);
  kv_manager<> no_host(cfg(8));
  REQUIRE(no_host.allocate_prompt(request_id(1), iota_tokens(5)));
  CHECK_FALSE(no_host.swap_out(request_id(1)));  // no host tier: no room, nothing moved
  CHECK_FALSE(no_host.is_swapped(request_id(1)));
}

TEST_CASE("the prefix cache spans both tiers", "[kv][tier][prefix]") {
  kv_manager<> kv(cfg(12, 32));     // 11 device blocks
  const auto a = iota_tokens(100);  // 7 blocks, 6 full
  REQUIRE(admit(kv, request_id(1), a));
  REQUIRE(kv.fork(request_id(1), request_id(2)));
  const auto out1 = kv.swap_out(request_id(1));
  REQUIRE(out1);
  CHECK(out1->blocks == 7);
  CHECK(kv.host_cache()->cached_blocks() == 6);
  // The fork shares the 6 full blocks' content: its swap-out copies only its partial block.
  const auto out2 = kv.swap_out(request_id(2));
  REQUIRE(out2);
  CHECK(out2->blocks == 1);
  const auto h1 = kv.host_blocks(request_id(1)), h2 = kv.host_blocks(request_id(2));
  for (std::size_t i = 0; i < 6; ++i) {
    CHECK(h1[i] == h2[i]);
    CHECK(kv.host_cache()->ref_count(block_id(h1[i].value())) == 2);
  }
  CHECK(h1[6] != h2[6]);
  // Evict the device copies: a big unrelated prompt takes every device block.
  REQUIRE(admit(kv, request_id(3), iota_tokens(11 * 16, 50000)));
  kv.free(request_id(3));
  kv.free(request_id(1));
  kv.free(request_id(2));  // host copies stay cached in the host tier
  CHECK(kv.host_cache()->cached_blocks() == 6);
  CHECK(kv.host_free_blocks() == 31);
  // A new prompt with A's prefix misses on the device but finds it in the host tier.
  auto b = iota_tokens(120);
  std::fill(b.begin() + 96, b.end(), 5);
  const auto r = admit(kv, request_id(4), b);
  REQUIRE(r);
  CHECK(r->hit_blocks == 0);
  CHECK(r->host_hit_blocks == 6);
  CHECK(r->cached_tokens == 96);
  CHECK(r->host_to_device.blocks == 6);
  CHECK(r->host_to_device.direction == swap_direction::in);
  std::size_t moved = 0;
  for (const auto& u : r->host_to_device.units) moved += u.count;
  CHECK(moved == 6);
  const auto dev = kv.blocks(request_id(4));
  CHECK(r->host_to_device.units.front().device_first == dev[0]);
  // Copied-in blocks are device cache entries again.
  const auto again = admit(kv, request_id(5), b);
  REQUIRE(again);
  CHECK(again->hit_blocks == 7);
  CHECK(again->host_hit_blocks == 0);
  CHECK(again->host_to_device.units.empty());
}

TEST_CASE("swap plans group consecutive ids and respect the unit cap", "[kv][tier]") {
  const std::vector<block_id> d{block_id(3), block_id(4), block_id(5), block_id(9), block_id(10)};
  const std::vector<host_block_id> h{host_block_id(1), host_block_id(2), host_block_id(7), host_block_id(8),
                                     host_block_id(9)};
  const auto p = make_swap_plan(swap_direction::out, d, h);
  REQUIRE(p.units.size() == 3);
  CHECK(p.units[0] == copy_unit{block_id(3), host_block_id(1), 2});
  CHECK(p.units[1] == copy_unit{block_id(5), host_block_id(7), 1});
  CHECK(p.units[2] == copy_unit{block_id(9), host_block_id(8), 2});
  CHECK(make_swap_plan(swap_direction::out, d, h, 1).units.size() == 5);
  CHECK_THROWS_AS(make_swap_plan(swap_direction::out, d, std::span(h).first(2)), weft::error);
  CHECK_THROWS_AS(make_swap_plan(swap_direction::out, d, h, 0), weft::error);
}

TEST_CASE("kv_manager bad input: clear errors, nothing changes", "[kv][manager][errors]") {
  CHECK_THROWS_AS(kv_manager<>(cfg(1)), weft::error);
  kv_config bad = cfg(8);
  bad.watermark = 1.5;
  CHECK_THROWS_AS(kv_manager<>(bad), weft::error);
  bad = cfg(8);
  bad.block_size = 0;
  CHECK_THROWS_AS(kv_manager<>(bad), weft::error);
  kv_manager<> kv(cfg(8));
  REQUIRE(admit(kv, request_id(1), iota_tokens(20)));
  const auto used = kv.used_blocks();
  CHECK_THROWS_WITH(admit(kv, request_id(1), iota_tokens(5)), Catch::Contains("already allocated"));
  CHECK_THROWS_AS(admit(kv, request_id(2), std::vector<token_id>{}), weft::error);
  CHECK_THROWS_AS(kv.allocate_prompt(request_id::invalid(), iota_tokens(3)), weft::error);
  const multimodal_item outside{1, 15, 10};
  request_options mm;
  mm.media = std::span<const multimodal_item>(&outside, 1);
  CHECK_THROWS_WITH(admit(kv, request_id(9), iota_tokens(20), mm), Catch::Contains("outside the prompt"));
  const std::array<multimodal_item, 2> unsorted{multimodal_item{1, 10, 2}, multimodal_item{2, 3, 2}};
  mm.media = unsorted;
  CHECK_THROWS_WITH(admit(kv, request_id(9), iota_tokens(20), mm), Catch::Contains("sorted by offset"));
  CHECK_FALSE(kv.contains(request_id(9)));
  kv.free(request_id(1));
  CHECK_THROWS_WITH(kv.free(request_id(1)), Catch::Contains("request 1 is not allocated"));
  CHECK_THROWS_AS(kv.append(request_id(1), 1), weft::error);  // appending to a freed sequence
  const token_id t = 3;
  CHECK_THROWS_AS(kv.append(request_id(1), std::span<const token_id>(&t, 1)), weft::error);
  CHECK_THROWS_AS(kv.fork(request_id(1), request_id(5)), weft::error);
  CHECK_THROWS_AS(kv.blocks(request_id(1)), weft::error);
  CHECK(kv.used_blocks() == used - 2);
  CHECK(kv.free_blocks() == 7);
}

TEST_CASE("admission controller: watermark and quotas", "[kv][admission]") {
  admission_controller a(3);
  CHECK(a.fits(7, 10));
  CHECK_FALSE(a.fits(8, 10));
  CHECK_FALSE(a.fits(11, 10));
  const tenant_id t(1), u(2);
  CHECK(a.within_quota(t, 1'000'000));  // no quota: unlimited
  a.set_quota(t, 4);
  CHECK(a.within_quota(t, 4));
  CHECK_FALSE(a.within_quota(t, 5));
  a.charge(t, 3);
  CHECK(a.usage(t) == 3);
  CHECK_FALSE(a.within_quota(t, 2));
  CHECK(a.within_quota(u, 100));
  CHECK_THROWS_AS(a.refund(t, 4), weft::error);  // more than it holds
  CHECK(a.usage(t) == 3);
  CHECK_THROWS_AS(a.refund(u, 1), weft::error);
  CHECK_THROWS_AS(a.set_quota(tenant_id::invalid(), 1), weft::error);
  a.refund(t, 3);
  CHECK(a.usage(t) == 0);
  a.charge(tenant_id::invalid(), 5);  // not accounted
  CHECK(a.within_quota(tenant_id::invalid(), 1'000'000));
}

TEST_CASE("a block enters the prefix cache only after its KV is reported computed", "[kv][prefix][publish]") {
  kv_manager<> kv(cfg(32));
  const auto p = iota_tokens(70);                         // 4 full blocks + 6 tokens
  REQUIRE(kv.allocate_prompt(request_id(1), p, {}, 32));  // chunked prefill: slots for the first chunk
  CHECK(kv.num_tokens(request_id(1)) == 32);
  CHECK(kv.cache().cached_blocks() == 0);
  // A second request arriving now finds nothing: the first chunk's KV is not written yet.
  CHECK(kv.cached_prefix_tokens(p) == 0);
  kv.computed(request_id(1), 32);  // the first chunk ran
  CHECK(kv.cache().cached_blocks() == 2);
  CHECK(kv.cached_prefix_tokens(p) == 32);
  REQUIRE(kv.grow(request_id(1), 70).fits);  // the rest of the prompt
  CHECK(kv.cache().cached_blocks() == 2);
  kv.computed(request_id(1), 70);
  CHECK(kv.cache().cached_blocks() == 4);
  const auto b = kv.allocate_prompt(request_id(2), p);
  REQUIRE(b);
  CHECK(b->cached_tokens == 64);
  // Counts never go back and never pass the slots.
  CHECK_THROWS_WITH(kv.computed(request_id(1), 60), Catch::Contains("cannot go back"));
  CHECK_THROWS_WITH(kv.computed(request_id(1), 71), Catch::Contains("slots for 70"));
  CHECK_THROWS_WITH(kv.grow(request_id(1), 71), Catch::Contains("append the new ids"));
  CHECK_THROWS_WITH(kv.computed(request_id(9), 1), Catch::Contains("request 9 is not allocated"));
}

TEST_CASE("copied-in and forked blocks wait for computed() too", "[kv][prefix][publish]") {
  kv_manager<> kv(cfg(24, 32));
  const auto a = iota_tokens(100);
  REQUIRE(admit(kv, request_id(1), a));
  REQUIRE(kv.swap_out(request_id(1)));
  REQUIRE(admit(kv, request_id(2), iota_tokens(23 * 16, 50000)));  // evicts A's device copies
  kv.free(request_id(2));
  kv.free(request_id(1));
  // Request 3 finds A's prefix in the host tier: its device blocks are fresh and the copy has not run.
  auto b = a;
  b.resize(99);
  const auto r3 = kv.allocate_prompt(request_id(3), b);
  REQUIRE(r3);
  CHECK(r3->host_hit_blocks == 6);
  CHECK(kv.computed_tokens(request_id(3)) == 0);
  const auto r4 = kv.allocate_prompt(request_id(4), b);
  REQUIRE(r4);
  CHECK(r4->hit_blocks == 0);  // request 3's copies are not visible before they are computed
  kv.computed(request_id(3), 96);
  CHECK(kv.allocate_prompt(request_id(5), b)->hit_blocks == 6);
  // Fork: the child shares the parent's blocks and publishes nothing of its own until computed.
  kv_manager<> f(cfg(32));
  REQUIRE(f.allocate_prompt(request_id(1), iota_tokens(40)));
  REQUIRE(f.fork(request_id(1), request_id(2)));
  CHECK(f.cache().cached_blocks() == 0);
  CHECK(f.computed_tokens(request_id(2)) == 0);
  f.computed(request_id(2), 40);
  CHECK(f.cache().cached_blocks() == 2);
  f.computed(request_id(1), 40);  // same blocks, same keys: nothing new
  CHECK(f.cache().cached_blocks() == 2);
}

TEST_CASE("swap-in publishes its fresh copies only after the next computed()", "[kv][tier][publish]") {
  kv_manager<> kv(cfg(12, 32));
  REQUIRE(admit(kv, request_id(1), iota_tokens(64)));
  REQUIRE(kv.swap_out(request_id(1)));
  REQUIRE(admit(kv, request_id(2), iota_tokens(11 * 16, 50000)));  // evicts the device copies
  kv.free(request_id(2));
  const auto in = kv.swap_in(request_id(1));
  REQUIRE(in);
  CHECK(in->blocks == 4);
  // The device blocks hold no KV until the copy ran: a prompt finds the prefix only in the host tier.
  const auto probe = kv.allocate_prompt(request_id(3), iota_tokens(65));
  REQUIRE(probe);
  CHECK(probe->hit_blocks == 0);
  CHECK(probe->host_hit_blocks == 4);
  kv.free(request_id(3));
  kv.computed(request_id(1), kv.computed_tokens(request_id(1)));
  const auto hit = kv.allocate_prompt(request_id(4), iota_tokens(65));
  REQUIRE(hit);
  CHECK(hit->hit_blocks == 4);
}

TEST_CASE("swap-out keeps the computed tokens and drops slots never written", "[kv][tier]") {
  kv_manager<> kv(cfg(32, 32));
  const auto p = iota_tokens(40);
  REQUIRE(kv.allocate_prompt(request_id(1), p));
  kv.computed(request_id(1), 40);
  const token_id next = 7;
  REQUIRE(kv.append(request_id(1), std::span<const token_id>(&next, 1)).fits);  // slot for token 40
  REQUIRE(kv.num_tokens(request_id(1)) == 41);
  const auto out = kv.swap_out(request_id(1));  // preempted before that step ran
  REQUIRE(out);
  CHECK(out->blocks == 3);
  CHECK(kv.num_tokens(request_id(1)) == 40);
  CHECK(kv.tokens(request_id(1)).size() == 41);  // the id stays known
  REQUIRE(kv.swap_in(request_id(1)));
  CHECK(kv.num_tokens(request_id(1)) == 40);
  CHECK_THROWS_WITH(kv.append(request_id(1), std::span<const token_id>(&next, 1)), Catch::Contains("holds 1"));
  REQUIRE(kv.grow(request_id(1), 41).fits);  // the known id gets its slot again
}

TEST_CASE("requests without token ids are counted only", "[kv][manager][counts]") {
  kv_manager<> kv(cfg(32));
  const auto a = kv.allocate_prompt(request_id(1), std::size_t{100}, {}, 40);
  REQUIRE(a);
  CHECK(a->cached_tokens == 0);
  CHECK(kv.num_tokens(request_id(1)) == 40);
  CHECK(kv.tokens(request_id(1)).empty());
  REQUIRE(kv.grow(request_id(1), 140).fits);  // past the prompt: no ids needed
  kv.computed(request_id(1), 140);
  CHECK(kv.cache().cached_blocks() == 0);
  CHECK(kv.blocks(request_id(1)).size() == 9);
  CHECK_THROWS_AS(kv.allocate_prompt(request_id(2), std::size_t{0}), weft::error);
}

TEST_CASE("sizes that would wrap are errors, not wrong answers", "[kv][errors][overflow]") {
  kv_manager<> kv(cfg(32));
  REQUIRE(kv.allocate_prompt(request_id(1), iota_tokens(20)));
  kv.computed(request_id(1), 20);
  const auto before = kv.free_blocks();
  CHECK_THROWS_WITH(kv.append(request_id(1), SIZE_MAX - 3), Catch::Contains("overflow"));
  CHECK(kv.num_tokens(request_id(1)) == 20);
  CHECK(kv.free_blocks() == before);
  CHECK_FALSE(kv.grow(request_id(1), 20).copy);  // unchanged and still usable
  CHECK_FALSE(kv.can_fit(SIZE_MAX));
  CHECK_FALSE(kv.allocate_prompt(request_id(2), SIZE_MAX));  // too big: an outcome, nothing wraps
  CHECK_FALSE(kv.contains(request_id(2)));
}

TEST_CASE("a rolled-back transaction leaves no trace", "[kv][transaction]") {
  kv_manager<> kv(cfg(16, 16));
  REQUIRE(admit(kv, request_id(1), iota_tokens(50)));
  REQUIRE(admit(kv, request_id(2), iota_tokens(30, 900)));
  kv.free(request_id(2));  // cached blocks on the free list, in LRU order
  const auto fl = free_list(kv);
  const auto t1 = std::vector<block_id>(kv.blocks(request_id(1)).begin(), kv.blocks(request_id(1)).end());
  const auto cached = kv.cache().cached_blocks();
  const auto stats = kv.stats();
  kv.begin_transaction();
  CHECK_THROWS_AS(kv.begin_transaction(), weft::error);
  REQUIRE(admit(kv, request_id(3), iota_tokens(30, 900)));  // revives request 2's blocks from the list
  REQUIRE(kv.fork(request_id(1), request_id(4)));
  const token_id t = 1;
  REQUIRE(kv.append(request_id(4), std::span<const token_id>(&t, 1)).copy);  // copy-on-write
  REQUIRE(kv.swap_out(request_id(1)));
  REQUIRE(kv.allocate_prompt(request_id(5), iota_tokens(60, 7000)));  // evicts cached blocks
  kv.free(request_id(3));
  CHECK_THROWS_AS(kv.reset_prefix_cache(), weft::error);
  kv.rollback_transaction();
  CHECK_FALSE(kv.in_transaction());
  CHECK(free_list(kv) == fl);
  CHECK(std::vector<block_id>(kv.blocks(request_id(1)).begin(), kv.blocks(request_id(1)).end()) == t1);
  CHECK_FALSE(kv.is_swapped(request_id(1)));
  CHECK(kv.num_requests() == 1);
  CHECK(kv.cache().cached_blocks() == cached);
  CHECK(kv.stats().hit_tokens == stats.hit_tokens);
  CHECK(kv.host_free_blocks() == 15);
  for (const block_id b : t1) CHECK(kv.cache().ref_count(b) == 1);
  // A committed transaction keeps its changes.
  kv.begin_transaction();
  REQUIRE(admit(kv, request_id(3), iota_tokens(30, 900)));
  kv.commit_transaction();
  CHECK(kv.contains(request_id(3)));
  CHECK(kv.stats().hit_tokens == stats.hit_tokens + 16);
}

TEST_CASE("a rolled-back transaction restores the verify-on-hit contents of blocks it refilled",
          "[kv][transaction][collision]") {
  kv_config c = cfg(5);  // 4 usable blocks of 16 tokens
  c.verify_on_hit = true;
  kv_manager<> kv(c);
  const auto a = iota_tokens(33);
  REQUIRE(admit(kv, request_id(1), a));
  kv.free(request_id(1));  // its two full blocks stay cached on the free list
  kv.begin_transaction();
  // Four blocks of other content: request 1's cached blocks are evicted and refilled, keyed anew.
  REQUIRE(admit(kv, request_id(2), iota_tokens(64, 500)));
  CHECK(kv.cache().evictions() == 2);
  kv.rollback_transaction();
  CHECK(kv.cache().evictions() == 0);
  // Request 1's blocks are cached again with their own tokens and fingerprints: served, no collision.
  const auto hit = kv.allocate_prompt(request_id(3), a);
  REQUIRE(hit);
  CHECK(hit->cached_tokens == 32);
  CHECK(kv.cache().collisions() == 0);
}

TEST_CASE("prompt keys computed ahead serve allocation and probes exactly as hashing there does",
          "[kv][prefix][prompt_keys]") {
  for (const bool verify : {false, true}) {
    kv_config c = cfg(64);
    c.verify_on_hit = verify;
    kv_manager<> kv(c);
    const auto shared = iota_tokens(48);  // three full blocks
    auto prompt = shared;
    prompt.push_back(1000);
    prompt.push_back(1001);
    REQUIRE(admit(kv, request_id(1), shared));
    const request_options o{7, 0, {}, tenant_id::invalid()};
    REQUIRE(admit(kv, request_id(9), shared, o));  // salted: its own namespace
    const prompt_keys keys = kv.compute_prompt_keys(prompt);
    CHECK(keys.tokens == prompt.size());
    CHECK(keys.keys.size() == 3);
    CHECK(keys.prints.size() == (verify ? 3u : 0u));
    CHECK(kv.cached_prefix_tokens(prompt, {}, keys) == kv.cached_prefix_tokens(prompt));
    CHECK(kv.cached_prefix_tokens(prompt, {}, keys) == 48);
    const auto a = kv.allocate_prompt(request_id(2), prompt, {}, kv_manager<>::whole_prompt, keys);
    REQUIRE(a);
    CHECK(a->cached_tokens == 48);
    CHECK(a->hit_blocks == 3);
    // A longer sequence that starts with the prompt (a readmission with its decoded tokens): the keys
    // cover the prompt, the rest is hashed there, and the hits equal those of a fresh hash.
    auto longer = prompt;
    for (token_id t = 2000; t < 2030; ++t) longer.push_back(t);
    REQUIRE(admit(kv, request_id(3), longer));
    const auto b = kv.allocate_prompt(request_id(4), longer, {}, kv_manager<>::whole_prompt, keys);
    REQUIRE(b);
    CHECK(b->cached_tokens == kv.cached_prefix_tokens(longer));
    CHECK(b->cached_tokens == 64);
  }
}

TEST_CASE("prompt keys from another manager, prompt or options are errors that change nothing",
          "[kv][prefix][prompt_keys][errors]") {
  kv_manager<> kv(cfg(64));
  kv_manager<> other(cfg(64));
  const auto prompt = iota_tokens(40);
  const prompt_keys mine = kv.compute_prompt_keys(prompt);
  const prompt_keys theirs = other.compute_prompt_keys(prompt);
  const std::size_t free_before = kv.free_blocks();
  auto refused = [&](const prompt_keys& k, std::span<const token_id> p, const request_options& o) {
    CHECK_THROWS_WITH(kv.allocate_prompt(request_id(1), p, o, kv_manager<>::whole_prompt, k),
                      Catch::Contains("not computed by this kv_manager"));
    CHECK_THROWS_WITH(kv.cached_prefix_tokens(p, o, k), Catch::Contains("not computed by this kv_manager"));
    CHECK(kv.num_requests() == 0);
    CHECK(kv.free_blocks() == free_before);
  };
  refused(theirs, prompt, {});  // another manager's keys
  auto edited = prompt;
  edited[3] = 999;
  refused(mine, edited, {});                                               // other tokens, same length
  refused(mine, std::span<const token_id>(prompt).first(20), {});          // a shorter prompt
  refused(mine, prompt, request_options{5, 0, {}, tenant_id::invalid()});  // another salt
  prompt_keys cut = mine;
  cut.keys.pop_back();
  CHECK_THROWS_WITH(kv.allocate_prompt(request_id(1), prompt, {}, kv_manager<>::whole_prompt, cut),
                    Catch::Contains("full blocks"));
  CHECK(kv.num_requests() == 0);
  // The right keys work, and give what hashing there gives.
  const auto a = kv.allocate_prompt(request_id(1), prompt, {}, kv_manager<>::whole_prompt, mine);
  REQUIRE(a);
  CHECK(a->slots == prompt.size());
}

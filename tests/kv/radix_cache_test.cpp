#include <weft/core/clock.hpp>
#include <weft/kv/radix_cache.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <numeric>
#include <vector>

using namespace weft::kv;

namespace {
std::vector<token_id> seq(std::size_t n, token_id start = 1) {
  std::vector<token_id> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}
std::vector<block_id> take(block_pool& pool, std::size_t n) {
  std::vector<block_id> out;
  REQUIRE(pool.allocate(n, out));
  return out;
}
}  // namespace

TEST_CASE("radix cache: insert, match, split at a page boundary", "[kv][radix]") {
  block_pool pool(64);
  radix_cache<> cache(pool, 4);
  const auto a = seq(16);  // 4 pages
  const auto ab = take(pool, 4);
  const auto [present, node_a] = cache.insert(a, ab);
  CHECK(present == 0);
  CHECK(cache.cached_blocks() == 4);
  CHECK(cache.evictable_blocks() == 4);
  CHECK(cache.node_count() == 1);

  auto b = a;
  b[9] = 999;  // diverges inside page 2: pages 0,1 shared
  const auto m = cache.match(b);
  CHECK(m.matched_tokens == 8);
  CHECK(m.blocks == std::vector<block_id>{ab[0], ab[1]});
  CHECK(cache.node_count() == 2);  // the match split the node after 2 pages

  const auto bb = take(pool, 4);
  const auto [present_b, node_b] = cache.insert(b, bb);
  CHECK(present_b == 2);  // the caller keeps bb[0], bb[1] and must release them
  pool.release(bb[0]);
  pool.release(bb[1]);
  CHECK(cache.node_count() == 3);
  CHECK(cache.cached_blocks() == 6);
  const auto full = cache.match(a);
  CHECK(full.matched_tokens == 16);
  CHECK(full.blocks == ab);
  // a partial trailing page never matches
  const auto shortq = cache.match(std::span<const token_id>(a).first(7));
  CHECK(shortq.matched_tokens == 4);
  (void)node_a;
  (void)node_b;
}

TEST_CASE("radix cache: lock counts protect, evictable/protected sizes track", "[kv][radix]") {
  block_pool pool(64);
  radix_cache<> cache(pool, 4);
  const auto a = seq(16);
  auto b = a;
  b[12] = -5;  // shares 3 pages
  cache.insert(a, take(pool, 4));
  const auto bb = take(pool, 4);
  const auto [pb, nb] = cache.insert(b, bb);
  REQUIRE(pb == 3);
  for (std::size_t i = 0; i < 3; ++i) pool.release(bb[i]);
  CHECK(cache.cached_blocks() == 5);
  cache.lock(nb);
  CHECK(cache.protected_blocks() == 4);  // shared 3 pages + b's own page
  CHECK(cache.evictable_blocks() == 1);  // a's last page
  CHECK(cache.evict(100) == 1);          // only a's leaf can go
  CHECK(cache.cached_blocks() == 4);
  CHECK(cache.match(a).matched_tokens == 12);
  cache.unlock(nb);
  CHECK(cache.protected_blocks() == 0);
  CHECK_THROWS_AS(cache.unlock(nb), weft::error);
  CHECK(cache.evict(100) == 4);
  CHECK(cache.cached_blocks() == 0);
  CHECK(pool.free_blocks() == pool.usable_blocks());
  CHECK_THROWS_AS(cache.lock(nb), weft::error);  // evicted node
}

TEST_CASE("radix cache: eviction order follows the policy", "[kv][radix]") {
  auto run = [](auto policy) {
    block_pool pool(64);
    radix_cache<decltype(policy)> cache(pool, 2, policy);
    // three independent 1-page prompts: x (inserted first), y, z
    const std::vector<token_id> x{1, 2}, y{3, 4}, z{5, 6};
    cache.insert(x, take(pool, 1));
    cache.insert(y, take(pool, 1), /*priority=*/5);
    cache.insert(z, take(pool, 1), /*priority=*/-1);
    cache.match(x);  // x: most recent, 2 hits
    cache.match(x);
    cache.match(y);
    std::vector<token_id> order;
    for (int k = 0; k < 3; ++k) {
      const auto before = cache.cached_blocks();
      cache.evict(1);
      REQUIRE(cache.cached_blocks() == before - 1);
      for (const auto& t : {x, y, z})
        if (cache.match(t).matched_tokens == 0 && std::find(order.begin(), order.end(), t[0]) == order.end())
          order.push_back(t[0]);
    }
    return order;
  };
  // Matches after each eviction refresh survivors equally often, so the first victim is decisive.
  CHECK(run(lru_eviction{}).front() == 5);       // z never touched since insertion
  CHECK(run(fifo_eviction{}).front() == 1);      // x inserted first
  CHECK(run(lfu_eviction{}).front() == 5);       // z has no hits
  CHECK(run(priority_eviction{}).front() == 5);  // z has priority -1
  CHECK(run(any_eviction_policy::named("fifo")).front() == 1);
  CHECK_THROWS_WITH(any_eviction_policy::named("random"), Catch::Contains("lru, lfu, fifo or priority"));
  CHECK(run(make_eviction_policy("lru")).front() == 5);
  CHECK_THROWS_WITH(make_eviction_policy(""), Catch::Contains("unknown eviction policy ''"));
}

TEST_CASE("radix cache: a TTL pin keeps an agent's context until it expires", "[kv][radix]") {
  weft::manual_clock clock;
  block_pool pool(16);
  radix_cache<lru_eviction, weft::manual_clock> cache(pool, 4, clock);
  const auto ctx = seq(8);
  const auto [p, node] = cache.insert(ctx, take(pool, 2));
  cache.pin(node, std::chrono::seconds(30));
  CHECK(cache.evict(10) == 0);
  clock.advance(std::chrono::seconds(29));
  CHECK(cache.evict(10) == 0);
  clock.advance(std::chrono::seconds(2));
  CHECK(cache.evict(10) == 2);
  CHECK(cache.cached_blocks() == 0);
  CHECK_THROWS_AS(cache.pin(radix_node(77), std::chrono::seconds(1)), weft::error);
  (void)p;
}

TEST_CASE("radix cache: bad input", "[kv][radix][errors]") {
  block_pool pool(16);
  CHECK_THROWS_AS(radix_cache<>(pool, 0), weft::error);
  radix_cache<> cache(pool, 4);
  const auto t = seq(8);
  const auto blocks = take(pool, 1);
  CHECK_THROWS_WITH(cache.insert(t, blocks), Catch::Contains("1 blocks for 2 whole pages"));
  std::vector<block_id> never{block_id(9), block_id(10)};
  CHECK_THROWS_AS(cache.insert(t, never), weft::error);
  CHECK(cache.cached_blocks() == 0);
  CHECK(cache.node_count() == 0);
}

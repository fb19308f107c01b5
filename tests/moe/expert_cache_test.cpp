#include <weft/moe/any_expert_eviction_policy.hpp>
#include <weft/moe/expert_cache.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

using namespace weft::moe;

namespace {
const model_shape shape{3, 6, 2};

template <class P>
void load_now(expert_cache<P>& c, expert_key k) {
  auto order = c.start_load(k);
  REQUIRE(order.has_value());
  c.complete(*order);
}
}  // namespace

TEST_CASE("the load protocol: miss, in flight, hit", "[moe][cache]") {
  expert_cache<> c(cache_config::in_slots(shape, 2));
  const expert_key k{1, 4};
  CHECK(c.lookup(k).status == lookup_status::miss);
  auto order = c.start_load(k);
  REQUIRE(order);
  CHECK(order->key == k);
  CHECK(order->pool == 1);
  CHECK(order->slot == 0);
  CHECK(order->kind == load_kind::demand);
  CHECK(c.state(k) == entry_state::loading);
  const auto in_flight = c.lookup(k);
  CHECK(in_flight.status == lookup_status::in_flight);
  CHECK(in_flight.slot == 0);
  c.complete(*order);
  CHECK(c.lookup(k).status == lookup_status::hit);
  CHECK(c.stats().lookups == 3);
  CHECK(c.stats().misses == 1);
  CHECK(c.stats().in_flight_hits == 1);
  CHECK(c.stats().hits == 1);
  CHECK(c.peek(k).status == lookup_status::hit);
  CHECK(c.stats().lookups == 3);  // peek does not count
}

TEST_CASE("LRU eviction within a layer's pool and slot reuse", "[moe][cache]") {
  expert_cache<lru_policy> c(cache_config::in_slots(shape, 2));
  for (std::uint32_t e : {0u, 1u}) {
    (void)c.lookup({0, e});
    load_now(c, {0, e});
  }
  (void)c.lookup({0, 0});  // 0 is now more recent than 1
  // Layer 1 has its own pool: loading there evicts nothing in layer 0.
  (void)c.lookup({1, 5});
  load_now(c, {1, 5});
  CHECK(c.last_evicted().empty());
  (void)c.lookup({0, 2});
  auto order = c.start_load({0, 2});
  REQUIRE(order);
  REQUIRE(c.last_evicted().size() == 1);
  CHECK(c.last_evicted()[0] == expert_key{0, 1});
  CHECK(order->slot == 1);  // the victim's slot
  CHECK(c.state({0, 1}) == entry_state::absent);
  CHECK(c.stats().evictions == 1);
}

TEST_CASE("byte capacity with per-layer expert sizes under a global pool", "[moe][cache]") {
  // layer sizes 10, 20, 40 bytes; 60 bytes shared by all layers
  expert_cache<lru_policy> c(cache_config::in_bytes(shape, 60, {10, 20, 40}, capacity_scope::global));
  CHECK(c.num_pools() == 1);
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
  CHECK(c.pool_count() == c.num_pools());  // the deprecated name, kept for one release
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
  CHECK(c.slot_capacity(0) == 6);  // 60 / smallest (10)
  load_now(c, {0, 0});
  load_now(c, {1, 0});
  load_now(c, {0, 1});
  CHECK(c.used_bytes(0) == 40);
  auto order = c.start_load({2, 0});  // needs 40: must evict 20 bytes at least, LRU order
  REQUIRE(order);
  CHECK(order->bytes == 40);
  REQUIRE(c.last_evicted().size() == 2);  // (0,0) 10 bytes is not enough; (1,0) follows
  CHECK(c.last_evicted()[0] == expert_key{0, 0});
  CHECK(c.last_evicted()[1] == expert_key{1, 0});
  CHECK(c.used_bytes(0) == 50);
  CHECK(c.used_bytes(0) <= c.byte_capacity(0));
}

TEST_CASE("pinned and in-flight entries are never evicted; a refused load changes nothing", "[moe][cache]") {
  expert_cache<lru_policy> c(cache_config::in_slots(shape, 2));
  load_now(c, {0, 0});
  c.pin({0, 0});
  auto second = c.start_load({0, 1});  // in flight
  REQUIRE(second);
  const auto before = c.stats();
  CHECK_FALSE(c.start_load({0, 2}).has_value());
  CHECK_FALSE(c.prefetch({0, 3}).has_value());
  CHECK(c.stats().evictions == before.evictions);
  CHECK(c.state({0, 2}) == entry_state::absent);
  CHECK(c.used_slots(0) == 2);
  c.complete(*second);
  auto third = c.start_load({0, 2});  // now (0,1) is a candidate
  REQUIRE(third);
  CHECK(c.last_evicted()[0] == expert_key{0, 1});
  CHECK(c.state({0, 0}) == entry_state::resident);
  c.pin({0, 0});  // pins nest
  c.unpin({0, 0});
  CHECK(c.pin_count({0, 0}) == 1);
  c.unpin({0, 0});
  CHECK(c.pin_count({0, 0}) == 0);
}

TEST_CASE("prefetch: skipped when present, counted when used, cancellable", "[moe][cache]") {
  expert_cache<> c(cache_config::in_slots(shape, 3));
  auto p = c.prefetch({2, 1});
  REQUIRE(p);
  CHECK(p->kind == load_kind::prefetch);
  CHECK_FALSE(c.prefetch({2, 1}).has_value());  // already loading
  c.complete(*p);
  CHECK(c.lookup({2, 1}).status == lookup_status::hit);
  CHECK(c.stats().prefetch_used == 1);
  CHECK(c.lookup({2, 1}).status == lookup_status::hit);
  CHECK(c.stats().prefetch_used == 1);  // once per load
  auto q = c.prefetch({2, 2});
  REQUIRE(q);
  c.cancel(*q);
  CHECK(c.state({2, 2}) == entry_state::absent);
  CHECK(c.used_slots(2) == 1);
  CHECK(c.stats().cancels == 1);
  c.erase({2, 1});
  CHECK(c.used_slots(2) == 0);
}

TEST_CASE("bad input raises weft::error and leaves the cache unchanged", "[moe][cache][errors]") {
  using weft::errc;
  auto code_of = [](auto&& f) {
    try {
      f();
    } catch (const weft::error& e) {
      return static_cast<errc>(e.code().value());
    }
    return errc::aborted;
  };
  CHECK(code_of([] { expert_cache<> c(cache_config::in_slots(shape, 0)); }) == errc::invalid_argument);
  CHECK(code_of([] { expert_cache<> c(cache_config::in_bytes(shape, 0, {8})); }) == errc::invalid_argument);
  CHECK(code_of([] { expert_cache<> c(cache_config::in_bytes(shape, 7, {8})); }) == errc::invalid_argument);
  CHECK(code_of([] { expert_cache<> c(cache_config::in_bytes(shape, 64, {8, 8})); }) == errc::invalid_argument);
  CHECK(code_of([] { expert_cache<> c(cache_config::in_bytes(shape, 64, {0})); }) == errc::invalid_argument);
  CHECK(code_of([] { expert_cache<> c(cache_config::in_slots(model_shape{0, 4, 1}, 2)); }) == errc::invalid_argument);
  CHECK(code_of([] {
          cache_config both = cache_config::in_slots(shape, 2);
          both.bytes = 100;
          expert_cache<> c(both);
        }) == errc::invalid_argument);
  CHECK_THROWS_WITH(expert_cache<>(cache_config::in_slots(shape, 0)), Catch::Contains("capacity is zero"));

  expert_cache<> c(cache_config::in_slots(shape, 2));
  load_now(c, {0, 0});
  const auto stats = c.stats();
  CHECK(code_of([&] { (void)c.lookup({0, 6}); }) == errc::out_of_range);
  CHECK(code_of([&] { (void)c.lookup({3, 0}); }) == errc::out_of_range);
  CHECK_THROWS_WITH(c.lookup({0, 9}), Catch::Contains("unknown expert (layer 0, expert 9)"));
  CHECK(code_of([&] { (void)c.start_load({0, 0}); }) == errc::precondition);        // already resident
  CHECK(code_of([&] { c.complete(expert_key{0, 1}, 99); }) == errc::precondition);  // never started
  CHECK_THROWS_WITH(c.complete(expert_key{0, 1}, 99), Catch::Contains("ticket 99 was never issued"));
  CHECK_THROWS_WITH(c.complete(expert_key{0, 1}, 1), Catch::Contains("the expert is absent"));
  CHECK(code_of([&] { c.complete(expert_key{0, 0}, 1); }) == errc::precondition);  // already resident
  CHECK_THROWS_WITH(c.complete(expert_key{0, 0}, 1), Catch::Contains("it completed already"));
  CHECK(code_of([&] { c.cancel(expert_key{0, 0}, 1); }) == errc::precondition);
  CHECK(code_of([&] { c.unpin({0, 0}); }) == errc::precondition);
  CHECK(code_of([&] { c.pin({1, 1}); }) == errc::precondition);
  CHECK(code_of([&] { c.erase({1, 1}); }) == errc::precondition);
  CHECK(code_of([&] { (void)c.used_slots(7); }) == errc::out_of_range);
  CHECK(c.stats().lookups == stats.lookups);
  CHECK(c.state({0, 0}) == entry_state::resident);
  CHECK(c.used_slots(0) == 1);
  CHECK(c.lookup({0, 0}).status == lookup_status::hit);
}

TEST_CASE("a stale completion of a cancelled load is refused: loads carry tickets", "[moe][cache][errors]") {
  expert_cache<> c(cache_config::in_slots(shape, 2));
  const expert_key k{1, 2};
  const auto first = c.start_load(k);
  REQUIRE(first);
  c.cancel(*first);
  const auto second = c.start_load(k);  // the same expert, loading again (another copy, maybe another slot)
  REQUIRE(second);
  CHECK(second->ticket != first->ticket);
  // The first copy's late completion must not mark k resident: its bytes may be the wrong ones.
  CHECK_THROWS_WITH(c.complete(*first), Catch::Contains("stale ticket"));
  CHECK(c.state(k) == entry_state::loading);
  CHECK_THROWS_AS(c.cancel(*first), weft::error);
  CHECK(c.state(k) == entry_state::loading);
  c.complete(*second);
  CHECK(c.state(k) == entry_state::resident);
  CHECK_THROWS_WITH(c.complete(*second), Catch::Contains("completed already"));
  // A shape whose per-expert state cannot fit is refused before anything is allocated.
  CHECK_THROWS_WITH(expert_cache<>(cache_config::in_slots({65536, 65536, 2}, 2)),
                    Catch::Contains("exceeds model_shape::max_keys"));
}

TEST_CASE("asynchronous loads completed in any order", "[moe][cache][async]") {
  const model_shape wide{2, 16, 2};
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    expert_cache<> c(cache_config::in_slots(wide, 8));
    std::vector<load_order> started;
    std::set<std::uint32_t> slots;
    for (std::uint32_t e = 0; e < 8; ++e) {
      (void)c.lookup({1, e});
      auto order = c.start_load({1, e});
      REQUIRE(order);
      CHECK(slots.insert(order->slot).second);  // distinct slots
      CHECK(order->slot < 8);
      started.push_back(*order);
    }
    CHECK_FALSE(c.start_load({1, 9}).has_value());  // everything in flight: no victim
    std::shuffle(started.begin(), started.end(), rng);
    std::map<expert_key, std::uint32_t> slot_of;
    for (const auto& o : started) slot_of[o.key] = c.peek(o.key).slot;
    for (std::size_t i = 0; i < started.size(); ++i) {
      c.complete(started[i]);
      for (std::size_t j = 0; j < started.size(); ++j) {
        const auto r = c.peek(started[j].key);
        CHECK(r.status == (j <= i ? lookup_status::hit : lookup_status::in_flight));
        CHECK(r.slot == slot_of[started[j].key]);  // a slot never moves while loading or resident
      }
    }
    // The oldest completion is the LRU victim now.
    auto order = c.start_load({1, 9});
    REQUIRE(order);
    CHECK(c.last_evicted()[0] == started.front().key);
    CHECK(order->slot == slot_of[started.front().key]);
  }
}

TEST_CASE("cache invariants under random operations, against a reference model", "[moe][cache][random]") {
  const model_shape s{3, 8, 2};
  for (std::uint32_t seed = 1; seed <= 30; ++seed) {
    std::mt19937 rng(seed);
    const bool global = seed % 2 == 0;
    const bool bytes = seed % 3 == 0;
    cache_config cfg =
        bytes
            ? cache_config::in_bytes(s, 100, {10, 20, 30}, global ? capacity_scope::global : capacity_scope::per_layer)
            : cache_config::in_slots(s, 3, global ? capacity_scope::global : capacity_scope::per_layer);
    any_expert_eviction_policy policy =
        seed % 4 == 0 ? any_expert_eviction_policy(lfu_policy{}) : any_expert_eviction_policy(lru_policy{});
    expert_cache<any_expert_eviction_policy> c(cfg, policy);
    std::map<expert_key, entry_state> state;  // reference: absent keys are missing
    std::map<expert_key, std::uint32_t> pins;
    std::map<expert_key, load_order> orders;  // the last load of each key (stale once it ended)
    auto random_key = [&] {
      return expert_key{static_cast<std::uint32_t>(rng() % s.num_layers),
                        static_cast<std::uint32_t>(rng() % s.num_experts)};
    };
    for (int step = 0; step < 400; ++step) {
      const expert_key k = random_key();
      const auto it = state.find(k);
      const entry_state ref = it == state.end() ? entry_state::absent : it->second;
      switch (rng() % 7) {
        case 0:
        case 1: {
          const auto r = c.lookup(k);
          CHECK(r.status == (ref == entry_state::absent    ? lookup_status::miss
                             : ref == entry_state::loading ? lookup_status::in_flight
                                                           : lookup_status::hit));
          break;
        }
        case 2: {
          if (ref != entry_state::absent) {
            CHECK_THROWS_AS(c.start_load(k), weft::error);
            break;
          }
          auto order = rng() % 2 ? c.start_load(k) : c.prefetch(k);
          if (order) {
            for (const expert_key v : c.last_evicted()) {
              REQUIRE(state.count(v));
              CHECK(state[v] == entry_state::resident);  // never an in-flight entry
              CHECK(pins[v] == 0);                       // never a pinned one
              CHECK(c.pool_of(v) == c.pool_of(k));
              state.erase(v);
            }
            state[k] = entry_state::loading;
            orders[k] = *order;
          } else {
            CHECK(c.state(k) == entry_state::absent);
          }
          break;
        }
        case 3:
          if (ref == entry_state::loading) {
            c.complete(orders[k]);
            state[k] = entry_state::resident;
          } else {
            CHECK_THROWS_AS(c.complete(k, orders.count(k) ? orders[k].ticket : 0), weft::error);
          }
          break;
        case 4:
          if (ref != entry_state::absent) {
            c.pin(k);
            ++pins[k];
          } else {
            CHECK_THROWS_AS(c.pin(k), weft::error);
          }
          break;
        case 5:
          if (pins[k] > 0) {
            c.unpin(k);
            --pins[k];
          } else {
            CHECK_THROWS_AS(c.unpin(k), weft::error);
          }
          break;
        case 6:
          if (ref == entry_state::loading && pins[k] == 0) {
            c.cancel(orders[k]);
            state.erase(k);
          } else if (ref == entry_state::resident && pins[k] == 0) {
            c.erase(k);
            state.erase(k);
          }
          break;
      }
      // Invariants: the cache agrees with the reference; pools within capacity; slots distinct.
      std::map<std::uint32_t, std::set<std::uint32_t>> slots;
      std::map<std::uint32_t, std::uint64_t> used, used_bytes;
      for (std::uint32_t l = 0; l < s.num_layers; ++l)
        for (std::uint32_t e = 0; e < s.num_experts; ++e) {
          const expert_key q{l, e};
          const auto f = state.find(q);
          const entry_state want = f == state.end() ? entry_state::absent : f->second;
          REQUIRE(c.state(q) == want);
          if (want != entry_state::absent) {
            const std::uint32_t p = c.pool_of(q);
            CHECK(slots[p].insert(c.peek(q).slot).second);
            CHECK(c.peek(q).slot < c.slot_capacity(p));
            ++used[p];
            used_bytes[p] += c.expert_bytes(q);
          }
          CHECK(c.pin_count(q) == pins[q]);
        }
      for (std::uint32_t p = 0; p < c.num_pools(); ++p) {
        CHECK(c.used_slots(p) == used[p]);
        CHECK(c.used_slots(p) <= c.slot_capacity(p));
        if (bytes) {
          CHECK(c.used_bytes(p) == used_bytes[p]);
          CHECK(c.used_bytes(p) <= c.byte_capacity(p));
        }
      }
    }
  }
}

TEST_CASE("any_expert_eviction_policy behaves exactly like the policy it holds", "[moe][cache][any]") {
  std::mt19937 rng(7);
  expert_cache<lru_policy> direct(cache_config::in_slots(shape, 3, capacity_scope::global));
  expert_cache<any_expert_eviction_policy> erased(cache_config::in_slots(shape, 3, capacity_scope::global),
                                                  any_expert_eviction_policy(lru_policy{}));
  for (int i = 0; i < 300; ++i) {
    const expert_key k{static_cast<std::uint32_t>(rng() % 3), static_cast<std::uint32_t>(rng() % 6)};
    const auto a = direct.lookup(k);
    const auto b = erased.lookup(k);
    REQUIRE(a.status == b.status);
    if (a.status == lookup_status::miss) {
      load_now(direct, k);
      load_now(erased, k);
      REQUIRE(std::vector<expert_key>(direct.last_evicted().begin(), direct.last_evicted().end()) ==
              std::vector<expert_key>(erased.last_evicted().begin(), erased.last_evicted().end()));
    }
  }
  CHECK(direct.stats().hits == erased.stats().hits);
  CHECK(erased.policy(0).target<lru_policy>() != nullptr);
  CHECK(erased.policy(0).target<lfu_policy>() == nullptr);
  any_expert_eviction_policy copy = erased.policy(0);  // deep copy
  CHECK(copy.target<lru_policy>() != erased.policy(0).target<lru_policy>());
}

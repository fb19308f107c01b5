// Randomized differential tests: the block pool against a std::list reference, the key map against
// std::unordered_map, and kv_manager against a reference model of who holds which block and what
// each cached block contains. Seeded, so any failure reproduces.
#include <weft/kv/block_pool.hpp>
#include <weft/kv/detail/key_map.hpp>
#include <weft/kv/kv_manager.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <list>
#include <map>
#include <random>
#include <unordered_map>
#include <vector>

using namespace weft::kv;

TEST_CASE("block pool matches a std::list reference over random operations", "[kv][model]") {
  for (const std::uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    const std::uint32_t cap = 40;
    block_pool pool(cap);
    std::list<std::uint32_t> ref_free;  // front = next allocated
    std::vector<std::uint32_t> ref_count(cap, 0);
    for (std::uint32_t i = 1; i < cap; ++i) ref_free.push_back(i);
    for (int step = 0; step < 4000; ++step) {
      const int op = static_cast<int>(rng() % 5);
      const std::uint32_t b = 1 + rng() % (cap - 1);
      if (op == 0) {
        const std::size_t n = rng() % 4;
        std::vector<block_id> out;
        const bool ok = pool.allocate(n, out);
        REQUIRE(ok == (n <= ref_free.size()));
        for (const block_id x : out) {
          REQUIRE(x.value() == ref_free.front());
          ref_free.pop_front();
          ref_count[x.value()] = 1;
        }
      } else if (op == 1) {
        if (ref_count[b] == 0) {
          REQUIRE_THROWS_AS(pool.release(block_id(b)), weft::error);
        } else {
          const bool back = rng() % 2;
          pool.release(block_id(b), back ? free_position::back : free_position::front);
          if (--ref_count[b] == 0) {
            if (back)
              ref_free.push_back(b);
            else
              ref_free.push_front(b);
          }
        }
      } else if (op == 2) {
        if (ref_count[b] == 0)
          REQUIRE_THROWS_AS(pool.add_ref(block_id(b)), weft::error);
        else
          pool.add_ref(block_id(b)), ++ref_count[b];
      } else if (op == 3) {
        if (ref_count[b] != 0) {
          REQUIRE_THROWS_AS(pool.take(block_id(b)), weft::error);
        } else {
          pool.take(block_id(b));
          ref_free.remove(b);
          ref_count[b] = 1;
        }
      } else {
        if (ref_count[b] == 0) {
          pool.touch_free(block_id(b));
          ref_free.remove(b);
          ref_free.push_back(b);
        }
      }
      std::vector<std::uint32_t> actual;
      pool.for_each_free([&](block_id x) { actual.push_back(x.value()); });
      REQUIRE(actual == std::vector<std::uint32_t>(ref_free.begin(), ref_free.end()));
      for (std::uint32_t i = 1; i < cap; ++i) REQUIRE(pool.ref_count(block_id(i)) == ref_count[i]);
      REQUIRE(pool.free_blocks() == ref_free.size());
    }
  }
}

TEST_CASE("key map matches std::unordered_map over random operations", "[kv][model]") {
  std::mt19937_64 rng(7);
  detail::key_map map(300);
  std::unordered_map<block_key, std::uint32_t> ref;
  for (int step = 0; step < 20000; ++step) {
    // Small key space with colliding low bits exercises probe runs and backward shifts; keys that
    // differ only in hi (or swap hi and lo, which share a home slot) check the whole key is compared.
    const std::uint64_t hi = rng() % 3, lo = (rng() % 400) << (rng() % 2 ? 0 : 40);
    const block_key key = rng() % 2 ? block_key{hi, lo} : block_key{lo, hi};
    const int op = static_cast<int>(rng() % 3);
    if (op == 0 && ref.size() < 300) {
      const auto v = static_cast<std::uint32_t>(rng() % 1000);
      const auto [it, inserted] = ref.emplace(key, v);
      REQUIRE(map.insert(key, v) == it->second);
      (void)inserted;
    } else if (op == 1) {
      REQUIRE(map.erase(key) == (ref.erase(key) == 1));
    } else {
      const auto it = ref.find(key);
      REQUIRE(map.find(key) == (it == ref.end() ? detail::key_map::npos : it->second));
    }
    REQUIRE(map.size() == ref.size());
  }
  for (const auto& [k, v] : ref) REQUIRE(map.find(k) == v);
}

namespace {

struct model_request {
  std::vector<token_id> tokens;  // empty when unknown (count-only appends happened)
  bool known = true;
  std::uint64_t salt = 0;
  std::size_t num_tokens = 0;
  bool swapped = false;
};

struct snapshot {
  std::size_t free = 0;
  std::map<std::uint64_t, std::vector<block_id>> tables;
  std::vector<std::uint32_t> refs;
  bool operator==(const snapshot&) const = default;
};

snapshot take_snapshot(const kv_manager<>& kv) {
  snapshot s;
  s.free = kv.free_blocks();
  kv.for_each_request([&](request_id id, const block_table& t, bool) {
    s.tables[id.value()] = std::vector<block_id>(t.blocks().begin(), t.blocks().end());
  });
  for (std::uint32_t b = 1; b < kv.cache().pool().capacity(); ++b) s.refs.push_back(kv.cache().ref_count(block_id(b)));
  return s;
}

// Content identity of a full block: the salt and every token up to the block's end.
using content = std::pair<std::uint64_t, std::vector<token_id>>;

void check_invariants(const kv_manager<>& kv, const std::map<std::uint64_t, model_request>& model,
                      std::map<block_key, content>& seen_keys) {
  const std::size_t cap = kv.cache().pool().capacity();
  const std::size_t bs = kv.block_size();
  std::vector<std::uint32_t> live(cap, 0);
  std::size_t requests = 0;
  kv.for_each_request([&](request_id id, const block_table& t, bool swapped) {
    ++requests;
    const model_request& m = model.at(id.value());
    REQUIRE(swapped == m.swapped);
    REQUIRE(kv.num_tokens(id) == m.num_tokens);
    if (swapped) {
      REQUIRE(t.num_blocks() == 0);
      const auto hb = kv.host_blocks(id);
      REQUIRE(hb.size() == (m.num_tokens + bs - 1) / bs);
      for (std::size_t i = 0; m.known && i < hb.size() && (i + 1) * bs <= m.tokens.size(); ++i) {
        if (const auto key = kv.host_cache()->key_of(block_id(hb[i].value()))) {
          const content c{m.salt, std::vector<token_id>(m.tokens.begin(), m.tokens.begin() + (i + 1) * bs)};
          const auto [it, inserted] = seen_keys.emplace(*key, c);
          REQUIRE(it->second == c);  // host copies hold what their key says
          (void)inserted;
        }
      }
      return;
    }
    REQUIRE(t.num_tokens() == m.num_tokens);
    REQUIRE(t.num_blocks() == (m.num_tokens + bs - 1) / bs);
    for (std::size_t i = 0; i < t.num_blocks(); ++i) {
      const block_id b = t.blocks()[i];
      ++live[b.value()];
      // Cached content is what this request holds there: no stale key, no wrong hit.
      if (m.known && (i + 1) * bs <= m.tokens.size()) {
        if (const auto key = kv.cache().key_of(b)) {
          const content c{m.salt, std::vector<token_id>(m.tokens.begin(), m.tokens.begin() + (i + 1) * bs)};
          const auto [it, inserted] = seen_keys.emplace(*key, c);
          REQUIRE(it->second == c);  // one key, one content, forever
          (void)inserted;
        }
      }
    }
  });
  REQUIRE(requests == model.size());
  std::size_t referenced = 0;
  for (std::uint32_t b = 1; b < cap; ++b) {
    const block_id id(b);
    REQUIRE(kv.cache().ref_count(id) == live[b]);       // ref counts equal live references
    REQUIRE(kv.cache().is_free(id) == (live[b] == 0));  // never both free and referenced
    referenced += live[b] != 0;
    if (const auto key = kv.cache().key_of(id)) REQUIRE(kv.cache().find(*key) == id);  // keys unique
  }
  REQUIRE(kv.free_blocks() + referenced == kv.usable_blocks());
  // The host tier obeys the same rules: ref counts equal swapped requests' references.
  if (const auto* host = kv.host_cache()) {
    std::vector<std::uint32_t> host_live(host->pool().capacity(), 0);
    kv.for_each_request([&](request_id id, const block_table&, bool swapped) {
      if (swapped)
        for (const host_block_id h : kv.host_blocks(id)) ++host_live[h.value()];
    });
    for (std::uint32_t b = 1; b < host->pool().capacity(); ++b) {
      REQUIRE(host->ref_count(block_id(b)) == host_live[b]);
      if (const auto key = host->key_of(block_id(b))) REQUIRE(host->find(*key) == block_id(b));
    }
  }
}

}  // namespace

TEST_CASE("kv_manager matches a reference model over thousands of random operations", "[kv][model]") {
  for (const std::uint32_t seed : {11u, 12u, 13u, 14u}) {
    std::mt19937 rng(seed);
    kv_config c;
    c.num_blocks = 48;
    c.block_size = 4;
    c.host_blocks = 40;
    c.watermark = 0.05;
    kv_manager<> kv(c);
    std::map<std::uint64_t, model_request> model;
    std::map<block_key, content> seen_keys;
    // A few shared "documents" so prompts overlap and the cache gets hits.
    std::vector<std::vector<token_id>> docs(4);
    for (auto& d : docs)
      for (int i = 0; i < 40; ++i) d.push_back(static_cast<token_id>(rng() % 5));
    std::uint64_t next_id = 1;
    std::size_t hits = 0, failures = 0, host_hits = 0;
    auto pick = [&]() -> std::uint64_t {
      auto it = model.begin();
      std::advance(it, static_cast<long>(rng() % model.size()));
      return it->first;
    };
    for (int step = 0; step < 3000; ++step) {
      const int op = static_cast<int>(rng() % 8);
      const snapshot before = take_snapshot(kv);
      if (op <= 1 || model.empty()) {
        const auto& d = docs[rng() % docs.size()];
        std::vector<token_id> prompt(d.begin(), d.begin() + static_cast<long>(1 + rng() % d.size()));
        for (std::size_t k = rng() % 6; k > 0; --k) prompt.push_back(static_cast<token_id>(rng() % 5));
        request_options o;
        o.cache_salt = rng() % 4 == 0 ? 99 : 0;
        const request_id id(next_id++);
        const auto r = kv.allocate_prompt(id, prompt, o);
        if (r) {
          REQUIRE(r->cached_tokens % c.block_size == 0);
          REQUIRE(r->cached_tokens < prompt.size());
          hits += r->cached_tokens;
          host_hits += r->host_hit_blocks;
          REQUIRE(r->host_to_device.blocks == r->host_hit_blocks);
          model[id.value()] = model_request{prompt, true, o.cache_salt, prompt.size(), false};
        } else {
          ++failures;
          REQUIRE(take_snapshot(kv) == before);
        }
      } else if (op <= 3) {
        const std::uint64_t id = pick();
        model_request& m = model[id];
        const std::size_t n = 1 + rng() % 6;
        if (m.swapped) {
          REQUIRE_THROWS_AS(kv.append(request_id(id), n), weft::error);
        } else {
          std::vector<token_id> t(n);
          for (auto& x : t) x = static_cast<token_id>(rng() % 5);
          const bool count_only = rng() % 8 == 0;
          const auto r = count_only ? kv.append(request_id(id), n) : kv.append(request_id(id), t);
          if (r.fits) {
            m.num_tokens += n;
            if (count_only) m.known = false;
            if (m.known) m.tokens.insert(m.tokens.end(), t.begin(), t.end());
            if (r.copy) REQUIRE(before.refs[r.copy->src.value() - 1] >= 2);
          } else {
            ++failures;
            REQUIRE(take_snapshot(kv) == before);
          }
        }
      } else if (op == 4) {
        const std::uint64_t id = pick();
        const model_request m = model[id];
        const request_id child(next_id++);
        if (m.swapped) {
          REQUIRE_THROWS_AS(kv.fork(request_id(id), child), weft::error);
        } else {
          REQUIRE(kv.fork(request_id(id), child));
          REQUIRE(kv.free_blocks() == before.free);
          model[child.value()] = m;
        }
      } else if (op == 5) {
        const std::uint64_t id = pick();
        kv.free(request_id(id));
        model.erase(id);
        REQUIRE_THROWS_AS(kv.free(request_id(id)), weft::error);
      } else {
        const std::uint64_t id = pick();
        model_request& m = model[id];
        const auto plan = m.swapped ? kv.swap_in(request_id(id)) : kv.swap_out(request_id(id));
        if (plan) {
          std::size_t moved = 0;
          for (const auto& u : plan->units) moved += u.count;
          REQUIRE(moved == plan->blocks);
          m.swapped = !m.swapped;
        } else {
          ++failures;
          REQUIRE(take_snapshot(kv) == before);
        }
      }
      check_invariants(kv, model, seen_keys);
    }
    CHECK(hits > 0);       // the workload exercised the cache
    CHECK(host_hits > 0);  // including the host half
    CHECK(failures > 0);   // and the all-or-nothing paths
    for (const auto& [id, m] : model) kv.free(request_id(id));
    CHECK(kv.used_blocks() == 0);
    CHECK(kv.host_free_blocks() == c.host_blocks - 1);
  }
}

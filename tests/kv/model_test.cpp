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
#include <optional>
#include <random>
#include <span>
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
  std::size_t num_tokens = 0;  // tokens with a slot
  std::size_t computed = 0;
  bool swapped = false;
  bool operator==(const model_request&) const = default;
};

// One request as the manager shows it: its device and host tables and its token counts.
struct request_snapshot {
  std::uint64_t id = 0;
  std::vector<block_id> table;
  std::vector<host_block_id> host_table;
  std::size_t slots = 0, computed = 0;
  bool operator==(const request_snapshot&) const = default;
};

// Everything observable about a manager: tables, reference counts, free-list order (device and
// host), the key every block carries, and the statistics.
struct snapshot {
  std::size_t free = 0;
  std::vector<request_snapshot> requests;  // by id
  std::vector<std::uint32_t> refs;
  std::vector<block_id> free_list, host_free_list;
  std::vector<std::optional<block_key>> keys, host_keys;
  std::uint64_t hit_tokens = 0;
  bool operator==(const snapshot&) const = default;
};

snapshot take_snapshot(const kv_manager<>& kv) {
  snapshot s;
  s.free = kv.free_blocks();
  kv.for_each_request([&](request_id id, const block_table& t, bool) {
    const auto host = kv.host_blocks(id);
    s.requests.push_back({id.value(), std::vector<block_id>(t.blocks().begin(), t.blocks().end()),
                          std::vector<host_block_id>(host.begin(), host.end()), kv.num_tokens(id),
                          kv.computed_tokens(id)});
  });
  std::sort(s.requests.begin(), s.requests.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  for (std::uint32_t b = 1; b < kv.cache().pool().capacity(); ++b) {
    s.refs.push_back(kv.cache().ref_count(block_id(b)));
    s.keys.push_back(kv.cache().key_of(block_id(b)));
  }
  kv.cache().pool().for_each_free([&](block_id b) { s.free_list.push_back(b); });
  if (const auto* host = kv.host_cache()) {
    host->pool().for_each_free([&](block_id b) { s.host_free_list.push_back(b); });
    for (std::uint32_t b = 1; b < host->pool().capacity(); ++b) s.host_keys.push_back(host->key_of(block_id(b)));
  }
  s.hit_tokens = kv.stats().hit_tokens;
  return s;
}

// Content identity of a full block: the salt and every token up to the block's end.
using content = std::pair<std::uint64_t, std::vector<token_id>>;

// One key, one content, forever: the first time `key` is seen it is recorded as naming (salt, every
// token up to the block's end); later it must name the same. Compared in place, without a copy of
// the tokens per block and step (most of this test's time under ASan when it copied them).
bool names_content(std::unordered_map<block_key, content>& seen_keys, const block_key& key, std::uint64_t salt,
                   std::span<const token_id> tokens) {
  const auto it = seen_keys.find(key);
  if (it == seen_keys.end()) {
    seen_keys.emplace(key, content{salt, std::vector<token_id>(tokens.begin(), tokens.end())});
    return true;
  }
  return it->second.first == salt && std::ranges::equal(it->second.second, tokens);
}

void check_invariants(const kv_manager<>& kv, const std::map<std::uint64_t, model_request>& model,
                      std::unordered_map<block_key, content>& seen_keys) {
  const std::size_t cap = kv.cache().pool().capacity();
  const std::size_t bs = kv.block_size();
  std::vector<std::uint32_t> live(cap, 0);
  std::size_t requests = 0;
  kv.for_each_request([&](request_id id, const block_table& t, bool swapped) {
    ++requests;
    const model_request& m = model.at(id.value());
    REQUIRE(swapped == m.swapped);
    REQUIRE(kv.num_tokens(id) == m.num_tokens);
    REQUIRE(kv.computed_tokens(id) == m.computed);
    if (m.known) REQUIRE(std::equal(m.tokens.begin(), m.tokens.end(), kv.tokens(id).begin(), kv.tokens(id).end()));
    if (swapped) {
      REQUIRE(t.num_blocks() == 0);
      const auto hb = kv.host_blocks(id);
      REQUIRE(hb.size() == (m.num_tokens + bs - 1) / bs);
      for (std::size_t i = 0; m.known && i < hb.size() && (i + 1) * bs <= m.tokens.size(); ++i) {
        if (const auto key = kv.host_cache()->key_of(block_id(hb[i].value()))) {
          if (!names_content(seen_keys, *key, m.salt, std::span(m.tokens).first((i + 1) * bs)))
            FAIL("request " << id.value() << ": the key of host block " << i << " names other content");
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
          if (!names_content(seen_keys, *key, m.salt, std::span(m.tokens).first((i + 1) * bs)))
            FAIL("request " << id.value() << ": the key of block " << i << " names other content");
        }
      }
    }
  });
  REQUIRE(requests == model.size());
  std::size_t referenced = 0;
  // Per block: ref counts equal live references, never both free and referenced, keys unique. Each is
  // asserted (with the block) only when one fails: that is millions of assertions per run otherwise.
  for (std::uint32_t b = 1; b < cap; ++b) {
    const block_id id(b);
    const auto key = kv.cache().key_of(id);
    if (kv.cache().ref_count(id) != live[b] || kv.cache().is_free(id) != (live[b] == 0) ||
        (key && kv.cache().find(*key) != id)) {
      CAPTURE(b);
      REQUIRE(kv.cache().ref_count(id) == live[b]);
      REQUIRE(kv.cache().is_free(id) == (live[b] == 0));
      REQUIRE((!key || kv.cache().find(*key) == id));
    }
    referenced += live[b] != 0;
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
      const auto key = host->key_of(block_id(b));
      if (host->ref_count(block_id(b)) != host_live[b] || (key && host->find(*key) != block_id(b))) {
        CAPTURE(b);
        REQUIRE(host->ref_count(block_id(b)) == host_live[b]);
        REQUIRE((!key || host->find(*key) == block_id(b)));
      }
    }
  }
}

}  // namespace

TEST_CASE("kv_manager matches a reference model over thousands of random operations", "[kv][model]") {
  for (const std::uint32_t seed : {11u, 12u, 13u, 14u}) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    kv_config c;
    c.num_blocks = 48;
    c.block_size = 4;
    c.host_blocks = 40;
    c.watermark = 0.05;
    kv_manager<> kv(c);
    std::map<std::uint64_t, model_request> model;
    std::unordered_map<block_key, content> seen_keys;
    // A few shared "documents" so prompts overlap and the cache gets hits.
    std::vector<std::vector<token_id>> docs(4);
    for (auto& d : docs)
      for (int i = 0; i < 40; ++i) d.push_back(static_cast<token_id>(rng() % 5));
    std::uint64_t next_id = 1;
    std::size_t hits = 0, failures = 0, host_hits = 0, rollbacks = 0;
    // Transactions: opened at random, then committed or rolled back; a rollback must restore the
    // snapshot taken at the start exactly.
    std::optional<snapshot> tx_snapshot;
    std::map<std::uint64_t, model_request> tx_model;
    auto pick = [&]() -> std::uint64_t {
      auto it = model.begin();
      std::advance(it, static_cast<long>(rng() % model.size()));
      return it->first;
    };
    for (int step = 0; step < 4000; ++step) {
      if (!tx_snapshot && rng() % 16 == 0) {
        tx_snapshot = take_snapshot(kv);
        tx_model = model;
        kv.begin_transaction();
      } else if (tx_snapshot && rng() % 8 == 0) {
        if (rng() % 2 == 0) {
          kv.rollback_transaction();
          model = tx_model;
          REQUIRE(take_snapshot(kv) == *tx_snapshot);
          ++rollbacks;
        } else {
          kv.commit_transaction();
        }
        tx_snapshot.reset();
      }
      const int op = static_cast<int>(rng() % 10);
      const snapshot before = take_snapshot(kv);
      if (op <= 1 || model.empty()) {
        const auto& d = docs[rng() % docs.size()];
        std::vector<token_id> prompt(d.begin(), d.begin() + static_cast<long>(1 + rng() % d.size()));
        for (std::size_t k = rng() % 6; k > 0; --k) prompt.push_back(static_cast<token_id>(rng() % 5));
        request_options o;
        o.cache_salt = rng() % 4 == 0 ? 99 : 0;
        const request_id id(next_id++);
        const std::size_t slots = rng() % 2 == 0 ? kv_manager<>::whole_prompt : rng() % (prompt.size() + 1);
        const auto r = kv.allocate_prompt(id, prompt, o, slots);
        if (r) {
          REQUIRE(r->cached_tokens % c.block_size == 0);
          REQUIRE(r->cached_tokens < prompt.size());
          REQUIRE(r->slots == std::max(r->cached_tokens, std::min(slots, prompt.size())));
          hits += r->cached_tokens;
          host_hits += r->host_hit_blocks;
          REQUIRE(r->host_to_device.blocks == r->host_hit_blocks);
          model[id.value()] = model_request{prompt, true, o.cache_salt, r->slots, r->hit_blocks * c.block_size, false};
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
        } else if (m.known && m.tokens.size() > m.num_tokens) {
          // Prompt ids (or a preempted decode id) still without slots: the next chunk grows.
          const std::size_t to = m.num_tokens + 1 + rng() % (m.tokens.size() - m.num_tokens);
          const auto r = kv.grow(request_id(id), to);
          if (r.fits) {
            m.num_tokens = to;
          } else {
            ++failures;
            REQUIRE(take_snapshot(kv) == before);
          }
        } else {
          std::vector<token_id> t(n);
          for (auto& x : t) x = static_cast<token_id>(rng() % 5);
          const bool count_only = rng() % 8 == 0;
          const auto r = count_only ? kv.append(request_id(id), n) : kv.append(request_id(id), t);
          if (r.fits) {
            m.num_tokens += n;
            if (count_only) m.known = false;
            if (m.known) {
              m.tokens.insert(m.tokens.end(), t.begin(), t.end());
            } else {
              m.tokens.clear();
            }
            if (r.copy) REQUIRE(before.refs[r.copy->src.value() - 1] >= 2);
          } else {
            ++failures;
            REQUIRE(take_snapshot(kv) == before);
          }
        }
      } else if (op <= 5) {
        const std::uint64_t id = pick();
        model_request& m = model[id];
        if (m.swapped) {
          REQUIRE_THROWS_AS(kv.computed(request_id(id), m.computed), weft::error);
        } else {
          const std::size_t n = m.computed + rng() % (m.num_tokens - m.computed + 1);
          kv.computed(request_id(id), n);
          m.computed = n;
        }
      } else if (op == 6) {
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
      } else if (op == 7) {
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
          if (!m.swapped) m.num_tokens = m.computed;  // slots never written are dropped
          m.swapped = !m.swapped;
        } else {
          ++failures;
          REQUIRE(take_snapshot(kv) == before);
        }
      }
      check_invariants(kv, model, seen_keys);
    }
    if (tx_snapshot) kv.commit_transaction();
    CHECK(hits > 0);       // the workload exercised the cache
    CHECK(host_hits > 0);  // including the host half
    CHECK(failures > 0);   // and the all-or-nothing paths
    CHECK(rollbacks > 0);  // and transactions
    for (const auto& [id, m] : model) kv.free(request_id(id));
    CHECK(kv.used_blocks() == 0);
    CHECK(kv.host_free_blocks() == c.host_blocks - 1);
  }
}

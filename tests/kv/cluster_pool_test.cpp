#include <weft/core/random.hpp>
#include <weft/kv/cluster_pool.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <vector>

using weft::kv::block_id;
using weft::kv::cluster_block;
using weft::kv::cluster_block_move;
using weft::kv::cluster_pool;
using weft::kv::instance_blocks;

namespace {

// Conservation on every instance and across the cluster: free + used + lent == capacity, and the
// blocks lent equal the blocks borrowed.
void check_conservation(const cluster_pool& p) {
  std::size_t lent = 0, borrowed = 0;
  for (std::size_t i = 0; i < p.instances(); ++i) {
    const instance_blocks& b = p.blocks(i);
    CHECK(b.free + b.used_local + b.lent == b.capacity);
    lent += b.lent;
    borrowed += b.borrowed;
  }
  CHECK(lent == borrowed);
}

std::vector<instance_blocks> snapshot(const cluster_pool& p) {
  std::vector<instance_blocks> s;
  for (std::size_t i = 0; i < p.instances(); ++i) s.push_back(p.blocks(i));
  return s;
}

std::map<std::uint32_t, std::size_t> per_owner(const std::vector<cluster_block>& v) {
  std::map<std::uint32_t, std::size_t> m;
  for (const auto& b : v) ++m[b.owner];
  return m;
}

}  // namespace

TEST_CASE("cluster pool: local blocks first, borrowing only when local memory is full", "[kv][cluster_pool]") {
  const std::array<std::size_t, 3> caps{4, 6, 10};
  cluster_pool p(caps, 2);
  std::vector<cluster_block> a;
  REQUIRE(p.allocate(0, 3, a));
  CHECK(per_owner(a) == std::map<std::uint32_t, std::size_t>{{0, 3}});
  CHECK(p.blocks(0).borrowed == 0);
  // 1 local left; 4 more: 1 local, then units of 2 from the richest creditor (instance 2 with 10 free).
  std::vector<cluster_block> b;
  REQUIRE(p.allocate(0, 5, b));
  CHECK(per_owner(b) == std::map<std::uint32_t, std::size_t>{{0, 1}, {2, 4}});
  CHECK(p.blocks(0).used_local == 4);
  CHECK(p.blocks(0).borrowed == 4);
  CHECK(p.blocks(2).lent == 4);
  CHECK(p.blocks(2).free == 6);
  // Now instances 1 and 2 tie at 6 free: the lower index lends first, then the richer one alternates.
  std::vector<cluster_block> c;
  REQUIRE(p.allocate(0, 4, c));
  CHECK(per_owner(c) == std::map<std::uint32_t, std::size_t>{{1, 2}, {2, 2}});
  for (const auto& x : c) CHECK(p.holder(x) == 0);
  check_conservation(p);
  // Frees return blocks to their owners.
  for (const auto& x : b) p.release(0, x);
  CHECK(p.blocks(2).lent == 2);
  CHECK(p.blocks(0).borrowed == 4);
  CHECK(p.blocks(0).used_local == 3);
  check_conservation(p);
}

TEST_CASE("cluster pool: a creditor short of a unit lends what it has, and the next richest the rest",
          "[kv][cluster_pool]") {
  const std::array<std::size_t, 3> caps{1, 3, 2};
  cluster_pool p(caps, 4);
  std::vector<cluster_block> a;
  REQUIRE(p.allocate(0, 6, a));
  CHECK(per_owner(a) == std::map<std::uint32_t, std::size_t>{{0, 1}, {1, 3}, {2, 2}});
  CHECK(p.total_free() == 0);
  check_conservation(p);
}

TEST_CASE("cluster pool: all-or-nothing when the cluster is short", "[kv][cluster_pool]") {
  const std::array<std::size_t, 2> caps{4, 4};
  cluster_pool p(caps);
  std::vector<cluster_block> a;
  REQUIRE(p.allocate(1, 5, a));
  const auto before = snapshot(p);
  std::vector<cluster_block> b{{7, block_id(7)}};
  CHECK_FALSE(p.allocate(0, 4, b));
  CHECK(b.size() == 1);  // nothing appended
  CHECK(snapshot(p) == before);
  CHECK(p.allocate(0, 3, b));
  CHECK(p.total_free() == 0);
  CHECK(p.allocate(0, 0, b));  // nothing asked: nothing to fail
  check_conservation(p);
}

TEST_CASE("cluster pool: the owner reclaims lent blocks, borrowers' KV moves elsewhere", "[kv][cluster_pool]") {
  const std::array<std::size_t, 3> caps{2, 4, 4};
  cluster_pool p(caps);
  std::vector<cluster_block> a;
  REQUIRE(p.allocate(0, 6, a));  // 2 local, 2 from instance 1, 2 from instance 2 (alternating richest)
  CHECK(p.blocks(1).lent == 2);
  CHECK(p.blocks(2).lent == 2);
  std::vector<cluster_block_move> moves;
  // Instance 1 needs its memory back: instance 0 has no free block, so the KV goes to instance 2.
  REQUIRE(p.reclaim(1, 2, moves));
  REQUIRE(moves.size() == 2);
  for (const auto& m : moves) {
    CHECK(m.borrower == 0);
    CHECK(m.from.owner == 1);
    CHECK(m.to.owner == 2);
    CHECK(p.holder(m.to) == 0);
    CHECK_THROWS_AS(p.holder(m.from), weft::error);  // the reclaimed block is free again
  }
  CHECK(p.blocks(1).lent == 0);
  CHECK(p.blocks(1).free == 4);
  CHECK(p.blocks(2).lent == 4);
  CHECK(p.blocks(0).borrowed == 4);
  check_conservation(p);
  // Instance 2 reclaims while instance 0 has a free block: the KV goes home, becoming local.
  p.release(0, a[0]);
  moves.clear();
  REQUIRE(p.reclaim(2, 1, moves));
  CHECK(moves.at(0).to.owner == 0);
  CHECK(p.blocks(0).used_local == 2);
  CHECK(p.blocks(0).borrowed == 3);
  check_conservation(p);
}

TEST_CASE("cluster pool: reclaim is all-or-nothing", "[kv][cluster_pool]") {
  const std::array<std::size_t, 2> caps{2, 4};
  cluster_pool p(caps);
  std::vector<cluster_block> a;
  REQUIRE(p.allocate(0, 5, a));  // 3 lent by instance 1, 1 free there
  const auto before = snapshot(p);
  std::vector<cluster_block_move> moves;
  CHECK_FALSE(p.reclaim(1, 4, moves));  // only 3 lent
  CHECK_FALSE(p.reclaim(1, 1, moves));  // nowhere to put them: instance 0 is full
  CHECK(moves.empty());
  CHECK(snapshot(p) == before);
  CHECK(p.reclaim(1, 0, moves));
}

TEST_CASE("cluster pool: bad input is rejected, naming the value, with nothing changed", "[kv][cluster_pool]") {
  CHECK_THROWS_AS(cluster_pool(std::vector<std::size_t>{}), weft::error);
  CHECK_THROWS_AS(cluster_pool(std::vector<std::size_t>{4, 0}), weft::error);
  CHECK_THROWS_AS(cluster_pool(std::vector<std::size_t>{4}, 0), weft::error);
  const std::array<std::size_t, 2> caps{3, 3};
  cluster_pool p(caps);
  std::vector<cluster_block> a;
  REQUIRE(p.allocate(0, 4, a));
  const auto before = snapshot(p);
  std::vector<cluster_block_move> moves;
  CHECK_THROWS_AS(p.allocate(2, 1, a), weft::error);
  CHECK_THROWS_AS(p.reclaim(5, 1, moves), weft::error);
  CHECK_THROWS_AS(p.blocks(2), weft::error);
  CHECK_THROWS_AS(p.release(0, cluster_block{0, block_id(0)}), weft::error);  // the null block
  CHECK_THROWS_AS(p.release(0, cluster_block{0, block_id(4)}), weft::error);  // out of range
  CHECK_THROWS_AS(p.release(0, cluster_block{9, block_id(1)}), weft::error);  // no such instance
  CHECK_THROWS_AS(p.release(1, a[0]), weft::error);                           // held by instance 0
  const cluster_block free_one = [&] {
    for (std::uint32_t b = 1; b <= 3; ++b)
      if (std::find(a.begin(), a.end(), cluster_block{1, block_id(b)}) == a.end()) return cluster_block{1, block_id(b)};
    return cluster_block{};
  }();
  CHECK_THROWS_AS(p.release(1, free_one), weft::error);  // never allocated
  p.release(0, a[0]);
  CHECK_THROWS_AS(p.release(0, a[0]), weft::error);  // double free
  try {
    p.release(0, cluster_block{0, block_id(9)});
    FAIL("no throw");
  } catch (const weft::error& e) {
    CHECK(std::string(e.what()).find("block 9") != std::string::npos);
  }
  p.allocate(0, 1, a);  // restore the state of `before` (the freed block comes back)
  CHECK(snapshot(p) == before);
}

// A reference model: per instance, the holder of each block as a plain vector; allocation by the same
// documented rule written the slow way. Random operations on both, compared after every step.
TEST_CASE("cluster pool: randomized differential test against a simple model", "[kv][cluster_pool]") {
  weft::rng rng(20240105);
  for (int round = 0; round < 20; ++round) {
    const std::size_t n = 1 + static_cast<std::size_t>(rng.below(5));
    std::vector<std::size_t> caps(n);
    for (auto& c : caps) c = 1 + static_cast<std::size_t>(rng.below(12));
    const std::size_t unit = 1 + static_cast<std::size_t>(rng.below(3));
    cluster_pool p(caps, unit);
    // model[i] = number of free blocks of i; holds[u][o] = blocks of o held by u.
    std::vector<std::size_t> free_of(caps);
    std::vector<std::vector<std::size_t>> holds(n, std::vector<std::size_t>(n, 0));
    std::vector<std::vector<cluster_block>> held(n);
    for (int step = 0; step < 300; ++step) {
      const std::size_t u = static_cast<std::size_t>(rng.below(n));
      const auto op = static_cast<std::size_t>(rng.below(3));
      if (op == 0) {
        const std::size_t k = static_cast<std::size_t>(rng.below(8));
        std::size_t total = 0;
        for (auto f : free_of) total += f;
        std::vector<cluster_block> out;
        const bool ok = p.allocate(u, k, out);
        REQUIRE(ok == (k <= total));
        if (!ok) {
          CHECK(out.empty());
          continue;
        }
        std::vector<std::size_t> expect(n, 0);
        std::size_t left = k, local = std::min(k, free_of[u]);
        expect[u] += local;
        free_of[u] -= local;
        left -= local;
        while (left > 0) {
          std::size_t best = n;
          for (std::size_t i = 0; i < n; ++i)
            if (i != u && (best == n || free_of[i] > free_of[best])) best = i;
          const std::size_t t = std::min({left, unit, free_of[best]});
          expect[best] += t;
          free_of[best] -= t;
          left -= t;
        }
        std::vector<std::size_t> got(n, 0);
        for (const auto& b : out) ++got[b.owner];
        CHECK(got == expect);
        for (std::size_t o = 0; o < n; ++o) holds[u][o] += expect[o];
        held[u].insert(held[u].end(), out.begin(), out.end());
      } else if (op == 1 && !held[u].empty()) {
        const std::size_t i = static_cast<std::size_t>(rng.below(held[u].size()));
        const cluster_block b = held[u][i];
        p.release(u, b);
        held[u].erase(held[u].begin() + static_cast<std::ptrdiff_t>(i));
        ++free_of[b.owner];
        --holds[u][b.owner];
      } else if (op == 2) {
        const std::size_t k = static_cast<std::size_t>(rng.below(4));
        std::size_t lent = 0, elsewhere = 0;
        for (std::size_t h = 0; h < n; ++h)
          if (h != u) lent += holds[h][u];
        for (std::size_t i = 0; i < n; ++i)
          if (i != u) elsewhere += free_of[i];
        std::vector<cluster_block_move> moves;
        const bool ok = p.reclaim(u, k, moves);
        REQUIRE(ok == (k <= lent && k <= elsewhere));
        if (!ok) continue;
        REQUIRE(moves.size() == k);
        for (const auto& m : moves) {
          CHECK(m.from.owner == u);
          CHECK(m.to.owner != u);
          CHECK(p.holder(m.to) == m.borrower);
          auto& v = held[m.borrower];
          auto it = std::find(v.begin(), v.end(), m.from);
          REQUIRE(it != v.end());
          *it = m.to;
          --holds[m.borrower][u];
          ++holds[m.borrower][m.to.owner];
          ++free_of[u];
          --free_of[m.to.owner];
        }
      }
      for (std::size_t i = 0; i < n; ++i) {
        instance_blocks e;
        e.capacity = caps[i];
        e.free = free_of[i];
        e.used_local = holds[i][i];
        for (std::size_t h = 0; h < n; ++h)
          if (h != i) {
            e.lent += holds[h][i];
            e.borrowed += holds[i][h];
          }
        REQUIRE(p.blocks(i) == e);
      }
      check_conservation(p);
    }
  }
}

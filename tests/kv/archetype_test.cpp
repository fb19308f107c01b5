// Archetypes: each kv algorithm instantiated with the weakest type its concept admits, which
// proves the concept is all the algorithm uses (range-v3's practice).
#include <weft/kv/block_table.hpp>
#include <weft/kv/concepts.hpp>
#include <weft/kv/hashed_prefix_cache.hpp>
#include <weft/kv/kv_manager.hpp>
#include <weft/kv/radix_cache.hpp>

#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

using namespace weft::kv;

namespace {

// block_hasher: a state type and begin/absorb/finish (plus default/copy construction), nothing
// else. A polynomial over the inputs: weak, but enough to key distinct test prompts apart.
struct hasher_archetype {
  struct state {
    std::uint64_t h = 0;
  };
  void begin(state& s, block_key parent, std::span<const token_id> tokens) const {
    s.h = parent.lo * 31 + parent.hi + 7;
    for (const token_id t : tokens) s.h = s.h * 1000003 + static_cast<std::uint64_t>(t);
  }
  void absorb(state& s, key_field f, std::span<const std::uint64_t> words) const {
    s.h = s.h * 1000033 + static_cast<std::uint64_t>(f);
    for (const std::uint64_t w : words) s.h = s.h * 1000033 + w;
  }
  block_key finish(state& s) const { return block_key{0, s.h}; }
};

// eviction_policy: a score of plain int.
struct policy_archetype {
  int score(const eviction_stats& s) const { return -static_cast<int>(s.created); }  // newest first
};

// block_allocator: the five members, nothing else.
class allocator_archetype {
 public:
  explicit allocator_archetype(std::size_t n) : pool_(n) {}
  bool allocate(std::size_t n, std::vector<block_id>& out) { return pool_.allocate(n, out); }
  void release(block_id b) { pool_.release(b); }
  void add_ref(block_id b) { pool_.add_ref(b); }
  std::uint32_t ref_count(block_id b) const { return pool_.ref_count(b); }
  std::size_t free_blocks() const { return pool_.free_blocks(); }

 private:
  block_pool pool_;
};

static_assert(block_hasher<hasher_archetype>);
static_assert(eviction_policy<policy_archetype>);
static_assert(block_allocator<allocator_archetype>);
static_assert(block_allocator<block_pool>);
static_assert(block_allocator<hashed_prefix_cache<>>);
static_assert(!block_hasher<int>);
static_assert(!eviction_policy<int>);

std::vector<token_id> seq(std::size_t n) {
  std::vector<token_id> t(n);
  std::iota(t.begin(), t.end(), 1);
  return t;
}

}  // namespace

TEST_CASE("archetype hasher drives the prefix cache and the manager", "[kv][archetype]") {
  kv_config c;
  c.num_blocks = 16;
  c.block_size = 4;
  c.watermark = 0;
  for (const bool verify : {false, true}) {
    c.verify_on_hit = verify;
    kv_manager<hasher_archetype> kv(c);
    REQUIRE(kv.allocate_prompt(request_id(1), seq(13)));
    kv.computed(request_id(1), 13);
    const auto r = kv.allocate_prompt(request_id(2), seq(13));
    REQUIRE(r);
    CHECK(r->cached_tokens == 12);
  }
}

TEST_CASE("archetype eviction policy drives the radix cache", "[kv][archetype]") {
  block_pool pool(16);
  radix_cache<policy_archetype> cache(pool, 2);
  std::vector<block_id> b;
  REQUIRE(pool.allocate(2, b));
  const std::vector<token_id> x{1, 2}, y{3, 4};
  cache.insert(x, std::span<const block_id>(&b[0], 1));
  cache.insert(y, std::span<const block_id>(&b[1], 1));
  CHECK(cache.evict(1) == 1);
  CHECK(cache.match(x).matched_tokens == 2);  // newest (y) went first
  CHECK(cache.match(y).matched_tokens == 0);
}

TEST_CASE("archetype allocator drives block tables with copy-on-write", "[kv][archetype]") {
  allocator_archetype alloc(8);
  block_table t(4);
  REQUIRE(t.append(alloc, 6));
  block_table f = t.fork(alloc);
  const auto r = f.append(alloc, 1);
  REQUIRE(r.copy);
  CHECK(r.copy->src == t.blocks()[1]);
  f.release(alloc);
  t.release(alloc);
  CHECK(alloc.free_blocks() == 7);
}

// Property tests of block keys: with the default hashers, blocks whose inputs differ in one token,
// one position, the salt, the adapter, the tenant or the placement of a multimodal item get
// different keys (from the first block the difference reaches), and equal inputs equal keys.
#include <weft/core/random.hpp>
#include <weft/kv/block_hasher.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <sstream>
#include <unordered_set>
#include <vector>

using namespace weft::kv;

TEST_CASE("block_key is an ordered, hashable, printable 128-bit value", "[kv][keys]") {
  const block_key a{1, 2}, b{1, 3}, c{2, 0};
  CHECK(a < b);
  CHECK(b < c);  // hi first
  CHECK(a == block_key{1, 2});
  CHECK(a.low64() == 2);
  std::ostringstream out;
  out << block_key{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  CHECK(out.str() == "0123456789abcdeffedcba9876543210");
  std::unordered_set<block_key> set{a, b, c, a};
  CHECK(set.size() == 3);
  CHECK(std::hash<block_key>{}(block_key{0, 5}) != std::hash<block_key>{}(block_key{5, 0}));
}

namespace {

struct input {
  std::vector<token_id> tokens;
  std::uint64_t salt = 0, adapter = 0;
  std::optional<tenant_id> tenant;
  std::vector<multimodal_item> media;
  key_options options() const { return key_options{salt, adapter, media, tenant}; }
};

template <class H>
std::vector<block_key> keys_of(const H& h, const input& in, std::size_t bs) {
  std::vector<block_key> k;
  extend_block_keys(in.tokens, bs, in.options(), k, h);
  return k;
}

input random_input(weft::rng& r, std::size_t bs) {
  input in;
  const std::size_t blocks = 2 + r.below(5);
  in.tokens.resize(blocks * bs + r.below(bs));
  // Mostly a realistic vocabulary; sometimes any int32 (the 4-byte encoding).
  const bool wide = r.bernoulli(0.2);
  for (auto& t : in.tokens) t = wide ? static_cast<token_id>(r.next()) : static_cast<token_id>(r.below(150'000));
  if (r.bernoulli(0.5)) in.salt = 1 + r.below(1000);
  if (r.bernoulli(0.5)) in.adapter = 1 + r.below(1000);
  if (r.bernoulli(0.5)) in.tenant = tenant_id(static_cast<std::uint32_t>(r.below(100)));
  const std::size_t items = r.below(12);
  for (std::size_t i = 0; i < items; ++i) in.media.push_back({r.next(), r.below(in.tokens.size()), r.below(2 * bs)});
  std::sort(in.media.begin(), in.media.end(), [](auto& x, auto& y) { return x.offset < y.offset; });
  for (auto& m : in.media) m.length = std::min(m.length, in.tokens.size() - m.offset);
  return in;
}

// Keys [0, first) equal, every key from `first` on different.
void check_differs_from(const std::vector<block_key>& a, const std::vector<block_key>& b, std::size_t first) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("block " << i << " of " << a.size() << ", first difference at " << first);
    if (i < first)
      CHECK(a[i] == b[i]);
    else
      CHECK(a[i] != b[i]);
  }
}

// First full block a media item touches (the block holding offset for a 0-length item).
std::size_t first_block(const multimodal_item& m, std::size_t bs) { return m.offset / bs; }

}  // namespace

TEMPLATE_TEST_CASE("keys differ for blocks that differ in one token, position, salt, adapter, tenant or media",
                   "[kv][keys][property]", sha256_block_hasher, fast_block_hasher) {
  const TestType h{};
  weft::rng r(20261122);
  for (int trial = 0; trial < 150; ++trial) {
    const std::size_t bs = std::array<std::size_t, 3>{1, 4, 16}[r.below(3)];
    const input base = random_input(r, bs);
    const auto k = keys_of(h, base, bs);
    const std::size_t full = base.tokens.size() / bs;
    INFO("trial " << trial << " block size " << bs);
    CHECK(keys_of(h, base, bs) == k);  // deterministic
    CHECK(std::set<block_key>(k.begin(), k.end()).size() == k.size());

    {  // one token
      input x = base;
      const std::size_t p = r.below(full * bs);
      x.tokens[p] ^= 1 + static_cast<token_id>(r.below(7));
      check_differs_from(k, keys_of(h, x, bs), p / bs);
    }
    {  // one position: the same tokens one place to the right (behind a new first token)
      input x = base;
      x.tokens.insert(x.tokens.begin(), x.tokens.front() ^ 1);
      x.tokens.pop_back();
      for (auto& m : x.media) {
        m.offset = std::min(m.offset + 1, x.tokens.size());
        m.length = std::min(m.length, x.tokens.size() - m.offset);
      }
      const auto kx = keys_of(h, x, bs);
      for (std::size_t i = 0; i < full; ++i) CHECK(std::find(k.begin(), k.end(), kx[i]) == k.end());
    }
    {  // salt: changed or removed
      input x = base;
      x.salt = base.salt == 0 ? 7 : (r.bernoulli(0.5) ? 0 : base.salt + 1);
      check_differs_from(k, keys_of(h, x, bs), 0);
    }
    {  // adapter
      input x = base;
      x.adapter = base.adapter == 0 ? 9 : (r.bernoulli(0.5) ? 0 : base.adapter + 1);
      check_differs_from(k, keys_of(h, x, bs), 0);
    }
    {  // tenant: another one, or none
      input x = base;
      if (base.tenant && r.bernoulli(0.5))
        x.tenant.reset();
      else
        x.tenant = tenant_id(base.tenant ? base.tenant->value() + 1 : 3);
      check_differs_from(k, keys_of(h, x, bs), 0);
    }
    if (!base.media.empty()) {  // media: one item's hash, or its placement moved by one token
      const std::size_t i = r.below(base.media.size());
      input x = base;
      x.media[i].content_hash ^= 1;
      if (first_block(base.media[i], bs) < full)
        check_differs_from(k, keys_of(h, x, bs), first_block(base.media[i], bs));
      input y = base;
      if (y.media[i].offset + y.media[i].length < y.tokens.size() &&
          (i + 1 == y.media.size() || y.media[i + 1].offset > y.media[i].offset)) {
        ++y.media[i].offset;
        if (first_block(base.media[i], bs) < full)
          check_differs_from(k, keys_of(h, y, bs), first_block(base.media[i], bs));
      }
    }
  }
}

TEMPLATE_TEST_CASE("fields are domain-separated: the same value as salt, adapter or tenant gives different keys",
                   "[kv][keys]", sha256_block_hasher, fast_block_hasher) {
  const TestType h{};
  const std::vector<token_id> t(32, 5);
  std::set<block_key> seen;
  for (const std::uint64_t v : {1ULL, 42ULL, 0xffffffffULL}) {
    input salt{t, v, 0, {}, {}}, adapter{t, 0, v, {}, {}},
        tenant{t, 0, 0, tenant_id(static_cast<std::uint32_t>(v)), {}};
    for (const input* in : {&salt, &adapter, &tenant}) CHECK(seen.insert(keys_of(h, *in, 16)[0]).second);
  }
  // One media item of three words is not three single-word fields, nor the same words reordered.
  typename TestType::state s;
  const std::array<std::uint64_t, 3> w{1, 2, 3};
  h.begin(s, root_block_key, t);
  h.absorb(s, key_field::media, w);
  const block_key one = h.finish(s);
  h.begin(s, root_block_key, t);
  for (const std::uint64_t x : w) h.absorb(s, key_field::media, std::span<const std::uint64_t>(&x, 1));
  CHECK(h.finish(s) != one);
  h.begin(s, root_block_key, t);
  h.absorb(s, key_field::adapter, w);
  CHECK(h.finish(s) != one);
}

TEMPLATE_TEST_CASE("every overlapping media item counts, with its signed start in the block", "[kv][keys]",
                   sha256_block_hasher, fast_block_hasher) {
  const TestType h{};
  const std::vector<token_id> t(48, 11);
  auto keys = [&](const std::vector<multimodal_item>& media) {
    std::vector<block_key> k;
    extend_block_keys(t, 16, key_options{0, 0, media, {}}, k, h);
    return k;
  };
  // The same image starting 2 or 5 tokens into block 1 (it used to be keyed with offset 0 both times).
  const auto at2 = keys({{77, 18, 4}}), at5 = keys({{77, 21, 4}});
  CHECK(at2[0] == at5[0]);
  CHECK(at2[1] != at5[1]);
  // An item that began in block 0: its start relative to block 1 is negative, and it matters.
  const auto from10 = keys({{77, 10, 20}}), from11 = keys({{77, 11, 20}});
  CHECK(from10[1] != from11[1]);
  // Twenty items in one block (the old fixed buffer kept 8): changing the last one changes the key,
  // and so does moving one by a token.
  std::vector<multimodal_item> many;
  for (std::size_t i = 0; i < 20; ++i) many.push_back({1000 + i, 16 + i / 2, 1});
  const auto base = keys(many);
  auto last = many;
  last.back().content_hash ^= 0xff;
  CHECK(keys(last)[1] != base[1]);
  auto moved = many;
  moved[15].offset = 24;  // 16 + 15/2 = 23 -> 24, still sorted
  CHECK(keys(moved)[1] != base[1]);
  // A zero-length item belongs to the block holding its offset, wherever in the block it is.
  CHECK(keys({{5, 20, 0}})[1] != keys({{5, 21, 0}})[1]);
  CHECK(keys({{5, 16, 0}})[0] == keys({})[0]);
}

#include <weft/core/hash.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <set>
#include <string>

TEST_CASE("hash_bytes depends on every byte, the length and the seed", "[core][hash]") {
  const std::string base(40, 'a');
  std::set<std::uint64_t> seen;
  seen.insert(weft::hash_bytes(base));
  for (std::size_t i = 0; i < base.size(); ++i) {
    std::string s = base;
    s[i] = 'b';
    CHECK(seen.insert(weft::hash_bytes(s)).second);
  }
  for (std::size_t len = 0; len < base.size(); ++len) CHECK(seen.insert(weft::hash_bytes(base.substr(0, len))).second);
  CHECK(weft::hash_bytes(std::string("a")) != weft::hash_bytes(std::string("a\0", 2)));
  CHECK(weft::hash_bytes(base, 1) != weft::hash_bytes(base, 2));
  CHECK(weft::hash_bytes(base, 1) == weft::hash_bytes(base, 1));
}

TEST_CASE("hash_combine is order-sensitive and flips about half the bits", "[core][hash]") {
  CHECK(weft::hash_combine(weft::hash_combine(0, 1), 2) != weft::hash_combine(weft::hash_combine(0, 2), 1));
  double flipped = 0;
  for (std::uint64_t v = 1; v <= 1000; ++v)
    flipped += __builtin_popcountll(weft::hash_combine(99, v) ^ weft::hash_combine(99, v ^ 1));
  CHECK(flipped / 1000 == Approx(32).margin(2));
}

#include <weft/core/random.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <concepts>
#include <cstdint>
#include <random>

static_assert(std::uniform_random_bit_generator<weft::rng>);

TEST_CASE("weft::rng reproduces SplitMix64's published stream", "[core][random]") {
  // Reference values of SplitMix64 seeded with 0 (Vigna's splitmix64.c).
  weft::rng g(0);
  CHECK(g.next() == 0xE220A8397B1DCDAFull);
  CHECK(g.next() == 0x6E789E6AA1B965F4ull);
  CHECK(g.next() == 0x06C45D188009454Full);
}

TEST_CASE("weft::rng distributions stay in range and match their moments", "[core][random]") {
  weft::rng g(42);
  constexpr int n = 200000;
  double sum = 0, sum_exp = 0, sum_norm = 0, sum_norm2 = 0;
  int below_hits[7] = {};
  for (int i = 0; i < n; ++i) {
    const double u = g.uniform();
    REQUIRE(u > 0.0);
    REQUIRE(u < 1.0);
    sum += u;
    sum_exp += g.exponential(4.0);
    const double z = g.normal();
    sum_norm += z;
    sum_norm2 += z * z;
    const auto b = g.below(7);
    REQUIRE(b < 7);
    ++below_hits[b];
  }
  CHECK(sum / n == Approx(0.5).margin(0.01));
  CHECK(sum_exp / n == Approx(0.25).margin(0.01));
  CHECK(sum_norm / n == Approx(0.0).margin(0.01));
  CHECK(sum_norm2 / n == Approx(1.0).margin(0.02));
  for (int c : below_hits) CHECK(c == Approx(n / 7.0).epsilon(0.05));
  CHECK(g.below(0) == 0);
}

TEST_CASE("weft::rng split streams are independent of the parent's later draws", "[core][random]") {
  weft::rng a(7), b(7);
  weft::rng ca = a.split();
  weft::rng cb = b.split();
  CHECK(ca.next() == cb.next());
  CHECK(ca.next() != a.next());
}

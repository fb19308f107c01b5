// half and bfloat16: exhaustive over all 65,536 bit patterns, plus rounding of every midpoint and
// of random floats against an independent double-precision reference.
#include <weft/core/half.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

bool is_nan_bits16_half(std::uint16_t b) { return (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0; }
bool is_nan_bits16_bf(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

// Every finite non-negative value of a 16-bit format, ascending, as doubles with their bits.
struct grid {
  std::vector<double> values;
  std::vector<std::uint16_t> bits;
};

template <class T>
grid positive_finite_grid(std::uint16_t inf_bits) {
  grid g;
  for (std::uint32_t b = 0; b < inf_bits; ++b) {
    g.values.push_back(static_cast<float>(T::from_bits(static_cast<std::uint16_t>(b))));
    g.bits.push_back(static_cast<std::uint16_t>(b));
  }
  return g;
}

// Reference rounding, independent of the implementation: nearest grid value, ties to the even
// bit pattern; beyond the largest finite value by half an ulp or more, infinity.
std::uint16_t reference_round(const grid& g, std::uint16_t inf_bits, double x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  const double a = std::fabs(x);
  const double top = g.values.back();
  const double top_ulp = top - g.values[g.values.size() - 2];
  if (a >= top + top_ulp / 2) return static_cast<std::uint16_t>(sign | inf_bits);
  auto it = std::lower_bound(g.values.begin(), g.values.end(), a);
  if (it == g.values.end()) return static_cast<std::uint16_t>(sign | g.bits.back());
  auto hi = static_cast<std::size_t>(it - g.values.begin());
  if (g.values[hi] == a || hi == 0) return static_cast<std::uint16_t>(sign | g.bits[hi]);
  const std::size_t lo = hi - 1;
  const double dlo = a - g.values[lo], dhi = g.values[hi] - a;
  std::size_t pick = dlo < dhi ? lo : dhi < dlo ? hi : ((g.bits[lo] & 1u) == 0 ? lo : hi);
  return static_cast<std::uint16_t>(sign | g.bits[pick]);
}

}  // namespace

TEST_CASE("half: every bit pattern round-trips through float", "[core][half]") {
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float f = weft::half::from_bits(bits);
    const weft::half back(f);
    if (is_nan_bits16_half(bits)) {
      REQUIRE(std::isnan(f));
      REQUIRE(is_nan_bits16_half(back.bits));
      REQUIRE((back.bits & 0x8000u) == (bits & 0x8000u));
      REQUIRE((back.bits & 0x200u) != 0);  // quieted
    } else {
      REQUIRE(back.bits == bits);
    }
  }
}

TEST_CASE("half: known values", "[core][half]") {
  CHECK(weft::half(1.0f).bits == 0x3c00);
  CHECK(weft::half(-2.0f).bits == 0xc000);
  CHECK(weft::half(65504.0f).bits == 0x7bff);
  CHECK(weft::half(65519.0f).bits == 0x7bff);
  CHECK(weft::half(65520.0f).bits == 0x7c00);  // ties to even: infinity
  CHECK(weft::half(std::ldexp(1.0f, -24)).bits == 0x0001);
  CHECK(weft::half(std::ldexp(1.0f, -25)).bits == 0x0000);  // tie to even zero
  CHECK(weft::half(std::ldexp(1.5f, -25)).bits == 0x0001);
  CHECK(weft::half(-0.0f).bits == 0x8000);
  CHECK(weft::half(std::numeric_limits<float>::infinity()).bits == 0x7c00);
  CHECK(static_cast<float>(weft::half::from_bits(0x3555)) == Approx(0.333251953125f));
  static_assert(weft::half(1.0f).bits == 0x3c00, "conversion is constexpr");
}

TEST_CASE("half: every midpoint and its neighbours round to nearest even", "[core][half]") {
  const grid g = positive_finite_grid<weft::half>(0x7c00);
  for (std::size_t i = 0; i + 1 < g.values.size(); ++i) {
    const double mid = (g.values[i] + g.values[i + 1]) / 2;  // exact in float (one extra bit)
    const auto midf = static_cast<float>(mid);
    REQUIRE(static_cast<double>(midf) == mid);
    for (float x : {midf, std::nextafter(midf, 0.0f), std::nextafter(midf, 1e30f), -midf}) {
      INFO("x = " << x);
      REQUIRE(weft::half(x).bits == reference_round(g, 0x7c00, x));
    }
  }
}

TEST_CASE("half: random floats match the reference rounding", "[core][half]") {
  const grid g = positive_finite_grid<weft::half>(0x7c00);
  std::mt19937 rng(42);
  std::uniform_int_distribution<std::uint32_t> exponent(100, 145), mantissa(0, 0x7fffff), sign(0, 1);
  for (int i = 0; i < 200000; ++i) {
    const std::uint32_t bits = (sign(rng) << 31) | (exponent(rng) << 23) | mantissa(rng);
    const float x = std::bit_cast<float>(bits);
    INFO("bits = " << bits);
    REQUIRE(weft::half(x).bits == reference_round(g, 0x7c00, x));
  }
}

TEST_CASE("bfloat16: every bit pattern round-trips and midpoints tie to even", "[core][bfloat16]") {
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float f = weft::bfloat16::from_bits(bits);
    const weft::bfloat16 back(f);
    if (is_nan_bits16_bf(bits)) {
      REQUIRE(std::isnan(f));
      REQUIRE(is_nan_bits16_bf(back.bits));
    } else {
      REQUIRE(back.bits == bits);
    }
  }
  const grid g = positive_finite_grid<weft::bfloat16>(0x7f80);
  for (std::size_t i = 0; i + 1 < g.values.size(); ++i) {
    const double mid = (g.values[i] + g.values[i + 1]) / 2;
    const auto midf = static_cast<float>(mid);
    for (float x : {midf, std::nextafter(midf, 0.0f), std::nextafter(midf, 3e38f)}) {
      INFO("x = " << x);
      REQUIRE(weft::bfloat16(x).bits == reference_round(g, 0x7f80, x));
    }
  }
  CHECK(weft::bfloat16(1.0f).bits == 0x3f80);
  CHECK(weft::bfloat16(std::numeric_limits<float>::max()).bits == 0x7f80);  // rounds to infinity
}

TEST_CASE("half and bfloat16 arithmetic happens in float", "[core][half]") {
  const weft::half a(1.5f), b(2.25f);
  CHECK(a + b == 3.75f);
  CHECK(a < b);
  const weft::bfloat16 c(3.0f);
  CHECK(c * 2.0f == 6.0f);
}

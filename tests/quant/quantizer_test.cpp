// Quantizers: absmax and min-max codes are the round-to-nearest codes of their ranges, the error
// report matches a direct computation, the error shrinks with more bits and smaller groups, and
// a user-written quantizer (the archetype) plugs in through the concept and through any_quantizer.
#include <weft/quant/quantizers.hpp>

#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <cmath>
#include <span>
#include <vector>

using namespace weft::quant;

namespace {
// The weakest type satisfying weft::quant::quantizer: the two members the concept names, nothing
// else (no default constructor, not copyable-assignable).
struct archetype_quantizer {
  explicit archetype_quantizer(float s) : scale(s) {}
  archetype_quantizer& operator=(const archetype_quantizer&) = delete;
  group_params choose(std::span<const float>, int bits) const { return {scale, symmetric_zero(bits)}; }
  bool symmetric() const { return true; }
  float scale;
};
static_assert(quantizer<archetype_quantizer>);
static_assert(quantizer<absmax_quantizer> && quantizer<minmax_quantizer> && quantizer<any_quantizer>);
static_assert(!quantizer<int>);
}  // namespace

TEST_CASE("quantize: absmax codes are RTN of w / scale and the error report is right", "[quant][quantizer]") {
  const std::int64_t n = 6, k = 200;
  const auto w = quant_test::random_floats(static_cast<std::size_t>(n * k), 3);
  for (int bits : {4, 8}) {
    const auto r = quantize<float>(w, n, k, {bits, 64, true});
    double sum_sq = 0, ref_sq = 0, max_abs = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < k; ++j) {
        const float v = w[static_cast<std::size_t>(i * k + j)];
        const auto g = j / 64;
        float amax = 0;
        for (std::int64_t t = g * 64; t < std::min<std::int64_t>(k, (g + 1) * 64); ++t)
          amax = std::max(amax, std::fabs(w[static_cast<std::size_t>(i * k + t)]));
        const float scale = amax / (bits == 4 ? 7.0f : 127.0f);
        REQUIRE(r.weights.scale(i, g) == scale);
        REQUIRE(r.weights.code(i, j) == static_cast<int>(std::nearbyint(v / scale)) + symmetric_zero(bits));
        const double d = v - r.weights.value(i, j);
        sum_sq += d * d;
        ref_sq += double(v) * v;
        max_abs = std::max(max_abs, std::fabs(d));
        REQUIRE(std::fabs(d) <= scale * 0.5 + 1e-7);
      }
    CHECK(r.error.max_abs == Approx(max_abs));
    CHECK(r.error.relative == Approx(std::sqrt(sum_sq / ref_sq)));
    CHECK(r.error.rmse == Approx(std::sqrt(sum_sq / double(n * k))));
  }
}

TEST_CASE("quantize: more bits and smaller groups give smaller error; min-max beats absmax on skewed data",
          "[quant][quantizer]") {
  const std::int64_t n = 16, k = 512;
  auto w = quant_test::random_floats(static_cast<std::size_t>(n * k), 9, 0.0f, 1.0f);  // all positive: skewed
  const auto e4 = quantize<weft::half>(w, n, k, {4, 128, true}).error;
  const auto e8 = quantize<weft::half>(w, n, k, {8, 128, true}).error;
  const auto e4_g32 = quantize<weft::half>(w, n, k, {4, 32, true}).error;
  const auto e4_minmax = quantize<weft::half>(w, n, k, {4, 128, false}, minmax_quantizer{}).error;
  CHECK(e8.relative < e4.relative / 8);
  CHECK(e4_g32.relative <= e4.relative);
  CHECK(e4_minmax.relative < e4.relative);
  CHECK(e4.sqnr_db > 15.0);
  // Min-max keeps 0 exact and covers the range: every error within half a step.
  const auto r = quantize<float>(w, n, k, {4, 128, false}, minmax_quantizer{});
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < k; ++j)
      REQUIRE(std::fabs(w[static_cast<std::size_t>(i * k + j)] - r.weights.value(i, j)) <=
              r.weights.scale(i, j / 128) * 0.5f + 1e-6f);
}

TEST_CASE("quantize: user-written and run-time-chosen quantizers", "[quant][quantizer]") {
  const std::vector<float> w = {0.5f, -1.0f, 2.0f, 1.0f, 0.0f, 3.0f, -3.0f, 1.5f};
  const archetype_quantizer fixed(0.5f);
  const auto r = quantize<float>(std::span<const float>(w), 1, 8, {4, 0, true}, fixed);
  CHECK(r.weights.code(0, 0) == 9);
  CHECK(r.weights.code(0, 5) == 14);
  CHECK(r.error.max_abs == 0.0);
  CHECK(std::isinf(r.error.sqnr_db));
  const any_quantizer pick =
      std::string("minmax") == "minmax" ? any_quantizer(minmax_quantizer{}) : any_quantizer(absmax_quantizer{});
  CHECK_FALSE(pick.symmetric());
  const auto r2 = quantize<float>(std::span<const float>(w), 1, 8, {4, 0, false}, pick);
  CHECK(r2.error.max_abs <= 6.0 / 15 / 2 + 1e-6);
}

TEST_CASE("quantize: bad input is rejected", "[quant][quantizer]") {
  const std::vector<float> w(64, 1.0f);
  CHECK_THROWS_WITH(quantize<float>(w, 2, 30, {4, 32, true}),
                    Catch::Contains("weights have 64 elements but N x K = 2 x 30"));
  CHECK_THROWS_WITH(quantize<float>(w, 2, 32, {4, 32, false}),
                    Catch::Contains("the quantizer is symmetric but the scheme is asymmetric"));
  CHECK_THROWS_WITH(quantize<float>(w, 2, 32, {3, 32, true}), Catch::Contains("bits = 3"));
  auto nan = w;
  nan[7] = std::nanf("");
  CHECK_THROWS_WITH(quantize<float>(nan, 2, 32, {4, 32, true}), Catch::Contains("weight 7 is nan"));
  // N x K must not wrap to the span's size.
  CHECK_THROWS_WITH(quantize<float>(w, (std::int64_t{1} << 62) + 1, 64, {4, 32, true}), Catch::Contains("overflow"));
  // A scale beyond fp16's range is an error, not a silently clamped matrix.
  const std::vector<float> big(64, 1e6f);
  CHECK_THROWS_WITH(quantize<weft::half>(big, 2, 32, {4, 32, true}), Catch::Contains("cannot hold"));
  CHECK_NOTHROW(quantize<weft::bfloat16>(big, 2, 32, {4, 32, true}));
}

// GPTQ and AWQ converters: random checkpoint tensors round-trip bit for bit (including act-order
// g_idx and v1's zero - 1), the converted weights compute the same product as the checkpoint's own
// unpacking rule, and malformed tensors are rejected.
#include <weft/quant/awq.hpp>
#include <weft/quant/gptq.hpp>
#include <weft/quant/reference.hpp>

#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

using namespace weft::quant;

namespace {

std::vector<std::int32_t> random_words(std::size_t count, std::uint64_t seed) {
  std::mt19937 rng(static_cast<std::uint32_t>(seed));
  std::vector<std::int32_t> v(count);
  for (auto& x : v) x = static_cast<std::int32_t>(rng());
  return v;
}

std::vector<weft::half> random_scales(std::size_t count, std::uint64_t seed) {
  std::vector<weft::half> v;
  for (float f : quant_test::random_floats(count, seed, 0.001f, 0.1f)) v.push_back(weft::half(f));
  return v;
}

// The checkpoint's own meaning of GPTQ tensors, written independently of from_gptq: W[n][k].
float gptq_weight(const gptq_view<weft::half>& t, std::int64_t n, std::int64_t k) {
  const std::int64_t gs = t.group_size == -1 ? t.k : t.group_size;
  const std::int64_t g = t.g_idx.empty() ? k / gs : t.g_idx[static_cast<std::size_t>(k)];
  const auto q =
      (static_cast<std::uint32_t>(t.qweight[static_cast<std::size_t>(k / 8 * t.n + n)]) >> (4 * (k % 8))) & 0xF;
  auto z =
      (static_cast<std::uint32_t>(t.qzeros[static_cast<std::size_t>(g * (t.n / 8) + n / 8)]) >> (4 * (n % 8))) & 0xF;
  if (t.version == gptq_version::v1) z += 1;
  return (static_cast<float>(q) - static_cast<float>(z)) *
         static_cast<float>(t.scales[static_cast<std::size_t>(g * t.n + n)]);
}

}  // namespace

TEST_CASE("gptq: tensors round-trip losslessly, with and without act-order", "[quant][gptq]") {
  for (auto version : {gptq_version::v1, gptq_version::v2})
    for (bool act_order : {false, true})
      for (auto [k, n, gs] : {std::tuple{64, 8, 32}, {256, 24, 128}, {96, 16, -1}, {160, 8, 32}}) {
        INFO("K " << k << " N " << n << " group " << gs << " act_order " << act_order);
        const std::int64_t groups = gs == -1 ? 1 : (k + gs - 1) / gs;
        gptq_tensors<weft::half> t;
        t.k = k;
        t.n = n;
        t.group_size = gs;
        t.version = version;
        t.qweight = random_words(static_cast<std::size_t>(k / 8 * n), 1);
        t.qzeros = random_words(static_cast<std::size_t>(groups * n / 8), 2);
        if (version == gptq_version::v2)  // v2 zeros are 0..15 as stored; v1 any nibble (zero = nibble + 1)
          for (auto& z : t.qzeros) z &= 0x77777777;
        t.scales = random_scales(static_cast<std::size_t>(groups * n), 3);
        if (act_order) {
          std::vector<std::int32_t> perm(static_cast<std::size_t>(k));
          std::iota(perm.begin(), perm.end(), 0);
          std::shuffle(perm.begin(), perm.end(), std::mt19937(5));
          t.g_idx.assign(static_cast<std::size_t>(k), 0);
          const std::int64_t g_size = gs == -1 ? k : gs;
          for (std::int64_t i = 0; i < k; ++i)
            t.g_idx[static_cast<std::size_t>(perm[static_cast<std::size_t>(i)])] =
                static_cast<std::int32_t>(i / g_size);
        }
        const auto imported = from_gptq(t.view());
        CHECK(imported.input_perm.empty() == !act_order);
        // Same matrix as the checkpoint's own rule, after the input permutation.
        for (std::int64_t r = 0; r < n; ++r)
          for (std::int64_t i = 0; i < k; ++i) {
            const std::int64_t orig = act_order ? imported.input_perm[static_cast<std::size_t>(i)] : i;
            REQUIRE(imported.weights.value(r, i) == gptq_weight(t.view(), r, orig));
          }
        const auto back = to_gptq(imported.weights, imported.input_perm, version);
        CHECK(back.qweight == t.qweight);
        CHECK(back.qzeros == t.qzeros);
        CHECK(back.g_idx == t.g_idx);
        CHECK(back.group_size == t.group_size);
        CHECK(std::equal(back.scales.begin(), back.scales.end(), t.scales.begin(),
                         [](weft::half a, weft::half b) { return a.bits == b.bits; }));
      }
}

TEST_CASE("gptq: bad tensors are rejected", "[quant][gptq]") {
  gptq_tensors<weft::half> t;
  t.k = 64;
  t.n = 8;
  t.group_size = 32;
  t.qweight.assign(64, 0);
  t.qzeros.assign(2, 0);
  t.scales.assign(16, weft::half(1.0f));
  CHECK_NOTHROW(from_gptq(t.view()));
  auto bad = t;
  bad.k = 60;
  CHECK_THROWS_WITH(from_gptq(bad.view()), Catch::Contains("K = 60 is not divisible by 8"));
  bad = t;
  bad.n = 12;
  CHECK_THROWS_WITH(from_gptq(bad.view()), Catch::Contains("N = 12 is not divisible by 8"));
  bad = t;
  bad.scales.pop_back();
  CHECK_THROWS_WITH(from_gptq(bad.view()), Catch::Contains("scales has 15 elements but [G][N] needs 16"));
  bad = t;
  bad.qzeros.push_back(0);
  CHECK_THROWS_WITH(from_gptq(bad.view()), Catch::Contains("qzeros has 3 words"));
  bad = t;
  bad.g_idx.assign(64, 0);  // every channel in group 0: not groups of 32
  CHECK_THROWS_WITH(from_gptq(bad.view()), Catch::Contains("exactly 32 input channels"));
  bad = t;
  bad.g_idx.assign(64, 5);
  CHECK_THROWS_WITH(from_gptq(bad.view()), Catch::Contains("g_idx[0] = 5"));
  bad = t;
  bad.group_size = 48;
  CHECK_THROWS_WITH(from_gptq(bad.view()), Catch::Contains("group_size = 48"));
  // v1 stores zero - 1: nibble 15 means zero 16, which v2 cannot store; zero 0 (from v2) does not fit v1.
  bad = t;
  bad.qzeros.assign(2, -1);  // every nibble 15
  const auto w16 = from_gptq(bad.view()).weights;
  CHECK(w16.zero(0, 0) == 16);
  CHECK_NOTHROW(to_gptq(w16, {}, gptq_version::v1));
  CHECK_THROWS_WITH(to_gptq(w16, {}, gptq_version::v2), Catch::Contains("cannot be stored by GPTQ v2"));
  bad = t;
  bad.version = gptq_version::v2;
  const auto w0 = from_gptq(bad.view()).weights;
  CHECK_THROWS_WITH(to_gptq(w0, {}, gptq_version::v1), Catch::Contains("zero point 0 of row 0 group 0"));
  const std::vector<std::int32_t> not_perm(64, 1);
  CHECK_THROWS_WITH(to_gptq(w0, not_perm, gptq_version::v2), Catch::Contains("not a permutation"));
}

TEST_CASE("awq: tensors round-trip losslessly and use nibble order 0,4,1,5,2,6,3,7", "[quant][awq]") {
  for (auto [k, n, gs] : {std::tuple{64, 8, 32}, {128, 32, 128}, {200, 16, 64}}) {
    INFO("K " << k << " N " << n << " group " << gs);
    const std::int64_t groups = (k + gs - 1) / gs;
    awq_tensors<weft::half> t;
    t.k = k;
    t.n = n;
    t.group_size = gs;
    t.qweight = random_words(static_cast<std::size_t>(k * n / 8), 11);
    t.qzeros = random_words(static_cast<std::size_t>(groups * n / 8), 12);
    t.scales = random_scales(static_cast<std::size_t>(groups * n), 13);
    const auto w = from_awq(t.view());
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t i = 0; i < k; ++i) {
        const std::uint32_t word = static_cast<std::uint32_t>(t.qweight[static_cast<std::size_t>(i * n / 8 + r / 8)]);
        const int nibble_of[8] = {0, 4, 1, 5, 2, 6, 3, 7};
        REQUIRE(w.code(r, i) == static_cast<int>((word >> (4 * nibble_of[r % 8])) & 0xF));
      }
    const auto back = to_awq(w);
    CHECK(back.qweight == t.qweight);
    CHECK(back.qzeros == t.qzeros);
    CHECK(std::equal(back.scales.begin(), back.scales.end(), t.scales.begin(),
                     [](weft::half a, weft::half b) { return a.bits == b.bits; }));
  }
}

TEST_CASE("awq and gptq describe the same matrix after conversion", "[quant][awq][gptq]") {
  const auto w = quant_test::exact_matrix<weft::half>(16, 128, {4, 64, false}, 99);
  const auto via_awq = from_awq(to_awq(w).view());
  CHECK(via_awq == w);
  const auto g = to_gptq(w, {}, gptq_version::v2);
  CHECK(from_gptq(g.view()).weights == w);
}

TEST_CASE("awq: bad tensors are rejected", "[quant][awq]") {
  awq_tensors<weft::half> t;
  t.k = 64;
  t.n = 8;
  t.group_size = 32;
  t.qweight.assign(64, 0);
  t.qzeros.assign(2, 0);
  t.scales.assign(16, weft::half(1.0f));
  CHECK_NOTHROW(from_awq(t.view()));
  auto bad = t;
  bad.n = 12;
  CHECK_THROWS_WITH(from_awq(bad.view()), Catch::Contains("N = 12 is not divisible by 8"));
  bad = t;
  bad.qweight.pop_back();
  CHECK_THROWS_WITH(from_awq(bad.view()), Catch::Contains("qweight has 63 words"));
  bad = t;
  bad.scales.resize(8);
  CHECK_THROWS_WITH(from_awq(bad.view()), Catch::Contains("scales has 8 elements"));
  const auto int8 = quant_test::exact_matrix<weft::half>(8, 64, {8, 32, true}, 1);
  CHECK_THROWS_WITH(to_awq(int8), Catch::Contains("int4"));
  const auto per_channel = quant_test::exact_matrix<weft::half>(8, 64, {4, 0, true}, 1);
  CHECK_THROWS_WITH(to_awq(per_channel), Catch::Contains("per-channel"));
}

// Shapes a malicious checkpoint's metadata could claim: the size products must not wrap to a value
// that matches the (small) tensors handed in, and nothing may be read or written out of bounds.
TEST_CASE("gptq/awq: hostile shapes whose size products overflow are rejected", "[quant][gptq][awq]") {
  const std::vector<std::int32_t> words(64, 0x12345678);
  const std::vector<weft::half> scales(64, weft::half(0.5f));
  const std::int64_t huge = (std::int64_t{1} << 62) + 64;
  // k * (n / 8) = 1024 * (2^59 + 8) wraps to 8192 in int64 arithmetic.
  CHECK_THROWS_AS(from_awq(awq_view<weft::half>{1024, huge, 32, words, words, scales}), weft::error);
  CHECK_THROWS_WITH(from_awq(awq_view<weft::half>{1024, huge, 32, words, words, scales}),
                    Catch::Contains("overflow") || Catch::Contains("exceeds"));
  for (std::int64_t n : {std::int64_t{1} << 61, huge, std::int64_t{0x7ffffffffffffff8}})
    for (std::int64_t k : {std::int64_t{8}, std::int64_t{1} << 40, std::int64_t{0x7ffffffffffffff8}}) {
      INFO("K " << k << " N " << n);
      CHECK_THROWS_AS(from_gptq(gptq_view<weft::half>{k, n, 32, words, words, scales, {}, gptq_version::v1}),
                      weft::error);
      CHECK_THROWS_AS(from_gptq(gptq_view<weft::half>{k, n, -1, words, words, scales, {}, gptq_version::v1}),
                      weft::error);
      CHECK_THROWS_AS(from_awq(awq_view<weft::half>{k, n, 32, words, words, scales}), weft::error);
      CHECK_THROWS_AS(from_gptq(gptq_view<weft::half>{n, k, 32, words, words, scales, {}, gptq_version::v1}),
                      weft::error);
      CHECK_THROWS_AS(from_awq(awq_view<weft::half>{n, k, 32, words, words, scales}), weft::error);
    }
  // A group size that would round K up past INT64_MAX.
  CHECK_THROWS_AS(from_awq(awq_view<weft::half>{0x7fffffffffffffff, 8, 1 << 30, words, words, scales}), weft::error);
}

TEST_CASE("gptq/awq: non-finite scales are rejected", "[quant][gptq][awq]") {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    INFO("scale " << bad);
    gptq_tensors<weft::half> g;
    g.k = 64;
    g.n = 8;
    g.group_size = 32;
    g.qweight.assign(64, 0);
    g.qzeros.assign(2, 0);
    g.scales.assign(16, weft::half(1.0f));
    g.scales[5] = weft::half(bad);
    CHECK_THROWS_WITH(from_gptq(g.view()), Catch::Contains("not finite"));
    awq_tensors<weft::half> a;
    a.k = 64;
    a.n = 8;
    a.group_size = 32;
    a.qweight.assign(64, 0);
    a.qzeros.assign(2, 0);
    a.scales.assign(16, weft::half(1.0f));
    a.scales[3] = weft::half(bad);
    CHECK_THROWS_WITH(from_awq(a.view()), Catch::Contains("not finite"));
    const std::vector<std::int32_t> codes(64, 1);
    const std::vector<float> fs{1.0f, bad};
    CHECK_THROWS_WITH(quantized_matrix<float>::from_codes(2, 32, {4, 0, true}, codes, fs),
                      Catch::Contains("not finite"));
  }
}

// quantized_matrix: packing round-trips codes for every shape edge, the layouts match tile_math's
// index functions, and every bad argument is rejected with weft::error and a clear message.
#include <weft/quant/format.hpp>
#include <weft/quant/quantizers.hpp>

#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

using namespace weft::quant;

TEMPLATE_TEST_CASE("quantized_matrix: codes, scales and zeros round-trip through the packed layout", "[quant][format]",
                   float, weft::half, weft::bfloat16) {
  for (int bits : {4, 8})
    for (bool sym : {true, false})
      for (auto [n, k, gs] :
           {std::tuple{1, 32, 32}, {7, 100, 32}, {17, 130, 64}, {5, 256, 128}, {3, 45, 0}, {16, 64, 0}}) {
        const quant_scheme s{bits, gs, sym};
        const auto w = quant_test::exact_matrix<TestType>(n, k, s, 42 + static_cast<std::uint64_t>(n * k));
        INFO("bits " << bits << " sym " << sym << " n " << n << " k " << k << " group " << gs);
        const auto codes = w.codes();
        REQUIRE(codes.size() == static_cast<std::size_t>(n * k));
        const auto back = quantized_matrix<TestType>::from_codes(
            n, k, s, codes, std::vector<TestType>(w.scales().begin(), w.scales().end()),
            std::vector<std::int16_t>(w.zeros().begin(), w.zeros().end()));
        CHECK(back == w);
        CHECK(w.groups() == (gs == 0 ? 1 : (k + gs - 1) / gs));
        CHECK(w.k_padded() % (bits == 4 ? 32 : 64) == 0);
        for (std::int64_t r = 0; r < n; ++r)
          for (std::int64_t c = 0; c < k; ++c) {
            const auto g = c / w.group_size();
            REQUIRE(w.value(r, c) == (static_cast<float>(w.code(r, c) - w.zero(r, g)) * w.scale(r, g)));
          }
      }
}

TEST_CASE("quantized_matrix: int4 layout is the documented nibble order", "[quant][format]") {
  std::vector<std::int32_t> codes(64);
  for (int i = 0; i < 64; ++i) codes[static_cast<std::size_t>(i)] = i % 16;
  const auto w = quantized_matrix<float>::from_codes(1, 64, {4, 64, true}, codes, std::vector<float>{1.0f});
  const auto p = w.packed();
  REQUIRE(p.size() == 32);
  for (int j = 0; j < 16; ++j) {
    CHECK((p[static_cast<std::size_t>(j)] & 0xF) == j % 16);        // element j
    CHECK((p[static_cast<std::size_t>(j)] >> 4) == (j + 16) % 16);  // element j + 16
    CHECK((p[static_cast<std::size_t>(16 + j)] & 0xF) == (32 + j) % 16);
  }
}

TEST_CASE("quantized_matrix: int8 layout is VNNI/AMX panels with row sums", "[quant][format]") {
  const std::int64_t n = 20, k = 70;
  const auto codes = quant_test::random_ints(static_cast<std::size_t>(n * k), 7, -128, 127);
  const auto w = quantized_matrix<float>::from_codes(n, k, {8, 0, true}, codes, std::vector<float>(n, 0.5f));
  CHECK(w.k_padded() == 128);
  CHECK(w.packed().size() == static_cast<std::size_t>(32 * 128));
  for (std::int64_t r = 0; r < n; ++r) {
    std::int32_t sum = 0;
    for (std::int64_t c = 0; c < k; ++c) {
      const auto code = codes[static_cast<std::size_t>(r * k + c)];
      REQUIRE(static_cast<std::int8_t>(w.packed()[static_cast<std::size_t>(int8_offset(r, c, 128))]) == code);
      sum += code;
    }
    CHECK(w.row_sums()[static_cast<std::size_t>(r)] == sum);
  }
  CHECK(w.weight_bytes() == w.packed().size() + n * sizeof(float));
}

TEST_CASE("quantized_matrix: bad arguments are rejected with a message naming the value", "[quant][format]") {
  using M = quantized_matrix<weft::half>;
  const std::vector<std::int32_t> codes(64, 3);
  const std::vector<weft::half> one(2, weft::half(1.0f));
  const auto fails = [](auto&& f, const char* needle) {
    try {
      f();
      FAIL("no error for " << needle);
    } catch (const weft::error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
      CHECK(std::string(e.what()).find("weft::quant::quantized_matrix::from_codes") != std::string::npos);
    }
  };
  fails([&] { (void)M::from_codes(2, 32, {5, 32, true}, codes, one); }, "bits = 5");
  fails([&] { (void)M::from_codes(2, 32, {4, 48, true}, codes, one); }, "group_size = 48");
  fails(
      [&] {
        (void)M::from_codes(2, 31, {4, 32, true}, codes, one);
      },
      "codes has 64 elements but N x K = 2 x 31 = 62");
  fails(
      [&] {
        (void)M::from_codes(1, 64, {4, 32, true}, codes, std::vector<weft::half>(3, weft::half(1.0f)));
      },
      "scales has 3 elements but N x groups = 1 x 2 = 2");
  fails([&] { (void)M::from_codes(2, 32, {4, 32, false}, codes, one); }, "zeros has 0 elements");
  fails([&] { (void)M::from_codes(0, 32, {4, 32, true}, {}, {}); }, "must be positive");
  std::vector<std::int32_t> bad = codes;
  bad[5] = 16;
  fails([&] { (void)M::from_codes(2, 32, {4, 32, true}, bad, one); }, "code 16 at index 5");
  fails(
      [&] {
        (void)M::from_codes(2, 32, {4, 32, true}, codes, one, std::vector<std::int16_t>{8, 7});
      },
      "zero point 7 at index 1");
  const auto w = M::from_codes(2, 32, {4, 32, true}, codes, one);
  CHECK_THROWS_AS(w.code(2, 0), weft::error);
  CHECK_THROWS_AS(w.code(0, 32), weft::error);
  CHECK(w.code(1, 31) == 3);
}

TEST_CASE("quantized_matrix: from_packed loads the packed layout back and checks every size", "[quant][format]") {
  for (auto s :
       {quant_scheme{4, 32, true}, quant_scheme{4, 64, false}, quant_scheme{8, 0, true}, quant_scheme{8, 32, false}}) {
    INFO("bits " << s.bits << " group " << s.group_size << " sym " << s.symmetric);
    const auto w = quant_test::exact_matrix<weft::half>(21, 100, s, 3);
    const auto back = quantized_matrix<weft::half>::from_packed(
        21, 100, s, w.packed(), w.scales(), s.symmetric ? std::span<const std::int16_t>{} : w.zeros());
    CHECK(back == w);
    CHECK(std::equal(back.row_sums().begin(), back.row_sums().end(), w.row_sums().begin(), w.row_sums().end()));
    const auto short_packed = w.packed().first(w.packed().size() - 1);
    CHECK_THROWS_WITH(quantized_matrix<weft::half>::from_packed(21, 100, s, short_packed, w.scales(), w.zeros()),
                      Catch::Contains("packed has " + std::to_string(short_packed.size()) + " bytes but a 21 x 100"));
    CHECK_THROWS_WITH(quantized_matrix<weft::half>::from_packed(21, 100, s, w.packed(), w.scales().first(5), w.zeros()),
                      Catch::Contains("scales has 5 elements"));
    CHECK_THROWS_WITH(quantized_matrix<weft::half>::from_packed(40, 100, s, w.packed(), w.scales(), w.zeros()),
                      Catch::Contains("40 x 100"));
  }
  // int8 padding must be zero: the kernels' row sums and padded products rely on it.
  const auto w8 = quant_test::exact_matrix<float>(3, 10, {8, 0, true}, 4);
  std::vector<std::uint8_t> bytes(w8.packed().begin(), w8.packed().end());
  bytes[static_cast<std::size_t>(int8_offset(2, 40, w8.k_padded()))] = 7;
  CHECK_THROWS_WITH(quantized_matrix<float>::from_packed(3, 10, {8, 0, true}, bytes, w8.scales()),
                    Catch::Contains("padding byte of row 2, input 40 is 7"));
  // Sizes that overflow are an error, not a wrapped comparison.
  CHECK_THROWS_WITH(quantized_matrix<float>::from_packed(std::int64_t{1} << 60, 64, {4, 32, true}, bytes, w8.scales()),
                    Catch::Contains("overflow"));
}

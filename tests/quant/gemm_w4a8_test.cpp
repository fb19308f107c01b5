// W4A8 kernels: every path (portable, AVX2, AVX-512 VNNI; those this CPU has) equals the integer
// reference bit for bit on inputs whose sums are exact in fp32, for every group size (chunks of
// 16, 32 and 64 bytes), ragged K and N, and batches 1..9; on random inputs its error against the
// fp32 product is the activation-quantization error and no more; bad input is rejected.
#include <weft/quant/gemm_w4.hpp>
#include <weft/quant/gemm_w4a8.hpp>
#include <weft/quant/quantizers.hpp>
#include <weft/quant/reference.hpp>

#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <cmath>
#include <cstring>
#include <vector>

using namespace weft::quant;

namespace {

std::vector<isa> runnable_w4a8_paths() {
  std::vector<isa> out;
  for (isa p : w4a8_paths)
    if (cpu_features::get().supports(p)) out.push_back(p);
  return out;
}

// int8 activations in [lo, hi] with power-of-two token scales: every product and sum is exact.
quantized_activations exact_activations(std::int64_t m, std::int64_t k, std::uint64_t seed, int lo, int hi) {
  quantized_activations a{m, k, {}, {}};
  for (int v : quant_test::random_ints(static_cast<std::size_t>(m * k), seed, lo, hi))
    a.values.push_back(static_cast<std::int8_t>(v));
  for (int e : quant_test::random_ints(static_cast<std::size_t>(m), seed + 1, -4, 2))
    a.scales.push_back(std::ldexp(1.0f, e));
  return a;
}

double relative_error(const std::vector<float>& y, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    num += (y[i] - ref[i]) * (y[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("w4a8: chunk order lines activations up with the nibbles of a chunk", "[quant][w4a8]") {
  // CB = 16 is the natural order; CB = 64: element 16 (block 0, high nibble) sits after 64 low ones.
  for (std::int64_t i = 0; i < 96; ++i) CHECK(detail::w4a8_position(i, 16) == i);
  CHECK(detail::w4a8_position(0, 64) == 0);
  CHECK(detail::w4a8_position(15, 64) == 15);
  CHECK(detail::w4a8_position(16, 64) == 64);
  CHECK(detail::w4a8_position(32, 64) == 16);
  CHECK(detail::w4a8_position(127, 64) == 127);
  CHECK(detail::w4a8_position(128, 64) == 128);
  CHECK(detail::w4a8_position(48, 32) == 48);
  CHECK(detail::w4a8_position(40, 32) == 24);
  // Each chunk is a permutation of its elements.
  for (int cb : {16, 32, 64}) {
    std::vector<int> seen(256, 0);
    for (std::int64_t i = 0; i < 256; ++i) ++seen[static_cast<std::size_t>(detail::w4a8_position(i, cb))];
    for (int s : seen) CHECK(s == 1);
  }
  CHECK(detail::w4a8_chunk_bytes(isa::avx512_vnni, 128, 32) == 64);
  CHECK(detail::w4a8_chunk_bytes(isa::avx512_vnni, 64, 2) == 32);
  CHECK(detail::w4a8_chunk_bytes(isa::avx512_vnni, 96, 2) == 16);
  CHECK(detail::w4a8_chunk_bytes(isa::avx512_vnni, 4000, 1) == 64);  // per-channel: one group
  CHECK(detail::w4a8_chunk_bytes(isa::avx2, 128, 8) == 32);
  CHECK(detail::w4a8_chunk_bytes(isa::portable, 128, 8) == 16);
}

TEST_CASE("w4a8: every path is bit-identical to the integer reference on exact inputs", "[quant][w4a8]") {
  for (bool sym : {true, false})
    for (auto [m, n, k, gs] : {std::tuple{1, 1, 32, 32},
                               {1, 7, 100, 32},
                               {1, 33, 300, 128},
                               {3, 9, 64, 0},
                               {5, 12, 130, 64},
                               {8, 5, 256, 128},
                               {2, 64, 1000, 128},
                               {1, 4, 31, 0},
                               {9, 13, 640, 256},
                               {4, 8, 288, 96},
                               {7, 6, 200, 0},
                               {1, 21, 4096, 128}}) {
      INFO("M " << m << " N " << n << " K " << k << " group " << gs << " sym " << sym);
      const auto w = quant_test::exact_matrix<weft::half>(n, k, {4, gs, sym}, static_cast<std::uint64_t>(m * n + k));
      const auto a = exact_activations(m, k, static_cast<std::uint64_t>(k + gs), -8, 8);
      const auto ref = reference_gemm_w4a8(w, a);
      for (isa p : runnable_w4a8_paths())
        for (bool par : {false, true}) {
          INFO("path " << to_string(p) << " parallel " << par);
          std::vector<float> y(static_cast<std::size_t>(m * n), -1.0f);
          gemm_w4a8(w, a, std::span<float>(y), {p, par});
          REQUIRE(quant_test::same_bits(y, ref));
        }
    }
}

TEMPLATE_TEST_CASE("w4a8: full-range int8 activations and every scale type agree with the reference", "[quant][w4a8]",
                   float, weft::half, weft::bfloat16) {
  // Codes 0..15 against -127..127: the largest products the int32 paths see (no saturation in
  // vpmaddubsw's int16 pair sums: 2 * 15 * 127 < 32767).
  const std::int64_t m = 3, n = 19, k = 520;
  const auto w = quant_test::exact_matrix<TestType>(n, k, {4, 128, false}, 5);
  const auto a = exact_activations(m, k, 6, -127, 127);
  const auto ref = reference_gemm_w4a8(w, a);
  for (isa p : runnable_w4a8_paths()) {
    INFO("path " << to_string(p));
    std::vector<float> y(static_cast<std::size_t>(m * n));
    gemm_w4a8(w, a, std::span<float>(y), {p, true});
    for (std::size_t i = 0; i < y.size(); ++i) REQUIRE(y[i] == Approx(ref[i]).epsilon(1e-5));
  }
}

TEST_CASE("w4a8: accuracy against the fp32 product is the activation quantization's, beside W4A16", "[quant][w4a8]") {
  const std::int64_t m = 4, n = 64, k = 1024;
  const auto wf = quant_test::random_floats(static_cast<std::size_t>(n * k), 41);
  const auto xf = quant_test::random_floats(static_cast<std::size_t>(m * k), 42);
  const auto w = quantize<weft::half>(wf, n, k, {4, 128, true}).weights;
  const auto deq = w.dequantize();
  std::vector<double> ref(static_cast<std::size_t>(m * n));
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t c = 0; c < n; ++c)
      for (std::int64_t i = 0; i < k; ++i)
        ref[static_cast<std::size_t>(r * n + c)] +=
            double(deq[static_cast<std::size_t>(c * k + i)]) * xf[static_cast<std::size_t>(r * k + i)];
  std::vector<float> y16(ref.size()), y8(ref.size());
  gemm_w4(w, std::span<const float>(xf), m, std::span<float>(y16));
  gemm_w4a8(w, std::span<const float>(xf), m, std::span<float>(y8));
  const double e16 = relative_error(y16, ref), e8 = relative_error(y8, ref);
  INFO("relative error: W4A32 " << e16 << ", W4A8 " << e8);
  CHECK(e16 < 1e-5);
  // Uniform activations quantized to 8 bits: the product's relative error is about 2^-8 / sqrt(3)
  // per term, averaged down over K; it must be visible but small.
  CHECK(e8 > e16);
  CHECK(e8 < 5e-3);
}

TEST_CASE("w4a8: bf16 activations quantize the same as their fp32 values", "[quant][w4a8]") {
  const std::int64_t m = 2, n = 8, k = 256;
  const auto w = quant_test::exact_matrix<weft::half>(n, k, {4, 128, true}, 8);
  std::vector<weft::bfloat16> xb;
  std::vector<float> xf;
  for (float v : quant_test::random_floats(static_cast<std::size_t>(m * k), 9)) {
    xb.push_back(weft::bfloat16(v));
    xf.push_back(static_cast<float>(xb.back()));
  }
  std::vector<float> yb(static_cast<std::size_t>(m * n)), yf(yb.size());
  gemm_w4a8(w, std::span<const weft::bfloat16>(xb), m, std::span<float>(yb));
  gemm_w4a8(w, std::span<const float>(xf), m, std::span<float>(yf));
  CHECK(quant_test::same_bits(yb, yf));
  std::vector<float> y1(static_cast<std::size_t>(n));
  gemv_w4a8(w, std::span<const float>(xf).first(static_cast<std::size_t>(k)), std::span<float>(y1));
  CHECK(std::equal(y1.begin(), y1.end(), yf.begin()));
}

TEST_CASE("w4a8: bad input is rejected and the output left untouched", "[quant][w4a8]") {
  const auto w = quant_test::exact_matrix<float>(8, 64, {4, 32, true}, 1);
  const auto a = exact_activations(1, 64, 2, -8, 8);
  std::vector<float> y(8, 7.0f);
  CHECK_THROWS_WITH(gemm_w4a8(w, a, std::span<float>(y).first(7)),
                    Catch::Contains("output has 7 elements but M x N = 1 x 8"));
  auto short_a = a;
  short_a.values.pop_back();
  CHECK_THROWS_WITH(gemm_w4a8(w, short_a, std::span<float>(y)), Catch::Contains("activations hold 63 values"));
  auto wrong_k = exact_activations(1, 32, 2, -8, 8);
  CHECK_THROWS_WITH(gemm_w4a8(w, wrong_k, std::span<float>(y)), Catch::Contains("activations are 1 x 32"));
  auto huge = a;
  huge.rows = std::int64_t{1} << 62;
  CHECK_THROWS_WITH(gemm_w4a8(w, huge, std::span<float>(y)), Catch::Contains("overflow"));
  const auto w8 = quant_test::exact_matrix<float>(8, 64, {8, 0, true}, 1);
  CHECK_THROWS_WITH(gemm_w4a8(w8, a, std::span<float>(y)), Catch::Contains("int4"));
  std::vector<float> x(64, 1.0f);
  x[3] = std::nanf("");
  CHECK_THROWS_WITH(gemv_w4a8(w, std::span<const float>(x), std::span<float>(y)), Catch::Contains("not finite"));
  for (float v : y) CHECK(v == 7.0f);
  if (!cpu_features::get().supports(isa::avx512_vnni))
    CHECK_THROWS_WITH(gemm_w4a8(w, a, std::span<float>(y), {isa::avx512_vnni, true}),
                      Catch::Contains("avx512_vnni path was requested"));
}

// CPU kernels: every path (portable, AVX2, AVX-512, VNNI, AMX; those this CPU has) matches the
// reference bit for bit on small-integer inputs, stays within mean relative error 1e-3 of an fp32
// product of the dequantized weights on random inputs, covers every shape edge, rejects bad input.
#include <weft/quant/gemm_w4.hpp>
#include <weft/quant/gemm_w8a8.hpp>
#include <weft/quant/quantizers.hpp>
#include <weft/quant/reference.hpp>

#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

using namespace weft::quant;

namespace {

std::vector<isa> runnable(std::span<const isa> paths) {
  std::vector<isa> out;
  for (isa p : paths)
    if (cpu_features::get().supports(p)) out.push_back(p);
  return out;
}

template <class Act>
std::vector<Act> small_int_activations(std::size_t count, std::uint64_t seed) {
  std::vector<Act> x;
  for (int v : quant_test::random_ints(count, seed, -8, 8)) x.push_back(Act(static_cast<float>(v)));
  return x;
}

// Mean over outputs of |y - ref| / (|ref| + eps), eps guarding outputs that are nearly zero.
double mean_relative_error(const std::vector<float>& y, const std::vector<double>& ref) {
  double sum = 0, scale = 0;
  for (double r : ref) scale += std::fabs(r);
  const double eps = scale / static_cast<double>(ref.size()) * 1e-2;
  for (std::size_t i = 0; i < y.size(); ++i) sum += std::fabs(y[i] - ref[i]) / (std::fabs(ref[i]) + eps);
  return sum / static_cast<double>(y.size());
}

}  // namespace

TEST_CASE("cpu features: detected paths are consistent", "[quant][kernels]") {
  const auto& f = cpu_features::get();
  CHECK(f.supports(isa::portable));
  if (f.supports(isa::avx512_vnni)) CHECK(f.supports(isa::avx512));
  INFO("w4 path " << to_string(w4_path()) << ", w8a8 path " << to_string(w8a8_path()));
  CHECK(static_cast<int>(w4_path()) >= static_cast<int>(isa::portable));
  CHECK(w4_path(isa::portable) == isa::portable);
  if (f.supports(isa::avx512_vnni)) CHECK(w4_path(isa::avx512_vnni) == isa::avx512);  // best at or below
}

TEMPLATE_TEST_CASE("gemm_w4: every path is bit-identical to the reference on small integers", "[quant][kernels]", float,
                   weft::half, weft::bfloat16) {
  using Act = TestType;
  for (bool sym : {true, false})
    for (auto [m, n, k, gs] : {std::tuple{1, 1, 32, 32},
                               {1, 7, 100, 32},
                               {1, 33, 300, 128},
                               {3, 9, 64, 0},
                               {5, 12, 130, 64},
                               {8, 5, 256, 128},
                               {2, 64, 1000, 128},
                               {1, 4, 31, 0}}) {
      INFO("M " << m << " N " << n << " K " << k << " group " << gs << " sym " << sym);
      const auto w = quant_test::exact_matrix<weft::half>(n, k, {4, gs, sym}, static_cast<std::uint64_t>(m * n * k));
      const auto x = small_int_activations<Act>(static_cast<std::size_t>(m * k), 5);
      const auto ref = reference_gemm(w, std::span<const Act>(x), m);
      for (isa p : runnable(w4_paths))
        for (bool par : {false, true}) {
          INFO("path " << to_string(p) << " parallel " << par);
          std::vector<float> y(static_cast<std::size_t>(m * n), -1.0f);
          gemm_w4(w, std::span<const Act>(x), m, std::span<float>(y), {p, par});
          REQUIRE(quant_test::same_bits(y, ref));
        }
    }
}

TEST_CASE("gemm_w4: random inputs within 1e-3 mean relative error of the fp32 dequantized product",
          "[quant][kernels]") {
  const std::int64_t m = 3, n = 96, k = 1000;  // K not a multiple of the group (128)
  const auto wf = quant_test::random_floats(static_cast<std::size_t>(n * k), 21);
  const auto xf = quant_test::random_floats(static_cast<std::size_t>(m * k), 22);
  for (bool sym : {true, false}) {
    const auto w = sym ? quantize<weft::bfloat16>(wf, n, k, {4, 128, true}).weights
                       : quantize<weft::bfloat16>(wf, n, k, {4, 128, false}, minmax_quantizer{}).weights;
    const auto deq = w.dequantize();
    std::vector<weft::half> xh;
    std::vector<weft::bfloat16> xb;
    for (float v : xf) {
      xh.push_back(weft::half(v));
      xb.push_back(weft::bfloat16(v));
    }
    std::vector<double> ref(static_cast<std::size_t>(m * n)), ref_h(ref.size()), ref_b(ref.size());
    for (std::int64_t r = 0; r < m; ++r)
      for (std::int64_t c = 0; c < n; ++c)
        for (std::int64_t i = 0; i < k; ++i) {
          ref[static_cast<std::size_t>(r * n + c)] +=
              double(deq[static_cast<std::size_t>(c * k + i)]) * xf[static_cast<std::size_t>(r * k + i)];
          ref_h[static_cast<std::size_t>(r * n + c)] +=
              double(deq[static_cast<std::size_t>(c * k + i)]) * float(xh[static_cast<std::size_t>(r * k + i)]);
          ref_b[static_cast<std::size_t>(r * n + c)] +=
              double(deq[static_cast<std::size_t>(c * k + i)]) * float(xb[static_cast<std::size_t>(r * k + i)]);
        }
    for (isa p : runnable(w4_paths)) {
      INFO("path " << to_string(p) << " sym " << sym);
      std::vector<float> y(static_cast<std::size_t>(m * n));
      gemm_w4(w, std::span<const float>(xf), m, std::span<float>(y), {p, true});
      CHECK(mean_relative_error(y, ref) < 1e-3);
      gemv_w4(w, std::span<const weft::half>(xh).first(static_cast<std::size_t>(k)),
              std::span<float>(y).first(static_cast<std::size_t>(n)), {p, true});
      gemm_w4(w, std::span<const weft::half>(xh), m, std::span<float>(y), {p, true});
      CHECK(mean_relative_error(y, ref_h) < 1e-3);
      gemm_w4(w, std::span<const weft::bfloat16>(xb), m, std::span<float>(y), {p, true});  // the BF16 path
      CHECK(mean_relative_error(y, ref_b) < 1e-3);
    }
  }
}

TEST_CASE("gemm_w4: bad input is rejected and the output left untouched", "[quant][kernels]") {
  const auto w = quant_test::exact_matrix<float>(8, 64, {4, 32, true}, 1);
  const std::vector<float> x(64, 1.0f);
  std::vector<float> y(8, 7.0f);
  CHECK_THROWS_WITH(gemm_w4(w, std::span<const float>(x).first(63), 1, std::span<float>(y)),
                    Catch::Contains("activations have 63 elements but M x K = 1 x 64"));
  CHECK_THROWS_WITH(gemm_w4(w, std::span<const float>(x), 1, std::span<float>(y).first(7)),
                    Catch::Contains("output has 7 elements but M x N = 1 x 8"));
  CHECK_THROWS_WITH(gemm_w4(w, std::span<const float>(x), 0, std::span<float>(y)), Catch::Contains("M = 0"));
  const auto w8 = quant_test::exact_matrix<float>(8, 64, {8, 0, true}, 1);
  CHECK_THROWS_WITH(gemm_w4(w8, std::span<const float>(x), 1, std::span<float>(y)), Catch::Contains("int4"));
  for (float v : y) CHECK(v == 7.0f);
  if (!cpu_features::get().supports(isa::amx_int8))
    CHECK_THROWS_WITH(gemm_w4(w, std::span<const float>(x), 1, std::span<float>(y), {isa::amx_int8, true}),
                      Catch::Contains("amx_int8 path was requested"));
}

TEST_CASE("gemm_w8a8: every path matches the int32 reference exactly", "[quant][kernels]") {
  for (auto [m, n, k] :
       {std::tuple{1, 1, 4}, {1, 16, 64}, {3, 17, 70}, {33, 40, 130}, {8, 48, 256}, {65, 33, 200}, {2, 5, 3}}) {
    INFO("M " << m << " N " << n << " K " << k);
    const auto w = quant_test::exact_matrix<float>(n, k, {8, 0, true}, static_cast<std::uint64_t>(n + k));
    std::vector<std::int8_t> a;
    for (int v : quant_test::random_ints(static_cast<std::size_t>(m * k), 3, -128, 127))
      a.push_back(static_cast<std::int8_t>(v));
    const auto ref = reference_gemm_w8a8_i32(w, std::span<const std::int8_t>(a), m);
    for (isa p : runnable(w8a8_paths))
      for (bool par : {false, true}) {
        INFO("path " << to_string(p) << " parallel " << par);
        std::vector<std::int32_t> c(static_cast<std::size_t>(m * n), -1);
        gemm_w8a8_i32(w, std::span<const std::int8_t>(a), m, std::span<std::int32_t>(c), {p, par});
        REQUIRE(c == ref);
      }
  }
}

TEST_CASE("gemm_w8a8: scaled output equals the dequantized product of the quantized operands", "[quant][kernels]") {
  const std::int64_t m = 5, n = 37, k = 300;
  const auto wf = quant_test::random_floats(static_cast<std::size_t>(n * k), 31);
  const auto xf = quant_test::random_floats(static_cast<std::size_t>(m * k), 32);
  const auto w = quantize<float>(wf, n, k, {8, 0, true}).weights;
  const auto a = quantize_activations(xf, m, k);
  std::vector<double> ref(static_cast<std::size_t>(m * n));
  std::vector<float> exact(ref.size());
  const auto c = reference_gemm_w8a8_i32(w, std::span<const std::int8_t>(a.values), m);
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t j = 0; j < n; ++j) {
      for (std::int64_t i = 0; i < k; ++i)
        ref[static_cast<std::size_t>(r * n + j)] += double(w.value(j, i)) *
                                                    a.values[static_cast<std::size_t>(r * k + i)] *
                                                    a.scales[static_cast<std::size_t>(r)];
      exact[static_cast<std::size_t>(r * n + j)] = static_cast<float>(c[static_cast<std::size_t>(r * n + j)]) *
                                                   a.scales[static_cast<std::size_t>(r)] * w.scale(j, 0);
    }
  for (isa p : runnable(w8a8_paths)) {
    INFO("path " << to_string(p));
    std::vector<float> y(static_cast<std::size_t>(m * n));
    gemm_w8a8(w, a, std::span<float>(y), {p, true});
    CHECK(quant_test::same_bits(y, exact));
    CHECK(mean_relative_error(y, ref) < 1e-3);
  }
}

TEST_CASE("gemm_w8a8: bad input is rejected", "[quant][kernels]") {
  const auto w = quant_test::exact_matrix<float>(8, 64, {8, 0, true}, 1);
  const std::vector<std::int8_t> a(64, 1);
  std::vector<std::int32_t> c(8, 0);
  CHECK_THROWS_WITH(gemm_w8a8_i32(w, std::span<const std::int8_t>(a).first(60), 1, std::span<std::int32_t>(c)),
                    Catch::Contains("activations have 60 elements"));
  const auto w4 = quant_test::exact_matrix<float>(8, 64, {4, 32, true}, 1);
  CHECK_THROWS_WITH(gemm_w8a8_i32(w4, std::span<const std::int8_t>(a), 1, std::span<std::int32_t>(c)),
                    Catch::Contains("symmetric int8"));
  const auto asym = quant_test::exact_matrix<float>(8, 64, {8, 0, false}, 1);
  CHECK_THROWS_WITH(gemm_w8a8_i32(asym, std::span<const std::int8_t>(a), 1, std::span<std::int32_t>(c)),
                    Catch::Contains("asymmetric"));
  const auto grouped = quant_test::exact_matrix<float>(8, 64, {8, 32, true}, 1);
  std::vector<float> y(8);
  const auto qa = quantize_activations(std::vector<float>(64, 1.0f), 1, 64);
  CHECK_THROWS_WITH(gemm_w8a8(grouped, qa, std::span<float>(y)), Catch::Contains("per-channel"));
  const auto qa_wrong = quantize_activations(std::vector<float>(32, 1.0f), 1, 32);
  CHECK_THROWS_WITH(gemm_w8a8(w, qa_wrong, std::span<float>(y)), Catch::Contains("activations have 32 elements"));
  CHECK_THROWS_WITH(quantize_activations(std::vector<float>(10, 1.0f), 3, 4), Catch::Contains("input has 10 elements"));
}

TEST_CASE("kernels: concurrent calls on shared weights give the same results", "[quant][kernels][concurrent]") {
  const auto w4 = quant_test::exact_matrix<weft::half>(40, 256, {4, 128, false}, 77);
  const auto w8 = quant_test::exact_matrix<float>(40, 256, {8, 0, true}, 78);
  const auto x = small_int_activations<float>(2 * 256, 79);
  std::vector<std::int8_t> a;
  for (int v : quant_test::random_ints(2 * 256, 80, -128, 127)) a.push_back(static_cast<std::int8_t>(v));
  const auto ref4 = reference_gemm(w4, std::span<const float>(x), 2);
  const auto ref8 = reference_gemm_w8a8_i32(w8, std::span<const std::int8_t>(a), 2);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<float> y(80);
      std::vector<std::int32_t> c(80);
      bool good = true;
      for (int rep = 0; rep < 5; ++rep) {
        gemm_w4(w4, std::span<const float>(x), 2, std::span<float>(y), {isa::automatic, t % 2 == 0});
        gemm_w8a8_i32(w8, std::span<const std::int8_t>(a), 2, std::span<std::int32_t>(c), {isa::automatic, t % 2 == 1});
        good = good && quant_test::same_bits(y, ref4) && c == ref8;
      }
      ok[static_cast<std::size_t>(t)] = good ? 1 : 0;
    });
  for (auto& th : threads) th.join();
  for (int v : ok) CHECK(v == 1);
}

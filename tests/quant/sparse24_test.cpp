// 2:4 sparse int4 weights (Sparse-Marlin's format): magnitude pruning, the metadata layout,
// quantization of the kept weights, the packed size against dense int4, the CPU kernels (every
// path bit-identical to the element-wise reference on exact inputs), accuracy, and bad input.
#include <weft/quant/gemm_sparse24.hpp>
#include <weft/quant/gemm_w4.hpp>
#include <weft/quant/reference.hpp>
#include <weft/quant/sparse24_matrix.hpp>

#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <cmath>
#include <cstring>
#include <vector>

using namespace weft::quant;

namespace {

std::vector<isa> runnable_sparse24_paths() {
  std::vector<isa> out;
  for (isa p : sparse24_paths)
    if (cpu_features::get().supports(p)) out.push_back(p);
  return out;
}

// A random 2:4 matrix with exact values: codes 0..15, power-of-two scales, random positions.
template <class Scale>
sparse24_matrix<Scale> exact_sparse(std::int64_t n, std::int64_t k, quant_scheme s, std::uint64_t seed) {
  const std::int64_t gs = s.group_size == 0 ? k : s.group_size, groups = (k + gs - 1) / gs;
  const auto codes = quant_test::random_ints(static_cast<std::size_t>(n * k / 2), seed, 0, 15);
  const auto pairs = quant_test::random_ints(static_cast<std::size_t>(n * k / 4), seed + 1, 0, 5);
  constexpr std::uint8_t choice[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
  std::vector<std::uint8_t> positions;
  for (int p : pairs) {
    positions.push_back(choice[p][0]);
    positions.push_back(choice[p][1]);
  }
  std::vector<Scale> scales;
  for (int e : quant_test::random_ints(static_cast<std::size_t>(n * groups), seed + 2, -3, 2))
    scales.push_back(Scale(std::ldexp(1.0f, e)));
  std::vector<std::int16_t> zeros;
  if (!s.symmetric)
    for (int z : quant_test::random_ints(static_cast<std::size_t>(n * groups), seed + 3, 0, 15))
      zeros.push_back(static_cast<std::int16_t>(z));
  return sparse24_matrix<Scale>::from_parts(n, k, s, codes, positions, scales, zeros);
}

}  // namespace

TEST_CASE("sparse24: magnitude pruning keeps the two largest of every four", "[quant][sparse24]") {
  const std::vector<float> w = {0.1f, -0.5f, 0.3f, 0.2f, 1.0f, 1.0f, 1.0f, 1.0f, 0.0f, 0.0f, 0.0f, -2.0f};
  const auto p = prune_2_4(w, 1, 12);
  CHECK(p == std::vector<float>{0.0f, -0.5f, 0.3f, 0.0f, 1.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -2.0f});
  CHECK_THROWS_WITH(prune_2_4(w, 1, 6), Catch::Contains("multiple of 4"));
  CHECK_THROWS_WITH(prune_2_4(w, 2, 8), Catch::Contains("weights have 12 elements but N x K = 2 x 8"));
  auto nan = w;
  nan[2] = std::nanf("");
  CHECK_THROWS_WITH(prune_2_4(nan, 1, 12), Catch::Contains("not finite"));
}

TEST_CASE("sparse24: metadata holds two 2-bit positions per group of four, low nibble first", "[quant][sparse24]") {
  // Row 0: groups keep (1, 2), (0, 3), then (0, 1) for the rest; codes 1..32.
  std::vector<std::int32_t> codes(32);
  for (int i = 0; i < 32; ++i) codes[static_cast<std::size_t>(i)] = (i % 15) + 1;
  std::vector<std::uint8_t> positions(32);
  for (int t = 0; t < 16; ++t) {
    positions[static_cast<std::size_t>(2 * t)] = t == 0 ? 1 : 0;
    positions[static_cast<std::size_t>(2 * t + 1)] = t == 0 ? 2 : t == 1 ? 3 : 1;
  }
  const std::vector<float> scales{1.0f};
  const auto m = sparse24_matrix<float>::from_parts(1, 64, {4, 0, true}, codes, positions, scales);
  CHECK(m.meta()[0] == static_cast<std::uint8_t>((1 | 2 << 2) | ((0 | 3 << 2) << 4)));
  CHECK(m.nibble(0, 0) == 0b1001);
  CHECK(m.nibble(0, 1) == 0b1100);
  CHECK(m.value(0, 0) == 0.0f);
  CHECK(m.value(0, 1) == static_cast<float>(codes[0] - 8));
  CHECK(m.value(0, 2) == static_cast<float>(codes[1] - 8));
  CHECK(m.value(0, 3) == 0.0f);
  CHECK(m.value(0, 4) == static_cast<float>(codes[2] - 8));
  CHECK(m.value(0, 7) == static_cast<float>(codes[3] - 8));
  const auto dense = m.dequantize();
  int nonzero = 0;
  for (float v : dense) nonzero += v != 0.0f ? 1 : 0;
  CHECK(nonzero <= 32);
}

TEST_CASE("sparse24: quantize_2_4 stores the pruned matrix with 3 bits per weight", "[quant][sparse24]") {
  const std::int64_t n = 48, k = 512;
  const auto w = quant_test::random_floats(static_cast<std::size_t>(n * k), 7);
  const auto pruned = prune_2_4(w, n, k);
  for (bool sym : {true, false}) {
    INFO("symmetric " << sym);
    const auto s = sym ? quantize_2_4<weft::half>(pruned, n, k, {4, 128, true})
                       : quantize_2_4<weft::half>(pruned, n, k, {4, 128, false}, minmax_quantizer{});
    const auto deq = s.weights.dequantize();
    double err = 0, norm = 0;
    for (std::size_t i = 0; i < deq.size(); ++i) {
      if (pruned[i] == 0.0f) REQUIRE(deq[i] == 0.0f);  // pruned weights stay exactly zero
      err += (deq[i] - pruned[i]) * (deq[i] - pruned[i]);
      norm += pruned[i] * pruned[i];
    }
    CHECK(std::sqrt(err / norm) == Approx(s.error.relative).epsilon(1e-6));
    CHECK(s.error.relative < 0.12);  // int4 RTN on the kept half, like dense int4
    // Packed size: K/4 bytes of codes + K/8 of metadata per row + scales, against K/2 for dense.
    const auto dense = quantize<weft::half>(w, n, k, {4, 128, true}).weights;
    const std::size_t scales_bytes = static_cast<std::size_t>(n * (k / 128)) * 2 * (sym ? 1 : 2);
    CHECK(s.weights.weight_bytes() == static_cast<std::size_t>(n * k / 4 + n * k / 8) + scales_bytes);
    CHECK(static_cast<double>(s.weights.weight_bytes()) <
          0.76 * static_cast<double>(dense.weight_bytes()) + 1.0 * (sym ? 0 : scales_bytes));
  }
  // A group of four with three non-zeros is not 2:4.
  std::vector<float> bad(static_cast<std::size_t>(64), 0.0f);
  bad[4] = bad[5] = bad[6] = 1.0f;
  CHECK_THROWS_WITH(quantize_2_4<float>(bad, 1, 64, {4, 64, true}), Catch::Contains("inputs 4..7 hold 3 non-zeros"));
}

TEST_CASE("sparse24: every path is bit-identical to the reference on exact inputs", "[quant][sparse24]") {
  for (bool sym : {true, false})
    for (auto [m, n, k, gs] : {std::tuple{1, 1, 64, 64},
                               {1, 7, 128, 64},
                               {2, 9, 256, 128},
                               {3, 5, 192, 0},
                               {5, 12, 640, 128},
                               {1, 33, 1024, 256}}) {
      INFO("M " << m << " N " << n << " K " << k << " group " << gs << " sym " << sym);
      const auto w = exact_sparse<weft::half>(n, k, {4, gs, sym}, static_cast<std::uint64_t>(n * k + m));
      std::vector<float> x;
      for (int v : quant_test::random_ints(static_cast<std::size_t>(m * k), 3, -8, 8))
        x.push_back(static_cast<float>(v));
      const auto ref = reference_gemm(w, std::span<const float>(x), m);
      for (isa p : runnable_sparse24_paths())
        for (bool par : {false, true}) {
          INFO("path " << to_string(p) << " parallel " << par);
          std::vector<float> y(static_cast<std::size_t>(m * n), -1.0f);
          gemm_sparse24(w, std::span<const float>(x), m, std::span<float>(y), {p, par});
          REQUIRE(quant_test::same_bits(y, ref));
        }
    }
}

TEST_CASE("sparse24: random inputs match the dense kernel on the same (pruned) weights", "[quant][sparse24]") {
  const std::int64_t m = 3, n = 40, k = 1024;
  const auto pruned = prune_2_4(quant_test::random_floats(static_cast<std::size_t>(n * k), 11), n, k);
  const auto s = quantize_2_4<weft::bfloat16>(pruned, n, k, {4, 128, true}).weights;
  const auto xf = quant_test::random_floats(static_cast<std::size_t>(m * k), 12);
  std::vector<weft::bfloat16> xb(xf.begin(), xf.end());
  std::vector<double> ref(static_cast<std::size_t>(m * n));
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t c = 0; c < n; ++c)
      for (std::int64_t i = 0; i < k; ++i)
        ref[static_cast<std::size_t>(r * n + c)] +=
            double(s.value(c, i)) * float(xb[static_cast<std::size_t>(r * k + i)]);
  for (isa p : runnable_sparse24_paths()) {
    std::vector<float> y(static_cast<std::size_t>(m * n));
    gemm_sparse24(s, std::span<const weft::bfloat16>(xb), m, std::span<float>(y), {p, true});
    double err = 0, norm = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      err += (y[i] - ref[i]) * (y[i] - ref[i]);
      norm += ref[i] * ref[i];
    }
    INFO("path " << to_string(p));
    CHECK(std::sqrt(err / norm) < 1e-5);
  }
}

TEST_CASE("sparse24: bad input is rejected with the shapes named", "[quant][sparse24]") {
  using S = sparse24_matrix<float>;
  const std::vector<std::int32_t> codes(32, 3);
  std::vector<std::uint8_t> positions(32);
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<std::uint8_t>(i % 2);
  const std::vector<float> one{1.0f};
  CHECK_NOTHROW(S::from_parts(1, 64, {4, 0, true}, codes, positions, one));
  CHECK_THROWS_WITH(S::from_parts(1, 32, {4, 0, true}, codes, positions, one), Catch::Contains("multiple of 64"));
  CHECK_THROWS_WITH(S::from_parts(1, 64, {4, 32, true}, codes, positions, one), Catch::Contains("group_size = 32"));
  CHECK_THROWS_WITH(S::from_parts(1, 64, {8, 0, true}, codes, positions, one), Catch::Contains("int4"));
  CHECK_THROWS_WITH(S::from_parts(1, 64, {4, 0, true}, codes, std::span<const std::uint8_t>(positions).first(30), one),
                    Catch::Contains("positions has 30 entries but N x K/2 = 1 x 32"));
  auto backwards = positions;
  backwards[4] = 2;
  backwards[5] = 1;
  CHECK_THROWS_WITH(S::from_parts(1, 64, {4, 0, true}, codes, backwards, one),
                    Catch::Contains("group of 4 at input 8 keeps positions 2 and 1"));
  CHECK_THROWS_WITH(S::from_parts(1, 64, {4, 0, true}, std::span<const std::int32_t>(codes).first(31), positions, one),
                    Catch::Contains("codes has 31 elements"));
  CHECK_THROWS_WITH(S::from_parts(std::int64_t{1} << 62, 64, {4, 0, true}, codes, positions, one),
                    Catch::Contains("overflow"));
  const auto w = S::from_parts(1, 64, {4, 0, true}, codes, positions, one);
  std::vector<float> x(64, 1.0f), y(1, 7.0f);
  CHECK_THROWS_WITH(gemv_sparse24(w, std::span<const float>(x).first(63), std::span<float>(y)),
                    Catch::Contains("activations have 63 elements but M x K = 1 x 64"));
  CHECK_THROWS_WITH(gemm_sparse24(w, std::span<const float>(x), 1, std::span<float>()),
                    Catch::Contains("output has 0 elements but M x N = 1 x 1"));
  CHECK(y[0] == 7.0f);
}

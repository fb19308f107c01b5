// quant_gemv: quantize a layer's weights to int4, load the same layer from GPTQ and AWQ tensors,
// and run the batch-1 product (GEMV) a decoder step needs, plus int8 W8A8 and W4A8 products and
// the 2:4 sparse int4 format.
// Shows a user-written quantizer (clipped absmax) next to weft's own. A few seconds in a debug build.
#include <weft/quant.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <span>
#include <vector>

namespace wq = weft::quant;

// A user-written quantizer: absmax, but clipped at a fraction of the maximum, which trades a few
// clipped outliers for a finer step on everything else. Any type with these two members works.
struct clipped_absmax {
  float clip = 0.9f;
  wq::group_params choose(std::span<const float> group, int bits) const {
    float amax = 0.0f;
    for (float v : group) amax = std::max(amax, std::fabs(v));
    const float qmax = bits == 4 ? 7.0f : 127.0f;
    return {amax > 0.0f ? clip * amax / qmax : 1.0f, wq::symmetric_zero(bits)};
  }
  bool symmetric() const { return true; }
};
static_assert(wq::quantizer<clipped_absmax>);

// Printed beside every speed: a debug build's numbers are not weft's speed.
#if defined(NDEBUG) && defined(__OPTIMIZE__)
constexpr const char* build_kind = "optimised build";
#else
constexpr const char* build_kind = "UNOPTIMISED build: not weft's speed";
#endif

int main() {
  const std::int64_t n = 1024, k = 4096;  // a slice of a 7B-class projection (kept small for debug builds)
  std::mt19937 rng(2026);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(static_cast<std::size_t>(n * k)), x(static_cast<std::size_t>(k));
  for (auto& v : w) v = normal(rng);
  for (auto& v : x) v = normal(rng) * 50.0f;

  std::printf("CPU paths: W4 %s, W8A8 %s\n", wq::to_string(wq::w4_path()).data(),
              wq::to_string(wq::w8a8_path()).data());
  std::printf("\n1. Quantize %lld x %lld fp32 weights (%.1f MiB) to int4, groups of 128, fp16 scales\n",
              static_cast<long long>(n), static_cast<long long>(k), n * k * 4 / 1048576.0);
  const auto sym = wq::quantize<weft::half>(w, n, k, {4, 128, true});
  const auto asym = wq::quantize<weft::half>(w, n, k, {4, 128, false}, wq::minmax_quantizer{});
  const auto clipped = wq::quantize<weft::half>(w, n, k, {4, 128, true}, clipped_absmax{});
  for (auto [name, r] :
       {std::pair{"absmax (symmetric)", &sym}, {"min-max (asymmetric)", &asym}, {"clipped absmax (user)", &clipped}})
    std::printf("   %-22s relative error %.4f  SQNR %.1f dB  max |err| %.5f\n", name, r->error.relative,
                r->error.sqnr_db, r->error.max_abs);
  std::printf("   packed size %.2f MiB (%.1fx smaller than fp32)\n", sym.weights.weight_bytes() / 1048576.0,
              n * k * 4.0 / static_cast<double>(sym.weights.weight_bytes()));

  std::printf("\n2. The same layer as a GPTQ (v1) and an AWQ checkpoint would store it, and back\n");
  const auto gptq = wq::to_gptq(asym.weights, {}, wq::gptq_version::v1);
  const auto from_gptq = wq::from_gptq(gptq.view());
  const auto awq = wq::to_awq(asym.weights);
  std::printf("   GPTQ qweight [K/8][N] = %zu int32, qzeros %zu, scales %zu -> identical: %s\n", gptq.qweight.size(),
              gptq.qzeros.size(), gptq.scales.size(), from_gptq.weights == asym.weights ? "yes" : "NO");
  std::printf("   AWQ  qweight [K][N/8] = %zu int32 -> identical: %s\n", awq.qweight.size(),
              wq::from_awq(awq.view()) == asym.weights ? "yes" : "NO");

  std::printf("\n3. GEMV, batch 1, fp16 activations (W4A16), dequantizing on the fly\n");
  std::vector<weft::half> xh;
  for (float v : x) xh.push_back(weft::half(v));
  std::vector<float> y(static_cast<std::size_t>(n));
  wq::gemv_w4(sym.weights, std::span<const weft::half>(xh), std::span<float>(y));  // warm-up
  const int reps = 5;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) wq::gemv_w4(sym.weights, std::span<const weft::half>(xh), std::span<float>(y));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps;
  // Check against fp32 on the dequantized weights, and against the unquantized layer.
  const auto deq = sym.weights.dequantize();
  double err_deq = 0, err_full = 0, norm = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    double a = 0, b = 0;
    for (std::int64_t c = 0; c < k; ++c) {
      a += double(deq[static_cast<std::size_t>(r * k + c)]) * float(xh[static_cast<std::size_t>(c)]);
      b += double(w[static_cast<std::size_t>(r * k + c)]) * x[static_cast<std::size_t>(c)];
    }
    err_deq += (y[static_cast<std::size_t>(r)] - a) * (y[static_cast<std::size_t>(r)] - a);
    err_full += (y[static_cast<std::size_t>(r)] - b) * (y[static_cast<std::size_t>(r)] - b);
    norm += b * b;
  }
  std::printf(
      "   %.3f ms per GEMV, %.1f GB/s of weights: %lld x %lld int4 = %.1f MiB, cache-resident after the\n"
      "   warm-up (bench/quant measures DRAM-sized matrices); %s\n",
      s * 1e3, sym.weights.weight_bytes() / s / 1e9, static_cast<long long>(n), static_cast<long long>(k),
      static_cast<double>(sym.weights.weight_bytes()) / (1 << 20), build_kind);
  std::printf("   relative error vs fp32 product of the dequantized weights: %.2e (kernel arithmetic)\n",
              std::sqrt(err_deq / norm));
  std::printf("   relative error vs the unquantized fp32 layer:              %.2e (int4 quantization)\n",
              std::sqrt(err_full / norm));

  std::printf("\n4. W8A8: int8 weights (per-channel) x int8 activations (per-token), int32 accumulation\n");
  const std::int64_t m = 16;
  std::vector<float> xs(static_cast<std::size_t>(m * k));
  for (auto& v : xs) v = normal(rng) * 50.0f;
  const auto w8 = wq::quantize<float>(w, n, k, {8, 0, true}).weights;
  const auto a8 = wq::quantize_activations(xs, m, k);
  std::vector<float> y8(static_cast<std::size_t>(m * n));
  wq::gemm_w8a8(w8, a8, std::span<float>(y8));
  double e8 = 0, n8 = 0;
  for (std::int64_t r = 0; r < m; r += 5)
    for (std::int64_t c = 0; c < n; c += 7) {
      double b = 0;
      for (std::int64_t i = 0; i < k; ++i)
        b += double(w[static_cast<std::size_t>(c * k + i)]) * xs[static_cast<std::size_t>(r * k + i)];
      e8 += (y8[static_cast<std::size_t>(r * n + c)] - b) * (y8[static_cast<std::size_t>(r * n + c)] - b);
      n8 += b * b;
    }
  std::printf("   %lld x %lld x %lld on the %s path: relative error vs fp32 %.2e\n", static_cast<long long>(m),
              static_cast<long long>(n), static_cast<long long>(k), wq::to_string(wq::w8a8_path()).data(),
              std::sqrt(e8 / n8));

  std::printf("\n5. W4A8: the same int4 weights against int8 per-token activations (exact int32 per group)\n");
  std::vector<float> y48(static_cast<std::size_t>(n));
  wq::gemv_w4a8(sym.weights, std::span<const float>(x), std::span<float>(y48));
  double e48 = 0, n48 = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    double b = 0;
    for (std::int64_t c = 0; c < k; ++c)
      b += double(w[static_cast<std::size_t>(r * k + c)]) * x[static_cast<std::size_t>(c)];
    e48 += (y48[static_cast<std::size_t>(r)] - b) * (y48[static_cast<std::size_t>(r)] - b);
    n48 += b * b;
  }
  std::printf("   %s path: relative error vs the unquantized fp32 layer %.2e (W4A16 above: %.2e)\n",
              wq::to_string(wq::w4a8_path()).data(), std::sqrt(e48 / n48), std::sqrt(err_full / norm));

  std::printf("\n6. 2:4 sparsity (Sparse-Marlin's format): prune 2 of every 4 weights, store 3 bits per weight\n");
  const auto pruned = wq::prune_2_4(w, n, k);
  const auto sparse = wq::quantize_2_4<weft::half>(pruned, n, k, {4, 128, true});
  std::vector<float> ys(static_cast<std::size_t>(n));
  wq::gemv_sparse24(sparse.weights, std::span<const weft::half>(xh), std::span<float>(ys));
  std::printf(
      "   packed %.2f MiB vs dense int4 %.2f MiB; quantization error on the kept weights %.4f "
      "(pruning a dense layer costs more: train or fine-tune 2:4 first)\n",
      sparse.weights.weight_bytes() / 1048576.0, sym.weights.weight_bytes() / 1048576.0, sparse.error.relative);
  return 0;
}

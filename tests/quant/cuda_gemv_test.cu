// The decode GEMVs on a GPU (quant/cuda/w4_gemv.cuh): bit-identical to the CPU reference on exact
// inputs for W4A16 (fp16, bf16; float/fp16/bf16 scales; float or 16-bit output), W4A8 and 2:4
// sparse W4A16, every
// group size, symmetric and not, ragged N and K, M = 1 .. 32, every compiled kernel shape and
// split of K; deterministic on real data; every output written; bad arguments refused before any
// launch. Needs only the CUDA runtime (no Catch2, Boost or TBB), so it runs on a bare GPU machine;
// without a GPU it checks the argument validation and exits 77 (skipped). WEFT_GEMV_TEST_QUICK=1
// runs a smaller set (for compute-sanitizer's slower tools).
#include <weft/quant/cuda/w4_gemv.cuh>
#include <weft/quant/gpu_sparse24_matrix.hpp>
#include <weft/quant/gpu_w4_matrix.hpp>
#include <weft/quant/quantized_activations.hpp>
#include <weft/quant/reference.hpp>

#include "cuda_test_util.cuh"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace wq = weft::quant;
namespace wc = weft::quant::cuda;
using weft::bfloat16;
using weft::half;

namespace {

using weft_cuda_test::check;
using weft_cuda_test::checks;
using weft_cuda_test::cuda_ok;
using weft_cuda_test::device_buffer;
using weft_cuda_test::failures;

/// Every kernel shape the tests launch. The GPU run (bench/quant/gpu/build.sh) compiles the
/// benchmark's whole list; a build without WEFT_GEMV_TEST_EVERY_CONFIG (CI, which has no GPU)
/// compiles the launcher's own list only, to keep its build time down.
#ifdef WEFT_GEMV_TEST_EVERY_CONFIG
using all_configs = std::tuple<wc::gemv_config<2, 2, 8>, wc::gemv_config<2, 1, 8>, wc::gemv_config<1, 4, 8>,
                               wc::gemv_config<4, 1, 8>, wc::gemv_config<4, 2, 4>, wc::gemv_config<2, 2, 4>>;
const wc::gemv_policy all_policies[] = {{2, 2, 8, 0}, {2, 1, 8, 0}, {1, 4, 8, 0},
                                        {4, 1, 8, 0}, {4, 2, 4, 0}, {2, 2, 4, 0}};
using other_configs = wc::default_gemv_configs;
#else
using all_configs = wc::default_gemv_configs;
const wc::gemv_policy all_policies[] = {{2, 2, 8, 0}, {2, 1, 8, 0}, {1, 4, 8, 0}};
using other_configs = std::tuple<wc::gemv_config<2, 2, 8>>;
#endif
// The other type combinations (bf16, float and bf16 scales, 16-bit outputs, W4A8) run with
// other_configs: every shape on the GPU run, one in CI's build.

std::vector<int> random_ints(std::size_t count, unsigned seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int> v(count);
  for (auto& x : v) x = d(rng);
  return v;
}

/// An int4 matrix whose values are exact: codes 0..15, zeros 0..16, power-of-two scales.
template <class Scale>
wq::quantized_matrix<Scale> exact_w4(std::int64_t n, std::int64_t k, int group, bool symmetric, unsigned seed) {
  const wq::quant_scheme s{4, group, symmetric};
  const std::int64_t gs = group == 0 ? wq::round_up(k, 32) : group;
  const std::int64_t groups = wq::ceil_div(k, gs);
  std::vector<std::int32_t> codes;
  for (int c : random_ints(static_cast<std::size_t>(n * k), seed, 0, 15)) codes.push_back(c);
  std::vector<Scale> scales;
  for (int e : random_ints(static_cast<std::size_t>(n * groups), seed + 1, -3, 2))
    scales.push_back(Scale(std::ldexp(1.0f, e)));
  std::vector<std::int16_t> zeros;
  if (!symmetric)
    for (int z : random_ints(scales.size(), seed + 2, 0, 16)) zeros.push_back(static_cast<std::int16_t>(z));
  return wq::quantized_matrix<Scale>::from_codes(n, k, s, codes, scales, zeros);
}

/// The device copy of a gpu_w4_matrix.
template <class Scale>
struct device_matrix {
  wq::gpu_w4_matrix<Scale> host;
  device_buffer<std::uint32_t> words;
  device_buffer<Scale> scales;
  device_buffer<std::uint8_t> zeros;
  explicit device_matrix(const wq::quantized_matrix<Scale>& w)
      : host(wq::gpu_w4_matrix<Scale>::from(w)),
        words(std::vector<std::uint32_t>(host.words().begin(), host.words().end())),
        scales(std::vector<Scale>(host.scales().begin(), host.scales().end())),
        zeros(std::vector<std::uint8_t>(host.zeros().begin(), host.zeros().end())) {}
  const std::uint8_t* zero_ptr() const { return host.symmetric() ? nullptr : zeros.p; }
};

/// A zero-filled workspace that grows to what each launch asks for.
struct workspace {
  void* p = nullptr;
  std::size_t bytes = 0;
  void* at_least(std::size_t want) {
    if (want > bytes) {
      cudaFree(p);
      p = nullptr;
      cuda_ok(cudaMalloc(&p, want), "workspace");
      cuda_ok(cudaMemset(p, 0, want), "workspace zero");
      bytes = want;
    }
    return want == 0 ? nullptr : p;
  }
  ~workspace() { cudaFree(p); }
};
workspace shared_workspace;

template <class Out>
bool same_as_reference(const std::vector<Out>& y, const std::vector<float>& ref) {
  if (y.size() != ref.size()) return false;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if constexpr (std::is_same_v<Out, float>) {
      if (std::memcmp(&y[i], &ref[i], 4) != 0) return false;
    } else {
      if (y[i].bits != Out(ref[i]).bits) return false;
    }
  }
  return true;
}

std::string describe(const char* kind, std::int64_t m, std::int64_t n, std::int64_t k, int group, bool sym,
                     const wc::gemv_policy& pol) {
  char b[256];
  std::snprintf(b, sizeof b, "%s M=%lld N=%lld K=%lld group=%d %s policy{%d,%d,%d,splits %d}", kind,
                static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k), group,
                sym ? "sym" : "asym", pol.tiles_per_warp, pol.chunks_in_flight, pol.warps, pol.splits);
  return b;
}

template <class Configs, class Act, class Scale, class Out>
void run_w4a16(std::int64_t m, std::int64_t n, std::int64_t k, int group, bool sym, const wc::gemv_policy& pol) {
  const unsigned seed = static_cast<unsigned>(m * 131 + n * 7 + k * 3 + group + sym);
  const auto w = exact_w4<Scale>(n, k, group, sym, seed);
  std::vector<Act> x;
  for (int v : random_ints(static_cast<std::size_t>(m * k), seed + 9, -8, 8)) x.push_back(Act(static_cast<float>(v)));
  const auto ref = wq::reference_gemm(w, std::span<const Act>(x), m);
  device_matrix<Scale> dw(w);
  device_buffer<Act> dx(x);
  device_buffer<Out> dy(static_cast<std::size_t>(m * n));
  auto p = wc::make_gemv_params(dw.host, dx.p, dw.words.p, dw.scales.p, dw.zero_ptr(), dy.p, m);
  p.workspace = shared_workspace.at_least(wc::w4_gemv_workspace_bytes<Configs>(p, pol));
  const std::string what = describe("w4a16", m, n, k, group, sym, pol);
  for (int rep = 0; rep < 2; ++rep) {  // twice: the split counters must be back at zero
    dy.poison();
    cuda_ok(wc::launch_w4a16_gemv<Configs>(p, pol), what + " launch");
    cuda_ok(cudaDeviceSynchronize(), what + " run");
    check(same_as_reference(dy.get(), ref), what + " == reference");
  }
}

template <class Configs, class Scale>
void run_w4a8(std::int64_t m, std::int64_t n, std::int64_t k, int group, bool sym, const wc::gemv_policy& pol) {
  const unsigned seed = static_cast<unsigned>(m * 17 + n * 5 + k + group + sym);
  const auto w = exact_w4<Scale>(n, k, group, sym, seed);
  wq::quantized_activations a{m, k, {}, {}};
  for (int v : random_ints(static_cast<std::size_t>(m * k), seed + 3, -127, 127))
    a.values.push_back(static_cast<std::int8_t>(v));
  for (std::int64_t r = 0; r < m; ++r) a.scales.push_back(r % 3 == 0 ? 0.5f : 2.0f);
  const auto ref = wq::reference_gemm_w4a8(w, a);
  device_matrix<Scale> dw(w);
  device_buffer<std::int8_t> dx(a.values);
  device_buffer<float> dxs(a.scales);
  device_buffer<float> dy(static_cast<std::size_t>(m * n));
  auto p = wc::make_gemv_params(dw.host, dx.p, dw.words.p, dw.scales.p, dw.zero_ptr(), dy.p, m, nullptr, dxs.p);
  p.workspace = shared_workspace.at_least(wc::w4_gemv_workspace_bytes<Configs>(p, pol));
  const std::string what = describe("w4a8", m, n, k, group, sym, pol);
  dy.poison();
  cuda_ok(wc::launch_w4a8_gemv<Configs>(p, pol), what + " launch");
  cuda_ok(cudaDeviceSynchronize(), what + " run");
  check(same_as_reference(dy.get(), ref), what + " == reference");
}

/// 2:4 sparse weights with exact values: random kept codes and positions, power-of-two scales.
wq::sparse24_matrix<half> exact_sparse24(std::int64_t n, std::int64_t k, int group, bool symmetric, unsigned seed) {
  std::vector<std::int32_t> codes;
  for (int c : random_ints(static_cast<std::size_t>(n * k / 2), seed, 0, 15)) codes.push_back(c);
  const auto firsts = random_ints(static_cast<std::size_t>(n * k / 4), seed + 1, 0, 2);
  const auto seconds = random_ints(firsts.size(), seed + 2, 0, 2);
  std::vector<std::uint8_t> positions;
  for (std::size_t i = 0; i < firsts.size(); ++i) {
    positions.push_back(static_cast<std::uint8_t>(firsts[i]));
    positions.push_back(static_cast<std::uint8_t>(firsts[i] + 1 + seconds[i] % (3 - firsts[i])));
  }
  const std::int64_t groups = group == 0 ? 1 : wq::ceil_div(k, group);
  std::vector<half> scales;
  for (int e : random_ints(static_cast<std::size_t>(n * groups), seed + 3, -3, 2))
    scales.push_back(half(std::ldexp(1.0f, e)));
  std::vector<std::int16_t> zeros;
  if (!symmetric)
    for (int z : random_ints(scales.size(), seed + 4, 0, 16)) zeros.push_back(static_cast<std::int16_t>(z));
  return wq::sparse24_matrix<half>::from_parts(n, k, {4, group, symmetric}, codes, positions, scales, zeros);
}

template <class Configs, class Act, class Out>
void run_sparse24(std::int64_t m, std::int64_t n, std::int64_t k, int group, bool sym, const wc::gemv_policy& pol) {
  const unsigned seed = static_cast<unsigned>(m * 11 + n * 3 + k + group + sym);
  const auto w = exact_sparse24(n, k, group, sym, seed);
  std::vector<Act> x;
  for (int v : random_ints(static_cast<std::size_t>(m * k), seed + 9, -8, 8)) x.push_back(Act(static_cast<float>(v)));
  const auto ref = wq::reference_gemm(w, std::span<const Act>(x), m);
  const auto g = wq::gpu_sparse24_matrix<half>::from(w);
  device_buffer<std::uint32_t> words(std::vector<std::uint32_t>(g.words().begin(), g.words().end()));
  device_buffer<std::uint32_t> meta(std::vector<std::uint32_t>(g.meta().begin(), g.meta().end()));
  device_buffer<half> scales(std::vector<half>(g.scales().begin(), g.scales().end()));
  device_buffer<std::uint8_t> zeros(std::vector<std::uint8_t>(g.zeros().begin(), g.zeros().end()));
  device_buffer<Act> dx(x);
  device_buffer<Out> dy(static_cast<std::size_t>(m * n));
  auto p = wc::make_gemv_params(g, dx.p, words.p, meta.p, scales.p, sym ? nullptr : zeros.p, dy.p, m);
  p.workspace = shared_workspace.at_least(wc::w4_gemv_workspace_bytes<Configs>(p, pol));
  const std::string what = describe("sparse24", m, n, k, group, sym, pol);
  dy.poison();
  cuda_ok(wc::launch_w4a16_sparse24_gemv<Configs>(p, pol), what + " launch");
  cuda_ok(cudaDeviceSynchronize(), what + " run");
  check(same_as_reference(dy.get(), ref), what + " == reference");
}

/// Real data (random fp16 activations and scales): the same bits on every run and every split,
/// and within fp32 rounding of a float64 sum over the fp16-rounded inputs.
void run_real_data() {
  const std::int64_t m = 5, n = 300, k = 4096;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<std::int32_t> codes(static_cast<std::size_t>(n * k));
  for (auto& c : codes) c = static_cast<std::int32_t>(rng() % 16);
  std::vector<half> scales(static_cast<std::size_t>(n * (k / 128)));
  for (auto& s : scales) s = half(0.01f + 0.02f * std::fabs(d(rng)));
  std::vector<std::int16_t> zeros(scales.size());
  for (auto& z : zeros) z = static_cast<std::int16_t>(rng() % 17);
  const auto w = wq::quantized_matrix<half>::from_codes(n, k, {4, 128, false}, codes, scales, zeros);
  std::vector<half> x(static_cast<std::size_t>(m * k));
  for (auto& v : x) v = half(d(rng));
  device_matrix<half> dw(w);
  device_buffer<half> dx(x);
  device_buffer<float> dy(static_cast<std::size_t>(m * n));
  auto p = wc::make_gemv_params(dw.host, dx.p, dw.words.p, dw.scales.p, dw.zero_ptr(), dy.p, m);
  std::vector<double> ref(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t r = 0; r < m; ++r)
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < k; ++j)
        ref[static_cast<std::size_t>(r * n + i)] +=
            static_cast<double>(w.value(i, j)) *
            static_cast<double>(static_cast<float>(x[static_cast<std::size_t>(r * k + j)]));
  for (int splits : {1, 3, 7, 0}) {
    const wc::gemv_policy pol{2, 2, 8, splits};
    p.workspace = shared_workspace.at_least(wc::w4_gemv_workspace_bytes(p, pol));
    std::vector<float> first;
    for (int rep = 0; rep < 3; ++rep) {
      dy.poison();
      cuda_ok(wc::launch_w4a16_gemv(p, pol), "real-data launch");
      cuda_ok(cudaDeviceSynchronize(), "real-data run");
      const auto y = dy.get();
      if (rep == 0) first = y;
      check(std::memcmp(y.data(), first.data(), y.size() * 4) == 0,
            "real data: run " + std::to_string(rep) + " with splits " + std::to_string(splits) + " has the same bits");
      double err = 0, norm = 0;
      for (std::size_t i = 0; i < y.size(); ++i) {
        err += (y[i] - ref[i]) * (y[i] - ref[i]);
        norm += ref[i] * ref[i];
      }
      check(std::sqrt(err / norm) < 1e-5, "real data: relative error " + std::to_string(std::sqrt(err / norm)) +
                                              " < 1e-5 with splits " + std::to_string(splits));
    }
  }
}
template <class F>
void expect_error(F&& f, const char* needle, const std::string& what) {
  try {
    f();
    check(false, what + ": no error");
  } catch (const weft::error& e) {
    check(std::strstr(e.what(), needle) != nullptr, what + ": message '" + e.what() + "' names '" + needle + "'");
  }
}

void bad_arguments(bool gpu) {
  // Host pointers stand in for device ones: the shape checks come first and need no GPU.
  static half x[64];
  static std::uint32_t words[256];
  static half scales[32];
  static float y[16];
  wc::w4_gemv_params<half, half, float> p{};
  p.x = x;
  p.words = words;
  p.scales = scales;
  p.y = y;
  p.m = 1;
  p.n = 16;
  p.k = 64;
  p.tiles = 1;
  p.chunks = 1;
  p.group_size = 64;
  p.groups = 1;
  auto q = p;
  q.m = 0;
  expect_error([&] { (void)wc::launch_w4a16_gemv(q); }, "must be positive", "M = 0");
  q = p;
  q.m = 33;
  expect_error([&] { (void)wc::launch_w4a16_gemv(q); }, "M = 33", "M = 33");
  q = p;
  q.tiles = 2;
  expect_error([&] { (void)wc::launch_w4a16_gemv(q); }, "tiles = 2", "wrong tile count");
  q = p;
  q.group_size = 48;
  expect_error([&] { (void)wc::launch_w4a16_gemv(q); }, "group_size = 48", "group size not a multiple of 32");
  q = p;
  q.k = 128;
  q.chunks = 2;
  q.group_size = 32;
  q.groups = 4;
  expect_error([&] { (void)wc::launch_w4a16_gemv(q); }, "multiple of 64", "groups of 32 inputs");
  q = p;
  q.meta = words;
  expect_error([&] { (void)wc::launch_w4a16_gemv(q); }, "launch_w4a16_sparse24_gemv", "dense launch of 2:4 weights");
  q = p;
  q.x = nullptr;
  expect_error([&] { (void)wc::launch_w4a16_gemv(q); }, "x is null", "null x");
  q = p;
  expect_error([&] { (void)wc::launch_w4a16_gemv(q, {3, 3, 3, 0}); }, "not one of the compiled", "unknown policy");
  if (gpu) {
    // Host memory where device memory is needed, and a split of K without a workspace.
    expect_error([&] { (void)wc::launch_w4a16_gemv(p); }, "not device", "host pointer");
    device_buffer<half> dx(64);
    device_buffer<std::uint32_t> dwords(256);
    device_buffer<half> dscales(32);
    device_buffer<float> dy(16);
    q = p;
    q.x = dx.p;
    q.words = dwords.p;
    q.scales = dscales.p;
    q.y = dy.p;
    expect_error([&] { (void)wc::launch_w4a16_gemv(q, {2, 2, 8, 2}); }, "workspace is null", "missing workspace");
    wc::w4_gemv_params<std::int8_t, half, float> r{};
    device_buffer<std::int8_t> dx8(64);
    r.x = dx8.p;
    r.words = dwords.p;
    r.scales = dscales.p;
    r.y = dy.p;
    r.m = 1;
    r.n = 16;
    r.k = 64;
    r.tiles = 1;
    r.chunks = 1;
    r.group_size = 64;
    r.groups = 1;
    expect_error([&] { (void)wc::launch_w4a8_gemv<other_configs>(r); }, "x_scales is null",
                 "W4A8 without token scales");
  }
  // A words pointer off the 16-byte loads (on device memory where there is a GPU).
  const auto misaligned = [&](wc::w4_gemv_params<half, half, float> bad) {
    bad.words += 1;
    expect_error([&] { (void)wc::launch_w4a16_gemv(bad); }, "not 16-byte aligned", "misaligned words");
  };
  if (gpu) {
    device_buffer<half> dx(64), dscales(32);
    device_buffer<std::uint32_t> dwords(256);
    device_buffer<float> dy(16);
    q = p;
    q.x = dx.p;
    q.words = dwords.p;
    q.scales = dscales.p;
    q.y = dy.p;
    misaligned(q);
  } else {
    misaligned(p);
  }
  const auto w = exact_w4<half>(16, 64, 64, false, 1);
  const auto g = wq::gpu_w4_matrix<half>::from(w);
  expect_error([&] { (void)wc::make_gemv_params(g, x, words, scales, nullptr, y, 1); }, "zero points",
               "asymmetric matrix without zeros");
}

}  // namespace

int main() {
  const bool gpu = weft_cuda_test::gpu_present();
  bad_arguments(gpu);
  if (!gpu) return weft_cuda_test::skipped_without_gpu("quant.cuda_gemv");
  const char* quick_env = std::getenv("WEFT_GEMV_TEST_QUICK");
  const int quick = quick_env == nullptr ? 0 : std::atoi(quick_env);
  struct shape {
    std::int64_t n, k;
    int group;
    bool sym;
  };
  const shape shapes[] = {{37, 200, 128, false}, {300, 1000, 0, true}, {64, 4096, 128, false},
                          {50, 320, 256, true},  {16, 96, 96, false},  {1000, 512, 64, true}};
  const std::int64_t ms[] = {1, 3, 8, 16, 17, 32};
  for (const auto& s : shapes)
    for (std::int64_t m : ms) {
      if (quick > 0 && m != 3 && m != 17) continue;
      if (quick > 1 && (s.n != 37 || m != 17)) continue;
      for (const auto& pol : all_policies)
        for (int splits : {0, 1, 3}) {
          if (quick > 0 && splits == 0) continue;
          if (quick > 1 && &pol != &all_policies[0] && pol.warps != 4) continue;
          auto ps = pol;
          ps.splits = splits;
          run_w4a16<all_configs, half, half, float>(m, s.n, s.k, s.group, s.sym, ps);
        }
      run_w4a16<other_configs, bfloat16, bfloat16, float>(m, s.n, s.k, s.group, s.sym, {});
      run_w4a16<other_configs, bfloat16, bfloat16, float>(m, s.n, s.k, s.group, s.sym, {2, 2, 8, 3});
      run_w4a16<other_configs, half, float, float>(m, s.n, s.k, s.group, s.sym, {});
      run_w4a16<other_configs, half, half, half>(m, s.n, s.k, s.group, s.sym, {});
      run_w4a16<other_configs, bfloat16, half, bfloat16>(m, s.n, s.k, s.group, s.sym, {});
      run_w4a8<other_configs, half>(m, s.n, s.k, s.group, s.sym, {});
      run_w4a8<other_configs, float>(m, s.n, s.k, s.group, s.sym, {2, 2, 8, 3});
    }
  for (auto [n, k, group, sym] : {std::tuple{37, 192, 0, false}, {300, 1024, 128, true}, {64, 4096, 128, false}})
    for (std::int64_t m : ms) {
      if (quick > 0 && m != 3 && m != 17) continue;
      run_sparse24<all_configs, half, float>(m, n, k, group, sym, {});
      for (int splits : {1, 3}) {
        if (quick > 1 && splits == 1) continue;
        run_sparse24<all_configs, half, float>(m, n, k, group, sym, {2, 2, 8, splits});
      }
      run_sparse24<other_configs, bfloat16, bfloat16>(m, n, k, group, sym, {});
    }
  if (quick == 0) run_real_data();
  std::printf("quant.cuda_gemv: %d of %d checks failed\n", failures, checks);
  return failures == 0 ? 0 : 1;
}

// weft::quant's CUDA kernels, compiled for sm_80 and sm_90 whenever nvcc exists. With a GPU they
// run against the CPU reference (bit-identical on small integers); without one the test reports
// what it compiled and exits 77 (skipped). The launchers' argument checks run either way.
#include <weft/quant/cuda/w4a16_gemm.cuh>
#include <weft/quant/cuda/w4a16_sparse24_gemm.cuh>
#include <weft/quant/cuda/w4a8_gemm.cuh>
#include <weft/quant/cuda/w8a8_gemm.cuh>
#include <weft/quant/reference.hpp>

#include <cstdio>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

namespace wq = weft::quant;

namespace {

int failures = 0;
void check(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what);
    ++failures;
  }
}

template <class T>
T* to_device(const std::vector<T>& v) {
  T* p = nullptr;
  cudaMalloc(&p, v.size() * sizeof(T));
  cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return p;
}

template <class Act>
void run_w4(std::int64_t m, std::int64_t n, std::int64_t k, int group) {
  std::mt19937 rng(static_cast<unsigned>(m * n * k));
  std::vector<std::int32_t> codes(static_cast<std::size_t>(n * k));
  for (auto& c : codes) c = static_cast<std::int32_t>(rng() % 16);
  const std::int64_t groups = (k + group - 1) / group;
  std::vector<weft::half> scales(static_cast<std::size_t>(n * groups), weft::half(0.5f));
  std::vector<std::int16_t> zeros(scales.size());
  for (auto& z : zeros) z = static_cast<std::int16_t>(rng() % 16);
  const auto w = wq::quantized_matrix<weft::half>::from_codes(n, k, {4, group, false}, codes, scales, zeros);
  std::vector<Act> x;
  for (std::int64_t i = 0; i < m * k; ++i) x.push_back(Act(static_cast<float>(static_cast<int>(rng() % 17) - 8)));
  const auto ref = wq::reference_gemm(w, std::span<const Act>(x), m);
  std::vector<std::uint8_t> packed(w.packed().begin(), w.packed().end());
  std::vector<weft::half> sc(w.scales().begin(), w.scales().end());
  std::vector<std::int16_t> ze(w.zeros().begin(), w.zeros().end());
  auto* dx = to_device(x);
  auto* dc = to_device(packed);
  auto* ds = to_device(sc);
  auto* dz = to_device(ze);
  float* dy = nullptr;
  cudaMalloc(&dy, ref.size() * sizeof(float));
  const auto p = wq::cuda::make_w4a16_params(w, dx, dc, ds, dz, dy, m);
  std::vector<float> y(ref.size());
  check(wq::cuda::launch_w4a16_gemm(p) == cudaSuccess, "w4a16 gemm launch");
  cudaMemcpy(y.data(), dy, y.size() * sizeof(float), cudaMemcpyDeviceToHost);
  check(std::memcmp(y.data(), ref.data(), y.size() * 4) == 0, "w4a16 gemm (default tile) == reference");
  check(wq::cuda::launch_w4a16_gemm<wq::small_batch_w4_tile>(p) == cudaSuccess, "w4a16 gemm small tile launch");
  cudaMemcpy(y.data(), dy, y.size() * sizeof(float), cudaMemcpyDeviceToHost);
  check(std::memcmp(y.data(), ref.data(), y.size() * 4) == 0, "w4a16 gemm (small-batch tile) == reference");
  cudaFree(dx);
  cudaFree(dc);
  cudaFree(ds);
  cudaFree(dz);
  cudaFree(dy);
}

void run_w8(std::int64_t m, std::int64_t n, std::int64_t k) {
  std::mt19937 rng(static_cast<unsigned>(m + n + k));
  std::vector<std::int32_t> codes(static_cast<std::size_t>(n * k));
  for (auto& c : codes) c = static_cast<std::int32_t>(rng() % 255) - 127;
  const auto w = wq::quantized_matrix<float>::from_codes(n, k, {8, 0, true}, codes, std::vector<float>(n, 1.0f));
  std::vector<std::int8_t> a(static_cast<std::size_t>(m * k));
  for (auto& v : a) v = static_cast<std::int8_t>(static_cast<int>(rng() % 255) - 127);
  const auto ref = wq::reference_gemm_w8a8_i32(w, std::span<const std::int8_t>(a), m);
  std::vector<std::int8_t> packed(w.packed().size());
  std::memcpy(packed.data(), w.packed().data(), packed.size());
  auto* da = to_device(a);
  auto* dw = to_device(packed);
  std::int32_t* dc = nullptr;
  cudaMalloc(&dc, ref.size() * sizeof(std::int32_t));
  check(wq::cuda::launch_w8a8_gemm(wq::cuda::make_w8a8_params(w, da, dw, dc, m)) == cudaSuccess, "w8a8 launch");
  std::vector<std::int32_t> c(ref.size());
  cudaMemcpy(c.data(), dc, c.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost);
  check(c == ref, "w8a8 gemm == reference");
  cudaFree(da);
  cudaFree(dw);
  cudaFree(dc);
}

void run_w4a8(std::int64_t m, std::int64_t n, std::int64_t k, int group) {
  std::mt19937 rng(static_cast<unsigned>(m * 7 + n + k));
  std::vector<std::int32_t> codes(static_cast<std::size_t>(n * k));
  for (auto& c : codes) c = static_cast<std::int32_t>(rng() % 16);
  const std::int64_t groups = (k + group - 1) / group;
  std::vector<weft::half> scales(static_cast<std::size_t>(n * groups), weft::half(0.25f));
  std::vector<std::int16_t> zeros(scales.size());
  for (auto& z : zeros) z = static_cast<std::int16_t>(rng() % 16);
  const auto w = wq::quantized_matrix<weft::half>::from_codes(n, k, {4, group, false}, codes, scales, zeros);
  wq::quantized_activations a{m, k, {}, {}};
  for (std::int64_t i = 0; i < m * k; ++i)
    a.values.push_back(static_cast<std::int8_t>(static_cast<int>(rng() % 17) - 8));
  a.scales.assign(static_cast<std::size_t>(m), 0.5f);
  const auto ref = wq::reference_gemm_w4a8(w, a);
  auto* da = to_device(a.values);
  auto* das = to_device(a.scales);
  auto* dc = to_device(std::vector<std::uint8_t>(w.packed().begin(), w.packed().end()));
  auto* ds = to_device(std::vector<weft::half>(w.scales().begin(), w.scales().end()));
  auto* dz = to_device(std::vector<std::int16_t>(w.zeros().begin(), w.zeros().end()));
  float* dy = nullptr;
  cudaMalloc(&dy, ref.size() * sizeof(float));
  const auto p = wq::cuda::make_w4a8_params(w, da, das, dc, ds, dz, dy, m);
  std::vector<float> y(ref.size());
  check(wq::cuda::launch_w4a8_gemm(p) == cudaSuccess, "w4a8 gemm launch");
  cudaMemcpy(y.data(), dy, y.size() * sizeof(float), cudaMemcpyDeviceToHost);
  check(y == ref, "w4a8 gemm == reference");
  cudaFree(da);
  cudaFree(das);
  cudaFree(dc);
  cudaFree(ds);
  cudaFree(dz);
  cudaFree(dy);
}

template <class Act>
void run_sparse24(std::int64_t m, std::int64_t n, std::int64_t k, int group) {
  std::mt19937 rng(static_cast<unsigned>(m + 3 * n + k));
  std::vector<std::int32_t> codes(static_cast<std::size_t>(n * k / 2));
  for (auto& c : codes) c = static_cast<std::int32_t>(rng() % 16);
  std::vector<std::uint8_t> positions;
  for (std::int64_t t = 0; t < n * k / 4; ++t) {
    const auto first = static_cast<std::uint8_t>(rng() % 3);
    positions.push_back(first);
    positions.push_back(static_cast<std::uint8_t>(first + 1 + rng() % (3 - first)));
  }
  const std::int64_t groups = (k + group - 1) / group;
  std::vector<weft::half> scales(static_cast<std::size_t>(n * groups), weft::half(0.5f));
  const auto w = wq::sparse24_matrix<weft::half>::from_parts(n, k, {4, group, true}, codes, positions, scales);
  std::vector<Act> x;
  for (std::int64_t i = 0; i < m * k; ++i) x.push_back(Act(static_cast<float>(static_cast<int>(rng() % 9) - 4)));
  const auto ref = wq::reference_gemm(w, std::span<const Act>(x), m);
  auto* dx = to_device(x);
  auto* dc = to_device(std::vector<std::uint8_t>(w.values().packed().begin(), w.values().packed().end()));
  auto* dm = to_device(std::vector<std::uint8_t>(w.meta().begin(), w.meta().end()));
  auto* ds = to_device(std::vector<weft::half>(w.values().scales().begin(), w.values().scales().end()));
  auto* dz = to_device(std::vector<std::int16_t>(w.values().zeros().begin(), w.values().zeros().end()));
  float* dy = nullptr;
  cudaMalloc(&dy, ref.size() * sizeof(float));
  const auto p = wq::cuda::make_sparse24_params(w, dx, dc, dm, ds, dz, dy, m);
  check(wq::cuda::launch_w4a16_sparse24_gemm(p) == cudaSuccess, "sparse24 launch");
  std::vector<float> y(ref.size());
  cudaMemcpy(y.data(), dy, y.size() * sizeof(float), cudaMemcpyDeviceToHost);
  check(std::memcmp(y.data(), ref.data(), y.size() * 4) == 0, "sparse24 gemm == reference");
  cudaFree(dx);
  cudaFree(dc);
  cudaFree(dm);
  cudaFree(ds);
  cudaFree(dz);
  cudaFree(dy);
}

}  // namespace

int main() {
  // Argument checks need no GPU: a null pointer and a bad shape are refused before any launch.
  wq::w4a16_params<weft::half, weft::half> bad{};
  bad.m = 1;
  bad.n = 8;
  bad.k = 64;
  bad.k_padded = 64;
  bad.group_size = 32;
  bad.groups = 2;
  try {
    (void)wq::cuda::launch_w4a16_gemm(bad);
    check(false, "null pointers must be refused");
  } catch (const weft::error& e) {
    check(std::strstr(e.what(), "x is null") != nullptr, "message names the null argument");
  }
  bad.k_padded = 60;
  try {
    (void)wq::cuda::launch_w4a16_gemm(bad);
    check(false, "bad k_padded must be refused");
  } catch (const weft::error& e) {
    check(std::strstr(e.what(), "k_padded = 60") != nullptr, "message names k_padded");
  }
  // W4A8: a group size that does not describe K.
  wq::w4a8_params<weft::half> bad8{};
  bad8.m = 1;
  bad8.n = 8;
  bad8.k = 100;
  bad8.k_padded = 128;
  bad8.group_size = 48;
  bad8.groups = 3;
  try {
    (void)wq::cuda::launch_w4a8_gemm(bad8);
    check(false, "a group size that is not a multiple of 32 must be refused");
  } catch (const weft::error& e) {
    check(std::strstr(e.what(), "group_size = 48") != nullptr && std::strstr(e.what(), "K = 100") != nullptr,
          "message names the group size and K");
  }
  wq::sparse24_params<weft::half, weft::half> bad24{};
  bad24.m = 1;
  bad24.n = 8;
  bad24.k = 96;
  bad24.group_size = 64;
  bad24.groups = 2;
  try {
    (void)wq::cuda::launch_w4a16_sparse24_gemm(bad24);
    check(false, "K not a multiple of 64 must be refused for 2:4 weights");
  } catch (const weft::error& e) {
    check(std::strstr(e.what(), "K = 1 x 8 x 96") != nullptr || std::strstr(e.what(), "96") != nullptr,
          "message names K");
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf(
        "quant.cuda: kernels compiled (W4A16 half/bf16 GEMM, W4A8 GEMM, 2:4 sparse W4A16 GEMM, W8A8 GEMM; the "
        "decode GEMVs are quant.cuda_gemv); no GPU, %d argument-check failures; skipping the launches\n",
        failures);
    return failures == 0 ? 77 : 1;
  }
  for (auto [m, n, k, g] : {std::tuple{1, 64, 128, 32}, {37, 50, 300, 64}, {128, 128, 512, 128}}) {
    run_w4<weft::half>(m, n, k, g);
    run_w4<weft::bfloat16>(m, n, k, g);
    run_w8(m, n, k);
    run_w4a8(m, n, k, g);
  }
  for (auto [m, n, k, g] : {std::tuple{1, 64, 128, 64}, {37, 50, 320, 64}, {128, 128, 512, 128}}) {
    run_sparse24<weft::half>(m, n, k, g);
    run_sparse24<weft::bfloat16>(m, n, k, g);
  }
  std::printf("quant.cuda: %d failures\n", failures);
  return failures == 0 ? 0 : 1;
}

// The core value types in device code: half/bfloat16 conversion and reduce operators inside a
// kernel, compiled for sm_80 and sm_90. With a GPU present the kernel runs and its results are
// compared with the host's; without one the program says so and exits 77 (ctest: skipped).
#include <weft/core/half.hpp>
#include <weft/core/reduce_ops.hpp>
#include <weft/core/strong_id.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

__global__ void convert_and_reduce(const float* in, std::uint16_t* half_bits, std::uint16_t* bf_bits, float* sums,
                                   int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const weft::half h(in[i]);
  const weft::bfloat16 b(in[i]);
  half_bits[i] = h.bits;
  bf_bits[i] = b.bits;
  sums[i] = weft::op::sum{}(static_cast<float>(h), static_cast<float>(b));
}

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("core.cuda: compiled for sm_80/sm_90; no GPU here, kernel not launched\n");
    return 77;
  }
  constexpr int n = 1 << 16;
  float *in, *sums;
  std::uint16_t *hb, *bb;
  cudaMallocManaged(&in, n * sizeof(float));
  cudaMallocManaged(&sums, n * sizeof(float));
  cudaMallocManaged(&hb, n * sizeof(std::uint16_t));
  cudaMallocManaged(&bb, n * sizeof(std::uint16_t));
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i - n / 2) * 0.37f + 1e-3f * static_cast<float>(i % 97);
  convert_and_reduce<<<(n + 255) / 256, 256>>>(in, hb, bb, sums, n);
  if (cudaDeviceSynchronize() != cudaSuccess) {
    std::printf("core.cuda: kernel failed\n");
    return 1;
  }
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    const weft::half h(in[i]);
    const weft::bfloat16 b(in[i]);
    if (h.bits != hb[i] || b.bits != bb[i] || sums[i] != static_cast<float>(h) + static_cast<float>(b)) ++bad;
  }
  std::printf("core.cuda: %d of %d device results differ from the host\n", bad, n);
  return bad == 0 ? 0 : 1;
}

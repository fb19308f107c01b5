// Finds, on the GPU, how mma.sp.m16n8k32 (f16) reads its sparsity metadata: the PTX ISA gives the
// layout only as a figure, so each candidate layout is tried against a CPU product and the one that
// matches is printed. Input to the 2:4 decode GEMV's weight layout. Exit 0 when one candidate
// matches, 1 otherwise.
#include <weft/core/half.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace {

constexpr int candidates = 3;

// A: 16 x 32 logical, 2:4 per row (kept positions pos[r][j][0 < 1]); Ac: 16 x 16 kept values.
// Fragment of Ac as the m16n8k16 A fragment; B 32 x 8; metadata per lane by candidate:
//   0: lane t = 0 of each quad: rows g (bits 0-15) and g + 8 (bits 16-31), groups 0-3 (k 0-15);
//      t = 1: the same rows, groups 4-7 (k 16-31); selector 0.
//   1: t = 0: row g, groups 0-7 (4 bits each); t = 1: row g + 8; selector 0.
//   2: like 0 with the rows interleaved per group: t = 0 holds groups 0-3 as (g, g + 8) nibble pairs.
__global__ void probe(const std::uint32_t* a, const std::uint32_t* b, const std::uint32_t* meta, float* d) {
  const int lane = threadIdx.x;
  for (int c = 0; c < candidates; ++c) {
    float acc[4] = {0, 0, 0, 0};
    const std::uint32_t e = meta[c * 32 + lane];
    asm volatile(
        "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[lane * 4]), "r"(a[lane * 4 + 1]), "r"(a[lane * 4 + 2]), "r"(a[lane * 4 + 3]), "r"(b[lane * 4]),
          "r"(b[lane * 4 + 1]), "r"(b[lane * 4 + 2]), "r"(b[lane * 4 + 3]), "r"(e));
    for (int i = 0; i < 4; ++i) d[(c * 32 + lane) * 4 + i] = acc[i];
  }
}

}  // namespace

int main() {
  std::mt19937 rng(3);
  int pos[16][8][2];
  float values[16][16], bmat[32][8], dense[16][32] = {};
  for (int r = 0; r < 16; ++r)
    for (int j = 0; j < 8; ++j) {
      const int p0 = static_cast<int>(rng() % 3), p1 = p0 + 1 + static_cast<int>(rng() % (3 - p0));
      pos[r][j][0] = p0;
      pos[r][j][1] = p1;
      for (int s = 0; s < 2; ++s) {
        values[r][2 * j + s] = static_cast<float>(static_cast<int>(rng() % 9) - 4);
        dense[r][4 * j + pos[r][j][s]] = values[r][2 * j + s];
      }
    }
  for (auto& row : bmat)
    for (auto& v : row) v = static_cast<float>(static_cast<int>(rng() % 9) - 4);
  const auto h = [](float v) { return static_cast<std::uint32_t>(weft::half(v).bits); };
  std::vector<std::uint32_t> a(128), b(128), meta(candidates * 32, 0);
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    // A fragment of the compressed 16 x 16 (m16n8k16 layout).
    const int rows[4] = {g, g + 8, g, g + 8}, cols[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
    for (int r = 0; r < 4; ++r) a[lane * 4 + r] = h(values[rows[r]][cols[r]]) | (h(values[rows[r]][cols[r] + 1]) << 16);
    // B fragment of 32 x 8: k = 2t + (i % 2) + 8 (i / 2), i = 0..7, n = g.
    for (int r = 0; r < 4; ++r) b[lane * 4 + r] = h(bmat[2 * t + 8 * r][g]) | (h(bmat[2 * t + 1 + 8 * r][g]) << 16);
    const auto nib = [&](int row, int grp) {
      return static_cast<std::uint32_t>(pos[row][grp][0] | (pos[row][grp][1] << 2));
    };
    if (t < 2) {
      std::uint32_t m0 = 0, m1 = 0, m2 = 0;
      for (int j = 0; j < 4; ++j) {
        m0 |= nib(g, 4 * t + j) << (4 * j);
        m0 |= nib(g + 8, 4 * t + j) << (16 + 4 * j);
        m2 |= nib(g, 4 * t + j) << (8 * j);
        m2 |= nib(g + 8, 4 * t + j) << (8 * j + 4);
      }
      for (int j = 0; j < 8; ++j) m1 |= nib(t == 0 ? g : g + 8, j) << (4 * j);
      meta[0 * 32 + lane] = m0;
      meta[1 * 32 + lane] = m1;
      meta[2 * 32 + lane] = m2;
    }
  }
  float ref[16][8] = {};
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 32; ++k) ref[r][n] += dense[r][k] * bmat[k][n];
  std::uint32_t *da, *db, *dm;
  float* dd;
  cudaMalloc(&da, 512);
  cudaMalloc(&db, 512);
  cudaMalloc(&dm, meta.size() * 4);
  cudaMalloc(&dd, candidates * 128 * 4);
  cudaMemcpy(da, a.data(), 512, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), 512, cudaMemcpyHostToDevice);
  cudaMemcpy(dm, meta.data(), meta.size() * 4, cudaMemcpyHostToDevice);
  probe<<<1, 32>>>(da, db, dm, dd);
  std::vector<float> d(candidates * 128);
  const cudaError_t e = cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    std::printf("probe_mma_sp: CUDA error %s\n", cudaGetErrorString(e));
    return 1;
  }
  int found = -1;
  for (int c = 0; c < candidates; ++c) {
    int wrong = 0;
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const int row = lane / 4 + 8 * (i / 2), col = 2 * (lane % 4) + i % 2;
        wrong += d[(c * 32 + lane) * 4 + i] != ref[row][col];
      }
    std::printf("probe_mma_sp: candidate %d: %d of 128 outputs differ\n", c, wrong);
    if (wrong == 0 && found < 0) found = c;
  }
  std::printf("probe_mma_sp: metadata layout = candidate %d\n", found);
  return found >= 0 ? 0 : 1;
}

// The decode GEMV kernel (one for every format: the Math traits of detail/gemv_math.cuh differ):
// two-stage weight loads, register dequantization, mma, per-group fold, and a deterministic
// reduction over warps and K splits.
#pragma once

#include <weft/quant/cuda/detail/gemv_math.cuh>
#include <weft/quant/cuda/gemv_params.cuh>
#include <weft/quant/gemv_fragments.hpp>
#include <weft/quant/tile_math.hpp>

#include <cuda_runtime.h>

#include <cstdint>

namespace weft::quant::cuda::detail {

/// What a launch passes beside the parameters: facts the host works out once.
struct gemv_launch_info {
  int group_chunks = 0;   ///< chunks per group (all of them when the matrix has one group per row)
  int vector_chunks = 0;  ///< chunks whose activations may be read as 16-byte vectors (0 when x or K is unaligned)
};

/// The group of the chunks a warp visits, advanced without a division: the warp's chunks are
/// c, c + stride, c + 2 stride, ... and a group spans `per` chunks.
struct group_walk {
  int group, rest, step_groups, step_rest, per;
  __device__ group_walk(int c, int stride, int per_group)
      : group(c / per_group),
        rest(c % per_group),
        step_groups(stride / per_group),
        step_rest(stride % per_group),
        per(per_group) {}
  __device__ void advance() {
    group += step_groups;
    rest += step_rest;
    if (rest >= per) rest -= per, ++group;
  }
};

/// One lane's share of U consecutive chunks (64 inputs each) of one tile: decode each step's
/// fragment, multiply with the chunks' activation fragments, and fold the partial sums into acc by
/// the group's scales whenever the group changes and at the end. groups[u]: chunk u's group.
template <class Math, class Scale, int MB, int U, bool Sym>
__device__ __forceinline__ void chunks_product(const Scale* tile_scales, const std::uint8_t* tile_zeros,
                                               const int (&groups)[U], int count, const uint4 (&loaded)[U],
                                               const uint4 (&meta)[U],
                                               const std::uint32_t (&b)[U][MB][Math::steps][Math::b_regs],
                                               float (&acc)[MB][4]) {
  typename Math::zero_state z = Math::zeros(8, 8);
  float s0 = 0.0f, s1 = 0.0f;
  typename Math::partial part[MB][4] = {};
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (u >= count) break;
    if (u == 0 || groups[u] != groups[u - 1]) {
      if (u > 0)
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) {
          gemv_fold(part[mb], s0, s1, acc[mb]);
#pragma unroll
          for (int i = 0; i < 4; ++i) part[mb][i] = 0;
        }
      if constexpr (!Sym) {
        const std::uint32_t zz = *reinterpret_cast<const std::uint16_t*>(tile_zeros + groups[u] * gpu_w4_tile_rows);
        z = Math::zeros(static_cast<int>(zz & 0xFFu), static_cast<int>(zz >> 8));
      }
      load_scale_pair(tile_scales + groups[u] * gpu_w4_tile_rows, s0, s1);
    }
    const std::uint32_t w[4] = {loaded[u].x, loaded[u].y, loaded[u].z, loaded[u].w};
    const std::uint32_t e[4] = {meta[u].x, meta[u].y, meta[u].z, meta[u].w};
#pragma unroll
    for (int s = 0; s < Math::steps; ++s) {
      std::uint32_t a[4];
      Math::a_fragment(w, s, z, a);
#pragma unroll
      for (int mb = 0; mb < MB; ++mb) Math::mma(a, b[u][mb][s], e[s], part[mb]);
    }
  }
#pragma unroll
  for (int mb = 0; mb < MB; ++mb) gemv_fold(part[mb], s0, s1, acc[mb]);
}

/// The GEMV kernel. Block (x, y) owns tiles x*T .. x*T+T-1 and split y of K. K is cut into runs
/// of U consecutive chunks; warp w of split y takes runs (y*W + w) + j * (splits*W). Each lane
/// keeps two stages of T x U 16-byte weight loads: the next run is in flight while the current one
/// is decoded and multiplied. A run's chunks share one group unless groups are shorter than a run.
template <class Math, class Scale, class Out, int MB, int T, int U, int W, bool Sym>
__global__ void __launch_bounds__(32 * W)
    w4_gemv_kernel(const w4_gemv_params<typename Math::act, Scale, Out> p, gemv_launch_info info) {
  using Act = typename Math::act;
  constexpr int entries = T * MB * 4;
  __shared__ float reduce[W][entries][32];
  __shared__ bool last_block;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int tile0 = static_cast<int>(blockIdx.x) * T;
  const int tiles_here = min(T, static_cast<int>(p.tiles) - tile0);  // the same for the whole block
  const int split = static_cast<int>(blockIdx.y), splits = static_cast<int>(gridDim.y);
  const int stride = splits * W, chunks = static_cast<int>(p.chunks), groups = static_cast<int>(p.groups);
  const int runs = (chunks + U - 1) / U;
  // Per-tile bases: the lane's first 16 bytes of each tile, its rows' scale and zero cells.
  const uint4* words[T];
  const uint4* metas[T];  // 2:4 only: the lane's metadata (lanes 0 and 1 of each quad hold it)
  const Scale* scales[T];
  const std::uint8_t* zeros[T];
  const bool meta_lane = Math::has_meta && lane % 4 < 2;
#pragma unroll
  for (int t = 0; t < T; ++t) {
    const std::int64_t tile = min(tile0 + t, static_cast<int>(p.tiles) - 1);
    words[t] = reinterpret_cast<const uint4*>(p.words) + tile * chunks * 32 + lane;
    metas[t] = Math::has_meta ? reinterpret_cast<const uint4*>(p.meta) + tile * chunks * 16 + 2 * (lane / 4) + lane % 4
                              : nullptr;
    scales[t] = p.scales + tile * groups * gpu_w4_tile_rows + 2 * (lane / 4);
    zeros[t] = Sym ? nullptr : p.zeros + tile * groups * gpu_w4_tile_rows + 2 * (lane / 4);
  }
  // The lane's token of each 8-token fragment (rows past M read nothing and hold zeros).
  const Act* x_rows[MB];
  bool active[MB];
#pragma unroll
  for (int mb = 0; mb < MB; ++mb) {
    const std::int64_t row = 8 * mb + lane / 4;
    active[mb] = row < p.m;
    x_rows[mb] = p.x + min(row, p.m - 1) * p.k;
  }
  const auto load_run = [&](uint4(&stage)[T][U], uint4(&meta)[T][U], int run) {
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = run * U + u;
        const bool in = c < chunks && t < tiles_here;
        stage[t][u] = in ? load_weights(words[t] + c * 32) : make_uint4(0u, 0u, 0u, 0u);
        if constexpr (Math::has_meta)
          meta[t][u] = in && meta_lane ? load_weights(metas[t] + c * 16) : make_uint4(0u, 0u, 0u, 0u);
        else
          meta[t][u] = make_uint4(0u, 0u, 0u, 0u);
      }
  };
  // A run's groups: one division per warp, then a walk, when every run lies in one group.
  const bool run_in_one_group = info.group_chunks % U == 0;
  const int first = split * W + warp;
  group_walk walk(first, stride, run_in_one_group ? info.group_chunks / U : 1);
  float acc[T][MB][4] = {};
  uint4 stage[T][U], stage_meta[T][U];
  load_run(stage, stage_meta, first);
  for (int run = first; run < runs; run += stride) {
    uint4 next[T][U], next_meta[T][U];
    load_run(next, next_meta, run + stride);
    const int c0 = run * U, count = min(U, chunks - c0);
    int group_of[U];
#pragma unroll
    for (int u = 0; u < U; ++u) group_of[u] = run_in_one_group ? walk.group : (c0 + u) / info.group_chunks;
    walk.advance();
    std::uint32_t b[U][MB][Math::steps][Math::b_regs];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int mb = 0; mb < MB; ++mb)
        Math::b_chunk(x_rows[mb], active[mb] && u < count, p.k, static_cast<std::int64_t>(c0 + u) * Math::chunk_k, lane,
                      c0 + u < info.vector_chunks, b[u][mb]);
#pragma unroll
    for (int t = 0; t < T; ++t)
      if (t < tiles_here)
        chunks_product<Math, Scale, MB, U, Sym>(scales[t], zeros[t], group_of, count, stage[t], stage_meta[t], b,
                                                acc[t]);
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int u = 0; u < U; ++u) stage[t][u] = next[t][u], stage_meta[t][u] = next_meta[t][u];
  }
  // Warps of the block reduce in warp order; splits meet in the workspace, summed in split order by
  // whichever block of the tile group arrives last.
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int mb = 0; mb < MB; ++mb)
#pragma unroll
      for (int i = 0; i < 4; ++i) reduce[warp][(t * MB + mb) * 4 + i][lane] = acc[t][mb][i];
  __syncthreads();
  auto* counters = static_cast<unsigned*>(p.workspace);
  float* partials = reinterpret_cast<float*>(counters + round_up(gridDim.x, 64));
  const auto store = [&](int idx, float v) {
    const int e = idx / 32, l = idx % 32;
    const int t = e / (MB * 4), mb = (e / 4) % MB, i = e % 4;
    const gemv_out_pos pos = gemv_out_of(static_cast<std::int64_t>(tile0 + t) * gpu_w4_tile_rows, 8 * mb, l, i);
    if (pos.n < p.n && pos.m < p.m) p.y[pos.m * p.n + pos.n] = Out(v * Math::token_scale(p, pos.m));
  };
  for (int idx = static_cast<int>(threadIdx.x); idx < entries * 32; idx += 32 * W) {
    float v = 0.0f;
    for (int w = 0; w < W; ++w) v += reduce[w][idx / 32][idx % 32];
    if (splits == 1)
      store(idx, v);
    else
      partials[(static_cast<std::int64_t>(split) * gridDim.x + blockIdx.x) * entries * 32 + idx] = v;
  }
  if (splits == 1) return;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last_block = atomicAdd(&counters[blockIdx.x], 1u) == static_cast<unsigned>(splits - 1);
  __syncthreads();
  if (!last_block) return;
  __threadfence();
  for (int idx = static_cast<int>(threadIdx.x); idx < entries * 32; idx += 32 * W) {
    float v = 0.0f;
    for (int s = 0; s < splits; ++s)
      v += __ldcg(&partials[(static_cast<std::int64_t>(s) * gridDim.x + blockIdx.x) * entries * 32 + idx]);
    store(idx, v);
  }
  if (threadIdx.x == 0) counters[blockIdx.x] = 0;  // ready for the next call
}

}  // namespace weft::quant::cuda::detail

// The MoE dispatch on the GPU in three kernels and no allocation: a stable counting sort of the
// (token, choice) slots by expert (weft/quant/moe_dispatch_tiles.hpp describes the passes), with the
// same outputs as weft::quant::moe_dispatch (moe_dispatch_thrust.hpp), which sorts with a general
// stable sort instead. The caller owns every buffer; the work space comes from
// moe_dispatch_workspace_bytes. Reads the ids twice and writes each output once: O(slots + experts
// x tiles) work.
#pragma once

#include <weft/core/error.hpp>
#include <weft/quant/cuda/launch_check.cuh>
#include <weft/quant/moe_dispatch_tiles.hpp>

#include <cub/device/device_scan.cuh>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace weft::quant::cuda {

/// One MoE layer's dispatch: slots = tokens x top_k (slot s = token * top_k + k), every pointer on
/// the device. Outputs as moe_dispatch_plan: order (slots), tokens (slots), inverse (slots), counts
/// (num_experts), offsets (num_experts + 1). `invalid_ids` receives the number of ids outside
/// [0, num_experts); when it is not 0 once the stream has run, no output was written.
struct moe_dispatch_args {
  const std::int32_t* expert_ids = nullptr;
  std::int64_t slots = 0;
  int top_k = 0;
  int num_experts = 0;
  std::int32_t* order = nullptr;
  std::int32_t* tokens = nullptr;
  std::int32_t* inverse = nullptr;
  std::int32_t* counts = nullptr;
  std::int32_t* offsets = nullptr;
  std::int32_t* invalid_ids = nullptr;
  void* workspace = nullptr;  ///< moe_dispatch_workspace_bytes(slots, num_experts) bytes, 256-byte aligned
  std::size_t workspace_bytes = 0;
};

namespace detail {

struct dispatch_workspace {
  std::size_t counts_at = 0, bases_at = 0, scan_at = 0, scan_bytes = 0, total = 0;
};

inline std::size_t align256(std::size_t b) { return (b + 255) / 256 * 256; }

inline dispatch_workspace dispatch_layout(std::int64_t slots, int num_experts) {
  const std::size_t cells =
      static_cast<std::size_t>(num_experts) * static_cast<std::size_t>(dispatch::tiles_for(slots));
  dispatch_workspace w;
  w.counts_at = 256;  // the first 256 bytes hold the count of invalid ids
  w.bases_at = w.counts_at + align256(cells * sizeof(std::int32_t));
  w.scan_at = w.bases_at + align256(cells * sizeof(std::int32_t));
  const auto* none = static_cast<const std::int32_t*>(nullptr);
  const cudaError_t e = cub::DeviceScan::ExclusiveSum(nullptr, w.scan_bytes, none, static_cast<std::int32_t*>(nullptr),
                                                      static_cast<std::int64_t>(cells));
  expects(e == cudaSuccess, errc::io, "weft::quant::cuda::moe_dispatch_workspace_bytes",
          "cub::DeviceScan::ExclusiveSum refused to size its work space: ", cudaGetErrorString(e));
  w.total = w.scan_at + align256(w.scan_bytes);
  return w;
}

inline void check_dispatch(std::int64_t slots, int top_k, int num_experts, const char* where) {
  expects(top_k > 0 && num_experts > 0, errc::invalid_argument, where, "top_k = ", top_k,
          " and num_experts = ", num_experts, " must be positive");
  expects(num_experts <= dispatch::max_experts, errc::invalid_argument, where, "num_experts = ", num_experts,
          " exceeds the GPU dispatch's ", dispatch::max_experts,
          " (shared-memory counters); use moe_dispatch (Thrust)");
  expects(slots > 0 && slots < 0x7fffffff, errc::invalid_argument, where, "slots = ", slots,
          " must be in [1, 2^31 - 1): slot indices are int32");
  expects(slots % top_k == 0, errc::invalid_argument, where, "slots = ", slots,
          " is not a multiple of top_k = ", top_k);
}

// Pass 1: expert counts of each tile, counts[e * tiles + tile]; ids outside the range counted in *invalid.
// (Kernels are templates so that the header may be included by several translation units.)
template <int Threads = dispatch::block_threads>
__global__ void __launch_bounds__(Threads) dispatch_histogram(const std::int32_t* ids, std::int64_t slots, int experts,
                                                              std::int32_t* counts, std::int32_t* invalid) {
  static_assert(Threads == dispatch::block_threads, "the tiling assumes dispatch::block_threads threads");
  extern __shared__ std::int32_t hist[];
  const std::int64_t tiles = dispatch::tiles_for(slots), tile = blockIdx.x;
  for (int e = threadIdx.x; e < experts; e += dispatch::block_threads) hist[e] = 0;
  __syncthreads();
  int bad = 0;
  for (int j = threadIdx.x; j < dispatch::tile_items; j += dispatch::block_threads) {
    const std::int64_t slot = tile * dispatch::tile_items + j;
    if (slot >= slots) break;
    const std::int32_t e = ids[slot];
    if (e < 0 || e >= experts)
      ++bad;
    else
      atomicAdd(&hist[e], 1);
  }
  if (bad != 0) atomicAdd(invalid, bad);
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += dispatch::block_threads)
    counts[dispatch::count_index(e, tile, tiles)] = hist[e];
}

// Pass 3: every slot to its stable sorted position (bases: the exclusive scan of pass 1's counts).
template <int Threads = dispatch::block_threads>
__global__ void __launch_bounds__(Threads)
    dispatch_scatter(const std::int32_t* ids, std::int64_t slots, int top_k, int experts, const std::int32_t* bases,
                     const std::int32_t* invalid, std::int32_t* order, std::int32_t* tokens, std::int32_t* inverse,
                     std::int32_t* counts, std::int32_t* offsets, std::int32_t* invalid_out) {
  static_assert(Threads == dispatch::block_threads, "the tiling assumes dispatch::block_threads threads");
  __shared__ std::int32_t tile_ids[dispatch::tile_items];
  __shared__ std::int32_t rank[dispatch::tile_items];
  extern __shared__ std::int32_t per_warp[];  // [block_warps][experts]
  const std::int64_t tiles = dispatch::tiles_for(slots), tile = blockIdx.x, first = tile * dispatch::tile_items;
  const std::int32_t bad = *invalid;
  if (tile == 0 && threadIdx.x == 0) *invalid_out = bad;
  if (bad != 0) return;  // the whole grid sees the same value: nothing is written
  const int t = threadIdx.x, warp = t / dispatch::lanes, lane = t % dispatch::lanes;
  for (int i = t; i < dispatch::block_warps * experts; i += dispatch::block_threads) per_warp[i] = 0;
  for (int j = t; j < dispatch::tile_items; j += dispatch::block_threads)
    tile_ids[j] = first + j < slots ? ids[first + j] : -1;
  __syncthreads();
  std::int32_t* mine = per_warp + warp * experts;
  for (int r = 0; r < dispatch::rounds; ++r) {
    const int j = dispatch::slot_in_tile(warp, r, lane);
    const std::int32_t e = tile_ids[j];
    const unsigned valid = __ballot_sync(0xffffffffu, e >= 0);
    std::int32_t before = 0;
    unsigned peers = 0;
    if (e >= 0) {
      peers = __match_any_sync(valid, e);
      before = mine[e];
      rank[j] = before + __popc(peers & dispatch::lanes_below(lane));
    }
    __syncwarp();
    if (e >= 0 && __ffs(peers) - 1 == lane) mine[e] = before + __popc(peers);
    __syncwarp();
  }
  __syncthreads();
  for (int e = t; e < experts; e += dispatch::block_threads)
    dispatch::warp_bases(per_warp + e, experts, bases[dispatch::count_index(e, tile, tiles)]);
  __syncthreads();
  for (int j = t; j < dispatch::tile_items; j += dispatch::block_threads) {
    const std::int32_t e = tile_ids[j];
    if (e < 0) continue;
    dispatch::place(static_cast<std::int32_t>(first + j), per_warp[dispatch::warp_of(j) * experts + e] + rank[j], top_k,
                    order, tokens, inverse);
  }
  if (tile == 0)
    for (int e = t; e <= experts; e += dispatch::block_threads) {
      const std::int32_t at =
          e < experts ? bases[dispatch::count_index(e, 0, tiles)] : static_cast<std::int32_t>(slots);
      offsets[e] = at;
      if (e < experts) {
        const std::int32_t next =
            e + 1 < experts ? bases[dispatch::count_index(e + 1, 0, tiles)] : static_cast<std::int32_t>(slots);
        counts[e] = next - at;
      }
    }
}

}  // namespace detail

/// Work space bytes launch_moe_dispatch needs for this size (expert-by-tile counts, their scan and
/// CUB's scan space). Throws weft::error on the arguments launch_moe_dispatch refuses. O(1).
inline std::size_t moe_dispatch_workspace_bytes(std::int64_t slots, int top_k, int num_experts) {
  detail::check_dispatch(slots, top_k, num_experts, "weft::quant::cuda::moe_dispatch_workspace_bytes");
  return detail::dispatch_layout(slots, num_experts).total;
}

/// Enqueues the dispatch on `stream`: pass 1, CUB's exclusive scan, pass 3. Throws weft::error (before
/// anything is enqueued) when a size is out of range, a pointer is null or not device memory, or the
/// work space is too small or misaligned; returns the first CUDA error of the launches. Ids outside
/// [0, num_experts) are found on the device: *invalid_ids gets their count and no output is written.
/// Deterministic (the result does not depend on scheduling). Not thread-safe on one work space.
inline cudaError_t launch_moe_dispatch(const moe_dispatch_args& a, cudaStream_t stream = nullptr) {
  constexpr const char* where = "weft::quant::cuda::launch_moe_dispatch";
  detail::check_dispatch(a.slots, a.top_k, a.num_experts, where);
  const detail::dispatch_workspace w = detail::dispatch_layout(a.slots, a.num_experts);
  expects(a.workspace_bytes >= w.total, errc::invalid_argument, where, "workspace has ", a.workspace_bytes,
          " bytes; moe_dispatch_workspace_bytes says ", w.total);
  expects(reinterpret_cast<std::uintptr_t>(a.workspace) % 256 == 0, errc::invalid_argument, where,
          "workspace must be 256-byte aligned");
  const std::pair<const void*, const char*> pointers[] = {
      {a.expert_ids, "expert_ids"}, {a.order, "order"},     {a.tokens, "tokens"},           {a.inverse, "inverse"},
      {a.counts, "counts"},         {a.offsets, "offsets"}, {a.invalid_ids, "invalid_ids"}, {a.workspace, "workspace"}};
  for (const auto& [p, name] : pointers) detail::check_device_pointer(p, name, where);
  auto* base = static_cast<unsigned char*>(a.workspace);
  auto* invalid = reinterpret_cast<std::int32_t*>(base);
  auto* counts = reinterpret_cast<std::int32_t*>(base + w.counts_at);
  auto* bases = reinterpret_cast<std::int32_t*>(base + w.bases_at);
  const auto tiles = static_cast<unsigned>(dispatch::tiles_for(a.slots));
  const std::size_t cells = static_cast<std::size_t>(a.num_experts) * tiles;
  if (cudaError_t e = cudaMemsetAsync(invalid, 0, sizeof(std::int32_t), stream); e != cudaSuccess) return e;
  detail::dispatch_histogram<><<<tiles, dispatch::block_threads, a.num_experts * sizeof(std::int32_t), stream>>>(
      a.expert_ids, a.slots, a.num_experts, counts, invalid);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  std::size_t scan_bytes = w.scan_bytes;
  if (cudaError_t e = cub::DeviceScan::ExclusiveSum(base + w.scan_at, scan_bytes, counts, bases,
                                                    static_cast<std::int64_t>(cells), stream);
      e != cudaSuccess)
    return e;
  detail::dispatch_scatter<>
      <<<tiles, dispatch::block_threads, dispatch::block_warps * a.num_experts * sizeof(std::int32_t), stream>>>(
          a.expert_ids, a.slots, a.top_k, a.num_experts, bases, invalid, a.order, a.tokens, a.inverse, a.counts,
          a.offsets, a.invalid_ids);
  return cudaGetLastError();
}

}  // namespace weft::quant::cuda

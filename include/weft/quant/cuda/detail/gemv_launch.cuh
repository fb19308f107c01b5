// Host side of the decode GEMVs: picking a compiled kernel shape (the Configs type list) at run
// time, planning the grid and the split of K, checking every argument, and launching.
#pragma once

#include <weft/core/error.hpp>
#include <weft/quant/cuda/detail/gemv_kernel.cuh>
#include <weft/quant/cuda/gemv_params.cuh>
#include <weft/quant/cuda/launch_check.cuh>

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

namespace weft::quant::cuda::detail {

/// Calls f.template operator()<Config>() for the index-th entry of the Configs tuple.
template <class Configs, class F>
void visit_config(int index, F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (void)((static_cast<int>(I) == index ? (f.template operator()<std::tuple_element_t<I, Configs>>(), true) : false) ||
           ...);
  }
  (std::make_index_sequence<std::tuple_size_v<Configs>>{});
}

/// Tiles per warp of a config at MB activation fragments: capped so that the block's reduction
/// buffer (W x T x MB x 4 x 32 floats) stays within 32 KB of static shared memory.
template <class Config, int MB>
inline constexpr int tiles_of = Config::tiles < 8 / MB ? Config::tiles : 8 / MB;

/// Chunks in flight of a config at MB activation fragments: capped so that a run's activation
/// fragments (U x MB x steps x b_regs registers) stay within 64 registers, which the 2:4 format
/// (16 a chunk) and many tokens would otherwise exceed and spill.
template <class Math, class Config, int MB>
inline constexpr int unroll_of = [] {
  const int most = 64 / (MB * Math::steps * Math::b_regs);
  return Config::unroll < most ? Config::unroll : (most > 1 ? most : 1);
}();

template <class Math, class Scale, class Out, int MB, class Config, bool Sym>
auto kernel_of() {
  return &w4_gemv_kernel<Math, Scale, Out, MB, tiles_of<Config, MB>, unroll_of<Math, Config, MB>, Config::warps, Sym>;
}

/// Calls f.template operator()<Config, MB, Sym>() for the plan's kernel.
template <class Configs, class F>
void visit_kernel(int config, int mb, bool sym, F&& f) {
  visit_config<Configs>(config, [&]<class Config>() {
    const auto with_mb = [&]<int MB>() {
      if (sym)
        f.template operator()<Config, MB, true>();
      else
        f.template operator()<Config, MB, false>();
    };
    if (mb == 1)
      with_mb.template operator()<1>();
    else if (mb == 2)
      with_mb.template operator()<2>();
    else
      with_mb.template operator()<4>();
  });
}

/// Blocks of one kernel that fit on one multiprocessor, asked once per kernel (and process).
template <class Math, class Scale, class Out, int MB, class Config, bool Sym>
int resident_blocks() {
  static std::atomic<int> cached{0};
  int v = cached.load(std::memory_order_relaxed);
  if (v == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, kernel_of<Math, Scale, Out, MB, Config, Sym>(),
                                                      32 * Config::warps, 0) != cudaSuccess ||
        v < 1) {
      (void)cudaGetLastError();
      v = 1;
    }
    cached.store(v, std::memory_order_relaxed);
  }
  return v;
}

inline int multiprocessors() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms < 1) {
    (void)cudaGetLastError();
    return 1;
  }
  return sms;
}

/// What a launch will run: the kernel shape, the activation fragments and the split of K.
struct gemv_plan {
  int config = -1;  ///< index into the config list
  int mb = 1;       ///< n8 activation fragments: ceil(M / 8) rounded up to 1, 2 or 4
  int tiles = 1, unroll = 1, warps = 1;
  bool symmetric = true;
  std::int64_t tile_groups = 0, splits = 1;
  std::size_t workspace_bytes = 0;
};

/// The launcher's own choice, as an index into default_gemv_configs, from the H200 sweep
/// (docs/quant.md): two tiles and two chunks in flight per warp, 8 warps, for up to 16 tokens;
/// one chunk in flight for 17..32 tokens (their activation fragments need the registers); one
/// tile and four chunks for matrices of at most 32768 chunks (4096 x 4096 and smaller), whose
/// few tiles would otherwise leave multiprocessors idle.
inline int default_config(int mb, std::int64_t tile_chunks) {
  if (mb >= 4) return 1;
  return mb == 1 && tile_chunks <= 32768 ? 2 : 0;
}

template <class Configs, class Math, class Scale, class Out>
gemv_plan plan_gemv(const w4_gemv_params<typename Math::act, Scale, Out>& p, const gemv_policy& policy,
                    const char* where) {
  gemv_plan plan;
  plan.mb = p.m <= 8 ? 1 : p.m <= 16 ? 2 : 4;
  plan.symmetric = p.zeros == nullptr;
  if (policy.tiles_per_warp == 0 && policy.chunks_in_flight == 0 && policy.warps == 0) {
    // A Configs list shorter than the default one runs its last entry where the default would
    // pick a later one.
    plan.config =
        std::min(default_config(plan.mb, p.tiles * p.chunks), static_cast<int>(std::tuple_size_v<Configs>) - 1);
  } else {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (void)((std::tuple_element_t<I, Configs>::tiles == policy.tiles_per_warp &&
                      std::tuple_element_t<I, Configs>::unroll == policy.chunks_in_flight &&
                      std::tuple_element_t<I, Configs>::warps == policy.warps
                  ? (plan.config = static_cast<int>(I), true)
                  : false) ||
             ...);
    }
    (std::make_index_sequence<std::tuple_size_v<Configs>>{});
    expects(plan.config >= 0, errc::invalid_argument, where, "gemv_policy {tiles_per_warp ", policy.tiles_per_warp,
            ", chunks_in_flight ", policy.chunks_in_flight, ", warps ", policy.warps,
            "} is not one of the compiled configurations (pass them as the Configs list)");
  }
  int resident = 1;
  visit_kernel<Configs>(plan.config, plan.mb, plan.symmetric, [&]<class Config, int MB, bool Sym>() {
    plan.tiles = tiles_of<Config, MB>;
    plan.unroll = unroll_of<Math, Config, MB>;
    plan.warps = Config::warps;
    if (policy.splits == 0) resident = resident_blocks<Math, Scale, Out, MB, Config, Sym>();
  });
  plan.tile_groups = ceil_div(p.tiles, plan.tiles);
  expects(plan.tile_groups <= 0x7fffffff, errc::invalid_argument, where, "N = ", p.n, " needs ", plan.tile_groups,
          " blocks, more than a CUDA grid holds");
  if (policy.splits > 0) {
    plan.splits = policy.splits;
  } else {
    // Fill one wave of resident blocks when the tiles alone do not, keeping U chunks per warp.
    const std::int64_t slots = static_cast<std::int64_t>(multiprocessors()) * resident;
    const std::int64_t most = std::max<std::int64_t>(1, p.chunks / (plan.warps * plan.unroll));
    plan.splits = std::clamp<std::int64_t>(slots / plan.tile_groups, 1, std::min<std::int64_t>(most, 64));
  }
  expects(plan.splits >= 1 && plan.splits <= 65535, errc::invalid_argument, where, "splits = ", plan.splits,
          " must be 1 .. 65535");
  if (plan.splits > 1)
    plan.workspace_bytes = static_cast<std::size_t>(round_up(plan.tile_groups, 64)) * sizeof(unsigned) +
                           static_cast<std::size_t>(plan.splits * plan.tile_groups) *
                               static_cast<std::size_t>(plan.tiles * plan.mb * 4 * 32) * sizeof(float);
  return plan;
}

template <class Math, class Scale, class Out>
void check_gemv(const w4_gemv_params<typename Math::act, Scale, Out>& p, const char* where) {
  expects(p.m > 0 && p.n > 0 && p.k > 0, errc::invalid_argument, where, "shape M x N x K = ", p.m, " x ", p.n, " x ",
          p.k, " must be positive");
  expects(p.m <= 32, errc::invalid_argument, where, "M = ", p.m,
          " tokens; the decode GEMV takes at most 32 (use the GEMM)");
  expects(p.tiles == ceil_div(p.n, gpu_w4_tile_rows) && p.chunks == ceil_div(p.k, Math::chunk_k),
          errc::invalid_argument, where, "tiles = ", p.tiles, " and chunks = ", p.chunks,
          " do not describe N x K = ", p.n, " x ", p.k, " (need ceil(N / 16) and ceil(K / ", Math::chunk_k, "))");
  expects(p.group_size > 0 && p.group_size % int4_block == 0 && p.groups == ceil_div(p.k, p.group_size),
          errc::invalid_argument, where, "group_size = ", p.group_size, " and groups = ", p.groups,
          " do not describe K = ", p.k, " (group_size a multiple of 32, groups = ceil(K / group_size))");
  expects(p.groups == 1 || p.group_size % Math::chunk_k == 0, errc::invalid_argument, where,
          "group_size = ", p.group_size, ": the GPU layout needs groups of a multiple of ", Math::chunk_k,
          " inputs or one group per row");
  if constexpr (Math::has_meta)
    expects(p.k % 64 == 0, errc::invalid_argument, where, "K = ", p.k, " but 2:4 weights need K a multiple of 64");
  expects(p.chunks <= (std::int64_t{1} << 24), errc::invalid_argument, where, "K = ", p.k,
          " is larger than the GEMV handles (2^30 inputs)");
}

template <class Math, class Scale, class Out>
void check_gemv_pointers(const w4_gemv_params<typename Math::act, Scale, Out>& p, const char* where) {
  check_device_pointer(p.x, "x", where);
  check_device_pointer(p.words, "words", where);
  check_device_pointer(p.scales, "scales", where);
  if (p.zeros != nullptr) check_device_pointer(p.zeros, "zeros", where);
  check_device_pointer(p.y, "y", where);
  if constexpr (std::is_same_v<Math, w4a8_math>) check_device_pointer(p.x_scales, "x_scales", where);
  if constexpr (Math::has_meta) check_device_pointer(p.meta, "meta", where);
  // The kernel reads a lane's 16 bytes of codes, its two rows' scales and zeros as single loads.
  const auto aligned = [&](const void* ptr, std::size_t to, const char* name) {
    expects(reinterpret_cast<std::uintptr_t>(ptr) % to == 0, errc::invalid_argument, where, name, " pointer ", ptr,
            " is not ", to, "-byte aligned (the GPU layout is read in ", to, "-byte pieces; cudaMalloc's are)");
  };
  aligned(p.words, 16, "words");
  if constexpr (Math::has_meta) aligned(p.meta, 16, "meta");
  aligned(p.scales, 2 * sizeof(Scale), "scales");
  if (p.zeros != nullptr) aligned(p.zeros, 2, "zeros");
}

template <class Configs, class Math, class Scale, class Out>
cudaError_t launch_gemv(const w4_gemv_params<typename Math::act, Scale, Out>& p, const gemv_policy& policy,
                        cudaStream_t stream, const char* where) {
  check_gemv<Math>(p, where);
  if constexpr (!Math::has_meta)
    expects(p.meta == nullptr, errc::invalid_argument, where,
            "meta is set, so these are 2:4 weights: use launch_w4a16_sparse24_gemv");
  const gemv_plan plan = plan_gemv<Configs, Math>(p, policy, where);
  check_gemv_pointers<Math>(p, where);
  expects(plan.workspace_bytes == 0 || p.workspace != nullptr, errc::invalid_argument, where, "this launch splits K ",
          plan.splits, " ways and needs a workspace of ", plan.workspace_bytes,
          " bytes (w4_gemv_workspace_bytes), but workspace is null");
  if (plan.workspace_bytes > 0) check_device_pointer(p.workspace, "workspace", where);
  gemv_launch_info info;
  info.group_chunks = p.groups == 1 ? static_cast<int>(p.chunks) : static_cast<int>(p.group_size / Math::chunk_k);
  const bool x_aligned = p.k % Math::vector_elements == 0 && reinterpret_cast<std::uintptr_t>(p.x) % Math::x_align == 0;
  info.vector_chunks = x_aligned ? static_cast<int>(p.k / Math::chunk_k) : 0;
  const dim3 grid(static_cast<unsigned>(plan.tile_groups), static_cast<unsigned>(plan.splits));
  visit_kernel<Configs>(plan.config, plan.mb, plan.symmetric, [&]<class Config, int MB, bool Sym>() {
    kernel_of<Math, Scale, Out, MB, Config, Sym>()<<<grid, 32 * Config::warps, 0, stream>>>(p, info);
  });
  return cudaGetLastError();
}

}  // namespace weft::quant::cuda::detail

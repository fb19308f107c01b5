// A C ABI over weft's decode GEMVs, for callers that are not C++ (the PyTorch binding beside this
// file loads it with ctypes; the GPU benchmark uses that binding). Every function returns 0 on
// success or -1 after storing the weft::error or CUDA message, which weft_last_error() returns.
// Device pointers in, nothing synchronised; the stream is the caller's.
#include <weft/quant/cuda/w4_gemv.cuh>
#include <weft/quant/gpu_sparse24_matrix.hpp>
#include <weft/quant/gpu_w4_matrix.hpp>

#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <tuple>

namespace wq = weft::quant;
namespace wc = weft::quant::cuda;

namespace {

thread_local std::string last_error;

/// The kernel shapes this library carries: the launcher's default list plus those the benchmark
/// sweeps.
using capi_configs = std::tuple<wc::gemv_config<2, 2, 8>, wc::gemv_config<2, 1, 8>, wc::gemv_config<1, 4, 8>,
                                wc::gemv_config<4, 1, 8>, wc::gemv_config<4, 2, 4>, wc::gemv_config<2, 2, 4>>;

template <class F>
int guarded(F&& f) {
  try {
    const cudaError_t e = f();
    if (e != cudaSuccess) {
      last_error = std::string("CUDA: ") + cudaGetErrorString(e);
      return -1;
    }
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    return -1;
  }
}

template <class Act, class Out>
wc::w4_gemv_params<Act, weft::half, Out> params(const void* x, const void* words, const void* scales, const void* zeros,
                                                void* y, std::int64_t m, std::int64_t n, std::int64_t k,
                                                std::int64_t group_size, void* workspace, const float* x_scales,
                                                const void* meta = nullptr) {
  wc::w4_gemv_params<Act, weft::half, Out> p;
  p.meta = static_cast<const std::uint32_t*>(meta);
  p.x = static_cast<const Act*>(x);
  p.x_scales = x_scales;
  p.words = static_cast<const std::uint32_t*>(words);
  p.scales = static_cast<const weft::half*>(scales);
  p.zeros = static_cast<const std::uint8_t*>(zeros);
  p.y = static_cast<Out*>(y);
  p.m = m;
  p.n = n;
  p.k = k;
  p.tiles = wq::ceil_div(n, wq::gpu_w4_tile_rows);
  p.chunks = wq::ceil_div(k, meta != nullptr ? wq::gpu_sparse24_chunk_k : wq::gpu_w4_chunk_k);
  p.group_size = group_size == 0 ? wq::round_up(k, wq::int4_block) : group_size;
  p.groups = group_size <= 0 ? 1 : wq::ceil_div(k, group_size);
  p.workspace = workspace;
  return p;
}

// dtype codes: 0 = fp16, 1 = bf16, 2 = fp32 (outputs only)
template <class F>
int with_types(int act, int out, F&& f) {
  if (act == 0 && out == 0) return f(weft::half{}, weft::half{});
  if (act == 0 && out == 2) return f(weft::half{}, float{});
  if (act == 1 && out == 1) return f(weft::bfloat16{}, weft::bfloat16{});
  if (act == 1 && out == 2) return f(weft::bfloat16{}, float{});
  last_error = "unsupported (activation, output) dtype codes (" + std::to_string(act) + ", " + std::to_string(out) +
               "): activations fp16 (0) or bf16 (1), output the same or fp32 (2)";
  return -1;
}

/// Reads `words` 16-byte words with the GEMV's own load instruction and folds them into one word
/// per block: the memory roofline the benchmark sets the GEMV against.
__global__ void read_bandwidth_kernel(const std::uint32_t* data, std::int64_t words, std::uint32_t* sink) {
  std::uint32_t acc = 0;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const uint4 v = wc::detail::load_weights(reinterpret_cast<const uint4*>(data) + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) sink[blockIdx.x] = acc;  // practically never: keeps the loads alive
}

}  // namespace

extern "C" {

/// Streams `bytes` (a multiple of 16) from `data`; `sink` needs one word per block (4096 blocks).
int weft_read_bandwidth(const void* data, std::int64_t bytes, void* sink, void* stream) {
  return guarded([&] {
    weft::expects(bytes > 0 && bytes % 16 == 0, weft::errc::invalid_argument, "weft_read_bandwidth", "bytes = ", bytes,
                  " must be a positive multiple of 16");
    read_bandwidth_kernel<<<4096, 256, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const std::uint32_t*>(data), bytes / 16, static_cast<std::uint32_t*>(sink));
    return cudaGetLastError();
  });
}

/// The message of the last failed call on this thread ("" if none).
const char* weft_last_error() { return last_error.c_str(); }

/// Version of the GPU weight layout the kernels read (gpu_w4_matrix.hpp).
int weft_gpu_w4_layout_version() { return wq::gpu_w4_layout_version; }

/// Packs host codes (N x K int32, 0..15), fp16 scales (N x groups) and zeros (N x groups int16,
/// or null: symmetric, zero 8) into the GPU layout. Output sizes: weft_gpu_w4_sizes.
int weft_gpu_w4_sizes(std::int64_t n, std::int64_t k, std::int64_t group_size, std::int64_t* words,
                      std::int64_t* cells) {
  return guarded([&] {
    const auto z = wq::quantized_matrix<weft::half>::check_scheme(n, k, {4, static_cast<int>(group_size), true},
                                                                  "weft_gpu_w4_sizes");
    const auto tiles = wq::ceil_div(n, wq::gpu_w4_tile_rows), chunks = wq::ceil_div(k, wq::gpu_w4_chunk_k);
    *words = tiles * chunks * 128;
    *cells = tiles * wq::gpu_w4_tile_rows * z.groups;
    return cudaSuccess;
  });
}

int weft_gpu_w4_pack(const std::int32_t* codes, const std::uint16_t* scales, const std::int16_t* zeros, std::int64_t n,
                     std::int64_t k, std::int64_t group_size, std::uint32_t* words_out, std::uint16_t* scales_out,
                     std::uint8_t* zeros_out) {
  return guarded([&] {
    const wq::quant_scheme s{4, static_cast<int>(group_size), zeros == nullptr};
    const auto z = wq::quantized_matrix<weft::half>::check_scheme(n, k, s, "weft_gpu_w4_pack");
    const auto cells = static_cast<std::size_t>(z.cells);
    std::vector<weft::half> sc(cells);
    for (std::size_t i = 0; i < cells; ++i) sc[i] = weft::half::from_bits(scales[i]);
    const auto w = wq::quantized_matrix<weft::half>::from_codes(
        n, k, s, std::span<const std::int32_t>(codes, static_cast<std::size_t>(z.elements)), sc,
        zeros == nullptr ? std::span<const std::int16_t>{} : std::span<const std::int16_t>(zeros, cells));
    const auto g = wq::gpu_w4_matrix<weft::half>::from(w);
    std::memcpy(words_out, g.words().data(), g.words().size_bytes());
    std::memcpy(scales_out, g.scales().data(), g.scales().size_bytes());
    if (zeros_out != nullptr && !g.zeros().empty()) std::memcpy(zeros_out, g.zeros().data(), g.zeros().size_bytes());
    return cudaSuccess;
  });
}

/// Workspace bytes of a W4A16 (kind = 0), W4A8 (kind = 1) or 2:4 W4A16 (kind = 2) GEMV launch with
/// these arguments.
int weft_w4_gemv_workspace(int int8, int act, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t group_size,
                           int symmetric, int tiles_per_warp, int chunks_in_flight, int warps, int splits,
                           std::size_t* bytes) {
  const wc::gemv_policy pol{tiles_per_warp, chunks_in_flight, warps, splits};
  const void* zeros = symmetric ? nullptr : reinterpret_cast<const void*>(1);
  const void* meta = int8 == 2 ? reinterpret_cast<const void*>(1) : nullptr;
  return guarded([&] {
    // 2:4 carries the launcher's own shapes only (default_gemv_configs), to keep this library's size down.
    if (int8 == 2 && act == 1)
      *bytes = wc::w4_gemv_workspace_bytes<wc::default_gemv_configs>(
          params<weft::bfloat16, float>(nullptr, nullptr, nullptr, zeros, nullptr, m, n, k, group_size, nullptr,
                                        nullptr, meta),
          pol);
    else if (int8 == 2)
      *bytes = wc::w4_gemv_workspace_bytes<wc::default_gemv_configs>(
          params<weft::half, float>(nullptr, nullptr, nullptr, zeros, nullptr, m, n, k, group_size, nullptr, nullptr,
                                    meta),
          pol);
    else if (int8)
      *bytes = wc::w4_gemv_workspace_bytes<capi_configs>(
          params<std::int8_t, float>(nullptr, nullptr, nullptr, zeros, nullptr, m, n, k, group_size, nullptr, nullptr),
          pol);
    else if (act == 1)
      *bytes = wc::w4_gemv_workspace_bytes<capi_configs>(
          params<weft::bfloat16, float>(nullptr, nullptr, nullptr, zeros, nullptr, m, n, k, group_size, nullptr,
                                        nullptr),
          pol);
    else
      *bytes = wc::w4_gemv_workspace_bytes<capi_configs>(
          params<weft::half, float>(nullptr, nullptr, nullptr, zeros, nullptr, m, n, k, group_size, nullptr, nullptr),
          pol);
    return cudaSuccess;
  });
}

/// Y (M x N) = X (M x K, fp16 or bf16) W^T, W in the GPU layout with fp16 scales.
int weft_w4a16_gemv(int act, int out, const void* x, const void* words, const void* scales, const void* zeros, void* y,
                    std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t group_size, int tiles_per_warp,
                    int chunks_in_flight, int warps, int splits, void* workspace, void* stream) {
  const wc::gemv_policy pol{tiles_per_warp, chunks_in_flight, warps, splits};
  return with_types(act, out, [&](auto a, auto o) {
    using Act = decltype(a);
    using Out = decltype(o);
    return guarded([&] {
      return wc::launch_w4a16_gemv<capi_configs>(
          params<Act, Out>(x, words, scales, zeros, y, m, n, k, group_size, workspace, nullptr), pol,
          static_cast<cudaStream_t>(stream));
    });
  });
}

/// Y (M x N fp32) = diag(x_scales) X (M x K int8) W^T.
int weft_w4a8_gemv(const void* x, const float* x_scales, const void* words, const void* scales, const void* zeros,
                   float* y, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t group_size,
                   int tiles_per_warp, int chunks_in_flight, int warps, int splits, void* workspace, void* stream) {
  const wc::gemv_policy pol{tiles_per_warp, chunks_in_flight, warps, splits};
  return guarded([&] {
    return wc::launch_w4a8_gemv<capi_configs>(
        params<std::int8_t, float>(x, words, scales, zeros, y, m, n, k, group_size, workspace, x_scales), pol,
        static_cast<cudaStream_t>(stream));
  });
}

/// Sizes of the 2:4 GPU layout of an N x K matrix: words (kept codes), meta words, scale cells.
int weft_gpu_sparse24_sizes(std::int64_t n, std::int64_t k, std::int64_t group_size, std::int64_t* words,
                            std::int64_t* meta, std::int64_t* cells) {
  return guarded([&] {
    wq::sparse24_matrix<weft::half>::check_shape(n, k, {4, static_cast<int>(group_size), true},
                                                 "weft_gpu_sparse24_sizes");
    const auto tiles = wq::ceil_div(n, wq::gpu_w4_tile_rows), chunks = wq::ceil_div(k, wq::gpu_sparse24_chunk_k);
    *words = tiles * chunks * 128;
    *meta = tiles * chunks * 64;
    *cells = tiles * wq::gpu_w4_tile_rows * (group_size == 0 ? 1 : wq::ceil_div(k, group_size));
    return cudaSuccess;
  });
}

/// Packs host 2:4 weights: kept codes (N x K/2 int32, 0..15), positions (N x K/2 uint8, 0..3,
/// increasing in each group of 4), fp16 scales (N x groups) and zeros (or null) into the GPU layout.
int weft_gpu_sparse24_pack(const std::int32_t* codes, const std::uint8_t* positions, const std::uint16_t* scales,
                           const std::int16_t* zeros, std::int64_t n, std::int64_t k, std::int64_t group_size,
                           std::uint32_t* words_out, std::uint32_t* meta_out, std::uint16_t* scales_out,
                           std::uint8_t* zeros_out) {
  return guarded([&] {
    const wq::quant_scheme s{4, static_cast<int>(group_size), zeros == nullptr};
    wq::sparse24_matrix<weft::half>::check_shape(n, k, s, "weft_gpu_sparse24_pack");
    const auto kept = static_cast<std::size_t>(n * (k / 2));
    const auto cells = static_cast<std::size_t>(n * (group_size == 0 ? 1 : wq::ceil_div(k, group_size)));
    std::vector<weft::half> sc(cells);
    for (std::size_t i = 0; i < cells; ++i) sc[i] = weft::half::from_bits(scales[i]);
    const auto w = wq::sparse24_matrix<weft::half>::from_parts(
        n, k, s, std::span<const std::int32_t>(codes, kept), std::span<const std::uint8_t>(positions, kept), sc,
        zeros == nullptr ? std::span<const std::int16_t>{} : std::span<const std::int16_t>(zeros, cells));
    const auto g = wq::gpu_sparse24_matrix<weft::half>::from(w);
    std::memcpy(words_out, g.words().data(), g.words().size_bytes());
    std::memcpy(meta_out, g.meta().data(), g.meta().size_bytes());
    std::memcpy(scales_out, g.scales().data(), g.scales().size_bytes());
    if (zeros_out != nullptr && !g.zeros().empty()) std::memcpy(zeros_out, g.zeros().data(), g.zeros().size_bytes());
    return cudaSuccess;
  });
}

/// Y (M x N) = X (M x K, fp16 or bf16) W^T for 2:4 weights in the GPU layout with fp16 scales.
int weft_w4a16_sparse24_gemv(int act, int out, const void* x, const void* words, const void* meta, const void* scales,
                             const void* zeros, void* y, std::int64_t m, std::int64_t n, std::int64_t k,
                             std::int64_t group_size, int tiles_per_warp, int chunks_in_flight, int warps, int splits,
                             void* workspace, void* stream) {
  const wc::gemv_policy pol{tiles_per_warp, chunks_in_flight, warps, splits};
  return with_types(act, out, [&](auto a, auto o) {
    using Act = decltype(a);
    using Out = decltype(o);
    return guarded([&] {
      return wc::launch_w4a16_sparse24_gemv<wc::default_gemv_configs>(
          params<Act, Out>(x, words, scales, zeros, y, m, n, k, group_size, workspace, nullptr, meta), pol,
          static_cast<cudaStream_t>(stream));
    });
  });
}

}  // extern "C"

// W4A8 GEMV and GEMM on the CPU: int4 weights (weft's layout, group-wise scales and zeros) times
// per-token int8 activations with exact int32 dot products per group (AVX-512 VNNI vpdpbusd, or
// AVX2 vpmaddubsw/vpmaddwd), then fp32 scaling: the scheme of llama.cpp's Q4_0 x Q8_0 kernels and
// of QServe's W4A8 (Lin et al., "QServe: W4A8KV4 Quantization and System Co-design", 2024).
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/quant/concepts.hpp>
#include <weft/quant/cpu_features.hpp>
#include <weft/quant/detail/aligned_buffer.hpp>
#include <weft/quant/detail/w4a8_kernels.hpp>
#include <weft/quant/format.hpp>
#include <weft/quant/quantized_activations.hpp>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace weft::quant {

/// The paths the W4A8 kernels have, best last. CPUs with AVX-512 BW but no VNNI take the AVX2 path.
inline constexpr isa w4a8_paths[] = {isa::portable, isa::avx2, isa::avx512_vnni};

/// The path gemm_w4a8 would run for `requested` on this CPU. Throws weft::error (unsupported) when
/// a specific path is requested that the CPU lacks. Thread-safe. O(1).
inline isa w4a8_path(isa requested = isa::automatic) {
  return detail::resolve_path(requested, w4a8_paths, "weft::quant::w4a8_path");
}

namespace detail {

/// Bytes of packed weights one vector step reads on `path`: the widest load whose 2 x bytes
/// elements never straddle a group boundary (64 on VNNI for groups a multiple of 128).
inline int w4a8_chunk_bytes(isa path, std::int64_t group_size, std::int64_t groups) noexcept {
  const int widest = path == isa::avx512_vnni ? 64 : path == isa::avx2 ? 32 : 16;
  for (int cb = widest; cb > 16; cb /= 2)
    if (groups == 1 || group_size % (2 * cb) == 0) return cb;
  return 16;
}

/// Activations prepared once per call: reordered int8 rows, per-group sums, per-token scales.
struct w4a8_activations {
  aligned_buffer<std::int8_t> values;  // m x row_elements, chunk order; rows 64-byte aligned
  std::vector<float> sums;             // m x groups
  std::int64_t row_elements = 0;
};

template <class Scale>
w4a8_activations prepare_w4a8(const quantized_matrix<Scale>& w, const std::int8_t* a, std::int64_t m, int chunk_bytes) {
  const std::int64_t k = w.cols(), groups = w.groups(), gs = w.group_size();
  w4a8_activations p;
  p.row_elements = round_up(w.k_padded(), 2 * chunk_bytes);
  p.values = aligned_buffer<std::int8_t>(static_cast<std::size_t>(m * p.row_elements));
  p.sums.assign(static_cast<std::size_t>(m * groups), 0.0f);
  const std::int64_t chunk = 2 * chunk_bytes;
  for (std::int64_t r = 0; r < m; ++r) {
    const std::int8_t* src = a + r * k;
    std::int8_t* row = p.values.data() + r * p.row_elements;
    // Block by block (no division per element): elements 0..15 of block b of a chunk go to
    // b * 16, elements 16..31 to chunk_bytes + b * 16 (w4a8_position).
    for (std::int64_t k0 = 0; k0 < k; k0 += int4_block) {
      std::int8_t* dst = row + k0 / chunk * chunk + (k0 % chunk) / 2;
      const std::int64_t lo = std::min<std::int64_t>(16, k - k0), hi = std::min<std::int64_t>(16, k - k0 - 16);
      std::copy_n(src + k0, lo, dst);
      if (hi > 0) std::copy_n(src + k0 + 16, hi, dst + chunk_bytes);
    }
    for (std::int64_t g = 0; g < groups; ++g) {
      std::int32_t sum = 0;
      for (std::int64_t i = g * gs; i < std::min(k, (g + 1) * gs); ++i) sum += src[i];
      p.sums[static_cast<std::size_t>(r * groups + g)] = static_cast<float>(sum);
    }
  }
  return p;
}

template <int NR, int MB, class Scale>
void w4a8_rows(isa path, int chunk_bytes, const quantized_matrix<Scale>& w, const w4a8_activations& x,
               const float* token_scales, std::int64_t m0, std::int64_t n0, float* y) {
  const std::int64_t groups = w.groups(), n = w.rows();
  const auto row_bytes = int4_row_bytes(w.k_padded());
  w4a8_tile_args<NR, MB, Scale> a{};
  for (int r = 0; r < NR; ++r) {
    // Prefetch 4 rows ahead (8 KiB at K = 4096), on the first pass over a row only.
    const std::int64_t ahead = n0 + 4 + r;
    a.prefetch[r] = m0 != 0 ? nullptr : w.packed().data() + (ahead < n ? ahead : n0 + r) * row_bytes;
    a.rows[r] = w.packed().data() + (n0 + r) * row_bytes;
    a.scales[r] = w.scales().data() + (n0 + r) * groups;
    a.zeros[r] = w.zeros().data() + (n0 + r) * groups;
  }
  for (int i = 0; i < MB; ++i) {
    a.xa[i] = x.values.data() + (m0 + i) * x.row_elements;
    a.asum[i] = x.sums.data() + (m0 + i) * groups;
  }
  a.row_bytes = row_bytes;
  a.groups = groups;
  a.chunks = ceil_div(row_bytes, chunk_bytes);
  a.chunks_per_group = groups == 1 ? a.chunks : w.group_size() / (2 * chunk_bytes);
  float out[NR][MB];
  w4a8_tile(path, chunk_bytes, a, out);
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < MB; ++i) y[(m0 + i) * n + n0 + r] = out[r][i] * token_scales[m0 + i];
}

/// `count` (<= 4) consecutive weight rows from n0 against every token. Tiles measured on AVX-512
/// VNNI (4096 x 4096, one thread, weights in cache): one token reads 4 rows per pass (the loads
/// dominate); 2-3 tokens take 2 x 2 or 2 x 3 tiles; from 4 tokens on, one row against 4 or 8
/// tokens, which keeps 2 vpdpbusd + 1 fma per (row, token, group) the only work that grows with M.
template <class Scale>
void w4a8_row_block(isa path, int chunk_bytes, const quantized_matrix<Scale>& w, const w4a8_activations& x,
                    const float* ts, std::int64_t m_total, std::int64_t n0, std::int64_t count, float* y) {
  if (m_total == 1 && count == 4) return w4a8_rows<4, 1>(path, chunk_bytes, w, x, ts, 0, n0, y);
  if (m_total <= 3 && count % 2 == 0) {
    for (std::int64_t r = n0; r < n0 + count; r += 2) {
      if (m_total == 1) w4a8_rows<2, 1>(path, chunk_bytes, w, x, ts, 0, r, y);
      if (m_total == 2) w4a8_rows<2, 2>(path, chunk_bytes, w, x, ts, 0, r, y);
      if (m_total == 3) w4a8_rows<2, 3>(path, chunk_bytes, w, x, ts, 0, r, y);
    }
    return;
  }
  for (std::int64_t r = n0; r < n0 + count; ++r) {
    std::int64_t m = 0;
    for (; m + 8 <= m_total; m += 8) w4a8_rows<1, 8>(path, chunk_bytes, w, x, ts, m, r, y);
    if (m + 4 <= m_total) {
      w4a8_rows<1, 4>(path, chunk_bytes, w, x, ts, m, r, y);
      m += 4;
    }
    switch (m_total - m) {
      case 3:
        w4a8_rows<1, 3>(path, chunk_bytes, w, x, ts, m, r, y);
        break;
      case 2:
        w4a8_rows<1, 2>(path, chunk_bytes, w, x, ts, m, r, y);
        break;
      case 1:
        w4a8_rows<1, 1>(path, chunk_bytes, w, x, ts, m, r, y);
        break;
      default:
        break;
    }
  }
}

}  // namespace detail

/// Y = A * W^T with int8 per-token activations: A from quantize_activations (M x K), W an int4
/// quantized_matrix (N x K, any group size, symmetric or not), Y M x N fp32 (row-major):
/// y[m][n] = a.scales[m] * sum_g scale[n][g] * sum_{k in g} (code[n][k] - zero[n][g]) * a[m][k],
/// each group's sum exact in int32. Throws weft::error for int8 weights, shapes that do not match,
/// or a requested path the CPU lacks; Y is untouched then. O(M N K) work, O(M K) extra memory; the
/// weights are read once per call. Thread-safe for distinct Y; runs on oneTBB's arena.
template <scale_value Scale>
void gemm_w4a8(const quantized_matrix<Scale>& w, const quantized_activations& a, std::span<float> y,
               kernel_options options = {}) {
  constexpr const char* where = "weft::quant::gemm_w4a8";
  expects(!w.empty() && w.bits() == 4, errc::invalid_argument, where, "weights must be a non-empty int4 matrix (got ",
          w.bits(), "-bit, ", w.rows(), " x ", w.cols(), ")");
  expects(a.rows > 0 && a.cols == w.cols(), errc::invalid_argument, where, "activations are ", a.rows, " x ", a.cols,
          " but the weights are ", w.rows(), " x ", w.cols(), " (need M > 0 and K = ", w.cols(), ")");
  const auto a_count = checked_mul(a.rows, a.cols, where), y_count = checked_mul(a.rows, w.rows(), where);
  expects(std::cmp_equal(a.values.size(), a_count) && std::cmp_equal(a.scales.size(), a.rows), errc::invalid_argument,
          where, "activations hold ", a.values.size(), " values and ", a.scales.size(), " scales but M x K = ", a.rows,
          " x ", a.cols, " needs ", a_count, " and ", a.rows);
  expects(std::cmp_equal(y.size(), y_count), errc::invalid_argument, where, "output has ", y.size(),
          " elements but M x N = ", a.rows, " x ", w.rows(), " = ", y_count);
  const isa path = detail::resolve_path(options.path, w4a8_paths, where);
  const int chunk_bytes = detail::w4a8_chunk_bytes(path, w.group_size(), w.groups());
  const std::int64_t m = a.rows, n = w.rows();
  const auto x = detail::prepare_w4a8(w, a.values.data(), m, chunk_bytes);
  constexpr std::int64_t nr = 4;
  const auto body = [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b)
      detail::w4a8_row_block(path, chunk_bytes, w, x, a.scales.data(), m, b * nr, std::min(nr, n - b * nr), y.data());
  };
  const std::int64_t row_blocks = ceil_div(n, nr);
  if (options.parallel && row_blocks > 1) {
    // About 64 KiB of weights per task, as in gemm_w4.
    const std::int64_t grain = std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(1, nr * w.k_padded() / 2));
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, row_blocks, grain),
                      [&](const tbb::blocked_range<std::int64_t>& r) { body(r.begin(), r.end()); });
  } else {
    body(0, row_blocks);
  }
}

/// Y = X * W^T for fp32/fp16/bf16 activations X (M x K): quantizes X per token
/// (quantize_activations) and runs gemm_w4a8. Same errors, plus non-finite activations. O(M N K).
/// Thread-safe for distinct Y.
template <scale_value Scale, activation_value Act>
void gemm_w4a8(const quantized_matrix<Scale>& w, std::span<const Act> x, std::int64_t m, std::span<float> y,
               kernel_options options = {}) {
  expects(!w.empty(), errc::invalid_argument, "weft::quant::gemm_w4a8", "weights are empty");
  gemm_w4a8(w, quantize_activations<Act>(x, m, w.cols()), y, options);
}

/// y = W x for one token (batch 1), x quantized per token on the way in; see gemm_w4a8. O(N K).
/// Thread-safe for distinct y.
template <scale_value Scale, activation_value Act>
void gemv_w4a8(const quantized_matrix<Scale>& w, std::span<const Act> x, std::span<float> y,
               kernel_options options = {}) {
  gemm_w4a8(w, x, 1, y, options);
}

}  // namespace weft::quant

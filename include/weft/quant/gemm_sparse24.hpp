// W4A16 / W4A32 GEMV and GEMM with 2:4 structured-sparse int4 weights (sparse24_matrix) on the
// CPU: the CPU counterpart of Sparse-Marlin (Frantar, Castro et al., MARLIN, 2024). Only kept
// weights are read and multiplied: 3 bits per weight of traffic instead of 4, half the products.
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/quant/concepts.hpp>
#include <weft/quant/cpu_features.hpp>
#include <weft/quant/detail/sparse24_kernels.hpp>
#include <weft/quant/sparse24_matrix.hpp>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace weft::quant {

/// The paths the 2:4 sparse kernels have, best last (AVX-512 gathers activations with vpermt2ps;
/// CPUs without AVX-512 run the portable path).
inline constexpr isa sparse24_paths[] = {isa::portable, isa::avx512};

/// The path gemm_sparse24 would run for `requested` on this CPU. Thread-safe. O(1).
inline isa sparse24_path(isa requested = isa::automatic) {
  return detail::resolve_path(requested, sparse24_paths, "weft::quant::sparse24_path");
}

namespace detail {

template <int NR, int MB, class Scale>
void sparse24_rows(isa path, const sparse24_matrix<Scale>& w, const float* xf, std::int64_t m0, std::int64_t n0,
                   float* y) {
  const std::int64_t n = w.rows(), k = w.cols(), groups = w.groups();
  const auto& v = w.values();
  const std::int64_t code_bytes = k / 4, meta_bytes = k / 8;
  sparse24_tile_args<NR, MB, Scale> a{};
  for (int r = 0; r < NR; ++r) {
    const std::int64_t ahead = n0 + 4 + r;
    a.prefetch[r] = m0 != 0 ? nullptr : v.packed().data() + (ahead < n ? ahead : n0 + r) * code_bytes;
    a.rows[r] = v.packed().data() + (n0 + r) * code_bytes;
    a.meta[r] = w.meta().data() + (n0 + r) * meta_bytes;
    a.scales[r] = v.scales().data() + (n0 + r) * groups;
    a.zeros[r] = v.zeros().data() + (n0 + r) * groups;
  }
  for (int i = 0; i < MB; ++i) a.xs[i] = xf + (m0 + i) * k;
  a.groups = groups;
  a.blocks_per_group = w.group_size() / 64;
  a.blocks = k / 64;
  float out[NR][MB];
  sparse24_tile(path, a, out);
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < MB; ++i) y[(m0 + i) * n + n0 + r] = out[r][i];
}

template <int NR, class Scale>
void sparse24_row_block(isa path, const sparse24_matrix<Scale>& w, const float* xf, std::int64_t m_total,
                        std::int64_t n0, float* y) {
  std::int64_t m = 0;
  for (; m + 2 <= m_total; m += 2) sparse24_rows<NR, 2>(path, w, xf, m, n0, y);
  if (m < m_total) sparse24_rows<NR, 1>(path, w, xf, m, n0, y);
}

}  // namespace detail

/// Y = X * W^T with W 2:4 sparse int4 (N x K), X M x K (fp32, fp16 or bf16, row-major), Y M x N fp32.
/// Throws weft::error for shapes that do not match (checked, so M x K cannot wrap) or a requested
/// path the CPU lacks; Y is untouched then. O(M N K / 2) work, O(M K) extra memory; the weights
/// are read once per call. Thread-safe for distinct Y; runs on oneTBB's arena.
template <scale_value Scale, activation_value Act>
void gemm_sparse24(const sparse24_matrix<Scale>& w, std::span<const Act> x, std::int64_t m, std::span<float> y,
                   kernel_options options = {}) {
  constexpr const char* where = "weft::quant::gemm_sparse24";
  expects(!w.empty(), errc::invalid_argument, where, "weights are empty");
  expects(m > 0, errc::invalid_argument, where, "M = ", m, " must be positive");
  const auto x_count = checked_mul(m, w.cols(), where), y_count = checked_mul(m, w.rows(), where);
  expects(std::cmp_equal(x.size(), x_count), errc::invalid_argument, where, "activations have ", x.size(),
          " elements but M x K = ", m, " x ", w.cols(), " = ", x_count);
  expects(std::cmp_equal(y.size(), y_count), errc::invalid_argument, where, "output has ", y.size(),
          " elements but M x N = ", m, " x ", w.rows(), " = ", y_count);
  const isa path = detail::resolve_path(options.path, sparse24_paths, where);
  std::vector<float> xf(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) xf[i] = static_cast<float>(x[i]);
  const std::int64_t n = w.rows();
  constexpr std::int64_t nr = 4;
  const std::int64_t full = n / nr * nr;
  const auto body = [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t n0 = b * nr;
      if (n0 + nr <= full)
        detail::sparse24_row_block<4>(path, w, xf.data(), m, n0, y.data());
      else
        for (std::int64_t r = n0; r < n; ++r) detail::sparse24_row_block<1>(path, w, xf.data(), m, r, y.data());
    }
  };
  const std::int64_t row_blocks = ceil_div(n, nr);
  if (options.parallel && row_blocks > 1) {
    // About 64 KiB of kept codes and metadata per task.
    const std::int64_t grain = std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(1, nr * w.cols() * 3 / 8));
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, row_blocks, grain),
                      [&](const tbb::blocked_range<std::int64_t>& r) { body(r.begin(), r.end()); });
  } else {
    body(0, row_blocks);
  }
}

/// y = W x for one activation vector (batch 1); see gemm_sparse24. O(N K / 2). Thread-safe for
/// distinct y.
template <scale_value Scale, activation_value Act>
void gemv_sparse24(const sparse24_matrix<Scale>& w, std::span<const Act> x, std::span<float> y,
                   kernel_options options = {}) {
  gemm_sparse24(w, x, 1, y, options);
}

}  // namespace weft::quant

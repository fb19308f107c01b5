// W8A8 GEMM on the CPU: int8 activations (per-row absmax scales, as in LLM.int8()/SmoothQuant,
// Xiao et al. 2023) times int8 symmetric weights (per-channel scales) with exact int32
// accumulation; paths: portable, AVX2, AVX-512 VNNI and AMX, chosen at run time.
#pragma once

#include <weft/core/error.hpp>
#include <weft/quant/concepts.hpp>
#include <weft/quant/cpu_features.hpp>
#include <weft/quant/detail/w8_kernels.hpp>
#include <weft/quant/format.hpp>
#include <weft/quant/quantized_activations.hpp>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace weft::quant {

/// The paths the W8A8 kernels have, best last.
inline constexpr isa w8a8_paths[] = {isa::portable, isa::avx2, isa::avx512_vnni, isa::amx_int8};

/// The path gemm_w8a8 would run for `requested` on this CPU. Thread-safe. O(1).
inline isa w8a8_path(isa requested = isa::automatic) {
  return detail::resolve_path(requested, w8a8_paths, "weft::quant::w8a8_path");
}

namespace detail {

/// Drives the kernels over the output; epilogue(m0, n0, rows, cols, tile, ld) receives int32 tiles.
template <class Scale, class Epilogue>
void w8a8_drive(isa path, const quantized_matrix<Scale>& w, const std::int8_t* a, std::int64_t m, bool parallel,
                Epilogue&& epilogue) {
  const std::int64_t k = w.cols(), kp = w.k_padded(), n = w.rows(), k_steps = kp / 4;
  const std::int64_t panels = ceil_div(n, int8_panel_rows), panel_stride = kp * int8_panel_rows;
  const auto* weights = reinterpret_cast<const std::int8_t*>(w.packed().data());
  const auto run = [&](std::int64_t count, auto&& task) {
    if (parallel && count > 1)
      tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, count), [&](const tbb::blocked_range<std::int64_t>& r) {
        for (std::int64_t i = r.begin(); i < r.end(); ++i) task(i);
      });
    else
      for (std::int64_t i = 0; i < count; ++i) task(i);
  };
  // Activations padded to k_padded columns (and, for the tiled paths, to whole row tiles).
  const std::int64_t mr = path == isa::amx_int8 ? 32 : path == isa::avx512_vnni ? 8 : 1;
  const std::int64_t mp = round_up(m, mr);
  const bool vnni = path == isa::avx512_vnni;
  std::vector<std::int8_t> padded;
  const std::int8_t* ap = a;
  if (vnni || kp != k || mp != m) {
    padded.assign(static_cast<std::size_t>(mp * kp), 0);
    for (std::int64_t r = 0; r < m; ++r) std::memcpy(padded.data() + r * kp, a + r * k, static_cast<std::size_t>(k));
    // VNNI multiplies unsigned by signed bytes: a + 128 (flip the sign bit), corrected below.
    if (vnni)
      for (auto& v : padded) v = static_cast<std::int8_t>(static_cast<std::uint8_t>(v) ^ 0x80u);
    ap = padded.data();
  }
  switch (path) {
#if WEFT_QUANT_X86
    case isa::amx_int8: {
      // Blocks of 16 panels (256 outputs, 1 MiB of weights at K = 4096) stay in L2 while 32-row
      // slices of A stream past; within a block, pairs of panels make 32 x 32 C tiles.
      constexpr std::int64_t block_panels = 16;
      const std::int64_t nb = ceil_div(panels, block_panels);
      run(nb, [&](std::int64_t b) {
        alignas(64) std::int32_t c[32 * 32];
        const std::int64_t first = b * block_panels, last = std::min(panels, first + block_panels);
        amx_begin();
        for (std::int64_t m0 = 0; m0 < mp; m0 += 32)
          for (std::int64_t p = first; p < last; p += 2) {
            const std::int8_t* p0 = weights + p * panel_stride;
            const std::int8_t* p1 = p + 1 < panels ? p0 + panel_stride : p0;  // odd panel count: repeat
            const std::int64_t n0 = p * 16, cols = std::min<std::int64_t>(32, n - n0);
            w8_tile_amx(ap + m0 * kp, kp, p0, p1, kp, c);
            epilogue(m0, n0, std::min<std::int64_t>(32, m - m0), cols, c, 32);
          }
        amx_end();
      });
      return;
    }
    case isa::avx512_vnni: {
      constexpr std::int64_t nv = 3;
      const std::int64_t nb = ceil_div(panels, nv);
      const auto* au = reinterpret_cast<const std::uint8_t*>(ap);
      run(nb, [&](std::int64_t b) {
        std::int32_t c[8 * 16 * nv];
        const std::int64_t p0 = b * nv, np = std::min<std::int64_t>(nv, panels - p0);
        const std::int8_t* pw = weights + p0 * panel_stride;
        const std::int64_t n0 = p0 * 16, cols = std::min<std::int64_t>(np * 16, n - n0);
        for (std::int64_t m0 = 0; m0 < mp; m0 += 8) {
          if (np == 3)
            w8_tile_vnni<8, 3>(au + m0 * kp, kp, pw, panel_stride, k_steps, c, 16 * nv);
          else if (np == 2)
            w8_tile_vnni<8, 2>(au + m0 * kp, kp, pw, panel_stride, k_steps, c, 16 * nv);
          else
            w8_tile_vnni<8, 1>(au + m0 * kp, kp, pw, panel_stride, k_steps, c, 16 * nv);
          const std::int64_t rows = std::min<std::int64_t>(8, m - m0);
          for (std::int64_t i = 0; i < rows; ++i)
            for (std::int64_t j = 0; j < cols; ++j)
              c[i * 16 * nv + j] -= 128 * w.row_sums()[static_cast<std::size_t>(n0 + j)];
          epilogue(m0, n0, rows, cols, c, 16 * nv);
        }
      });
      return;
    }
#endif
    default: {
      run(panels, [&](std::int64_t p) {
        std::int32_t c[16];
        const std::int64_t n0 = p * 16, cols = std::min<std::int64_t>(16, n - n0);
        for (std::int64_t r = 0; r < m; ++r) {
#if WEFT_QUANT_X86
          if (path == isa::avx2)
            w8_panel_avx2(ap + r * kp, weights + p * panel_stride, k_steps, c);
          else
#endif
            w8_panel_portable(ap + r * kp, weights + p * panel_stride, k_steps, c);
          epilogue(r, n0, 1, cols, c, 16);
        }
      });
      return;
    }
  }
}

template <class Scale>
void check_w8a8(const quantized_matrix<Scale>& w, std::int64_t m, std::size_t a_size, std::size_t out_size,
                const char* where) {
  expects(!w.empty() && w.bits() == 8 && w.scheme().symmetric, errc::invalid_argument, where,
          "weights must be a non-empty symmetric int8 matrix (got ", w.bits(), "-bit, ",
          w.scheme().symmetric ? "symmetric" : "asymmetric", ", ", w.rows(), " x ", w.cols(), ")");
  expects(m > 0, errc::invalid_argument, where, "M = ", m, " must be positive");
  expects(w.cols() <= (std::int64_t{1} << 17), errc::invalid_argument, where, "K = ", w.cols(),
          " exceeds 131072, beyond which int32 accumulation of int8 products may overflow");
  expects(a_size == static_cast<std::size_t>(m * w.cols()), errc::invalid_argument, where, "activations have ", a_size,
          " elements but M x K = ", m, " x ", w.cols(), " = ", m * w.cols());
  expects(out_size == static_cast<std::size_t>(m * w.rows()), errc::invalid_argument, where, "output has ", out_size,
          " elements but M x N = ", m, " x ", w.rows(), " = ", m * w.rows());
}

}  // namespace detail

/// C = A * W^T in int32: A is M x K int8 (row-major), W a symmetric int8 quantized_matrix (N x K),
/// C is M x N int32 (row-major). Exact. Throws weft::error for 4-bit or asymmetric weights, size
/// mismatches, K > 2^17, or a requested path the CPU lacks; C is untouched then. O(M N K).
/// Thread-safe for distinct C; runs on oneTBB's arena.
template <scale_value Scale>
void gemm_w8a8_i32(const quantized_matrix<Scale>& w, std::span<const std::int8_t> a, std::int64_t m,
                   std::span<std::int32_t> c, kernel_options options = {}) {
  constexpr const char* where = "weft::quant::gemm_w8a8_i32";
  detail::check_w8a8(w, m, a.size(), c.size(), where);
  const isa path = detail::resolve_path(options.path, w8a8_paths, where);
  const std::int64_t n = w.rows();
  detail::w8a8_drive(path, w, a.data(), m, options.parallel,
                     [&](std::int64_t m0, std::int64_t n0, std::int64_t rows, std::int64_t cols, const std::int32_t* t,
                         std::int64_t ld) {
                       for (std::int64_t i = 0; i < rows; ++i)
                         std::memcpy(c.data() + (m0 + i) * n + n0, t + i * ld, static_cast<std::size_t>(cols) * 4);
                     });
}

/// Y = (A * W^T) scaled: y[m][n] = float(c[m][n]) * a.scales[m] * w.scale(n, 0), with A from
/// quantize_activations and W symmetric per-channel int8 (one group). Same errors as
/// gemm_w8a8_i32, plus group-wise weights (unsupported). O(M N K). Thread-safe for distinct Y.
template <scale_value Scale>
void gemm_w8a8(const quantized_matrix<Scale>& w, const quantized_activations& a, std::span<float> y,
               kernel_options options = {}) {
  constexpr const char* where = "weft::quant::gemm_w8a8";
  detail::check_w8a8(w, a.rows, a.values.size(), y.size(), where);
  expects(w.groups() == 1, errc::unsupported, where, "W8A8 needs per-channel weight scales; the weights have ",
          w.groups(), " groups per row");
  expects(a.cols == w.cols() && a.scales.size() == static_cast<std::size_t>(a.rows), errc::invalid_argument, where,
          "activations are ", a.rows, " x ", a.cols, " with ", a.scales.size(), " scales; need K = ", w.cols(),
          " and one scale per row");
  const isa path = detail::resolve_path(options.path, w8a8_paths, where);
  const std::int64_t n = w.rows();
  std::vector<float> ws(static_cast<std::size_t>(n));
  for (std::int64_t j = 0; j < n; ++j) ws[static_cast<std::size_t>(j)] = w.scale(j, 0);
  detail::w8a8_drive(path, w, a.values.data(), a.rows, options.parallel,
                     [&](std::int64_t m0, std::int64_t n0, std::int64_t rows, std::int64_t cols, const std::int32_t* t,
                         std::int64_t ld) {
                       for (std::int64_t i = 0; i < rows; ++i) {
                         const float sa = a.scales[static_cast<std::size_t>(m0 + i)];
                         for (std::int64_t j = 0; j < cols; ++j)
                           y[static_cast<std::size_t>((m0 + i) * n + n0 + j)] =
                               static_cast<float>(t[i * ld + j]) * sa * ws[static_cast<std::size_t>(n0 + j)];
                       }
                     });
}

}  // namespace weft::quant

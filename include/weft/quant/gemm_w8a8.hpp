// W8A8 GEMM on the CPU: int8 activations (per-row absmax scales, as in LLM.int8()/SmoothQuant,
// Xiao et al. 2023) times int8 symmetric weights (per-channel scales) with exact int32
// accumulation; paths: portable, AVX2, AVX-512 VNNI and AMX, chosen at run time.
#pragma once

#include <weft/core/checked.hpp>
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
#include <type_traits>
#include <utility>
#include <vector>

namespace weft::quant {

/// The paths the W8A8 kernels have, best last.
inline constexpr isa w8a8_paths[] = {isa::portable, isa::avx2, isa::avx512_vnni, isa::amx_int8};

/// The path gemm_w8a8 would run for `requested` on this CPU. Thread-safe. O(1).
inline isa w8a8_path(isa requested = isa::automatic) {
  return detail::resolve_path(requested, w8a8_paths, "weft::quant::w8a8_path");
}

namespace detail {

/// Where a W8A8 product goes: int32 C, or fp32 Y = C x a_scales[m] x w_scales[n]. A plain value.
struct w8a8_sink {
  std::int32_t* c = nullptr;
  float* y = nullptr;
  const float* a_scales = nullptr;  // M entries
  const float* w_scales = nullptr;  // N entries, padded with zeros to whole panels
  std::int64_t n = 0;               // row stride of the output
  /// Stores rows x cols of an int32 tile (row stride ld) at (m0, n0).
  void store(std::int64_t m0, std::int64_t n0, std::int64_t rows, std::int64_t cols, const std::int32_t* t,
             std::int64_t ld) const noexcept {
    for (std::int64_t i = 0; i < rows; ++i) {
      if (c != nullptr) {
        std::memcpy(c + (m0 + i) * n + n0, t + i * ld, static_cast<std::size_t>(cols) * 4);
      } else {
        const float sa = a_scales[m0 + i];
        for (std::int64_t j = 0; j < cols; ++j)
          y[(m0 + i) * n + n0 + j] = static_cast<float>(t[i * ld + j]) * sa * w_scales[n0 + j];
      }
    }
  }
};

/// The shape of a W8A8 product that every path reads: K, its padding, N, and the packed panels.
struct w8a8_layout {
  std::int64_t k, kp, n, k_steps, panels, panel_stride;
  const std::int8_t* weights;
  template <class Scale>
  explicit w8a8_layout(const quantized_matrix<Scale>& w)
      : k(w.cols()),
        kp(w.k_padded()),
        n(w.rows()),
        k_steps(kp / 4),
        panels(ceil_div(n, int8_panel_rows)),
        panel_stride(kp * int8_panel_rows),
        weights(reinterpret_cast<const std::int8_t*>(w.packed().data())) {}
};

/// Runs task(0..count-1), on oneTBB when parallel and there is more than one.
template <class Task>
void w8a8_run(bool parallel, std::int64_t count, Task&& task) {
  if (parallel && count > 1)
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, count), [&](const tbb::blocked_range<std::int64_t>& r) {
      for (std::int64_t i = r.begin(); i < r.end(); ++i) task(i);
    });
  else
    for (std::int64_t i = 0; i < count; ++i) task(i);
}

/// A (m x k, row-major) copied into `rows` zero-filled rows of stride kp (rows >= m).
inline std::vector<std::int8_t> w8a8_pad_rows(const std::int8_t* a, std::int64_t m, std::int64_t k, std::int64_t rows,
                                              std::int64_t kp) {
  std::vector<std::int8_t> padded(static_cast<std::size_t>(rows * kp), 0);
  for (std::int64_t r = 0; r < m; ++r) std::memcpy(padded.data() + r * kp, a + r * k, static_cast<std::size_t>(k));
  return padded;
}

#if WEFT_QUANT_X86
/// AMX: A padded to k_padded columns and whole 32-row tiles. Blocks of 16 panels (256 outputs, 1 MiB
/// of weights at K = 4096) stay in L2 while 32-row slices of A stream past; within a block, pairs of
/// panels make 32 x 32 C tiles.
inline void w8a8_drive_amx(const w8a8_layout& l, const std::int8_t* a, std::int64_t m, bool parallel,
                           const w8a8_sink& sink) {
  const std::int64_t mp = round_up(m, 32);
  const std::vector<std::int8_t> padded = w8a8_pad_rows(a, m, l.k, mp, l.kp);
  constexpr std::int64_t block_panels = 16;
  w8a8_run(parallel, ceil_div(l.panels, block_panels), [&](std::int64_t b) {
    alignas(64) std::int32_t c[32 * 32];
    const std::int64_t first = b * block_panels, last = std::min(l.panels, first + block_panels);
    amx_begin();
    for (std::int64_t m0 = 0; m0 < mp; m0 += 32)
      for (std::int64_t p = first; p < last; p += 2) {
        const std::int8_t* p0 = l.weights + p * l.panel_stride;
        const std::int8_t* p1 = p + 1 < l.panels ? p0 + l.panel_stride : p0;  // odd panel count: repeat
        const std::int64_t n0 = p * 16, cols = std::min<std::int64_t>(32, l.n - n0);
        w8_tile_amx(padded.data() + m0 * l.kp, l.kp, p0, p1, l.kp, c);
        sink.store(m0, n0, std::min<std::int64_t>(32, m - m0), cols, c, 32);
      }
    amx_end();
  });
}

/// A flipped to unsigned (a + 128) into rows of stride lda (mp of them, pre-filled with 0x80).
inline std::vector<std::uint8_t> w8a8_flip_unsigned(const std::int8_t* a, std::int64_t m, std::int64_t k,
                                                    std::int64_t mp, std::int64_t lda, bool parallel) {
  std::vector<std::uint8_t> au(static_cast<std::size_t>(mp * lda), 0x80);
  w8a8_run(parallel, ceil_div(m, 64), [&](std::int64_t block) {
    for (std::int64_t r = block * 64; r < std::min(m, block * 64 + 64); ++r) {
      std::uint8_t* dst = au.data() + r * lda;
      const std::int8_t* src = a + r * k;
      std::int64_t i = 0;
      for (; i + 8 <= k; i += 8) {  // eight bytes at a time: XOR with 0x80 in each byte
        std::uint64_t word;
        std::memcpy(&word, src + i, 8);
        word ^= 0x8080808080808080ull;
        std::memcpy(dst + i, &word, 8);
      }
      for (; i < k; ++i) dst[i] = static_cast<std::uint8_t>(src[i]) ^ 0x80u;
    }
  });
  return au;
}

/// AVX-512 VNNI: A flipped to unsigned and padded to whole 8-row tiles; the row stride is one cache
/// line longer than K so the 8 rows a tile broadcasts from do not share L1 sets. Each weight row's
/// accumulators start at -128 x its code sum, which undoes the flip.
template <class Scale>
void w8a8_drive_vnni(const quantized_matrix<Scale>& w, const w8a8_layout& l, const std::int8_t* a, std::int64_t m,
                     bool parallel, const w8a8_sink& sink) {
  constexpr std::int64_t mr = 8, nv = 3;
  const std::int64_t mp = round_up(m, mr), lda = l.kp + 64, n = l.n;
  const std::vector<std::uint8_t> au = w8a8_flip_unsigned(a, m, l.k, mp, lda, parallel);
  std::vector<std::int32_t> correction(static_cast<std::size_t>(l.panels * 16), 0);
  for (std::int64_t j = 0; j < n; ++j)
    correction[static_cast<std::size_t>(j)] = -128 * w.row_sums()[static_cast<std::size_t>(j)];
  w8a8_run(parallel, ceil_div(l.panels, nv), [&](std::int64_t b) {
    const std::int64_t p0 = b * nv, np = std::min<std::int64_t>(nv, l.panels - p0);
    const std::int8_t* pw = l.weights + p0 * l.panel_stride;
    const std::int64_t n0 = p0 * 16, cols = std::min<std::int64_t>(np * 16, n - n0);
    const std::int32_t* corr = correction.data() + n0;
    for (std::int64_t m0 = 0; m0 < mp; m0 += mr) {
      const std::uint8_t* at = au.data() + m0 * lda;
      const std::int64_t rows = std::min<std::int64_t>(mr, m - m0);
      const auto tile = [&](auto np_const) {
        constexpr int v = decltype(np_const)::value;
        if (sink.c != nullptr)
          w8_tile_vnni<mr, v, false>(at, lda, pw, l.panel_stride, l.k_steps, corr, sink.c + m0 * n + n0, n, rows, cols,
                                     nullptr, nullptr);
        else
          w8_tile_vnni<mr, v, true>(at, lda, pw, l.panel_stride, l.k_steps, corr, sink.y + m0 * n + n0, n, rows, cols,
                                    sink.a_scales + m0, sink.w_scales + n0);
      };
      if (np == 3)
        tile(std::integral_constant<int, 3>{});
      else if (np == 2)
        tile(std::integral_constant<int, 2>{});
      else
        tile(std::integral_constant<int, 1>{});
    }
  });
}
#endif

/// The portable and AVX2 paths: one row of A against one 16-row panel at a time (A padded to
/// k_padded columns only when K is not already a multiple).
inline void w8a8_drive_panels(isa path, const w8a8_layout& l, const std::int8_t* a, std::int64_t m, bool parallel,
                              const w8a8_sink& sink) {
  std::vector<std::int8_t> padded;
  const std::int8_t* ap = a;
  if (l.kp != l.k) {
    padded = w8a8_pad_rows(a, m, l.k, m, l.kp);
    ap = padded.data();
  }
  w8a8_run(parallel, l.panels, [&](std::int64_t p) {
    std::int32_t c[16];
    const std::int64_t n0 = p * 16, cols = std::min<std::int64_t>(16, l.n - n0);
    for (std::int64_t r = 0; r < m; ++r) {
#if WEFT_QUANT_X86
      if (path == isa::avx2)
        w8_panel_avx2(ap + r * l.kp, l.weights + p * l.panel_stride, l.k_steps, c);
      else
#endif
        w8_panel_portable(ap + r * l.kp, l.weights + p * l.panel_stride, l.k_steps, c);
      sink.store(r, n0, 1, cols, c, 16);
    }
  });
}

/// Drives the kernels of `path` over the output of C = A W^T (A: m x K int8, row-major) into `sink`.
template <class Scale>
void w8a8_drive(isa path, const quantized_matrix<Scale>& w, const std::int8_t* a, std::int64_t m, bool parallel,
                const w8a8_sink& sink) {
  const w8a8_layout layout(w);
  switch (path) {
#if WEFT_QUANT_X86
    case isa::amx_int8:
      w8a8_drive_amx(layout, a, m, parallel, sink);
      return;
    case isa::avx512_vnni:
      w8a8_drive_vnni(w, layout, a, m, parallel, sink);
      return;
#endif
    default:
      w8a8_drive_panels(path, layout, a, m, parallel, sink);
      return;
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
  const auto a_count = checked_mul(m, w.cols(), where), out_count = checked_mul(m, w.rows(), where);
  expects(std::cmp_equal(a_size, a_count), errc::invalid_argument, where, "activations have ", a_size,
          " elements but M x K = ", m, " x ", w.cols(), " = ", a_count);
  expects(std::cmp_equal(out_size, out_count), errc::invalid_argument, where, "output has ", out_size,
          " elements but M x N = ", m, " x ", w.rows(), " = ", out_count);
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
  detail::w8a8_drive(path, w, a.data(), m, options.parallel,
                     detail::w8a8_sink{c.data(), nullptr, nullptr, nullptr, w.rows()});
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
  std::vector<float> ws(static_cast<std::size_t>(round_up(n, int8_panel_rows)), 0.0f);
  for (std::int64_t j = 0; j < n; ++j) ws[static_cast<std::size_t>(j)] = w.scale(j, 0);
  detail::w8a8_drive(path, w, a.values.data(), a.rows, options.parallel,
                     detail::w8a8_sink{nullptr, y.data(), a.scales.data(), ws.data(), n});
}

}  // namespace weft::quant

// Cyclic repetition gradient codes: worker i holds partitions i, i+1, ..., i+s (mod n). Two
// constructions of B: the deterministic cyclic-MDS one (Raviv, Tamo, Tandon, Dimakis, "Gradient
// coding from cyclic MDS codes and expander graphs", ICML 2018, Sec. 3) over a real trigonometric
// (DFT) code, and the random one of Tandon et al. (ICML 2017, Alg. 2), kept for contrast.
#pragma once

#include <weft/coding/coefficient_matrix.hpp>
#include <weft/coding/detail/dense_solve.hpp>
#include <weft/coding/detail/random.hpp>
#include <weft/coding/linear_code.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

namespace weft::coding {

/// How the coefficients of a cyclic repetition code are chosen.
enum class cyclic_construction {
  /// Deterministic: the columns of B are the minimum-weight codewords of a real MDS code spanned
  /// by trigonometric polynomials at the n-th roots of unity (the real form of the cyclic
  /// Reed-Solomon/BCH code of Raviv et al.); the best-conditioned choice weft knows.
  mds,
  /// Tandon et al. Alg. 2: rows in the null space of a random Gaussian s x n matrix. Decodes in
  /// exact arithmetic but is badly conditioned as n and s grow; here for comparison only.
  random,
};

namespace detail {

/// n x k generator of the real trigonometric MDS code: column pairs cos(f t), sin(f t) at
/// t = 2 pi i / n for the k frequencies f symmetric about 0 (integers when k is odd, half-integers
/// when k is even). Every k rows are independent: up to a unitary change of basis they form a
/// Vandermonde matrix at distinct points of the unit circle.
inline column_major trig_generator(std::size_t n, std::size_t k) {
  column_major a(n, k);
  std::size_t col = 0;
  const double centre = (static_cast<double>(k) - 1.0) / 2.0;
  for (double f = centre - std::floor(centre); col < k; f += 1.0) {
    for (std::size_t i = 0; i < n; ++i) {
      const double t = 2.0 * std::numbers::pi * static_cast<double>(i) / static_cast<double>(n);
      if (f == 0.0) {
        a(i, col) = 1.0;
      } else {
        a(i, col) = std::cos(f * t);
        a(i, col + 1) = std::sin(f * t);
      }
    }
    col += (f == 0.0) ? 1 : 2;
  }
  return a;
}

/// Column j of B (the coefficients partition j gets at the workers holding it) is the unique, up
/// to scale, codeword of the code spanned by the generator whose support is the window of workers
/// {j-s, ..., j}; its scale makes x^T B = 1^T for x = ones (or a half-period cosine when that
/// vector is orthogonal to a column, which happens for odd n and even n - s). Then for every F of
/// n - s workers, 1^T lies in the row space of B_F (Raviv et al., Sec. 3). O(n^4): one QR per
/// column (the codeword's coordinates are a null vector of the generator's rows outside the window).
inline coefficient_matrix mds_columns(const column_major& gen, std::size_t s) {
  const std::size_t n = gen.m;
  const std::size_t k = gen.n;
  std::vector<std::vector<double>> w(n);
  for (std::size_t j = 0; j < n; ++j) {
    if (n - s - 1 == 0) {
      w[j].assign(k, 0.0);
      w[j][0] = 1.0;
      continue;
    }
    column_major outside(n - s - 1, k);
    std::size_t r = 0;
    for (std::size_t t = 0; t < n; ++t) {
      const std::size_t back = (j + n - t) % n;  // t is in the window when 0 <= j - t <= s (mod n)
      if (back > s) {
        for (std::size_t c = 0; c < k; ++c) outside(r, c) = gen(t, c);
        ++r;
      }
    }
    w[j] = null_vector(outside);
  }
  std::vector<double> u_all(n * n);  // u_all[j * n + t]: codeword j at worker t = (gen w_j)_t
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t t = 0; t < n; ++t) {
      double v = 0;
      for (std::size_t c = 0; c < k; ++c) v += gen(t, c) * w[j][c];
      u_all[j * n + t] = v;
    }
  // d_j = x^T u_j: the scale that puts x^T B = 1^T.
  auto scales_for = [&](const std::vector<double>& x, double& worst) {
    // |x^T u_j| relative to ||gen^T x||, as before: how far from orthogonal x is to the codeword.
    std::vector<double> gx(k, 0.0);
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t c = 0; c < k; ++c) gx[c] += gen(t, c) * x[t];
    double gnorm = 0;
    for (double v : gx) gnorm += v * v;
    gnorm = std::sqrt(gnorm);
    worst = std::numeric_limits<double>::infinity();
    std::vector<double> d(n);
    for (std::size_t j = 0; j < n; ++j) {
      double dot = 0;
      for (std::size_t c = 0; c < k; ++c) dot += w[j][c] * gx[c];
      d[j] = dot;
      worst = std::min(worst, std::abs(dot) / gnorm);
    }
    return d;
  };
  double worst = 0;
  std::vector<double> d = scales_for(std::vector<double>(n, 1.0), worst);
  if (worst < 1e-3) {
    std::vector<double> x(n);
    for (std::size_t i = 0; i < n; ++i)
      x[i] = std::cos(std::numbers::pi * (static_cast<double>(i) + 0.5) / static_cast<double>(n));
    d = scales_for(x, worst);
  }
  expects(worst >= 1e-3, errc::unsupported, "weft::coding::cyclic_repetition",
          "no well-scaled cyclic MDS construction found for n = ", n, ", s = ", s);
  coefficient_matrix b(n, n);
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t back = 0; back <= s; ++back) {
      const std::size_t t = (j + n - back) % n;
      b(t, j) = u_all[j * n + t] / d[j];
    }
  return b;
}

/// Tandon et al. Alg. 2: H is s x n Gaussian with H 1 = 0; row i of B is the null vector of H
/// restricted to the window {i, ..., i+s}, scaled so B(i, i) = 1.
inline coefficient_matrix tandon_random_rows(std::size_t n, std::size_t s, std::uint64_t seed) {
  rng gen(seed);
  column_major h(s, n);
  for (std::size_t r = 0; r < s; ++r) {
    double sum = 0;
    for (std::size_t c = 0; c + 1 < n; ++c) sum += (h(r, c) = gen.normal());
    h(r, n - 1) = -sum;
  }
  coefficient_matrix b(n, n);
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<double> v(1, 1.0);
    if (s > 0) {
      column_major window(s, s + 1);
      for (std::size_t c = 0; c <= s; ++c)
        for (std::size_t r = 0; r < s; ++r) window(r, c) = h(r, (i + c) % n);
      v = null_vector(window);
    }
    for (std::size_t c = 0; c <= s; ++c) b(i, (i + c) % n) = v[c] / v[0];
  }
  return b;
}

inline std::vector<std::vector<std::size_t>> cyclic_assignment(std::size_t n, std::size_t s) {
  std::vector<std::vector<std::size_t>> a(n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t c = 0; c <= s; ++c) a[i].push_back((i + c) % n);
  return a;
}

}  // namespace detail

/// Builds the cyclic repetition code for n workers and s stragglers: k = n partitions, worker i
/// holds partitions i..i+s (mod n), load s+1, one coded vector sent per worker. seed is used only
/// by cyclic_construction::random. Throws weft::error(invalid_argument) naming n and s when
/// s >= n. O(n^4) to build (n QRs of size n); decoders are solved lazily and cached.
inline linear_code cyclic_repetition(std::size_t n, std::size_t s,
                                     cyclic_construction construction = cyclic_construction::mds,
                                     std::uint64_t seed = 1) {
  constexpr const char* ctx = "weft::coding::cyclic_repetition";
  expects(n > 0, errc::invalid_argument, ctx, "n must be positive, got 0");
  expects(s < n, errc::invalid_argument, ctx, "s = ", s, " stragglers must be < n = ", n, " workers");
  coefficient_matrix b = construction == cyclic_construction::mds
                             ? detail::mds_columns(detail::trig_generator(n, n - s), s)
                             : detail::tandon_random_rows(n, s, seed);
  const std::string kind = construction == cyclic_construction::mds ? "mds" : "random";
  // The random construction's decoders carry its conditioning into the residual; a looser
  // tolerance keeps "exact" meaning "exact up to its own rounding" for it too.
  const double tolerance = construction == cyclic_construction::mds ? 1e-8 : 1e-4;
  return linear_code("cyclic_repetition_" + kind + "(n=" + std::to_string(n) + ",s=" + std::to_string(s) + ")",
                     std::move(b), detail::cyclic_assignment(n, s), s, code_kind::exact, tolerance);
}

/// Hybrid repetition: the workers are cut into floor(n/(s+1)) groups of consecutive workers whose
/// sizes differ by at most one (each >= s+1); each group runs a cyclic-MDS code on its own share of
/// the partitions. Same load s+1 and tolerance s as cyclic repetition, but each code is short, so
/// it stays well conditioned where a length-n cyclic code does not (n = 40, s = 10: groups 13, 13,
/// 14). Equals fractional repetition, up to scale, when (s+1) | n. weft's own design; see
/// docs/coding.md for the measured condition numbers. Throws like cyclic_repetition. O(n^4).
inline linear_code hybrid_repetition(std::size_t n, std::size_t s) {
  constexpr const char* ctx = "weft::coding::hybrid_repetition";
  expects(n > 0, errc::invalid_argument, ctx, "n must be positive, got 0");
  expects(s < n, errc::invalid_argument, ctx, "s = ", s, " stragglers must be < n = ", n, " workers");
  const std::size_t groups = n / (s + 1);
  coefficient_matrix b(n, n);
  std::vector<std::vector<std::size_t>> assignment(n);
  std::size_t start = 0;
  for (std::size_t g = 0; g < groups; ++g) {
    const std::size_t m = n / groups + (g < n % groups ? 1 : 0);
    const coefficient_matrix block = detail::mds_columns(detail::trig_generator(m, m - s), s);
    const auto local = detail::cyclic_assignment(m, s);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j : local[i]) assignment[start + i].push_back(start + j);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < m; ++j) b(start + i, start + j) = block(i, j);
    start += m;
  }
  return linear_code("hybrid_repetition(n=" + std::to_string(n) + ",s=" + std::to_string(s) + ")", std::move(b),
                     std::move(assignment), s);
}

}  // namespace weft::coding

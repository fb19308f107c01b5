// The dense linear algebra behind gradient-code decoders, standard library only: Householder QR
// with column pivoting (Businger and Golub 1965; Golub and Van Loan, Matrix Computations, 4th ed.,
// Alg. 5.4.1), the minimum-norm least-squares solve by a complete orthogonal decomposition
// (ibid. Sec. 5.5.2), a null vector, and a condition number from the triangular factor by power
// iteration. Decoders solve systems of at most a few hundred unknowns, so plain loops suffice and
// including this costs no compile time (a TU instantiating Eigen's decompositions costs seconds).
#pragma once

#include <weft/coding/coefficient_matrix.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <utility>
#include <vector>

namespace weft::coding::detail {

/// A column-major m x n working matrix.
struct column_major {
  std::size_t m = 0, n = 0;
  std::vector<double> a;
  column_major(std::size_t rows, std::size_t cols) : m(rows), n(cols), a(rows * cols, 0.0) {}
  double& operator()(std::size_t i, std::size_t j) noexcept { return a[j * m + i]; }
  double operator()(std::size_t i, std::size_t j) const noexcept { return a[j * m + i]; }
  double* col(std::size_t j) noexcept { return a.data() + j * m; }
  const double* col(std::size_t j) const noexcept { return a.data() + j * m; }
};

/// A P = Q R. R sits in the upper triangle of `qr`; Householder vector k (v_k = 1 implicit, then
/// the entries below the diagonal of column k) with scale tau[k] gives H_k = I - tau_k v v^T and
/// Q = H_0 H_1 ... H_{p-1}. Column j of A P is column perm[j] of A. rank: pivots above the
/// relative threshold. O(m n min(m, n)).
struct pivoted_qr {
  column_major qr;
  std::vector<double> tau;
  std::vector<std::size_t> perm;
  std::size_t rank = 0;

  explicit pivoted_qr(column_major a) : qr(std::move(a)) {
    const std::size_t m = qr.m, n = qr.n, p = std::min(m, n);
    tau.assign(p, 0.0);
    perm.resize(n);
    for (std::size_t j = 0; j < n; ++j) perm[j] = j;
    std::vector<double> norms(n);
    double first_pivot = 0;
    for (std::size_t k = 0; k < p; ++k) {
      // Pivot: the remaining column of largest norm (norms recomputed, not downdated: exact, and
      // the O(m n) per step is the same order as the update).
      std::size_t best = k;
      for (std::size_t j = k; j < n; ++j) {
        double s = 0;
        const double* c = qr.col(j);
        for (std::size_t i = k; i < m; ++i) s += c[i] * c[i];
        norms[j] = s;
        if (s > norms[best]) best = j;
      }
      if (best != k) {
        std::swap_ranges(qr.col(k), qr.col(k) + m, qr.col(best));
        std::swap(perm[k], perm[best]);
      }
      double* c = qr.col(k);
      const double norm = std::sqrt(norms[best]);
      if (k == 0) first_pivot = norm;
      if (norm == 0.0) {
        tau[k] = 0.0;
        continue;
      }
      const double alpha = c[k] > 0 ? -norm : norm;  // the sign that avoids cancellation in v_0
      const double v0 = c[k] - alpha;
      for (std::size_t i = k + 1; i < m; ++i) c[i] /= v0;
      tau[k] = -v0 / alpha;  // = 2 / (v^T v) with v = (1, c[k+1..m) / v0)
      c[k] = alpha;
      for (std::size_t j = k + 1; j < n; ++j) {
        double* d = qr.col(j);
        double w = d[k];
        for (std::size_t i = k + 1; i < m; ++i) w += c[i] * d[i];
        w *= tau[k];
        d[k] -= w;
        for (std::size_t i = k + 1; i < m; ++i) d[i] -= w * c[i];
      }
    }
    // Rank: |R_kk| above eps * max(m, n) * |R_00| (the threshold Eigen's rank-revealing QR uses).
    const double threshold = std::numeric_limits<double>::epsilon() * static_cast<double>(std::max(m, n)) * first_pivot;
    rank = 0;
    while (rank < p && std::abs(qr(rank, rank)) > threshold) ++rank;
  }

  /// x <- Q^T x (x has m entries). O(m p).
  void apply_qt(std::span<double> x) const {
    for (std::size_t k = 0; k < tau.size(); ++k) reflect(k, x);
  }
  /// x <- Q x. O(m p).
  void apply_q(std::span<double> x) const {
    for (std::size_t k = tau.size(); k-- > 0;) reflect(k, x);
  }

 private:
  void reflect(std::size_t k, std::span<double> x) const {
    if (tau[k] == 0.0) return;
    const double* c = qr.col(k);
    double w = x[k];
    for (std::size_t i = k + 1; i < qr.m; ++i) w += c[i] * x[i];
    w *= tau[k];
    x[k] -= w;
    for (std::size_t i = k + 1; i < qr.m; ++i) x[i] -= w * c[i];
  }
};

/// sigma_max / sigma_min of an r x r upper-triangular T with a nonzero diagonal: power iteration
/// on T^T T for sigma_max and on (T^T T)^{-1} (two triangular solves per step) for sigma_min. The
/// Rayleigh quotient converges fast in value even where singular values cluster (then their
/// difference is small too), so this is accurate to a few digits, plenty for a condition number.
/// O(iterations * r^2).
inline double triangular_condition(const column_major& t, std::size_t r) {
  if (r == 0) return std::numeric_limits<double>::infinity();
  auto mul = [&](const std::vector<double>& x, std::vector<double>& y) {  // y = T^T T x
    std::vector<double> tx(r, 0.0);
    for (std::size_t j = 0; j < r; ++j)
      for (std::size_t i = 0; i <= j; ++i) tx[i] += t(i, j) * x[j];
    for (std::size_t j = 0; j < r; ++j) {
      double s = 0;
      for (std::size_t i = 0; i <= j; ++i) s += t(i, j) * tx[i];
      y[j] = s;
    }
  };
  auto solve = [&](const std::vector<double>& x, std::vector<double>& y) {  // y = (T^T T)^{-1} x
    std::vector<double> z(x);  // T^T z = x (forward), then T y = z (backward)
    for (std::size_t j = 0; j < r; ++j) {
      double s = z[j];
      for (std::size_t i = 0; i < j; ++i) s -= t(i, j) * z[i];
      z[j] = s / t(j, j);
    }
    for (std::size_t i = r; i-- > 0;) {
      double s = z[i];
      for (std::size_t j = i + 1; j < r; ++j) s -= t(i, j) * y[j];
      y[i] = s / t(i, i);
    }
  };
  auto dominant = [&](auto&& op) {
    std::vector<double> x(r), y(r);
    // A fixed start with no symmetry, so it is not orthogonal to the dominant vector by accident.
    for (std::size_t i = 0; i < r; ++i) x[i] = 1.0 + 0.37 * std::sin(1.0 + static_cast<double>(i));
    double lambda = 0;
    for (int it = 0; it < 200; ++it) {
      double nx = 0;
      for (double v : x) nx += v * v;
      nx = std::sqrt(nx);
      for (double& v : x) v /= nx;
      op(x, y);
      double next = 0;
      for (std::size_t i = 0; i < r; ++i) next += x[i] * y[i];
      std::swap(x, y);
      if (it > 8 && std::abs(next - lambda) <= 1e-12 * std::abs(next)) return next;
      lambda = next;
    }
    return lambda;
  };
  const double largest = dominant(mul);            // sigma_max^2
  const double inverse_largest = dominant(solve);  // 1 / sigma_min^2
  if (!(largest > 0) || !(inverse_largest > 0)) return std::numeric_limits<double>::infinity();
  return std::sqrt(largest * inverse_largest);
}

/// The minimum-norm least-squares solution x of A x ~= b (A: m x n) by a complete orthogonal
/// decomposition: A P = Q [R11 R12; 0 0] with R11 r x r, then [R11 R12] = [U^T 0] Z^T by a QR of
/// its transpose, and x = P Z [U^{-T} (Q^T b)_{0..r}; 0]. Also returns cond(A) over its nonzero
/// singular values (those of the r x r factor). O(m n min(m, n) + n r^2).
struct least_squares {
  std::vector<double> x;
  double condition = 1.0;
};

inline least_squares min_norm_solve(const column_major& a, std::span<const double> b) {
  least_squares out;
  const std::size_t m = a.m, n = a.n;
  out.x.assign(n, 0.0);
  pivoted_qr f(a);
  const std::size_t r = f.rank;
  if (r == 0) {
    out.condition = std::numeric_limits<double>::infinity();
    return out;
  }
  std::vector<double> c(b.begin(), b.end());
  f.apply_qt(c);
  std::vector<double> w(n, 0.0);
  if (r == n) {
    for (std::size_t i = r; i-- > 0;) {  // R11 w = c
      double s = c[i];
      for (std::size_t j = i + 1; j < r; ++j) s -= f.qr(i, j) * w[j];
      w[i] = s / f.qr(i, i);
    }
    out.condition = triangular_condition(f.qr, r);
  } else {
    column_major mt(n, r);  // [R11 R12]^T, n x r
    for (std::size_t i = 0; i < r; ++i)
      for (std::size_t j = i; j < n; ++j) mt(j, i) = f.qr(i, j);
    // The rows of [R11 R12] are independent, so this QR needs no pivoting, but pivoted_qr is the
    // one QR we have; a permutation of the columns of M^T is a permutation of the equations.
    pivoted_qr z(std::move(mt));
    // M^T = Z [U; 0] Pz^T, so M = Pz [U^T 0] Z^T, and M w = c means [U^T 0] (Z^T w) = Pz^T c.
    std::vector<double> u(n, 0.0);
    for (std::size_t i = 0; i < r; ++i) {  // U^T u = Pz^T c, forward substitution
      double s = c[z.perm[i]];
      for (std::size_t j = 0; j < i; ++j) s -= z.qr(j, i) * u[j];
      u[i] = s / z.qr(i, i);
    }
    z.apply_q(u);  // w = Z [u; 0]
    w = std::move(u);
    out.condition = triangular_condition(z.qr, r);
  }
  (void)m;
  for (std::size_t j = 0; j < n; ++j) out.x[f.perm[j]] = w[j];
  return out;
}

/// A unit vector x with A x = 0 for an m x n matrix A with m < n (the direction of least
/// singular value when A has full row rank): the last column of Q in a QR of A^T. O(n m^2).
inline std::vector<double> null_vector(const column_major& a) {
  column_major at(a.n, a.m);
  for (std::size_t i = 0; i < a.m; ++i)
    for (std::size_t j = 0; j < a.n; ++j) at(j, i) = a(i, j);
  pivoted_qr f(std::move(at));
  std::vector<double> e(a.n, 0.0);
  e[a.n - 1] = 1.0;
  f.apply_q(e);
  return e;
}

/// Rows `rows` of B (a row-major coefficient matrix), transposed into a column-major k x |rows|
/// matrix: the A of the decoder equation B_F^T a = 1.
inline column_major rows_transposed(const coefficient_matrix& b, std::span<const std::size_t> rows) {
  column_major out(b.cols(), rows.size());
  for (std::size_t c = 0; c < rows.size(); ++c) {
    const auto src = b.row(rows[c]);
    std::copy(src.begin(), src.end(), out.col(c));
  }
  return out;
}

}  // namespace weft::coding::detail

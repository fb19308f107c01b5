// Dense linear algebra behind gradient-code decoders, on Eigen: the minimum-norm least-squares
// solve of B_F^T a = 1 (complete orthogonal decomposition) and the condition number of B_F (SVD).
#pragma once

#include <weft/coding/decoder.hpp>

#include <weft/coding/detail/eigen.hpp>

#include <cmath>
#include <cstddef>
#include <limits>

namespace weft::coding::detail {

/// Rows F of B.
inline Eigen::MatrixXd select_rows(const Eigen::MatrixXd& b, std::span<const std::size_t> rows) {
  Eigen::MatrixXd out(static_cast<Eigen::Index>(rows.size()), b.cols());
  for (std::size_t i = 0; i < rows.size(); ++i)
    out.row(static_cast<Eigen::Index>(i)) = b.row(static_cast<Eigen::Index>(rows[i]));
  return out;
}

/// Builds the decoder of survivor set F: a = argmin ||B_F^T a - 1|| with the smallest norm.
/// O(|F| k min(|F|, k)) for the solve plus the same for the SVD.
inline decoder solve_decoder(const Eigen::MatrixXd& b, const survivor_set& f, double tolerance) {
  decoder d;
  d.survivors.assign(f.workers().begin(), f.workers().end());
  const Eigen::Index k = b.cols();
  if (f.size() == 0) {
    d.residual = 1.0;
    d.condition = std::numeric_limits<double>::infinity();
    d.exact = false;
    return d;
  }
  const Eigen::MatrixXd bf = select_rows(b, f.workers());
  const Eigen::VectorXd ones = Eigen::VectorXd::Ones(k);
  Eigen::CompleteOrthogonalDecomposition<Eigen::MatrixXd> cod(bf.transpose());
  const Eigen::VectorXd a = cod.solve(ones);
  d.weights.assign(a.data(), a.data() + a.size());
  d.residual = (bf.transpose() * a - ones).norm() / std::sqrt(static_cast<double>(k));
  Eigen::JacobiSVD<Eigen::MatrixXd> svd(bf);
  const Eigen::VectorXd& sv = svd.singularValues();
  const double cutoff = sv(0) * 1e-13 * static_cast<double>(std::max<Eigen::Index>(bf.rows(), k));
  double smallest = sv(0);
  for (Eigen::Index i = 0; i < sv.size(); ++i)
    if (sv(i) > cutoff) smallest = sv(i);
  d.condition = sv(0) > 0 ? sv(0) / smallest : std::numeric_limits<double>::infinity();
  double amp = 0;
  for (Eigen::Index i = 0; i < a.size(); ++i) amp += std::abs(a(i)) * bf.row(i).cwiseAbs().sum();
  d.amplification = amp / static_cast<double>(k);
  d.exact = d.residual <= tolerance;
  return d;
}

}  // namespace weft::coding::detail

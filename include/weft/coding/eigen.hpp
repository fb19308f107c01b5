// Opt-in bridge between weft::coding and Eigen 3.4: coefficient matrices to and from
// Eigen::MatrixXd, codes from an Eigen matrix, and the decoder solved by Eigen's complete orthogonal
// decomposition and JacobiSVD (the reference weft's own dense solver is tested against). Not in the
// <weft/coding.hpp> umbrella: instantiating Eigen's decompositions costs seconds of compile time.
#pragma once

#include <weft/coding/approximate.hpp>
#include <weft/coding/coefficient_matrix.hpp>
#include <weft/coding/decoder.hpp>

#include <weft/coding/detail/eigen.hpp>  // Eigen, with g++ 12's false AVX-512 warnings silenced for its text only

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <utility>

namespace weft::coding {

/// A copy as an Eigen matrix. O(rows * cols).
inline Eigen::MatrixXd to_eigen(const coefficient_matrix& m) {
  Eigen::MatrixXd out(static_cast<Eigen::Index>(m.rows()), static_cast<Eigen::Index>(m.cols()));
  for (std::size_t i = 0; i < m.rows(); ++i)
    for (std::size_t j = 0; j < m.cols(); ++j)
      out(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = m(i, j);
  return out;
}

/// A copy of an Eigen matrix. O(rows * cols).
inline coefficient_matrix from_eigen(const Eigen::MatrixXd& m) {
  coefficient_matrix out(static_cast<std::size_t>(m.rows()), static_cast<std::size_t>(m.cols()));
  for (std::size_t i = 0; i < out.rows(); ++i)
    for (std::size_t j = 0; j < out.cols(); ++j)
      out(i, j) = m(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j));
  return out;
}

/// from_matrix() for a B held as an Eigen matrix; throws like it.
inline linear_code from_matrix(const Eigen::MatrixXd& b, std::size_t s, std::string name = "user code") {
  return from_matrix(from_eigen(b), s, std::move(name));
}

/// The decoder of survivors for B, solved by Eigen (CompleteOrthogonalDecomposition for the weights,
/// JacobiSVD for the condition number); the same definition as linear_code's decoders. Throws
/// weft::error(invalid_argument) like survivor_set for a bad index. O(|F| k min(|F|, k)) plus the SVD.
inline decoder solve_decoder_eigen(const coefficient_matrix& b, std::span<const std::size_t> survivors,
                                   double tolerance = 1e-9) {
  const survivor_set f(survivors, b.rows());
  decoder d;
  d.survivors.assign(f.workers().begin(), f.workers().end());
  const auto k = static_cast<Eigen::Index>(b.cols());
  if (f.size() == 0) {
    d.residual = 1.0;
    d.condition = std::numeric_limits<double>::infinity();
    d.exact = false;
    return d;
  }
  Eigen::MatrixXd bf(static_cast<Eigen::Index>(f.size()), k);
  for (std::size_t i = 0; i < f.size(); ++i)
    for (Eigen::Index j = 0; j < k; ++j)
      bf(static_cast<Eigen::Index>(i), j) = b(f.workers()[i], static_cast<std::size_t>(j));
  const Eigen::VectorXd ones = Eigen::VectorXd::Ones(k);
  const Eigen::CompleteOrthogonalDecomposition<Eigen::MatrixXd> cod(bf.transpose());
  const Eigen::VectorXd a = cod.solve(ones);
  d.weights.assign(a.data(), a.data() + a.size());
  d.residual = (bf.transpose() * a - ones).norm() / std::sqrt(static_cast<double>(k));
  const Eigen::JacobiSVD<Eigen::MatrixXd> svd(bf);
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

}  // namespace weft::coding

// Differential test of weft's own dense solver (detail/dense_solve.hpp) against Eigen's complete
// orthogonal decomposition and JacobiSVD (<weft/coding/eigen.hpp>): the same decoder weights,
// residuals and condition numbers for every code family and for random, rank-deficient and
// ill-conditioned matrices.
#include <weft/coding/approximate.hpp>
#include <weft/coding/cyclic_repetition.hpp>
#include <weft/coding/detail/random.hpp>
#include <weft/coding/eigen.hpp>
#include <weft/coding/fractional_repetition.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

using namespace weft::coding;

namespace {

// Compares weft's decoder for f with Eigen's. The minimum-norm least-squares solution is unique, so
// the weights agree up to rounding amplified by the condition number.
void compare(const coefficient_matrix& b, const std::vector<std::size_t>& f, double tolerance) {
  const survivor_set set(f, b.rows());
  const decoder ours = detail::solve_decoder(b, set, tolerance);
  const decoder ref = solve_decoder_eigen(b, f, tolerance);
  REQUIRE(ours.weights.size() == ref.weights.size());
  const double cond = std::max(1.0, ref.condition);
  double scale = 1.0;
  for (double w : ref.weights) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < ours.weights.size(); ++i)
    CHECK(std::abs(ours.weights[i] - ref.weights[i]) <= 1e-12 * cond * scale * 64);
  CHECK(std::abs(ours.residual - ref.residual) <= 1e-12 * cond * 64 + 1e-12);
  CHECK(ours.exact == ref.exact);
  if (std::isfinite(ref.condition) && ref.condition < 1e10)
    CHECK(ours.condition == Approx(ref.condition).epsilon(0.01));
  CHECK(ours.amplification == Approx(ref.amplification).epsilon(1e-6).margin(1e-9));
}

std::vector<std::size_t> random_subset(std::size_t n, std::size_t m, detail::rng& gen) {
  std::vector<std::size_t> all(n);
  std::iota(all.begin(), all.end(), std::size_t{0});
  for (std::size_t i = n; i > 1; --i) std::swap(all[i - 1], all[gen.below(i)]);
  all.resize(m);
  return all;
}

}  // namespace

TEST_CASE("decoders of every code family agree with Eigen's", "[coding][dense]") {
  detail::rng gen(11);
  std::vector<linear_code> codes{cyclic_repetition(6, 2),    cyclic_repetition(10, 4),
                                 cyclic_repetition(9, 3),    cyclic_repetition(12, 3, cyclic_construction::random),
                                 hybrid_repetition(23, 4),   fractional_repetition(12, 3),
                                 approximate_code(16, 3, 5), uncoded(5)};
  for (const auto& code : codes) {
    INFO(code.name());
    const std::size_t n = code.num_workers();
    for (int trial = 0; trial < 12; ++trial) {
      // Decodable sets (n - s) and smaller/larger ones (rank deficiency, inexact solves).
      const std::size_t m = 1 + gen.below(n);
      compare(code.coefficients(), random_subset(n, m, gen), 1e-8);
    }
  }
}

TEST_CASE("the dense solver matches Eigen on random, rank-deficient and ill-conditioned matrices", "[coding][dense]") {
  detail::rng gen(3);
  for (int trial = 0; trial < 60; ++trial) {
    const std::size_t n = 1 + gen.below(14), k = 1 + gen.below(14);
    coefficient_matrix b(n, k);
    const int kind = trial % 3;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < k; ++j) b(i, j) = gen.normal();
    if (kind == 1 && n > 2)  // rank deficient: the last row is a combination of the first two
      for (std::size_t j = 0; j < k; ++j) b(n - 1, j) = 2 * b(0, j) - 0.5 * b(1, j);
    if (kind == 2)  // graded rows: condition number up to ~1e6
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < k; ++j) b(i, j) *= std::pow(10.0, -6.0 * static_cast<double>(i) / 14.0);
    std::vector<std::size_t> all(n);
    std::iota(all.begin(), all.end(), std::size_t{0});
    INFO("trial " << trial << ": " << n << " x " << k);
    compare(b, all, 1e-9);
  }
}

TEST_CASE("a null vector spans the null space", "[coding][dense]") {
  detail::rng gen(5);
  for (std::size_t m = 1; m < 9; ++m) {
    detail::column_major a(m, m + 1);
    for (auto& v : a.a) v = gen.normal();
    const auto x = detail::null_vector(a);
    double norm = 0;
    for (double v : x) norm += v * v;
    CHECK(norm == Approx(1.0));
    for (std::size_t i = 0; i < m; ++i) {
      double dot = 0;
      for (std::size_t j = 0; j <= m; ++j) dot += a(i, j) * x[j];
      CHECK(std::abs(dot) < 1e-12);
    }
  }
}

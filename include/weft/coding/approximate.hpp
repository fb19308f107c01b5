// Approximate gradient coding over a sparse random regular bipartite graph (Charles,
// Papailiopoulos, Ellenberg, "Approximate gradient coding via sparse random graphs", 2017; the
// expander view is Raviv et al., ICML 2018, Sec. 4): each worker holds d partitions, each
// partition sits at d workers, messages are plain sums, and the master decodes the least-squares
// best approximation from whoever arrived, reporting its error. Also the uncoded baselines.
#pragma once

#include <weft/coding/detail/random.hpp>
#include <weft/coding/linear_code.hpp>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace weft::coding {

/// Builds an approximate gradient code: n workers, n partitions, a d-regular bipartite assignment
/// drawn as the union of d seeded random permutations with no partition repeated at a worker.
/// Coefficients are 0/1; try_decoder() returns, for any non-empty survivor set, the weights a
/// minimising ||B_F^T a - 1|| with decoder::residual its RMS error per partition. Throws
/// weft::error(invalid_argument) naming n and d when d is 0 or > n. Expected O(n d) draws plus
/// O(n^2) to fill B.
inline linear_code approximate_code(std::size_t n, std::size_t d, std::uint64_t seed = 1) {
  constexpr const char* ctx = "weft::coding::approximate_code";
  expects(n > 0, errc::invalid_argument, ctx, "n must be positive, got 0");
  expects(d >= 1 && d <= n, errc::invalid_argument, ctx, "degree d = ", d, " must be in [1, n = ", n, "]");
  detail::rng gen(seed);
  std::vector<std::vector<std::size_t>> assignment(n);
  std::vector<std::size_t> perm(n);
  for (std::size_t layer = 0; layer < d; ++layer) {
    // Redraw the permutation until it gives every worker a partition it does not hold yet. For
    // d << n almost every draw succeeds; the cyclic shift layer + i is a fallback that always works.
    bool ok = false;
    for (int attempt = 0; attempt < 64 && !ok; ++attempt) {
      std::iota(perm.begin(), perm.end(), std::size_t{0});
      for (std::size_t i = n; i > 1; --i) std::swap(perm[i - 1], perm[gen.below(i)]);
      ok = true;
      for (std::size_t i = 0; i < n && ok; ++i)
        for (std::size_t j : assignment[i]) ok = ok && j != perm[i];
    }
    if (!ok)
      for (std::size_t i = 0; i < n; ++i) perm[i] = (i + layer) % n;
    for (std::size_t i = 0; i < n; ++i) assignment[i].push_back(perm[i]);
  }
  coefficient_matrix b(n, n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j : assignment[i]) b(i, j) = 1.0;
  return linear_code("approximate(n=" + std::to_string(n) + ",d=" + std::to_string(d) + ")", std::move(b),
                     std::move(assignment), d - 1, code_kind::approximate);
}

/// Uncoded aggregation, the wait-for-all baseline: worker i holds partition i, B = I, s = 0.
inline linear_code uncoded(std::size_t n) {
  expects(n > 0, errc::invalid_argument, "weft::coding::uncoded", "n must be positive, got 0");
  std::vector<std::vector<std::size_t>> a(n);
  for (std::size_t i = 0; i < n; ++i) a[i] = {i};
  return linear_code("uncoded(n=" + std::to_string(n) + ")", coefficient_matrix::identity(n), std::move(a), 0);
}

/// Ignore-stragglers (and backup workers, which is the same code with a fixed count to wait for):
/// B = I, and any non-empty set decodes to the sum of what arrived, with the missing partitions
/// reported in decoder::residual = sqrt(missing / n).
inline linear_code ignore_stragglers(std::size_t n) {
  expects(n > 0, errc::invalid_argument, "weft::coding::ignore_stragglers", "n must be positive, got 0");
  std::vector<std::vector<std::size_t>> a(n);
  for (std::size_t i = 0; i < n; ++i) a[i] = {i};
  return linear_code("ignore_stragglers(n=" + std::to_string(n) + ")", coefficient_matrix::identity(n), std::move(a), 0,
                     code_kind::approximate);
}

/// A code from a user-supplied B (n x k) tolerating s stragglers, e.g. the n = 3, s = 1 example of
/// Tandon et al. The assignment is the nonzero pattern of each row. Decodability is checked per
/// survivor set when asked (decoder_for throws when B breaks the condition for that set).
inline linear_code from_matrix(coefficient_matrix b, std::size_t s, std::string name = "user code") {
  std::vector<std::vector<std::size_t>> a(b.rows());
  for (std::size_t i = 0; i < b.rows(); ++i)
    for (std::size_t j = 0; j < b.cols(); ++j)
      if (b(i, j) != 0.0) a[i].push_back(j);
  return linear_code(std::move(name), std::move(b), std::move(a), s);
}

}  // namespace weft::coding

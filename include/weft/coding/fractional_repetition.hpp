// Fractional repetition gradient code (Tandon, Lei, Dimakis, Karampatziakis, ICML 2017, Sec. 3.1):
// n workers in n/(s+1) groups; every worker of group g holds the same s+1 partitions and sends
// their plain sum, so any n - s survivors include one worker per group. Needs (s+1) | n.
#pragma once

#include <weft/coding/linear_code.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace weft::coding {

/// Builds the fractional repetition code for n workers and s stragglers (k = n partitions, load
/// s+1). Coefficients and decoding weights are all 0 or 1, so there is no cancellation and float32
/// decoding is as accurate as a plain sum. Throws weft::error(invalid_argument) naming n and s when
/// s >= n or (s+1) does not divide n. O(n^2).
inline linear_code fractional_repetition(std::size_t n, std::size_t s) {
  constexpr const char* ctx = "weft::coding::fractional_repetition";
  expects(n > 0, errc::invalid_argument, ctx, "n must be positive, got 0");
  expects(s < n, errc::invalid_argument, ctx, "s = ", s, " stragglers must be < n = ", n, " workers");
  expects(n % (s + 1) == 0, errc::invalid_argument, ctx, "fractional repetition needs (s+1) | n, but s+1 = ", s + 1,
          " does not divide n = ", n, " (use cyclic_repetition or hybrid_repetition)");
  coefficient_matrix b(n, n);
  std::vector<std::vector<std::size_t>> assignment(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t group = i / (s + 1);
    for (std::size_t j = group * (s + 1); j < (group + 1) * (s + 1); ++j) {
      assignment[i].push_back(j);
      b(i, j) = 1.0;
    }
  }
  return linear_code("fractional_repetition(n=" + std::to_string(n) + ",s=" + std::to_string(s) + ")", std::move(b),
                     std::move(assignment), s);
}

}  // namespace weft::coding

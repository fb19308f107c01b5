// The decoder of a gradient code for one survivor set: the weights a with a^T B_F = 1^T (exact
// codes) or the least-squares best approximation (approximate codes, Charles et al. 2017), plus
// the numbers that say how much to trust it (residual, condition number of B_F).
#pragma once

#include <weft/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace weft::coding {

/// A survivor set: the sorted, duplicate-free indices of the workers whose coded messages arrived.
/// A plain value type (not thread-safe to mutate; safe to share const). Construction O(m log m).
class survivor_set {
 public:
  survivor_set() = default;

  /// Validates and sorts the indices. Throws weft::error(invalid_argument) naming the offending
  /// index when one is >= n_workers or appears twice.
  survivor_set(std::span<const std::size_t> workers, std::size_t n_workers) : n_(n_workers) {
    workers_.assign(workers.begin(), workers.end());
    std::sort(workers_.begin(), workers_.end());
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      expects(workers_[i] < n_workers, errc::invalid_argument, "weft::coding::survivor_set", "worker index ",
              workers_[i], " is out of range for a code with n = ", n_workers, " workers");
      expects(i == 0 || workers_[i] != workers_[i - 1], errc::invalid_argument, "weft::coding::survivor_set",
              "worker index ", workers_[i], " appears twice in the survivor set");
    }
  }

  std::size_t size() const noexcept { return workers_.size(); }
  std::size_t num_workers() const noexcept { return n_; }
  [[deprecated("use num_workers()")]] std::size_t n_workers() const noexcept { return num_workers(); }
  std::span<const std::size_t> workers() const noexcept { return workers_; }
  bool contains(std::size_t w) const { return std::binary_search(workers_.begin(), workers_.end(), w); }

  /// One bit per worker, used as the decoder-cache key. O(n / 64).
  std::vector<std::uint64_t> bitmask() const {
    std::vector<std::uint64_t> bits((n_ + 63) / 64, 0);
    for (std::size_t w : workers_) bits[w / 64] |= std::uint64_t{1} << (w % 64);
    return bits;
  }

  friend bool operator==(const survivor_set&, const survivor_set&) = default;

 private:
  std::vector<std::size_t> workers_;  // invariant: sorted, unique, each < n_
  std::size_t n_ = 0;
};

/// Decoding weights for one survivor set. Decoding is the weighted sum
///   g_hat = sum_i weights[i] * message[survivors[i]],
/// which equals the full gradient when residual is (numerically) zero. Immutable once built;
/// thread-safe to share.
struct decoder {
  std::vector<std::size_t> survivors;  ///< sorted worker indices, one per weight
  std::vector<double> weights;         ///< computed in double
  /// ||B_F^T a - 1||_2 / sqrt(k): 0 (to rounding) for an exact decode; for an approximate code the
  /// decoded gradient is sum_j c_j g_j with c = B_F^T a, and this is the RMS of c_j - 1.
  double residual = 0.0;
  /// sigma_max / sigma_min of B_F over its nonzero singular values (1 is perfect; float32 loses
  /// about log10(condition) of its 7 digits in the worst case).
  double condition = 1.0;
  /// sum_i |a_i| * ||B_i||_1 / k: how much float32 rounding of the coded messages is amplified
  /// (relative error ~ amplification * 6e-8 for gradients of similar size).
  double amplification = 1.0;
  bool exact = true;  ///< residual <= the code's tolerance
};

}  // namespace weft::coding

// Measured all-reduce time against message size for one GPU count: the NCCL profiles of Vidur
// (Agrawal et al., "Vidur", MLSys 2024, §4.2), made non-decreasing in size by isotonic regression (pool
// adjacent violators) so that small-message noise cannot make a bigger message cheaper.
#pragma once

#include <weft/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace weft::sched::sim {

/// All-reduce seconds by element count (fp16 elements per GPU, as Vidur's collectives profiler sends).
/// Immutable after construction: thread-safe. seconds_for is O(log points).
class all_reduce_profile {
 public:
  /// Takes measured points: sizes strictly ascending and >= 1, times finite and >= 0. The times are
  /// replaced by their isotonic (non-decreasing) fit. Throws weft::error(invalid_argument) otherwise.
  all_reduce_profile(std::string source, int workers, std::vector<std::int64_t> elements, std::vector<double> seconds)
      : source_(std::move(source)), workers_(workers), elements_(std::move(elements)), seconds_(std::move(seconds)) {
    const char* where = "weft::sched::sim::all_reduce_profile";
    expects(workers_ >= 2, errc::invalid_argument, where, source_, ": an all-reduce needs >= 2 workers, got ",
            workers_);
    expects(!elements_.empty() && elements_.size() == seconds_.size(), errc::invalid_argument, where, source_,
            ": need as many times as sizes, and at least one");
    for (std::size_t i = 0; i < elements_.size(); ++i) {
      expects(elements_[i] >= 1 && (i == 0 || elements_[i - 1] < elements_[i]), errc::invalid_argument, where, source_,
              ": sizes must be >= 1 and strictly ascending; ", elements_[i], " at point ", i);
      expects(std::isfinite(seconds_[i]) && seconds_[i] >= 0.0, errc::invalid_argument, where, source_, ": time ",
              seconds_[i], " at size ", elements_[i]);
    }
    isotonic(seconds_);
  }

  const std::string& source() const noexcept { return source_; }
  int workers() const noexcept { return workers_; }
  std::span<const std::int64_t> elements() const noexcept { return elements_; }
  /// The fitted (non-decreasing) time at point i.
  double fitted_s(std::size_t i) const { return seconds_.at(i); }

  /// Seconds to all-reduce `elements` fp16 elements: linear between measured sizes; below the
  /// smallest its time (latency floor); above the largest scaled by size (bandwidth-bound).
  double seconds_for(double elements) const noexcept {
    if (!(elements > static_cast<double>(elements_.front()))) return seconds_.front();
    if (elements >= static_cast<double>(elements_.back()))
      return seconds_.back() * elements / static_cast<double>(elements_.back());
    const auto it = std::upper_bound(elements_.begin(), elements_.end(), elements,
                                     [](double e, std::int64_t p) { return e < static_cast<double>(p); });
    const std::size_t i = static_cast<std::size_t>(it - elements_.begin()) - 1;
    const double x0 = static_cast<double>(elements_[i]), x1 = static_cast<double>(elements_[i + 1]);
    return seconds_[i] + (elements - x0) / (x1 - x0) * (seconds_[i + 1] - seconds_[i]);
  }

 private:
  // Pool adjacent violators: the least-squares non-decreasing fit, in place. O(n).
  static void isotonic(std::vector<double>& y) {
    std::vector<std::pair<double, std::size_t>> blocks;  // (mean, count)
    for (double v : y) {
      blocks.emplace_back(v, 1);
      while (blocks.size() > 1 && blocks[blocks.size() - 2].first > blocks.back().first) {
        const auto [m1, n1] = blocks.back();
        blocks.pop_back();
        auto& [m0, n0] = blocks.back();
        m0 = (m0 * static_cast<double>(n0) + m1 * static_cast<double>(n1)) / static_cast<double>(n0 + n1);
        n0 += n1;
      }
    }
    std::size_t k = 0;
    for (const auto& [m, n] : blocks)
      for (std::size_t j = 0; j < n; ++j) y[k++] = m;
  }

  std::string source_;
  int workers_;
  // Invariants: elements_ strictly ascending; seconds_ as long and non-decreasing.
  std::vector<std::int64_t> elements_;
  std::vector<double> seconds_;
};

}  // namespace weft::sched::sim

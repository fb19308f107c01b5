// weft::quantile_histogram: streaming quantiles (p50/p90/p99/max) of non-negative values such as
// latencies, in bounded memory with a relative-error guarantee. Logarithmic buckets as in DDSketch
// (Masson, Rim, Lee, "DDSketch: A Fast and Fully-Mergeable Quantile Sketch with Relative-Error
// Guarantees", VLDB 2019, §2): bucket i holds (gamma^(i-1), gamma^i] with gamma = (1+a)/(1-a).
#pragma once

#include <weft/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace weft {

/// Error bound: for 0 <= q <= 1 let x_q be the value of rank floor(q * (count - 1)) among the
/// recorded values in sorted order; quantile(q) returns x' with |x' - x_q| <= a * x_q, where a is
/// relative_accuracy() — as long as the bucket limit never forced the lowest buckets to merge
/// (collapsed() is false; with the defaults, values spanning 17 orders of magnitude fit).
/// min(), max(), count(), sum() and mean() are exact.
///
/// Memory: at most max_buckets 8-byte counts. Complexity: record O(1) amortised, quantile O(buckets).
/// Thread-safety: not thread-safe; give each thread its own histogram and merge() them.
class quantile_histogram {
 public:
  /// relative_accuracy in (0, 1); max_buckets >= 16. Throws weft::error(invalid_argument) otherwise.
  explicit quantile_histogram(double relative_accuracy = 0.01, std::size_t max_buckets = 2048)
      : accuracy_(relative_accuracy), max_buckets_(max_buckets) {
    expects(relative_accuracy > 0.0 && relative_accuracy < 1.0, errc::invalid_argument, "weft::quantile_histogram",
            "relative_accuracy must be in (0, 1), got ", relative_accuracy);
    expects(max_buckets >= 16, errc::invalid_argument, "weft::quantile_histogram",
            "max_buckets must be at least 16, got ", max_buckets);
    gamma_ = (1.0 + accuracy_) / (1.0 - accuracy_);
    log_gamma_ = std::log(gamma_);
  }

  /// Records one value; it must be finite and non-negative (throws weft::error otherwise and
  /// records nothing).
  void record(double value) {
    // The value the last record() keyed again (a batch's tokens often share their gap): its bucket
    // is known, so the check, the log and the bucket search are skipped. Same result as below.
    if (value == last_value_ && value >= smallest_positive_) {
      const auto at = static_cast<std::uint64_t>(last_key_ - min_key_);
      if (at < buckets_.size()) {
        ++buckets_[static_cast<std::size_t>(at)];
        ++count_;
        sum_ += value;
        min_ = std::min(min_, value);
        max_ = std::max(max_, value);
        return;
      }
    }
    record(value, 1);
  }

  /// Records `times` copies of value.
  void record(double value, std::uint64_t times) {
    expects(std::isfinite(value) && value >= 0.0, errc::invalid_argument, "weft::quantile_histogram::record",
            "value must be finite and non-negative, got ", value);
    if (times == 0) return;
    if (value < smallest_positive_) {
      zero_count_ += times;
    } else {
      const std::int64_t key = key_of(value);
      // Almost every value lands in a bucket that exists: one compare (wrapping below min_key_).
      const auto at = static_cast<std::uint64_t>(key - min_key_);
      if (at < buckets_.size())
        buckets_[static_cast<std::size_t>(at)] += times;
      else
        add_to_bucket(key, times);
    }
    count_ += times;
    sum_ += value * static_cast<double>(times);
    min_ = std::min(min_, value);
    max_ = std::max(max_, value);
  }

  /// Adds every value recorded in other. Both must have the same relative accuracy.
  void merge(const quantile_histogram& other) {
    expects(other.accuracy_ == accuracy_, errc::mismatch, "weft::quantile_histogram::merge",
            "relative accuracies differ: ", accuracy_, " vs ", other.accuracy_);
    for (std::size_t i = 0; i < other.buckets_.size(); ++i)
      if (other.buckets_[i] != 0) add_to_bucket(other.min_key_ + static_cast<std::int64_t>(i), other.buckets_[i]);
    zero_count_ += other.zero_count_;
    count_ += other.count_;
    sum_ += other.sum_;
    min_ = std::min(min_, other.min_);
    max_ = std::max(max_, other.max_);
    collapsed_ = collapsed_ || other.collapsed_;
  }

  /// The q-quantile, q in [0, 1], within the bound in the class comment. quantile(0) == min() and
  /// quantile(1) == max() exactly. Throws weft::error on an empty histogram or q outside [0, 1].
  double quantile(double q) const {
    expects(q >= 0.0 && q <= 1.0, errc::invalid_argument, "weft::quantile_histogram::quantile",
            "q must be in [0, 1], got ", q);
    expects(count_ > 0, errc::precondition, "weft::quantile_histogram::quantile", "no values recorded");
    if (q == 0.0) return min_;
    if (q == 1.0) return max_;
    const auto rank = static_cast<std::uint64_t>(std::floor(q * static_cast<double>(count_ - 1)));
    if (rank < zero_count_) return min_;
    std::uint64_t seen = zero_count_;
    for (std::size_t i = 0; i < buckets_.size(); ++i) {
      seen += buckets_[i];
      if (seen > rank) {
        const double estimate =
            2.0 * std::pow(gamma_, static_cast<double>(min_key_ + static_cast<std::int64_t>(i))) / (gamma_ + 1.0);
        return std::clamp(estimate, min_, max_);
      }
    }
    return max_;
  }

  double p50() const { return quantile(0.50); }
  double p90() const { return quantile(0.90); }
  double p99() const { return quantile(0.99); }

  std::uint64_t count() const noexcept { return count_; }
  double sum() const noexcept { return sum_; }
  /// Mean of the recorded values; 0 when empty.
  double mean() const noexcept { return count_ == 0 ? 0.0 : sum_ / static_cast<double>(count_); }
  /// Smallest and largest recorded value; throws on an empty histogram.
  double min() const {
    expects(count_ > 0, errc::precondition, "weft::quantile_histogram::min", "no values recorded");
    return min_;
  }
  double max() const {
    expects(count_ > 0, errc::precondition, "weft::quantile_histogram::max", "no values recorded");
    return max_;
  }
  double relative_accuracy() const noexcept { return accuracy_; }
  /// True once the bucket limit forced the lowest buckets together (low quantiles lose the bound).
  bool collapsed() const noexcept { return collapsed_; }
  /// Bytes of bucket storage in use (at most 8 * max_buckets).
  std::size_t memory_bytes() const noexcept { return buckets_.capacity() * sizeof(std::uint64_t); }

  void reset() noexcept {
    buckets_.clear();
    zero_count_ = count_ = 0;
    sum_ = 0.0;
    min_ = std::numeric_limits<double>::infinity();
    max_ = -std::numeric_limits<double>::infinity();
    collapsed_ = false;
  }

 private:
  // The bucket key of a value >= smallest_positive_. Streams of latencies repeat values (every decode
  // of one simulated iteration has the same token gap), so the last value's key is kept: a repeat is
  // a compare instead of a log, and its key is the one key_slow gave it, so buckets and quantiles are
  // exactly those of the slow path.
  std::int64_t key_of(double value) noexcept {
    if (value == last_value_) return last_key_;
    return key_and_remember(value);
  }
  // Out of line: the log stays off the repeat path.
  [[gnu::noinline]] std::int64_t key_and_remember(double value) noexcept {
    last_key_ = key_slow(value);
    last_value_ = value;
    return last_key_;
  }
  std::int64_t key_slow(double value) const noexcept {
    return static_cast<std::int64_t>(std::ceil(std::log(value) / log_gamma_));
  }

  // Invariant: buckets_[i] counts values with key min_key_ + i; buckets_.size() <= max_buckets_.
  // Out of line: record() handles the common case, a key inside the buckets, itself.
  [[gnu::noinline]] void add_to_bucket(std::int64_t key, std::uint64_t times) {
    if (buckets_.empty()) {
      min_key_ = key;
      buckets_.assign(1, 0);
    }
    const auto max_key = min_key_ + static_cast<std::int64_t>(buckets_.size()) - 1;
    if (key < min_key_) {
      const auto grow = static_cast<std::size_t>(min_key_ - key);
      if (buckets_.size() + grow > max_buckets_) {
        // No room below: the value joins the lowest bucket (DDSketch's collapse-lowest).
        collapsed_ = true;
        const std::size_t room = max_buckets_ - buckets_.size();
        buckets_.insert(buckets_.begin(), room, 0);
        min_key_ -= static_cast<std::int64_t>(room);
        buckets_.front() += times;
        return;
      }
      buckets_.insert(buckets_.begin(), grow, 0);
      min_key_ = key;
    } else if (key > max_key) {
      const auto grow = static_cast<std::size_t>(key - max_key);
      if (buckets_.size() + grow > max_buckets_) {
        // Keep the high buckets exact (tail latency matters most); fold the lowest ones together.
        collapsed_ = true;
        const std::size_t drop = std::min(buckets_.size() + grow - max_buckets_, buckets_.size());
        std::uint64_t folded = 0;
        for (std::size_t i = 0; i < drop; ++i) folded += buckets_[i];
        buckets_.erase(buckets_.begin(), buckets_.begin() + static_cast<std::ptrdiff_t>(drop));
        min_key_ += static_cast<std::int64_t>(drop);
        if (buckets_.empty()) {
          buckets_.assign(1, 0);
          min_key_ = key;
        }
        buckets_.front() += folded;
        const auto new_max = min_key_ + static_cast<std::int64_t>(buckets_.size()) - 1;
        if (key > new_max) buckets_.resize(buckets_.size() + static_cast<std::size_t>(key - new_max), 0);
      } else {
        buckets_.resize(buckets_.size() + grow, 0);
      }
    }
    buckets_[static_cast<std::size_t>(key - min_key_)] += times;
  }

  // Values below this are counted as zero (they have no meaningful logarithmic bucket).
  static constexpr double smallest_positive_ = 1e-300;

  double accuracy_;
  std::size_t max_buckets_;
  double gamma_ = 0.0;
  double log_gamma_ = 0.0;
  // Cache of key_of: NaN matches no value until the first one is keyed.
  double last_value_ = std::numeric_limits<double>::quiet_NaN();
  std::int64_t last_key_ = 0;
  std::vector<std::uint64_t> buckets_;
  std::int64_t min_key_ = 0;
  std::uint64_t zero_count_ = 0;
  std::uint64_t count_ = 0;
  double sum_ = 0.0;
  double min_ = std::numeric_limits<double>::infinity();
  double max_ = -std::numeric_limits<double>::infinity();
  bool collapsed_ = false;
};

}  // namespace weft

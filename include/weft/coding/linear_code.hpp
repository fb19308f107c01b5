// weft::coding::linear_code: a gradient code given by its encoding matrix B (n workers x k
// partitions; worker i sends sum_j B_ij g_j) and its assignment, with decoders computed once per
// survivor set and cached. The condition an exact code meets (Tandon et al., ICML 2017, Sec. 2):
// for every survivor set F with |F| >= n - s, the all-ones vector lies in the row space of B_F.
#pragma once

#include <weft/coding/coefficient_matrix.hpp>
#include <weft/coding/concepts.hpp>
#include <weft/coding/decoder.hpp>
#include <weft/coding/detail/dense_solve.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace weft::coding {

namespace detail {

/// Builds the decoder of survivor set F: a = argmin ||B_F^T a - 1|| with the smallest norm (complete
/// orthogonal decomposition, dense_solve.hpp). O(|F| k min(|F|, k)).
inline decoder solve_decoder(const coefficient_matrix& b, const survivor_set& f, double tolerance) {
  decoder d;
  d.survivors.assign(f.workers().begin(), f.workers().end());
  const std::size_t k = b.cols();
  if (f.size() == 0) {
    d.residual = 1.0;
    d.condition = std::numeric_limits<double>::infinity();
    d.exact = false;
    return d;
  }
  const std::vector<double> ones(k, 1.0);
  const least_squares ls = min_norm_solve(rows_transposed(b, f.workers()), ones);
  d.weights = ls.x;
  d.condition = ls.condition;
  double sq = 0, amp = 0;
  std::vector<double> c(k, 0.0);  // c = B_F^T a, the coefficient each partition ends up with
  for (std::size_t i = 0; i < f.size(); ++i) {
    const auto row = b.row(f.workers()[i]);
    double l1 = 0;
    for (std::size_t j = 0; j < k; ++j) {
      c[j] += row[j] * d.weights[i];
      l1 += std::abs(row[j]);
    }
    amp += std::abs(d.weights[i]) * l1;
  }
  for (double v : c) sq += (v - 1.0) * (v - 1.0);
  d.residual = std::sqrt(sq / static_cast<double>(k));
  d.amplification = amp / static_cast<double>(k);
  d.exact = d.residual <= tolerance;
  return d;
}

/// Decoders keyed by survivor bitmask, at most `capacity` of them (the oldest entry is evicted
/// first). Thread-safe (one mutex; a miss solves under the lock, O(n^3) once per distinct set).
class decoder_cache {
 public:
  explicit decoder_cache(std::size_t capacity) : capacity_(capacity) {}

  template <class Make>
  std::shared_ptr<const decoder> get(const std::vector<std::uint64_t>& key, Make&& make) {
    std::lock_guard lock(mutex_);
    if (auto it = map_.find(key); it != map_.end()) {
      ++hits_;
      return it->second;
    }
    ++misses_;
    auto d = std::make_shared<const decoder>(make());
    if (map_.size() >= capacity_ && !order_.empty()) {
      map_.erase(order_.front());
      order_.pop_front();
    }
    map_.emplace(key, d);
    order_.push_back(key);
    return d;
  }
  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return map_.size();
  }
  std::pair<std::uint64_t, std::uint64_t> hits_misses() const {
    std::lock_guard lock(mutex_);
    return {hits_, misses_};
  }

 private:
  mutable std::mutex mutex_;
  std::size_t capacity_;
  std::map<std::vector<std::uint64_t>, std::shared_ptr<const decoder>> map_;
  std::deque<std::vector<std::uint64_t>> order_;  // insertion order, for eviction
  std::uint64_t hits_ = 0;
  std::uint64_t misses_ = 0;
};

}  // namespace detail

/// A linear gradient code. Immutable after construction except for its decoder cache; all member
/// functions are thread-safe. Copies share the cache (they share B, so the decoders are the same).
class linear_code {
 public:
  /// Decoders kept per code (a survivor set seen again after eviction is solved again).
  static constexpr std::size_t default_cache_capacity = 4096;

  /// b: n x k encoding matrix; assignment[i]: the partitions worker i stores (B_ij must be 0 for
  /// every other j); stragglers: s, the number of slow workers an exact code tolerates.
  /// Throws weft::error(invalid_argument) naming the value when s >= n, the assignment has the
  /// wrong size, names a partition >= k, or B has a nonzero outside the assignment or a NaN/Inf. O(n k).
  linear_code(std::string name, coefficient_matrix b, std::vector<std::vector<std::size_t>> assignment,
              std::size_t stragglers, code_kind kind = code_kind::exact, double tolerance = 1e-9)
      : name_(std::move(name)),
        b_(std::move(b)),
        assignment_(std::move(assignment)),
        s_(stragglers),
        kind_(kind),
        tolerance_(tolerance),
        cache_(std::make_shared<detail::decoder_cache>(default_cache_capacity)) {
    constexpr const char* where = "weft::coding::linear_code::linear_code";
    const std::size_t n = b_.rows();
    const std::size_t k = b_.cols();
    expects(n > 0 && k > 0, errc::invalid_argument, where, "B must be non-empty, got ", n, " x ", k);
    expects(s_ < n, errc::invalid_argument, where, "s = ", s_, " stragglers must be < n = ", n, " workers");
    expects(assignment_.size() == n, errc::invalid_argument, where, "assignment has ", assignment_.size(),
            " rows, expected one per worker (n = ", n, ")");
    expects(tolerance_ > 0, errc::invalid_argument, where, "tolerance must be positive, got ", tolerance_);
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<char> held(k, 0);
      for (std::size_t j : assignment_[i]) {
        expects(j < k, errc::invalid_argument, where, "worker ", i, " is assigned partition ", j,
                " but there are only k = ", k, " partitions");
        held[j] = 1;
      }
      for (std::size_t j = 0; j < k; ++j)
        expects(held[j] || b_(i, j) == 0.0, errc::invalid_argument, where, "B(", i, ", ", j, ") = ", b_(i, j),
                " but worker ", i, " does not hold partition ", j);
    }
    for (double v : b_.data())
      expects(std::isfinite(v), errc::invalid_argument, where, "B has a non-finite coefficient ", v);
  }

  const std::string& name() const noexcept { return name_; }
  std::size_t num_workers() const noexcept { return b_.rows(); }
  [[deprecated("use num_workers()")]] std::size_t n_workers() const noexcept { return num_workers(); }
  std::size_t n_partitions() const noexcept { return b_.cols(); }
  std::size_t stragglers() const noexcept { return s_; }
  code_kind kind() const noexcept { return kind_; }
  /// The encoding matrix B (n x k). O(1).
  const coefficient_matrix& coefficients() const noexcept { return b_; }
  /// B(worker, partition): the weight of that partition's gradient in the worker's message; 0 for
  /// a partition the worker does not hold. Unchecked indices. O(1).
  double coefficient(std::size_t worker, std::size_t partition) const noexcept { return b_(worker, partition); }

  /// Partitions stored by worker w, in the order encode() expects them. Throws when w >= n. O(1).
  std::span<const std::size_t> assignment(std::size_t worker) const {
    expects(worker < num_workers(), errc::out_of_range, "weft::coding::linear_code::assignment", "worker ", worker,
            " is out of range for n = ", num_workers());
    return assignment_[worker];
  }

  /// Storage and computation load: the largest number of partitions a worker holds. O(n).
  std::size_t load() const noexcept {
    std::size_t m = 0;
    for (const auto& a : assignment_) m = std::max(m, a.size());
    return m;
  }

  /// The decoder for survivors, or nullptr when they cannot decode (exact codes: the residual
  /// exceeds the tolerance; approximate codes: the set is empty). Any set may be asked, so an
  /// aggregator can test each arrival. Computed once per distinct set, then cached.
  /// Thread-safe; O(1) amortised on a hit, O(|F| k^2) on a miss.
  std::shared_ptr<const decoder> try_decoder(std::span<const std::size_t> survivors) const {
    survivor_set f(survivors, num_workers());
    auto d = cache_->get(f.bitmask(), [&] { return detail::solve_decoder(b_, f, tolerance_); });
    if (f.size() == 0) return nullptr;
    if (kind_ == code_kind::exact && !d->exact) return nullptr;
    return d;
  }

  /// The decoder for survivors. Throws weft::error(invalid_argument) naming the sizes when an exact
  /// code is given fewer than n - s survivors, and weft::error(precondition) with the residual when
  /// the set cannot decode. Thread-safe; cached like try_decoder.
  std::shared_ptr<const decoder> decoder_for(std::span<const std::size_t> survivors) const {
    constexpr const char* where = "weft::coding::linear_code::decoder_for";
    survivor_set f(survivors, num_workers());
    if (kind_ == code_kind::exact)
      expects(f.size() + s_ >= num_workers(), errc::invalid_argument, where, "survivor set has ", f.size(),
              " workers; code '", name_, "' with n = ", num_workers(), ", s = ", s_,
              " needs at least n - s = ", num_workers() - s_);
    else
      expects(f.size() > 0, errc::invalid_argument, where, "survivor set is empty");
    auto d = cache_->get(f.bitmask(), [&] { return detail::solve_decoder(b_, f, tolerance_); });
    expects(kind_ == code_kind::approximate || d->exact, errc::precondition, where, "code '", name_,
            "' cannot decode this survivor set of ", f.size(), " workers: residual ", d->residual,
            " exceeds tolerance ", tolerance_, " (B does not meet the gradient-coding condition)");
    return d;
  }

  /// Number of survivor sets decoded so far (distinct sets). Thread-safe; O(1).
  std::size_t cached_decoders() const { return cache_->size(); }
  /// (hits, misses) of the decoder cache. Thread-safe; O(1).
  std::pair<std::uint64_t, std::uint64_t> cache_stats() const { return cache_->hits_misses(); }

 private:
  std::string name_;
  coefficient_matrix b_;                              // invariant: zero outside assignment_, finite
  std::vector<std::vector<std::size_t>> assignment_;  // invariant: one row per worker, entries < k
  std::size_t s_;                                     // invariant: s_ < n
  code_kind kind_;
  double tolerance_;
  std::shared_ptr<detail::decoder_cache> cache_;  // never null
};

}  // namespace weft::coding

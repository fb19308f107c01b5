// The (B, W, lambda)-bursty straggler model of sequential gradient coding (Krishnan, Ebrahimi,
// Khisti, "Sequential Gradient Coding for Straggler Mitigation", ICLR 2023): in every window of W
// consecutive rounds, at most lambda distinct workers straggle, and the rounds in which any one
// worker straggles lie within B consecutive rounds (one burst of length <= B). straggler_history
// checks a pattern round by round, so a master can ask whether leaving this round's stragglers
// behind keeps the pattern inside the model (the test the paper's experiments use to decide
// whether to wait for everyone).
#pragma once

#include <weft/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

namespace weft::coding {

namespace detail {
/// Throws weft::error(invalid_argument) naming the worker when one of `workers` is >= n or repeated.
/// `scratch` is reused between calls. O(|workers| + n / 64).
inline void check_worker_set(std::span<const std::size_t> workers, std::size_t n, const char* where,
                             std::vector<std::uint64_t>& scratch) {
  scratch.assign((n + 63) / 64, 0);
  for (std::size_t w : workers) {
    expects(w < n, errc::invalid_argument, where, "straggler ", w, " is out of range for n = ", n, " workers");
    const std::uint64_t bit = std::uint64_t{1} << (w % 64);
    expects((scratch[w / 64] & bit) == 0, errc::invalid_argument, where, "straggler ", w,
            " appears twice in one round");
    scratch[w / 64] |= bit;
  }
}
}  // namespace detail

/// The parameters of the bursty straggler model. A plain value; validate() checks the paper's
/// constraints.
struct bursty_straggler_model {
  std::size_t n_workers = 0;
  std::size_t burst = 1;   ///< B: the longest burst of consecutive straggling rounds of one worker
  std::size_t window = 2;  ///< W: the sliding window, in rounds
  std::size_t lambda = 0;  ///< at most this many distinct stragglers in any window of W rounds

  friend bool operator==(const bursty_straggler_model&, const bursty_straggler_model&) = default;
};

/// Throws weft::error(invalid_argument) naming the values and the rule unless n >= 1, W >= 2,
/// 1 <= B < W and lambda <= n. `where` names the caller in the message. O(1).
inline void validate(const bursty_straggler_model& m, const char* where) {
  expects(m.n_workers >= 1, errc::invalid_argument, where, "the model needs n >= 1 workers, got n = ", m.n_workers);
  expects(m.window >= 2, errc::invalid_argument, where, "window W = ", m.window,
          " must be >= 2 rounds (the (B, W, lambda) model needs 1 <= B < W)");
  expects(m.burst >= 1 && m.burst < m.window, errc::invalid_argument, where, "burst B = ", m.burst,
          " must satisfy 1 <= B < W = ", m.window, " (the (B, W, lambda) model)");
  expects(m.lambda <= m.n_workers, errc::invalid_argument, where, "lambda = ", m.lambda, " exceeds n = ", m.n_workers,
          " workers (at most n distinct stragglers per window)");
}

/// A straggler pattern checked against a bursty model as it grows, one round at a time. Keeps only
/// what the last W rounds need. Not thread-safe (one owner). admits() O(|stragglers| + n / 64);
/// push() O(|stragglers|) amortised; distinct_in_window() O(1).
class straggler_history {
 public:
  /// Throws like validate(model).
  explicit straggler_history(const bursty_straggler_model& model) : m_(model) {
    validate(m_, "weft::coding::straggler_history");
    rounds_.assign(m_.n_workers, {});
    bucket_.assign(m_.window, 0);
  }

  const bursty_straggler_model& model() const noexcept { return m_; }
  /// Rounds pushed so far.
  std::uint64_t rounds() const noexcept { return round_; }

  /// Whether the pattern stays inside the model when the next round's stragglers are `stragglers`:
  /// the window ending at that round has at most lambda distinct stragglers, and for each of them
  /// its straggling rounds in the window span at most B rounds. Windows ending earlier were checked
  /// when their rounds were pushed. Throws weft::error(invalid_argument) naming a worker that is out
  /// of range or repeated.
  bool admits(std::span<const std::size_t> stragglers) const {
    check_set(stragglers, "weft::coding::straggler_history::admits");
    const std::uint64_t r = round_;
    const std::uint64_t first = r + 1 >= m_.window ? r + 1 - m_.window : 0;  // window [first, r]
    std::size_t distinct = in_window_after_slide();
    for (std::size_t w : stragglers) {
      const auto& mine = rounds_[w];
      // The earliest straggle of w inside the window (rounds_ keeps only the last W rounds).
      auto it = std::lower_bound(mine.begin(), mine.end(), first);
      if (it == mine.end()) {
        ++distinct;
      } else if (r - *it + 1 > m_.burst) {
        return false;
      }
    }
    return distinct <= m_.lambda;
  }

  /// Appends the next round. Throws like admits() (and then changes nothing); a round that breaks
  /// the model is recorded as it is (conforms() turns false for good).
  void push(std::span<const std::size_t> stragglers) {
    check_set(stragglers, "weft::coding::straggler_history::push");
    const bool ok = admits(stragglers);
    const std::uint64_t r = round_;
    // Slide: round r - W leaves the window, and with it every worker whose last straggle it was.
    if (r >= m_.window) in_window_ -= bucket_[r % m_.window];
    bucket_[r % m_.window] = 0;
    for (std::size_t w : stragglers) {
      auto& mine = rounds_[w];
      if (!mine.empty() && mine.back() + m_.window > r) {
        --bucket_[mine.back() % m_.window];  // still in the window: its last straggle moves to r
      } else {
        ++in_window_;
      }
      ++bucket_[r % m_.window];
      mine.push_back(r);
      while (mine.front() + m_.window <= r) mine.pop_front();
    }
    conforms_ = conforms_ && ok;
    ++round_;
  }

  /// True while every round pushed so far kept the pattern inside the model.
  bool conforms() const noexcept { return conforms_; }

  /// Distinct workers that straggled in the last W rounds pushed.
  std::size_t distinct_in_window() const noexcept { return in_window_; }

 private:
  // Distinct stragglers of the window [r - W + 1, r - 1] (the one admits() extends by round r).
  std::size_t in_window_after_slide() const noexcept {
    return round_ >= m_.window ? in_window_ - bucket_[round_ % m_.window] : in_window_;
  }

  void check_set(std::span<const std::size_t> stragglers, const char* where) const {
    detail::check_worker_set(stragglers, m_.n_workers, where, seen_);
  }

  bursty_straggler_model m_;                       // invariant: validated
  std::vector<std::deque<std::uint64_t>> rounds_;  // per worker: its straggling rounds within the last W
  std::vector<std::size_t> bucket_;                // bucket_[r % W]: workers whose last straggle was round r
  std::size_t in_window_ = 0;                      // workers with a straggle in the last W rounds
  std::uint64_t round_ = 0;
  bool conforms_ = true;
  mutable std::vector<std::uint64_t> seen_;  // scratch for check_set
};

/// Whether a whole pattern (pattern[r]: the stragglers of round r) conforms to the model. Throws
/// like straggler_history. O(total stragglers + rounds * n / 64).
inline bool conforms(const bursty_straggler_model& model, std::span<const std::vector<std::size_t>> pattern) {
  straggler_history h(model);
  for (const auto& round : pattern) {
    if (!h.admits(round)) return false;
    h.push(round);
  }
  return true;
}

}  // namespace weft::coding

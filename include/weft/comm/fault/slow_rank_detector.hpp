// Finds a slow or faulty rank from collective timings, before any timeout fires, in the manner of
// C4D (Dong et al., "Boosting Large-scale Parallel Training Efficiency with C4: A Communication-Driven
// Approach", arXiv 2406.04594, §3): collectives synchronise the ranks, so a rank that arrives late
// makes every other rank wait while it waits least itself. Each rank measures only its own time
// inside each collective (no clock is compared across hosts); the ranks share those durations and
// every rank runs the same robust outlier test on the same numbers, so all reach the same verdict.
#pragma once

#include <weft/comm/collectives.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/comm/options.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace weft::comm::fault {

/// When a rank counts as late in one step, and how persistent lateness must be to flag it. A plain
/// value; validated by slow_rank_detector.
struct slow_rank_options {
  std::size_t window = 16;       ///< steps the verdict looks back over, >= 2
  double min_fraction = 0.75;    ///< share of those steps in which the rank must be late, in (0, 1]
  double min_lateness_s = 1e-3;  ///< lateness below this is noise whatever the spread, >= 0
  /// A step's lateness must also exceed this many robust standard deviations (1.4826 x the median
  /// absolute deviation of the step's durations, which the one late rank barely moves), > 0.
  double robust_z = 5.0;
};

/// Why a rank is suspected: in `steps_late` of the last `steps_observed` steps it spent less time
/// in the collective than the median rank by at least the thresholds, by `median_lateness_s`
/// (median over those late steps) and at most `max_lateness_s`.
struct slow_rank_evidence {
  int rank = -1;
  std::size_t steps_late = 0, steps_observed = 0;
  double median_lateness_s = 0, max_lateness_s = 0;

  /// One line for logs: "rank 2 arrived late in 15 of 16 collectives (median 20.1 ms, max 24.9 ms)".
  std::string describe() const {
    return weft::detail::concat("rank ", rank, " arrived late in ", steps_late, " of ", steps_observed,
                                " collectives (median ", median_lateness_s * 1e3, " ms, max ", max_lateness_s * 1e3,
                                " ms later than the median rank)");
  }
};

/// The outlier test over a sliding window of steps. Not thread-safe (one per rank). observe O(p log p);
/// suspect O(p * window).
class slow_rank_detector {
 public:
  /// Throws weft::error(invalid_argument) naming the value for ranks < 2 or invalid options.
  explicit slow_rank_detector(int ranks, slow_rank_options o = {}) : ranks_(ranks), opt_(o) {
    constexpr const char* where = "weft::comm::fault::slow_rank_detector";
    expects(ranks >= 2, errc::invalid_argument, where, "needs at least 2 ranks, got ", ranks);
    expects(o.window >= 2, errc::invalid_argument, where, "window must be >= 2 steps, got ", o.window);
    expects(o.min_fraction > 0 && o.min_fraction <= 1, errc::invalid_argument, where,
            "min_fraction must be in (0, 1], got ", o.min_fraction);
    expects(std::isfinite(o.min_lateness_s) && o.min_lateness_s >= 0, errc::invalid_argument, where,
            "min_lateness_s must be finite and >= 0, got ", o.min_lateness_s);
    expects(std::isfinite(o.robust_z) && o.robust_z > 0, errc::invalid_argument, where,
            "robust_z must be finite and > 0, got ", o.robust_z);
  }

  int ranks() const noexcept { return ranks_; }
  std::size_t steps() const noexcept { return steps_; }

  /// One collective: each rank's own time inside it, in seconds (index = rank). Throws
  /// weft::error, changing nothing, for a wrong count or a negative or non-finite duration.
  void observe(std::span<const double> durations_s) {
    constexpr const char* where = "weft::comm::fault::slow_rank_detector::observe";
    expects(durations_s.size() == static_cast<std::size_t>(ranks_), errc::invalid_argument, where, "got ",
            durations_s.size(), " durations for ", ranks_, " ranks");
    for (std::size_t r = 0; r < durations_s.size(); ++r)
      expects(std::isfinite(durations_s[r]) && durations_s[r] >= 0, errc::invalid_argument, where, "rank ", r,
              "'s duration must be finite and >= 0, got ", durations_s[r]);
    scratch_.assign(durations_s.begin(), durations_s.end());
    const double med = median(scratch_);
    for (double& d : scratch_) d = std::abs(d - med);
    const double spread = 1.4826 * median(scratch_);
    const double threshold = std::max(opt_.min_lateness_s, opt_.robust_z * spread);
    std::vector<double> lateness(durations_s.size());
    for (std::size_t r = 0; r < durations_s.size(); ++r) {
      const double late = med - durations_s[r];
      lateness[r] = late > threshold ? late : 0.0;  // 0: not late this step
    }
    history_.push_back(std::move(lateness));
    if (history_.size() > opt_.window) history_.pop_front();
    ++steps_;
  }

  /// The rank late in at least min_fraction of the last `window` steps (the most often late, then
  /// the latest, if several), once `window` steps were observed; nullopt otherwise. Every rank that
  /// observed the same durations gets the same answer.
  std::optional<slow_rank_evidence> suspect() const {
    if (history_.size() < opt_.window) return std::nullopt;
    std::optional<slow_rank_evidence> best;
    for (int r = 0; r < ranks_; ++r) {
      std::vector<double> late;
      for (const auto& step : history_)
        if (step[static_cast<std::size_t>(r)] > 0) late.push_back(step[static_cast<std::size_t>(r)]);
      if (static_cast<double>(late.size()) < opt_.min_fraction * static_cast<double>(history_.size())) continue;
      slow_rank_evidence e{r, late.size(), history_.size(), 0, *std::max_element(late.begin(), late.end())};
      e.median_lateness_s = median(late);
      if (!best || std::pair(e.steps_late, e.median_lateness_s) > std::pair(best->steps_late, best->median_lateness_s))
        best = e;
    }
    return best;
  }

 private:
  static double median(std::vector<double>& v) {
    const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    if (v.size() % 2 == 1) return *mid;
    return 0.5 * (*mid + *std::max_element(v.begin(), mid));
  }

  int ranks_;
  slow_rank_options opt_;
  std::deque<std::vector<double>> history_;  // per step, each rank's lateness (0 when not late)
  std::vector<double> scratch_;
  std::size_t steps_ = 0;
};

/// Times the collectives a rank runs and, every `exchange_every` calls, shares the durations with
/// the other ranks (one allgather of exchange_every doubles per rank on its own channel) and feeds
/// them to a slow_rank_detector, so every rank holds the same verdict. Every rank must make the
/// same sequence of run() calls. Not thread-safe (one per rank and transport).
template <transport Tr>
class collective_monitor {
 public:
  /// `channel` must not be used by the monitored collectives. Throws weft::error for
  /// exchange_every == 0 or invalid detector options.
  collective_monitor(Tr& t, std::size_t exchange_every = 8, slow_rank_options o = {}, std::uint32_t channel = 0xC4C4u)
      : t_(t), every_(exchange_every), channel_(channel), detector_(t.size(), o) {
    expects(exchange_every >= 1, errc::invalid_argument, "weft::comm::fault::collective_monitor",
            "exchange_every must be >= 1");
    local_.reserve(every_);
  }

  /// Runs `collective()` (one collective call of this rank), timing it. On every exchange_every-th
  /// call, exchanges timings and returns the detector's verdict (also kept in suspect()). The
  /// collective's exceptions pass through unchanged and the call is not recorded.
  template <class F>
  std::optional<slow_rank_evidence> run(F&& collective) {
    const auto start = std::chrono::steady_clock::now();
    std::forward<F>(collective)();
    local_.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (local_.size() < every_) return std::nullopt;
    const std::size_t p = static_cast<std::size_t>(t_.size());
    all_.assign(every_ * p, 0.0);
    options o;
    o.channel = channel_;
    allgather(t_, std::span<const double>(local_), std::span<double>(all_), o);
    local_.clear();
    std::vector<double> step(p);
    for (std::size_t s = 0; s < every_; ++s) {
      for (std::size_t r = 0; r < p; ++r) step[r] = all_[r * every_ + s];
      detector_.observe(step);
    }
    verdict_ = detector_.suspect();
    return verdict_;
  }

  /// The verdict of the last exchange.
  const std::optional<slow_rank_evidence>& suspect() const noexcept { return verdict_; }
  const slow_rank_detector& detector() const noexcept { return detector_; }

 private:
  Tr& t_;
  std::size_t every_;
  std::uint32_t channel_;
  slow_rank_detector detector_;
  std::vector<double> local_, all_;
  std::optional<slow_rank_evidence> verdict_;
};

}  // namespace weft::comm::fault

// Backup workers (Chen, Pan, Monga, Bengio, Jozefowicz, "Revisiting distributed synchronous SGD",
// 2016): wait for the fastest n - b workers and drop the rest. The dynamic variant chooses b each
// step from recent latencies (after Xiong et al., "Straggler-resilient distributed machine learning
// with dynamic backup workers", 2021), maximising gradients aggregated per second.
#pragma once

#include <weft/coding/concepts.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <deque>
#include <span>
#include <vector>

namespace weft::coding {

/// Always the same number of backups. Not thread-safe (a plain value); O(1).
class fixed_backup {
 public:
  explicit fixed_backup(std::size_t b) : b_(b) {}
  void observe(std::span<const double>) {}
  /// min(b, n - 1). O(1).
  std::size_t backups(std::size_t n) const { return n == 0 ? 0 : std::min(b_, n - 1); }

 private:
  std::size_t b_;
};

/// Chooses b from a sliding window of observed per-worker latencies: the b in [0, max_backups]
/// maximising (n - b) / mean_over_window(T_(n-b)), the expected number of partial gradients per
/// second when the step ends at the (n - b)-th arrival. Before any observation it returns
/// initial_backups. Not thread-safe (one owner, the aggregating rank). observe O(n log n);
/// backups O(window * max_backups).
class adaptive_backup {
 public:
  /// window: how many past steps to remember (>= 1); max_backups: the most workers it may drop.
  explicit adaptive_backup(std::size_t window = 20, std::size_t max_backups = static_cast<std::size_t>(-1),
                           std::size_t initial_backups = 0)
      : window_(window), max_b_(max_backups), initial_(initial_backups) {
    expects(window >= 1, errc::invalid_argument, "weft::coding::adaptive_backup::adaptive_backup",
            "window must be >= 1 step, got ", window);
  }

  /// Records one step's completion times (seconds, one per worker; +inf for a worker that never
  /// finished). Throws weft::error(invalid_argument) when the count differs from earlier steps or
  /// a time is negative or NaN; the window is unchanged then.
  void observe(std::span<const double> latencies) {
    constexpr const char* where = "weft::coding::adaptive_backup::observe";
    expects(!latencies.empty(), errc::invalid_argument, where, "no latencies given");
    expects(history_.empty() || history_.front().size() == latencies.size(), errc::invalid_argument, where, "got ",
            latencies.size(), " latencies, earlier steps had ", history_.empty() ? 0 : history_.front().size());
    for (std::size_t i = 0; i < latencies.size(); ++i)
      expects(latencies[i] >= 0.0, errc::invalid_argument, where, "latency of worker ", i, " is ", latencies[i],
              "; must be >= 0");
    std::vector<double> sorted(latencies.begin(), latencies.end());
    std::sort(sorted.begin(), sorted.end());
    history_.push_back(std::move(sorted));
    if (history_.size() > window_) history_.pop_front();
  }

  /// The number of backups for the next step of n workers (< n).
  std::size_t backups(std::size_t n) const {
    if (n == 0) return 0;
    if (history_.empty() || history_.front().size() != n) return std::min(initial_, n - 1);
    const std::size_t limit = std::min(max_b_, n - 1);
    std::size_t best_b = 0;
    double best_rate = -1.0;
    for (std::size_t b = 0; b <= limit; ++b) {
      double mean = 0;
      for (const auto& step : history_) mean += step[n - b - 1];
      mean /= static_cast<double>(history_.size());
      const double rate = mean > 0 ? static_cast<double>(n - b) / mean : static_cast<double>(n - b) * 1e300;
      if (rate > best_rate) {
        best_rate = rate;
        best_b = b;
      }
    }
    return best_b;
  }

  std::size_t observed_steps() const noexcept { return history_.size(); }

 private:
  std::size_t window_;
  std::size_t max_b_;
  std::size_t initial_;
  std::deque<std::vector<double>> history_;  // invariant: each sorted ascending, all the same size
};

static_assert(backup_policy<fixed_backup>);
static_assert(backup_policy<adaptive_backup>);

}  // namespace weft::coding

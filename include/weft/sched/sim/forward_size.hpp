// The forward-pass size at which a model's token throughput saturates: the fixed pass size of
// DeepSpeed-FastGen's Dynamic SplitFuse (Holmes et al., arXiv 2401.08671, 2024, §3A, insight 2: below it
// the pass is bound by reading the weights and throughput grows with tokens; above it, by compute).
#pragma once

#include <weft/core/error.hpp>
#include <weft/sched/sim/cost_model.hpp>

#include <cstdint>

namespace weft::sched::sim {

/// The answer of saturating_forward_tokens. A plain value: thread-safe to copy.
struct forward_size {
  std::int64_t tokens = 0;          ///< the smallest pass reaching the asked share of the peak
  double tokens_per_s = 0.0;        ///< throughput of a pass of `tokens` tokens
  double peak_tokens_per_s = 0.0;   ///< the best throughput of any pass up to max_tokens
  std::int64_t peak_at_tokens = 0;  ///< the pass size of that peak
};

/// The smallest pass of at most max_tokens tokens whose throughput (tokens / cost_model::iteration_s)
/// is at least `share` of the best pass's. A pass here is one request's tokens attending only to
/// themselves and each other — FastGen's observation is that token count, not composition, sets a
/// pass's time; attention over long contexts adds to every pass alike. The engine's per-iteration CPU
/// time counts (it is what small passes amortise badly). Throws weft::error(invalid_argument) unless
/// share is in (0, 1] and max_tokens in [1, 2^20]. O(max_tokens · log profile points). Thread-safe.
inline forward_size saturating_forward_tokens(const cost_model& m, double share = 0.9,
                                              std::int64_t max_tokens = 16384) {
  constexpr const char* where = "weft::sched::sim::saturating_forward_tokens";
  expects(share > 0.0 && share <= 1.0, errc::invalid_argument, where, "share must be in (0, 1], got ", share);
  expects(max_tokens >= 1 && max_tokens <= (std::int64_t{1} << 20), errc::invalid_argument, where,
          "max_tokens must be in [1, 2^20], got ", max_tokens);
  const auto throughput = [&](std::int64_t t) {
    const double n = static_cast<double>(t);
    const double s = m.iteration_s(iteration_shape{n, n * (n + 1) / 2, n, 1});
    return s > 0 ? n / s : 0.0;
  };
  forward_size r;
  for (std::int64_t t = 1; t <= max_tokens; ++t) {
    const double f = throughput(t);
    if (f > r.peak_tokens_per_s) {
      r.peak_tokens_per_s = f;
      r.peak_at_tokens = t;
    }
  }
  for (std::int64_t t = 1; t <= max_tokens; ++t) {
    const double f = throughput(t);
    if (f >= share * r.peak_tokens_per_s) {
      r.tokens = t;
      r.tokens_per_s = f;
      break;
    }
  }
  return r;
}

}  // namespace weft::sched::sim

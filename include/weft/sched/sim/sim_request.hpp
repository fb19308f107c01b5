// What the simulator replays: a scheduler request plus the output length only the simulated engine
// knows, the bounds every workload (generated or read from a trace) must respect, and their check.
#pragma once

#include <weft/core/checked.hpp>
#include <weft/sched/request.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace weft::sched::sim {

/// A request plus what only the simulated engine knows: its true output length.
struct sim_request {
  request req;
  std::int64_t output_tokens = 1;  ///< >= 1
};

/// Requests sorted by arrival (ties: id). Generators and readers return this.
using workload = std::vector<sim_request>;

/// The longest prompt, and the longest output, a workload may hold: 2^24 = 16,777,216 tokens, above
/// every context window in use, and small enough that no sum of a request's lengths, generated tokens
/// or KV blocks can overflow 64-bit arithmetic anywhere in the scheduler or the simulator. Trace
/// readers reject longer rows (naming file, line and column); generators clamp to it.
inline constexpr std::int64_t max_request_tokens = std::int64_t{1} << 24;

/// The latest arrival a workload may hold, in seconds (about 31.7 years): arrivals read or scaled
/// beyond it (or to infinity) are rejected rather than silently becoming Inf or NaN.
inline constexpr double max_arrival_s = 1e9;

/// Throws weft::error(invalid_argument) naming the request and the rule when w is not a valid
/// workload: every request valid (sched::validate), prompt and output within max_request_tokens,
/// output >= 1, arrivals finite in [0, max_arrival_s] and sorted. Duplicate ids are the simulator's
/// check (it indexes them). O(n). Thread-safe.
inline void validate(const workload& w, const char* where) {
  for (std::size_t i = 0; i < w.size(); ++i) {
    const sim_request& s = w[i];
    sched::validate(s.req, where);
    expects(s.output_tokens >= 1 && s.output_tokens <= max_request_tokens, errc::invalid_argument, where, "request ",
            s.req.id, ": output_tokens must be in [1, ", max_request_tokens, "], got ", s.output_tokens);
    check_limit(s.req.prompt_tokens, max_request_tokens, where, "prompt_tokens");
    expects(s.req.arrival_s <= max_arrival_s, errc::invalid_argument, where, "request ", s.req.id, ": arrival_s ",
            s.req.arrival_s, " is beyond max_arrival_s (", max_arrival_s, ")");
    expects(i == 0 || w[i - 1].req.arrival_s <= s.req.arrival_s, errc::invalid_argument, where,
            "workload must be sorted by arrival; request ", s.req.id, " at ", s.req.arrival_s, " follows one at ",
            i == 0 ? 0.0 : w[i - 1].req.arrival_s);
  }
}

namespace detail {

// Stable sort by arrival, then ids 1..n in that order.
inline void sort_and_number(workload& w) {
  std::stable_sort(w.begin(), w.end(),
                   [](const sim_request& a, const sim_request& b) { return a.req.arrival_s < b.req.arrival_s; });
  for (std::size_t i = 0; i < w.size(); ++i) w[i].req.id = request_id(i + 1);
}

}  // namespace detail

}  // namespace weft::sched::sim

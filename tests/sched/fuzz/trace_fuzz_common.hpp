// Shared by the trace-reader fuzz harnesses: what every workload a reader returns must satisfy
// (lengths within max_request_tokens, arrivals finite, sorted and within max_arrival_s). A broken
// invariant aborts, which libFuzzer reports as a finding.
#pragma once

#include <weft/sched/sim/sim_request.hpp>

#include <cmath>
#include <cstdlib>

inline void check_workload(const weft::sched::sim::workload& w) {
  using namespace weft::sched::sim;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const auto& r = w[i];
    const bool ok = r.req.prompt_tokens >= 1 && r.req.prompt_tokens <= max_request_tokens && r.output_tokens >= 1 &&
                    r.output_tokens <= max_request_tokens && std::isfinite(r.req.arrival_s) && r.req.arrival_s >= 0.0 &&
                    r.req.arrival_s <= max_arrival_s && (i == 0 || w[i - 1].req.arrival_s <= r.req.arrival_s);
    if (!ok) std::abort();
  }
}

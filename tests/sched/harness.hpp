// A tiny engine for scheduler tests: submits requests, runs schedule/complete with the true output
// lengths, and lets the test inspect every batch.
#pragma once

#include <weft/sched/concepts.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace weft::sched::test {

struct job {
  request req;
  std::int64_t output = 1;  // true output length
};

struct outcome {
  std::int64_t iterations = 0;
  std::int64_t completed = 0;
  std::int64_t aborted = 0;
  std::int64_t empty_iterations_with_work = 0;
};

/// Runs every job (all submitted before the first iteration) to completion or max_iterations.
/// on_batch(batch, scheduler) is called after each schedule().
template <class S, class F>
outcome run_jobs(S& s, const std::vector<job>& jobs, F&& on_batch, std::int64_t max_iterations = 1000000) {
  std::unordered_map<request_id, std::int64_t> remaining;
  for (const auto& j : jobs) {
    remaining[j.req.id] = j.output;
    REQUIRE(s.submit(j.req, 0.0));
  }
  outcome out;
  std::vector<request_id> finished;
  while (!s.idle() && out.iterations < max_iterations) {
    const batch& b = s.schedule(static_cast<double>(out.iterations));
    on_batch(b, s);
    ++out.iterations;
    if (b.empty()) {
      ++out.empty_iterations_with_work;
      continue;
    }
    out.aborted += static_cast<std::int64_t>(b.aborted.size());
    finished.clear();
    for (const auto& e : b.entries)
      if (e.emits_token && --remaining[e.id] == 0) finished.push_back(e.id);
    out.completed += static_cast<std::int64_t>(finished.size());
    s.complete(finished);
  }
  return out;
}

}  // namespace weft::sched::test

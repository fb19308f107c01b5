// A tiny engine for scheduler tests: submits requests, runs schedule/complete with the true output
// lengths (and a made-up sampled token per emitting entry, for requests with token ids), and lets the
// test inspect every batch. Also the KV manager configuration the tests share.
#pragma once

#include <weft/kv/kv_manager.hpp>
#include <weft/sched/concepts.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace weft::sched::test {

/// weft::kv's manager with `blocks` usable device blocks of 16 tokens and `host` host blocks.
inline weft::kv::kv_manager<> kv_of(std::int64_t blocks, std::int64_t host = 0,
                                    std::size_t copy_unit_blocks = 1u << 20) {
  weft::kv::kv_config c;
  c.num_blocks = static_cast<std::size_t>(blocks) + 1;  // + the null block
  c.host_blocks = host == 0 ? 0 : static_cast<std::size_t>(host) + 1;
  c.block_size = 16;
  c.bytes_per_token = 100;
  c.max_copy_unit_blocks = copy_unit_blocks;
  return weft::kv::kv_manager<>(c);
}

/// The token a test engine "samples" for request id at its n-th output: any deterministic value.
inline token_id sampled_token(request_id id, std::int64_t n) {
  return static_cast<token_id>((id.value() * 7919 + static_cast<std::uint64_t>(n) * 104729) % 50000);
}

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
  std::vector<token_id> decoded;
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
    decoded.clear();
    for (const auto& e : b.entries) {
      decoded.push_back(e.emits_token ? sampled_token(e.id, remaining[e.id]) : -1);
      if (e.emits_token && --remaining[e.id] == 0) finished.push_back(e.id);
    }
    out.completed += static_cast<std::int64_t>(finished.size());
    s.complete(finished, decoded);
  }
  return out;
}

}  // namespace weft::sched::test

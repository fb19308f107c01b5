// VTC's fairness guarantee (Sheng et al., OSDI 2024, Theorem 4.3) checked on random workloads through
// the real iteration scheduler: while every client is backlogged, the weighted service of any two
// clients differs by at most 2 * U. FCFS breaks the same bound on the same workloads.
#include "harness.hpp"

#include <weft/sched/fcfs_queue.hpp>
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/vtc_queue.hpp>

#include <algorithm>
#include <map>
#include <random>

using namespace weft::sched;

namespace {

struct fairness_run {
  double max_difference = 0.0;  // max over iterations of (max - min) service among backlogged clients
  double max_single_charge = 0.0;
  double paper_bound = 0.0;  // 2 * max(w_in * L_in, w_out * M)
  std::int64_t backlogged_iterations = 0;
};

template <class Queue>
fairness_run run_overload(std::uint32_t seed, Queue queue, std::int64_t kv_blocks) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> in_len(1, 256), out_len(1, 256);
  const service_weights w{};
  // Client 0 floods (its 300 requests arrive first); clients 1..3 send 60 each just after.
  std::vector<weft_test::job> jobs;
  std::uint64_t id = 1;
  std::int64_t max_in = 0, max_out = 0;
  auto add = [&](std::uint32_t client, double t) {
    weft_test::job j;
    j.req.id = request_id(id++);
    j.req.client = client_id(client);
    j.req.prompt_tokens = in_len(rng);
    j.req.arrival_s = t;
    j.output = out_len(rng);
    max_in = std::max(max_in, j.req.prompt_tokens);
    max_out = std::max(max_out, j.output);
    jobs.push_back(j);
  };
  for (int i = 0; i < 300; ++i) add(0, 0.0);
  for (int i = 0; i < 60; ++i)
    for (std::uint32_t c = 1; c <= 3; ++c) add(c, 0.001);

  // KV for M = 16 * kv_blocks tokens, continuous batching (whole-prompt prefills, the paper's setting).
  iteration_scheduler<Queue> s(continuous_batching(16, 4096), std::move(queue), weft_test::kv_of(kv_blocks));

  std::map<request_id, std::uint32_t> client_of;
  std::map<request_id, std::int64_t> prompt_of;
  std::map<std::uint32_t, std::int64_t> unadmitted;
  for (const auto& j : jobs) {
    client_of[j.req.id] = j.req.client.value();
    prompt_of[j.req.id] = j.req.prompt_tokens;
    ++unadmitted[j.req.client.value()];
  }
  std::map<std::uint32_t, double> service;
  std::map<request_id, bool> admitted;
  fairness_run result;
  result.max_single_charge = w.input * static_cast<double>(max_in) + w.output * static_cast<double>(max_out);
  result.paper_bound =
      2.0 * std::max(w.input * static_cast<double>(max_in), w.output * static_cast<double>(16 * kv_blocks));
  bool all_backlogged = true;
  weft_test::run_jobs(s, jobs, [&](const batch& b, auto&) {
    if (!all_backlogged) return;
    for (const auto& e : b.entries) {
      const std::uint32_t c = client_of[e.id];
      // Service as VTC defines it: each prompt token once (a recompute after preemption is the
      // server's cost, not the client's gain), each output token once.
      if (!admitted[e.id]) {
        admitted[e.id] = true;
        --unadmitted[c];
        service[c] += w.input * static_cast<double>(prompt_of[e.id]);
      }
      if (e.emits_token) service[c] += w.output;
    }
    for (const auto& [c, n] : unadmitted)
      if (n == 0) all_backlogged = false;  // this client's backlog ended: the interval is over
    if (!all_backlogged) return;
    double lo = 1e300, hi = 0.0;
    for (std::uint32_t c = 0; c <= 3; ++c) {
      lo = std::min(lo, service[c]);
      hi = std::max(hi, service[c]);
    }
    result.max_difference = std::max(result.max_difference, hi - lo);
    ++result.backlogged_iterations;
  });
  return result;
}

}  // namespace

TEST_CASE("VTC keeps backlogged clients within 2x the max request charge; FCFS does not", "[sched][vtc][fairness]") {
  // Ample KV (8192 tokens, 16 running): no preemption, the tight bound 2 * (w_in L_in + w_out L_out).
  for (std::uint32_t seed = 1; seed <= 6; ++seed) {
    CAPTURE(seed);
    const fairness_run vtc = run_overload(seed, vtc_queue{}, 512);
    const fairness_run fcfs = run_overload(seed, fcfs_queue{}, 512);
    CAPTURE(vtc.max_difference, fcfs.max_difference, vtc.max_single_charge, vtc.paper_bound);
    REQUIRE(vtc.backlogged_iterations > 50);
    CHECK(vtc.max_difference <= 2.0 * vtc.max_single_charge);
    CHECK(vtc.max_difference <= vtc.paper_bound);
    CHECK(fcfs.max_difference > 2.0 * fcfs.max_single_charge);
    CHECK(fcfs.max_difference > fcfs.paper_bound);
  }
}

TEST_CASE("VTC stays within the paper's bound when KV pressure forces preemptions", "[sched][vtc][fairness]") {
  // Tight KV (2048 tokens): recompute preemptions readmit requests ahead of the queue, which the
  // theorem's U = max(w_in L_in, w_out M) covers (M = tokens the batch can hold).
  for (std::uint32_t seed = 1; seed <= 6; ++seed) {
    CAPTURE(seed);
    const fairness_run vtc = run_overload(seed, vtc_queue{}, 128);
    const fairness_run fcfs = run_overload(seed, fcfs_queue{}, 128);
    CAPTURE(vtc.max_difference, fcfs.max_difference, vtc.paper_bound);
    REQUIRE(vtc.backlogged_iterations > 50);
    CHECK(vtc.max_difference <= vtc.paper_bound);
    CHECK(fcfs.max_difference > fcfs.paper_bound);
  }
}

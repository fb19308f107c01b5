#include <weft/sched/any_batch_scheduler.hpp>
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/sim/cluster.hpp>
#include <weft/sched/sim/simulator.hpp>
#include <weft/sched/vtc_queue.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <cmath>
#include <sstream>

using namespace weft::sched;
using namespace weft::sched::sim;

namespace {

block_kv_manager kv_for(const cost_model& m, std::int64_t host_blocks = 0) {
  block_kv_manager::options o;
  o.block_tokens = 16;
  o.device_blocks = m.kv_blocks(16);
  o.host_blocks = host_blocks;
  o.bytes_per_token = m.kv_bytes_per_token();
  return block_kv_manager(o);
}

generator_options load(std::uint64_t seed, std::size_t n, double rate) {
  generator_options g;
  g.seed = seed;
  g.requests = n;
  g.rate_per_s = rate;
  g.prompt = {1024.0, 1.0, 16, 8000};
  g.output = {128.0, 1.0, 1, 1024};
  return g;
}

std::string records_csv(const sim_result& r) {
  std::ostringstream out;
  out.precision(17);
  write_records_csv(out, r.records);
  write_summary_csv(out, "x", r.stats, true);
  return out.str();
}

}  // namespace

TEST_CASE("simulator: same seed, same bits; another seed, other bits", "[sched][sim][determinism]") {
  const cost_model m(llama2_7b_a100());
  const workload w = gamma_workload(load(5, 300, 8.0), 3.0);
  sim_options o;
  o.time_noise_cv = 0.1;
  o.seed = 42;
  auto run = [&](std::uint64_t seed) {
    iteration_scheduler<vtc_queue> s(chunked_prefill(512, 128), vtc_queue{}, kv_for(m));
    sim_options oo = o;
    oo.seed = seed;
    return records_csv(simulate(s, w, m, oo));
  };
  const std::string a = run(42), b = run(42), c = run(43);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(gamma_workload(load(5, 300, 8.0), 3.0).size() == 300);
  const workload w2 = gamma_workload(load(5, 300, 8.0), 3.0);
  for (std::size_t i = 0; i < w.size(); ++i) {
    REQUIRE(w[i].req.arrival_s == w2[i].req.arrival_s);
    REQUIRE(w[i].output_tokens == w2[i].output_tokens);
  }
}

TEST_CASE("simulator: chunked prefill lowers p99 TBT and completes everything", "[sched][sim][chunked]") {
  const cost_model m(llama2_7b_a100());
  const workload w = poisson_workload(load(9, 400, 6.0));
  iteration_scheduler<> plain(continuous_batching(128, 16384), fcfs_queue{}, kv_for(m));
  const std::int64_t budget = token_budget_for_tbt(m, 0.2, 64, 1500.0);
  CAPTURE(budget);
  REQUIRE(budget >= 128);
  iteration_scheduler<> chunked(chunked_prefill(budget, 128), fcfs_queue{}, kv_for(m));
  const sim_result a = simulate(plain, w, m);
  const sim_result b = simulate(chunked, w, m);
  CAPTURE(a.stats.tbt_p99, b.stats.tbt_p99, a.stats.ttft_p50, b.stats.ttft_p50);
  CHECK(a.stats.finished == 400);
  CHECK(b.stats.finished == 400);
  CHECK(b.stats.tbt_p99 < a.stats.tbt_p99);
  CHECK(a.idle_with_work == 0);
  CHECK(b.idle_with_work == 0);  // work conservation
}

TEST_CASE("simulator: VTC narrows the service gap of an overloaded server", "[sched][sim][vtc]") {
  const cost_model m(llama2_7b_a100());
  generator_options g = load(3, 3000, 1.0);
  g.prompt = {512.0, 0.5, 16, 4000};
  // Tenant 0 floods at 24 req/s, tenants 1 and 2 send 12 req/s each: all beyond their fair share.
  const workload w = on_off_workload(g, {{24.0, 1e9, 0.0}, {12.0, 1e9, 0.0}, {12.0, 1e9, 0.0}}, 120.0);
  iteration_scheduler<fcfs_queue> f(chunked_prefill(2048, 128), fcfs_queue{}, kv_for(m));
  iteration_scheduler<vtc_queue> v(chunked_prefill(2048, 128), vtc_queue{}, kv_for(m));
  sim_options o;
  o.max_time_s = 120.0;
  const sim_result a = simulate(f, w, m, o);
  const sim_result b = simulate(v, w, m, o);
  CAPTURE(a.stats.max_service_gap, b.stats.max_service_gap, a.stats.jain_index, b.stats.jain_index);
  CHECK(b.stats.max_service_gap < a.stats.max_service_gap);
  CHECK(b.stats.jain_index > a.stats.jain_index);
  CHECK(b.stats.jain_index > 0.95);
}

TEST_CASE("simulator: swap preemption under a small cache still finishes", "[sched][sim][preemption]") {
  const cost_model m(llama2_7b_a100());
  block_kv_manager::options kv;
  kv.device_blocks = 600;  // ~9.6k tokens
  kv.host_blocks = 4000;
  kv.block_tokens = 16;
  kv.copy_unit_blocks = 16;
  kv.bytes_per_token = m.kv_bytes_per_token();
  scheduler_options so = chunked_prefill(512, 64);
  so.preemption = preemption_mode::swap;
  iteration_scheduler<> s(so, fcfs_queue{}, block_kv_manager(kv));
  generator_options g = load(4, 150, 20.0);
  g.output = {400.0, 0.5, 1, 1500};
  const sim_result r = simulate(s, poisson_workload(g), m);
  CHECK(r.stats.finished == 150);
  CHECK(r.stats.swaps > 0);
  CHECK(r.idle_with_work == 0);
}

TEST_CASE("generators are seeded, valid and shaped as asked", "[sched][sim][generators]") {
  const workload p = poisson_workload(load(1, 5000, 10.0));
  CHECK(p.back().req.arrival_s / 5000.0 == Approx(0.1).epsilon(0.05));
  const workload s = session_workload(load(2, 200, 5.0), 4, 10.0, 128);
  REQUIRE(s.size() == 200);
  std::size_t with_history = 0;
  for (const auto& r : s) {
    CHECK(r.req.prefix_id != 0);
    CHECK(r.req.prefix_tokens >= 128);
    CHECK(r.req.prefix_tokens <= r.req.prompt_tokens);
    with_history += r.req.prefix_tokens > 128;
  }
  CHECK(with_history > 100);
  CHECK_THROWS_AS(poisson_workload(load(1, 10, 0.0)), weft::error);
  generator_options bad = load(1, 10, 1.0);
  bad.output.min = 0;
  CHECK_THROWS_AS(poisson_workload(bad), weft::error);
  CHECK_THROWS_AS(gamma_workload(load(1, 10, 1.0), -1.0), weft::error);
}

TEST_CASE("cost model: roofline fallback, explicit attention, engine overheads, budgets", "[sched][sim][cost]") {
  const cost_model m(llama2_7b_a100());
  const cost_params& p = m.params();
  // One decode over 1000 tokens of context: overheads + 32 layers of (weights read + KV read) + LM head.
  const double w = 4096.0 * (4096 + 2 * 4096) + 4096.0 * 4096 + 3.0 * 4096 * 11008;
  const double linear = p.layer_overhead_s + w * 2 / (2.039e12 * p.memory_efficiency);
  const double attention =
      p.attention_overhead_s + std::max(4.0 * 4096 * 1000 / (312e12 * p.attention_compute_efficiency),
                                        1000.0 * 524288 / 32 / (2.039e12 * p.attention_memory_efficiency));
  const double head = 32000.0 * 4096 * 2 / (2.039e12 * p.memory_efficiency);
  CHECK(m.iteration_s(1, 1000, 1000) ==
        Approx(p.iteration_overhead_s + p.per_request_overhead_s + 32 * (linear + attention) + head).epsilon(1e-9));
  // 4096 prefill tokens: the linear part is compute-bound.
  CHECK(m.roofline_linear_layer_s(4096) == Approx(p.layer_overhead_s + 2 * w * 4096 / (312e12 * p.compute_efficiency)));
  CHECK(m.kv_bytes_per_token() == 524288);
  CHECK(cost_model(llama2_70b_a100_tp4()).kv_bytes_per_token() == 327680);
  CHECK(cost_model(mistral_7b_a100()).kv_bytes_per_token() == 131072);
  CHECK(cost_model(llama2_7b_h100()).iteration_s(1, 1000, 1000) < m.iteration_s(1, 1000, 1000));
  const std::int64_t loose = token_budget_for_tbt(m, 0.2, 32, 1000), tight = token_budget_for_tbt(m, 0.08, 32, 1000);
  CHECK(loose > tight);
  CHECK(tight >= 32);
  CHECK_THROWS_AS(token_budget_for_tbt(m, 0.0, 1, 1), weft::error);
  cost_params too_big = llama2_70b_a100_tp4();
  too_big.tensor_parallel = 1;
  CHECK_THROWS_AS(cost_model(too_big), weft::error);
  cost_params nan = llama2_7b_a100();
  nan.iteration_overhead_s = std::nan("");
  CHECK_THROWS_AS(cost_model(nan), weft::error);
  CHECK(jain_index({1, 1, 1}) == Approx(1.0));
  CHECK(jain_index({1, 0, 0}) == Approx(1.0 / 3));
}

TEST_CASE("token_budget_for_tbt: KV capacity, chunk position, infeasible targets", "[sched][sim][cost][budget]") {
  const cost_model m(mistral_7b_a100());
  tbt_budget_query q;
  q.tbt_target_s = 0.2;
  q.decodes = 32;
  q.mean_context = 1000;
  const tbt_budget start = token_budget_for_tbt(m, q);
  q.prompt_tokens = 6000;  // the last chunk of a 6000-token prompt attends to all of it
  const tbt_budget end = token_budget_for_tbt(m, q);
  CHECK(start.feasible);
  CHECK(end.feasible);
  CHECK(end.token_budget < start.token_budget);
  CHECK(end.iteration_s <= 0.2);
  q.headroom = 0.2;
  CHECK(token_budget_for_tbt(m, q).iteration_s <= 0.16);
  // More decodes than the KV cache holds: priced at what fits, and said.
  q.headroom = 0.0;
  q.decodes = 1000;
  q.mean_context = 6000;
  q.tbt_target_s = 5.0;
  const tbt_budget kv = token_budget_for_tbt(m, q);
  CHECK_FALSE(kv.feasible);
  CHECK(kv.decodes < 1000);
  CHECK(static_cast<double>(kv.decodes) * 6016 <= static_cast<double>(kv.kv_capacity_tokens));
  CHECK_THAT(kv.reason, Catch::Contains("KV cache holds"));
  // A target the decodes alone exceed.
  q.decodes = 64;
  q.mean_context = 1000;
  q.tbt_target_s = 0.01;
  const tbt_budget slow = token_budget_for_tbt(m, q);
  CHECK_FALSE(slow.feasible);
  CHECK(slow.token_budget == 64);
  CHECK_THAT(slow.reason, Catch::Contains("decodes alone"));
}

TEST_CASE("simulator rejects bad workloads", "[sched][sim][errors]") {
  const cost_model m;
  iteration_scheduler<> s(chunked_prefill(512, 64), fcfs_queue{}, kv_for(m));
  workload w = poisson_workload(load(1, 5, 1.0));
  workload unsorted = w;
  std::swap(unsorted[0], unsorted[4]);
  CHECK_THROWS_AS(simulate(s, unsorted, m), weft::error);
  workload zero = w;
  zero[2].output_tokens = 0;
  CHECK_THROWS_AS(simulate(s, zero, m), weft::error);
  sim_options o;
  o.window_s = 0.0;
  CHECK_THROWS_AS(simulate(s, w, m, o), weft::error);
  o = {};
  o.max_time_s = std::nan("");
  CHECK_THROWS_AS(simulate(s, w, m, o), weft::error);
  o = {};
  o.tbt_slo_s = -1.0;
  CHECK_THROWS_AS(simulate(s, w, m, o), weft::error);
  workload huge = w;
  huge[1].req.prompt_tokens = max_request_tokens + 1;
  CHECK_THROWS_AS(simulate(s, huge, m), weft::error);
  workload dup = w;
  dup[3].req.id = dup[2].req.id;
  CHECK_THROWS_AS(simulate(s, dup, m), weft::error);
  CHECK(simulate(s, w, m).stats.finished == 5);  // still usable
}

TEST_CASE("one driver: a single instance equals a one-instance colocated cluster, bit for bit",
          "[sched][sim][driver]") {
  const cost_model m(llama2_7b_a100());
  const workload w = poisson_workload(load(12, 300, 5.0));
  iteration_scheduler<vtc_queue> s(chunked_prefill(512, 128), vtc_queue{}, kv_for(m));
  sim_options o;
  o.time_noise_cv = 0.05;
  const sim_result a = simulate(s, w, m, o);
  cluster_options c;
  c.instances = 1;
  const std::function<std::unique_ptr<iteration_scheduler<vtc_queue>>()> make = [&m] {
    return std::make_unique<iteration_scheduler<vtc_queue>>(chunked_prefill(512, 128), vtc_queue{}, kv_for(m));
  };
  const cluster_result b = simulate_colocated(make, w, m, c, o);
  CHECK(records_csv(a) == records_csv(b.result));
}

TEST_CASE("simulator: first-scheduled time, raw TBT gaps and the share over a TBT SLO", "[sched][sim][metrics]") {
  const cost_model m(llama2_7b_a100());
  const workload w = poisson_workload(load(3, 200, 4.0));
  iteration_scheduler<> s(continuous_batching(128, 16384), fcfs_queue{}, kv_for(m));
  sim_options o;
  o.keep_tbt_gaps = true;
  o.tbt_slo_s = 0.1;
  const sim_result r = simulate(s, w, m, o);
  REQUIRE(r.stats.finished == 200);
  std::size_t tokens = 0, over = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const request_record& rec = r.records[i];
    CHECK(rec.first_scheduled_s >= rec.arrival_s);
    CHECK(rec.first_scheduled_s < rec.first_token_s);
    CHECK(rec.scheduling_delay_s() >= 0.0);
    tokens += static_cast<std::size_t>(rec.output_tokens - 1);
  }
  REQUIRE(r.tbt_gaps.size() == tokens);
  double max_gap = 0;
  for (double g : r.tbt_gaps) {
    over += g > 0.1;
    max_gap = std::max(max_gap, g);
  }
  CHECK(r.stats.tbt_over_slo == Approx(static_cast<double>(over) / static_cast<double>(tokens)));
  CHECK(over > 0);  // Orca's whole-prompt prefills stall decodes past 100 ms
  double max_rec = 0;
  for (const auto& rec : r.records) max_rec = std::max(max_rec, rec.max_tbt_s);
  CHECK(max_gap == max_rec);
  CHECK(r.stats.sched_delay_p99 >= r.stats.sched_delay_p50);
  CHECK(r.stats.never_scheduled == 0);
}

TEST_CASE("simulator runs any batch_scheduler, including the type-erased one", "[sched][sim][driver]") {
  const cost_model m(llama2_7b_a100());
  const workload w = poisson_workload(load(8, 50, 2.0));
  any_batch_scheduler s(std::make_unique<iteration_scheduler<>>(chunked_prefill(512, 64), fcfs_queue{}, kv_for(m)));
  CHECK(simulate(s, w, m).stats.finished == 50);
}

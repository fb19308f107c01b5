#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/sim/simulator.hpp>
#include <weft/sched/vtc_queue.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
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
  const std::int64_t budget = token_budget_for_tbt(m, 0.05, 64, 1500.0);
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

TEST_CASE("cost model is a roofline: decode memory-bound, prefill compute-bound", "[sched][sim][cost]") {
  const cost_model m(llama2_7b_a100());
  // One decode: weights / (bandwidth * efficiency) + overhead.
  const double decode = m.iteration_s(1, 1000, 1000);
  CHECK(decode == Approx(2e-3 + (6.74e9 * 2 + 1000 * 524288.0) / (2.039e12 * 0.8)).epsilon(1e-9));
  // 4096 prefill tokens: compute-bound.
  const double prefill = m.iteration_s(4096, 4096.0 * 4097 / 2, 4096);
  CHECK(prefill > 2e-3 + 2 * 6.74e9 * 4096 / (312e12 * 0.5));
  CHECK(m.kv_bytes_per_token() == 524288);
  CHECK(cost_model(llama2_70b_a100_tp4()).kv_bytes_per_token() == 327680);
  CHECK(cost_model(llama2_7b_h100()).iteration_s(1, 1000, 1000) < decode);
  const std::int64_t loose = token_budget_for_tbt(m, 0.2, 32, 1000), tight = token_budget_for_tbt(m, 0.03, 32, 1000);
  CHECK(loose > tight);
  CHECK(tight >= 32);
  CHECK_THROWS_AS(token_budget_for_tbt(m, 0.0, 1, 1), weft::error);
  cost_params too_big = llama2_70b_a100_tp4();
  too_big.tensor_parallel = 1;
  CHECK_THROWS_AS(cost_model(too_big), weft::error);
  CHECK(jain_index({1, 1, 1}) == Approx(1.0));
  CHECK(jain_index({1, 0, 0}) == Approx(1.0 / 3));
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
  CHECK(simulate(s, w, m).stats.finished == 5);  // still usable
}

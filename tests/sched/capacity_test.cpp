#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/prefill_first_scheduler.hpp>
#include <weft/sched/sim/capacity.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

using namespace weft::sched;
using namespace weft::sched::sim;

namespace {
// A fake deployment whose TBT p99 is 10 ms per req/s and whose median delay jumps above 12 req/s.
sim_result fake(double rate) {
  sim_result r;
  r.stats.tbt_p99 = 0.01 * rate;
  r.stats.sched_delay_p50 = rate > 12.0 ? 5.0 : 0.1;
  return r;
}
}  // namespace

TEST_CASE("capacity search brackets and bisects to the tolerance", "[sched][capacity]") {
  capacity_slo slo;
  slo.tbt_s = 0.1;
  capacity_options o;
  o.start_rate_per_s = 1.0;
  std::ostringstream progress;
  o.on_step = print_capacity_progress(progress, "fake");
  const capacity_result r = max_rate_under_slo(fake, slo, o);
  REQUIRE(r.found);
  CHECK(r.max_rate_per_s <= 10.0);
  CHECK(r.max_rate_per_s >= 10.0 / (1 + o.tolerance));
  CHECK(r.first_failing_rate_per_s > 10.0);
  CHECK(r.binding == "TBT p99");
  CHECK(r.steps.size() < 15);
  CHECK_THAT(progress.str(),
             Catch::Contains("capacity fake step  1") && Catch::Contains("meets") && Catch::Contains("fails: TBT p99"));
  // Starting above the capacity halves down first; a second bound binds when tighter.
  o.start_rate_per_s = 100.0;
  o.on_step = nullptr;
  slo.tbt_s = 0.2;
  slo.sched_delay_s = 2.0;
  const capacity_result s = max_rate_under_slo(fake, slo, o);
  CHECK(s.max_rate_per_s <= 12.0);
  CHECK(s.max_rate_per_s >= 12.0 / (1 + o.tolerance));
  CHECK(s.binding == "scheduling delay p50");  // TBT fails only above 20 req/s
  // No capacity above the minimum; capacity beyond the maximum.
  slo.tbt_s = 1e-6;
  slo.sched_delay_s = 0;
  CHECK_FALSE(max_rate_under_slo(fake, slo, o).found);
  slo.tbt_s = 1e9;
  o.max_rate_per_s = 1000.0;
  const capacity_result big = max_rate_under_slo(fake, slo, o);
  CHECK(big.max_rate_per_s == 1000.0);
  CHECK(big.first_failing_rate_per_s == 0.0);
}

TEST_CASE("capacity search rejects bad bounds", "[sched][capacity][errors]") {
  capacity_slo none;
  CHECK_THROWS_AS(max_rate_under_slo(fake, none), weft::error);
  capacity_slo slo;
  slo.tbt_s = 0.1;
  slo.tbt_quantile = 0.95;
  CHECK_THROWS_AS(max_rate_under_slo(fake, slo), weft::error);
  slo.tbt_quantile = 0.99;
  capacity_options o;
  o.tolerance = 0.0;
  CHECK_THROWS_AS(max_rate_under_slo(fake, slo, o), weft::error);
  o = {};
  o.start_rate_per_s = 0.0;
  CHECK_THROWS_AS(max_rate_under_slo(fake, slo, o), weft::error);
  slo.tbt_s = std::nan("");
  CHECK_THROWS_AS(max_rate_under_slo(fake, slo), weft::error);
}

TEST_CASE("capacity of Sarathi vs vLLM-style scheduling under a strict TBT SLO is deterministic",
          "[sched][capacity][sim]") {
  const cost_model m(mistral_7b_a100());
  std::vector<length_pair> pairs;
  for (int i = 0; i < 40; ++i) pairs.push_back({200 + (i * 397) % 3000, 50 + (i * 131) % 400});
  pairs_options a;
  a.seed = 9;
  a.requests = 150;
  capacity_slo slo;
  slo.tbt_s = 0.15;
  slo.sched_delay_s = 2.0;
  capacity_options o;
  o.start_rate_per_s = 0.5;
  o.tolerance = 0.05;
  block_kv_manager::options kv;
  kv.device_blocks = m.kv_blocks(16);
  const std::function<std::unique_ptr<iteration_scheduler<>>()> sarathi = [&] {
    return std::make_unique<iteration_scheduler<>>(chunked_prefill(512, 128), fcfs_queue{}, block_kv_manager(kv));
  };
  const std::function<std::unique_ptr<prefill_first_scheduler<>>()> vllm = [&] {
    return std::make_unique<prefill_first_scheduler<>>(vllm_baseline(128, 8192), fcfs_queue{}, block_kv_manager(kv));
  };
  const capacity_result s = max_rate_under_slo(sarathi, pairs, a, m, slo, o);
  const capacity_result v = max_rate_under_slo(vllm, pairs, a, m, slo, o);
  CAPTURE(s.max_rate_per_s, v.max_rate_per_s, s.binding, v.binding);
  REQUIRE(s.found);
  CHECK(s.max_rate_per_s > v.max_rate_per_s);
  const capacity_result again = max_rate_under_slo(sarathi, pairs, a, m, slo, o);
  CHECK(again.max_rate_per_s == s.max_rate_per_s);
  CHECK(again.steps.size() == s.steps.size());
  // Trace-driven: the same workload replayed at scaled times.
  a.rate_per_s = 1.0;
  const workload trace = pairs_workload(pairs, a);
  const capacity_result t = max_rate_under_slo(sarathi, trace, m, slo, o);
  CHECK(t.found);
}

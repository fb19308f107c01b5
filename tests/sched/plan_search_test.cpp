// APEX-style parallel plan search (sim/plan_search.hpp): the plan space, infeasible plans named, the
// ranking equal to each plan's own capacity search, and bad input refused.
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/sim/plan_search.hpp>

#include <catch2/catch.hpp>

#include <string>

using namespace weft::sched;
using namespace weft::sched::sim;

namespace {

workload small_workload(double rate) {
  generator_options g;
  g.seed = 11;
  g.requests = 48;
  g.rate_per_s = rate;
  g.clients = 1;
  g.prompt = {256.0, 0.0, 256, 256};
  g.output = {32.0, 0.0, 32, 32};
  return poisson_workload(g);
}

using sched_t = iteration_scheduler<>;

std::unique_ptr<sched_t> make_sched(const cost_model& m) {
  return std::make_unique<sched_t>(chunked_prefill(512, 64), fcfs_queue{},
                                   weft::kv::kv_manager<>(m.kv_manager_config(16)));
}

capacity_slo slo() {
  capacity_slo s;
  s.ttft_s = 1.0;
  s.tpot_s = 0.1;
  s.attainment = 0.9;
  return s;
}

plan_search_options two_gpus() {
  plan_search_options o;
  o.gpus = 2;
  o.tensor_parallel = {1, 2};
  o.pipeline_parallel = {1, 2};
  o.capacity.start_rate_per_s = 2.0;
  o.capacity.tolerance = 0.1;
  return o;
}

}  // namespace

TEST_CASE("enumerate_plans: every split of the budget, disaggregated splits of >= 2 instances", "[sched][apex]") {
  plan_search_options o;
  o.gpus = 8;
  o.tensor_parallel = {1, 2, 4, 8};
  o.pipeline_parallel = {1, 2};
  const auto plans = enumerate_plans(o);
  // (TP, PP) dividing 8: (1,1) 8 inst, (1,2) 4, (2,1) 4, (2,2) 2, (4,1) 2, (4,2) 1, (8,1) 1:
  // colocated 7 plans; splits 7 + 3 + 3 + 1 + 1 = 15.
  CHECK(plans.size() == 22);
  for (const auto& p : plans) {
    CHECK(p.gpus() == 8);
    CHECK(p.prefill_instances < p.instances);
  }
  o.disaggregation = false;
  CHECK(enumerate_plans(o).size() == 7);
  CHECK(parallel_plan{4, 1, 2, 1}.describe() == "TP4 x PP1 x 2 (1 prefill + 1 decode)");
  CHECK(parallel_plan{2, 2, 2, 0}.describe() == "TP2 x PP2 x 2 colocated");
}

TEST_CASE("search_parallel_plans: ranks each plan by its own capacity search", "[sched][apex]") {
  const cost_params base = llama2_7b_a100();
  const auto result = search_parallel_plans<sched_t>(
      base, [](const cost_params& p) { return cost_model(p); }, make_sched, small_workload, slo(), two_gpus());
  // TP1 x 2 colocated, TP1 x 2 split, TP1 x PP2, TP2 x PP1.
  REQUIRE(result.plans.size() == 4);
  REQUIRE(result.best() != nullptr);
  for (std::size_t i = 1; i < result.plans.size(); ++i)
    CHECK(result.plans[i - 1].capacity.max_rate_per_s >= result.plans[i].capacity.max_rate_per_s);
  // The rating of one plan equals a direct capacity search of that deployment.
  const plan_rating* tp2 = result.find(parallel_plan{2, 1, 1, 0});
  REQUIRE(tp2 != nullptr);
  cost_params p = base;
  p.tensor_parallel = 2;
  const cost_model m(p);
  sim_options so;
  so.ttft_slo_s = 1.0;
  so.tpot_slo_s = 0.1;
  const std::function<std::unique_ptr<sched_t>()> fresh = [&] { return make_sched(m); };
  cluster_options one;
  one.instances = 1;
  const capacity_result direct = max_rate_under_slo(
      [&](double rate) { return simulate_colocated<sched_t>(fresh, small_workload(rate), m, one, so).result; }, slo(),
      two_gpus().capacity);
  CHECK(tp2->capacity.max_rate_per_s == direct.max_rate_per_s);
  // Deterministic.
  const auto again = search_parallel_plans<sched_t>(
      base, [](const cost_params& q) { return cost_model(q); }, make_sched, small_workload, slo(), two_gpus());
  for (std::size_t i = 0; i < result.plans.size(); ++i)
    CHECK(again.plans[i].capacity.max_rate_per_s == result.plans[i].capacity.max_rate_per_s);
}

TEST_CASE("search_parallel_plans: plans the cost model refuses are kept, named and last", "[sched][apex]") {
  // 70B on 2 GPUs: TP1 does not fit one GPU, TP1 x PP2 and TP2 do.
  const cost_params base = llama2_70b_a100_tp4();
  plan_search_options o = two_gpus();
  o.disaggregation = false;
  const auto result = search_parallel_plans<sched_t>(
      base, [](const cost_params& p) { return cost_model(p); }, make_sched, small_workload, slo(), o);
  REQUIRE(result.plans.size() == 3);
  const plan_rating& last = result.plans.back();
  CHECK_FALSE(last.feasible);
  CHECK(last.plan.tensor_parallel == 1);
  CHECK(last.plan.pipeline_parallel == 1);
  CHECK_THAT(last.why_not, Catch::Contains("do not fit"));
  CHECK(result.plans.front().feasible);
}

TEST_CASE("plan search: bad input is refused", "[sched][apex]") {
  plan_search_options o;
  o.gpus = 0;
  CHECK_THROWS_WITH(enumerate_plans(o), Catch::Contains("gpus"));
  o.gpus = 5000;
  CHECK_THROWS_AS(enumerate_plans(o), weft::error);
  o.gpus = 8;
  o.tensor_parallel = {0};
  CHECK_THROWS_WITH(enumerate_plans(o), Catch::Contains("tensor_parallel"));
  o.tensor_parallel = {1};
  o.pipeline_parallel = {-2};
  CHECK_THROWS_WITH(enumerate_plans(o), Catch::Contains("pipeline_parallel"));
  const std::function<cost_model(const cost_params&)> none;
  CHECK_THROWS_AS(search_parallel_plans<sched_t>(llama2_7b_a100(), none, make_sched, small_workload, slo(), two_gpus()),
                  weft::error);
  // A plan space with no plan that divides the budget is empty, not an error.
  o.pipeline_parallel = {3};
  o.tensor_parallel = {1};
  CHECK(enumerate_plans(o).empty());
}

// Parallel execution plan search with the serving simulator (Lin et al., "APEX: An Extensible and
// Dynamism-Aware Simulator for Automated Parallel Execution in LLM Serving", arXiv 2411.17651, 2024, §3-4):
// every split of a GPU budget into tensor- and pipeline-parallel instances, replicated (data parallel)
// colocated or as prefill/decode pools, each rated by the capacity search on the real scheduler.
#pragma once

#include <weft/core/error.hpp>
#include <weft/sched/sim/capacity.hpp>
#include <weft/sched/sim/cluster.hpp>
#include <weft/sched/sim/cost_model.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace weft::sched::sim {

/// One way to deploy a model on a GPU budget. A plain value: thread-safe to copy.
struct parallel_plan {
  int tensor_parallel = 1;            ///< GPUs per pipeline stage
  int pipeline_parallel = 1;          ///< stages per instance
  std::size_t instances = 1;          ///< data-parallel instances (replicas)
  std::size_t prefill_instances = 0;  ///< > 0: disaggregated, this many of `instances` only prefill

  bool disaggregated() const noexcept { return prefill_instances > 0; }
  /// GPUs the plan uses. O(1).
  std::size_t gpus() const noexcept {
    return instances * static_cast<std::size_t>(tensor_parallel) * static_cast<std::size_t>(pipeline_parallel);
  }
  /// E.g. "TP4 x PP1 x 2 (1 prefill + 1 decode)". O(1).
  std::string describe() const {
    std::string s = "TP" + std::to_string(tensor_parallel) + " x PP" + std::to_string(pipeline_parallel) + " x " +
                    std::to_string(instances);
    if (disaggregated())
      s += " (" + std::to_string(prefill_instances) + " prefill + " + std::to_string(instances - prefill_instances) +
           " decode)";
    else
      s += " colocated";
    return s;
  }
};

/// The space to search. A plain value: thread-safe to copy.
struct plan_search_options {
  int gpus = 8;  ///< the budget; a plan uses all of it
  std::vector<int> tensor_parallel = {1, 2, 4, 8};
  std::vector<int> pipeline_parallel = {1, 2, 4};
  bool disaggregation = true;  ///< also every prefill/decode split of >= 2 instances
  capacity_options capacity{};
};

/// One rated plan.
struct plan_rating {
  parallel_plan plan;
  bool feasible = false;  ///< the cost model accepted it (weights fit, a profile for its TP degree)
  std::string why_not;    ///< the cost model's error when not feasible
  capacity_result capacity;
  double wall_s = 0.0;  ///< time its capacity search took
};

/// Every plan, rated; feasible ones first, by capacity (descending), ties by fewer instances.
struct plan_search_result {
  std::vector<plan_rating> plans;
  double wall_s = 0.0;
  /// The best feasible plan, if any. O(1).
  const plan_rating* best() const noexcept {
    return !plans.empty() && plans.front().feasible && plans.front().capacity.found ? &plans.front() : nullptr;
  }
  /// The rating of the plan described as p, if it was searched. O(plans).
  const plan_rating* find(const parallel_plan& p) const noexcept {
    for (const plan_rating& r : plans)
      if (r.plan.tensor_parallel == p.tensor_parallel && r.plan.pipeline_parallel == p.pipeline_parallel &&
          r.plan.instances == p.instances && r.plan.prefill_instances == p.prefill_instances)
        return &r;
    return nullptr;
  }
};

/// The plans of o's space that use exactly o.gpus GPUs: for each (TP, PP) with TP · PP dividing the
/// budget, the colocated replicas and, with o.disaggregation, every prefill/decode split. Throws
/// weft::error(invalid_argument) for a budget outside [1, 4096] or a degree < 1. O(|TP| · |PP| · gpus).
/// Thread-safe.
inline std::vector<parallel_plan> enumerate_plans(const plan_search_options& o) {
  constexpr const char* where = "weft::sched::sim::enumerate_plans";
  expects(o.gpus >= 1 && o.gpus <= 4096, errc::invalid_argument, where, "gpus must be in [1, 4096], got ", o.gpus);
  for (int t : o.tensor_parallel)
    expects(t >= 1 && t <= 4096, errc::invalid_argument, where, "tensor_parallel degrees must be in [1, 4096], got ",
            t);
  for (int p : o.pipeline_parallel)
    expects(p >= 1 && p <= 4096, errc::invalid_argument, where, "pipeline_parallel degrees must be in [1, 4096], got ",
            p);
  std::vector<parallel_plan> out;
  for (int t : o.tensor_parallel)
    for (int p : o.pipeline_parallel) {
      const long long per = static_cast<long long>(t) * p;
      if (per > o.gpus || o.gpus % per != 0) continue;
      const auto n = static_cast<std::size_t>(o.gpus / per);
      out.push_back({t, p, n, 0});
      if (o.disaggregation)
        for (std::size_t pre = 1; pre < n; ++pre) out.push_back({t, p, n, pre});
    }
  return out;
}

/// APEX's search: rates every plan of enumerate_plans(o) by max_rate_under_slo. model_for(params)
/// builds the cost model of base with the plan's tensor_parallel and pipeline_parallel (a profile
/// loader, or cost_model(params)); a weft::error from it marks the plan infeasible with its message.
/// make(model) returns a fresh scheduler for one instance; workload_at(rate) the requests at a rate.
/// Colocated plans run simulate_colocated, disaggregated ones simulate_disaggregated; the SLO's TTFT
/// and TPOT apply to every request. Deterministic. O(plans · capacity steps · simulation).
/// Thread-safe if the callbacks are.
template <class S>
plan_search_result search_parallel_plans(const cost_params& base,
                                         const std::function<cost_model(const cost_params&)>& model_for,
                                         const std::function<std::unique_ptr<S>(const cost_model&)>& make,
                                         const std::function<workload(double)>& workload_at, const capacity_slo& slo,
                                         const plan_search_options& o = {}) {
  constexpr const char* where = "weft::sched::sim::search_parallel_plans";
  expects(static_cast<bool>(model_for) && static_cast<bool>(make) && static_cast<bool>(workload_at),
          errc::invalid_argument, where, "model_for, make and workload_at must all be set");
  const std::vector<parallel_plan> plans = enumerate_plans(o);
  const auto t0 = std::chrono::steady_clock::now();
  plan_search_result out;
  sim_options so;
  so.ttft_slo_s = slo.ttft_s;
  so.tpot_slo_s = slo.tpot_s;
  for (const parallel_plan& plan : plans) {
    plan_rating r;
    r.plan = plan;
    cost_params p = base;
    p.tensor_parallel = plan.tensor_parallel;
    p.pipeline_parallel = plan.pipeline_parallel;
    std::optional<cost_model> m;
    try {
      m.emplace(model_for(p));
    } catch (const weft::error& e) {
      r.why_not = e.what();
      out.plans.push_back(std::move(r));
      continue;
    }
    r.feasible = true;
    const std::function<std::unique_ptr<S>()> fresh = [&] { return make(*m); };
    cluster_options c;
    if (plan.disaggregated()) {
      c.prefill_instances = plan.prefill_instances;
      c.decode_instances = plan.instances - plan.prefill_instances;
    } else {
      c.instances = plan.instances;
    }
    const auto p0 = std::chrono::steady_clock::now();
    r.capacity = max_rate_under_slo(
        [&](double rate) {
          const workload w = workload_at(rate);
          return plan.disaggregated() ? simulate_disaggregated<S>(fresh, w, *m, c, so).result
                                      : simulate_colocated<S>(fresh, w, *m, c, so).result;
        },
        slo, o.capacity);
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();
    out.plans.push_back(std::move(r));
  }
  std::stable_sort(out.plans.begin(), out.plans.end(), [](const plan_rating& a, const plan_rating& b) {
    if (a.feasible != b.feasible) return a.feasible;
    if (a.capacity.max_rate_per_s != b.capacity.max_rate_per_s)
      return a.capacity.max_rate_per_s > b.capacity.max_rate_per_s;
    return a.plan.instances < b.plan.instances;
  });
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace weft::sched::sim

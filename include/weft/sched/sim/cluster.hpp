// Multi-instance serving in the simulator: prefill/decode disaggregation (Zhong et al., "DistServe",
// OSDI 2024, §3-4: separate prefill and decode instance pools, a router, the KV cache sent from one to
// the other) and colocated instances balanced by live migration (Sun et al., "Llumnix", OSDI 2024, §4).
// Both run the same driver as the single-instance simulator (detail::event_loop).
#pragma once

#include <weft/sched/sim/simulator.hpp>

#include <functional>
#include <memory>
#include <vector>

namespace weft::sched::sim {

namespace detail {

template <class S>
cluster_result run_cluster(const std::function<std::unique_ptr<S>()>& make, const workload& w, const cost_model& m,
                           const cluster_options& c, const sim_options& o, bool disaggregated) {
  static_assert(
      reports_free_kv<S>,
      "a cluster routes by free KV: the scheduler type needs kv().free_blocks() (iteration_scheduler has it)");
  const char* where =
      disaggregated ? "weft::sched::sim::simulate_disaggregated" : "weft::sched::sim::simulate_colocated";
  expects(!disaggregated || (c.prefill_instances >= 1 && c.decode_instances >= 1), errc::invalid_argument, where,
          "need >= 1 prefill and >= 1 decode instance, got ", c.prefill_instances, " and ", c.decode_instances);
  expects(disaggregated || c.instances >= 1, errc::invalid_argument, where, "need >= 1 instance");
  const std::size_t n = disaggregated ? c.prefill_instances + c.decode_instances : c.instances;
  expects(n <= 4096, errc::invalid_argument, where, "at most 4096 instances, got ", n);
  std::vector<std::unique_ptr<S>> owned;
  std::vector<S*> nodes;
  std::vector<instance_role> roles;
  for (std::size_t j = 0; j < n; ++j) {
    owned.push_back(make());
    expects(owned.back() != nullptr, errc::invalid_argument, where, "the factory returned no scheduler");
    nodes.push_back(owned.back().get());
    roles.push_back(!disaggregated            ? instance_role::both
                    : j < c.prefill_instances ? instance_role::prefill
                                              : instance_role::decode);
  }
  cluster_options used = c;
  if (disaggregated) used.migration_interval_s = 0.0;  // migration balances colocated instances only
  event_loop<S> loop(std::move(nodes), std::move(roles), w, m, o, used, where);
  return loop.run();
}

}  // namespace detail

/// DistServe-style disaggregation: arrivals go to the prefill instance with the least queued prompt
/// tokens; after its first token a request's KV (prompt_tokens * kv_bytes_per_token) crosses the
/// interconnect (cost_model::kv_network_s) to the decode instance with the most free KV blocks, which
/// decodes it to the end. make() returns a fresh scheduler per instance (any batch_scheduler with
/// kv().free_blocks(), e.g. iteration_scheduler). Deterministic. Thread-safe if make() is.
template <class S>
cluster_result simulate_disaggregated(const std::function<std::unique_ptr<S>()>& make, const workload& w,
                                      const cost_model& m, const cluster_options& c = {}, const sim_options& o = {}) {
  return detail::run_cluster<S>(make, w, m, c, o, true);
}

/// Colocated instances (each prefills and decodes), arrivals routed to the least queued prompt
/// tokens, with Llumnix-style migration when c.migration_interval_s > 0 (needs S::migrate_out()).
/// With c.borrowing.enabled, instances lend each other KV blocks through a kv::cluster_pool
/// (Infinite-LLM; sim/detail/kv_borrowing.hpp): make() must then size each scheduler's KV to the cluster.
template <class S>
cluster_result simulate_colocated(const std::function<std::unique_ptr<S>()>& make, const workload& w,
                                  const cost_model& m, const cluster_options& c = {}, const sim_options& o = {}) {
  return detail::run_cluster<S>(make, w, m, c, o, false);
}

}  // namespace weft::sched::sim

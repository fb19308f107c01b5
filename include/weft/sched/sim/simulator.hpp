// Discrete-event serving simulator: replays a workload through a real batch scheduler (the same
// object an engine would run), advancing a simulated clock by the cost model's time for each batch
// and its KV copies. Deterministic: the same workload, scheduler, model and seed give the same bits.
// One instance here; several (colocated, disaggregated) in cluster.hpp — both run detail::event_loop.
#pragma once

#include <weft/sched/concepts.hpp>
#include <weft/sched/sim/cost_model.hpp>
#include <weft/sched/sim/detail/accounting.hpp>
#include <weft/sched/sim/detail/event_loop.hpp>
#include <weft/sched/sim/metrics.hpp>
#include <weft/sched/sim/workload.hpp>

namespace weft::sched::sim {

/// Runs w through s. The scheduler must be fresh (idle). Throws weft::error(invalid_argument) for a
/// workload that is not sorted by arrival, has duplicate ids, lengths outside [1, max_request_tokens]
/// or bad options, and weft::error(precondition) if the scheduler holds work but will not run anything
/// with no arrivals left. Requests are submitted when they arrive (also while a batch runs).
/// Thread-safe as long as s is not shared. O(iterations * batch + requests log requests).
template <batch_scheduler S>
sim_result simulate(S& s, const workload& w, const cost_model& m, const sim_options& o = {}) {
  const cluster_options one{};
  detail::event_loop<S> loop({&s}, {detail::instance_role::both}, w, m, o, one, "weft::sched::sim::simulate");
  return std::move(loop.run().result);
}

}  // namespace weft::sched::sim

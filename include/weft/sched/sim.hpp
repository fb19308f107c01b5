// weft::sched's serving simulator umbrella: a deterministic discrete-event simulator of an engine
// driven by weft's scheduler, priced by measured GPU profiles (Vidur format) or a roofline cost model,
// with MoE expert traffic, NanoFlow nano-batching, DistServe/semi-PD disaggregation, Llumnix
// migration, KV borrowing between instances and Sarathi-style capacity search. A simulator, not an
// engine: docs/sched.md documents the cost model and its sources. Include single headers instead to
// keep compile times down.
#pragma once

#include <weft/sched.hpp>

#include <weft/sched/sim/all_reduce_profile.hpp>
#include <weft/sched/sim/capacity.hpp>
#include <weft/sched/sim/cluster.hpp>
#include <weft/sched/sim/cost_model.hpp>
#include <weft/sched/sim/forward_size.hpp>
#include <weft/sched/sim/layer_profile.hpp>
#include <weft/sched/sim/metrics.hpp>
#include <weft/sched/sim/moe_cost.hpp>
#include <weft/sched/sim/nano_batching.hpp>
#include <weft/sched/sim/plan_search.hpp>
#include <weft/sched/sim/semi_pd.hpp>
#include <weft/sched/sim/sim_request.hpp>
#include <weft/sched/sim/simulator.hpp>
#include <weft/sched/sim/trace_readers.hpp>
#include <weft/sched/sim/vidur_profile.hpp>
#include <weft/sched/sim/workload.hpp>

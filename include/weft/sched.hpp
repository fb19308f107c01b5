// weft::sched umbrella: fair queues, KV-aware batch schedulers and the serving simulator.
// Include single headers instead to keep compile times down.
#pragma once

#include <weft/sched/aging_priority_queue.hpp>
#include <weft/sched/any_batch_scheduler.hpp>
#include <weft/sched/any_fair_queue.hpp>
#include <weft/sched/batch.hpp>
#include <weft/sched/chunked_prefill.hpp>
#include <weft/sched/concepts.hpp>
#include <weft/sched/continuous_batching.hpp>
#include <weft/sched/drr_queue.hpp>
#include <weft/sched/dynamic_splitfuse.hpp>
#include <weft/sched/fcfs_queue.hpp>
#include <weft/sched/hit_rate_aware_queue.hpp>
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/layered_prefill.hpp>
#include <weft/sched/prefill_first_scheduler.hpp>
#include <weft/sched/prefix_aware_queue.hpp>
#include <weft/sched/prefix_group_queue.hpp>
#include <weft/sched/request.hpp>
#include <weft/sched/scheduler_options.hpp>
#include <weft/sched/slo_priority_queue.hpp>
#include <weft/sched/victim_policy.hpp>
#include <weft/sched/vtc_queue.hpp>
#include <weft/sched/wfq_queue.hpp>
#include <weft/sched/sim/cost_model.hpp>
#include <weft/sched/sim/vidur_profile.hpp>
#include <weft/sched/sim/metrics.hpp>
#include <weft/sched/sim/simulator.hpp>
#include <weft/sched/sim/trace_readers.hpp>
#include <weft/sched/sim/workload.hpp>
#include <weft/sched/sim/cluster.hpp>
#include <weft/sched/sim/capacity.hpp>
#include <weft/sched/sim/forward_size.hpp>
#include <weft/sched/sim/plan_search.hpp>
#include <weft/sched/sim/semi_pd.hpp>

// weft::sched umbrella: fair queues and the KV-aware batch scheduler an engine drives. The serving
// simulator has its own umbrella, <weft/sched/sim.hpp>, since an engine does not need it. Include
// single headers instead to keep compile times down.
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
#include <weft/sched/paged_attention_inputs.hpp>
#include <weft/sched/prefill_first_scheduler.hpp>
#include <weft/sched/prefix_aware_queue.hpp>
#include <weft/sched/prefix_group_queue.hpp>
#include <weft/sched/request.hpp>
#include <weft/sched/scheduler_options.hpp>
#include <weft/sched/scheduler_steps.hpp>
#include <weft/sched/slo_priority_queue.hpp>
#include <weft/sched/stall_free_phase.hpp>
#include <weft/sched/victim_policy.hpp>
#include <weft/sched/vtc_queue.hpp>
#include <weft/sched/wfq_queue.hpp>

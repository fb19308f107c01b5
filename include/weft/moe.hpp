// weft::moe umbrella: expert caches with eviction policies and an asynchronous load protocol,
// prefetchers, routing traces and replay, token regrouping, aux-loss-free balancing, and expert
// placement with all-to-all dispatch plans. Standard library only. See docs/moe.md.
#pragma once

#include <weft/moe/types.hpp>
#include <weft/moe/concepts.hpp>
#include <weft/moe/eviction.hpp>
#include <weft/moe/any_eviction_policy.hpp>
#include <weft/moe/expert_cache.hpp>
#include <weft/moe/prefetch.hpp>
#include <weft/moe/trace.hpp>
#include <weft/moe/replay.hpp>
#include <weft/moe/segment_oracle.hpp>
#include <weft/moe/hybrid_schedule.hpp>
#include <weft/moe/hybrid_replay.hpp>
#include <weft/moe/regroup.hpp>
#include <weft/moe/aux_free_balancer.hpp>
#include <weft/moe/placement.hpp>

// Archetypes: the weakest types that satisfy each sched concept, run through the scheduler. If the
// scheduler used anything beyond the concept, this file would not compile.
#include "harness.hpp"

#include <weft/sched/concepts.hpp>
#include <weft/sched/iteration_scheduler.hpp>

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

using namespace weft::sched;

namespace {

using weft_test::min_kv;
using weft_test::min_queue;

struct min_victim {
  std::size_t choose(std::span<const victim_candidate>) const { return 0; }
};

}  // namespace

static_assert(fair_queue<min_queue>);
static_assert(kv_manager<min_kv>);
static_assert(victim_policy<min_victim>);
static_assert(batch_scheduler<iteration_scheduler<min_queue, min_kv, min_victim>>);
static_assert(batch_scheduler<iteration_scheduler<>>);
static_assert(kv_manager<weft::kv::kv_manager<>>);  // weft's KV manager models the concept directly

TEST_CASE("the scheduler runs on archetype policies", "[sched][archetype]") {
  // 600 tokens of KV for 20 requests of up to 100 + 60 tokens: preemption is needed.
  min_kv kv;
  kv.capacity = 600;
  iteration_scheduler<min_queue, min_kv, min_victim> s(chunked_prefill(64, 8), min_queue{}, kv);
  std::vector<weft_test::job> jobs;
  for (std::uint64_t i = 1; i <= 20; ++i) {
    weft_test::job j;
    j.req.id = request_id(i);
    j.req.client = client_id(0);
    j.req.prompt_tokens = static_cast<std::int64_t>(40 + (i * 7) % 60);
    j.output = static_cast<std::int64_t>(10 + (i * 13) % 50);
    jobs.push_back(j);
  }
  const auto out = weft_test::run_jobs(s, jobs, [](const batch& b, auto&) { CHECK(b.tokens() <= 64); });
  CHECK(out.completed == 20);
  CHECK(out.aborted == 0);
  CHECK(s.idle());
  CHECK(s.kv().st.used == 0);
}

#include <weft/sched/any_batch_scheduler.hpp>
#include <weft/sched/vtc_queue.hpp>

static_assert(batch_scheduler<any_batch_scheduler>);

TEST_CASE("any_batch_scheduler runs a scheduler chosen at run time", "[sched][any]") {
  for (int choice = 0; choice < 2; ++choice) {
    any_batch_scheduler s = choice == 0 ? any_batch_scheduler(std::make_unique<iteration_scheduler<vtc_queue>>(
                                              chunked_prefill(64, 8), vtc_queue{}, weft_test::kv_of(256)))
                                        : any_batch_scheduler(std::make_unique<iteration_scheduler<>>(
                                              continuous_batching(8, 256), fcfs_queue{}, weft_test::kv_of(256)));
    std::vector<weft_test::job> jobs;
    for (std::uint64_t i = 1; i <= 10; ++i) {
      weft_test::job j;
      j.req.id = request_id(i);
      j.req.client = client_id(static_cast<std::uint32_t>(i % 2));
      j.req.prompt_tokens = 50;
      j.output = 5;
      jobs.push_back(j);
    }
    const auto out = weft_test::run_jobs(s, jobs, [](const batch&, auto&) {});
    CHECK(out.completed == 10);
    CHECK(s.idle());
  }
  CHECK_THROWS_AS(any_batch_scheduler(std::unique_ptr<iteration_scheduler<>>()), weft::error);
}

// The optional hook bind_prefix_probe: detected by the concept binds_prefix_probe, with or without the
// opt-in; a misspelled hook without the opt-in is (as before) not detected, and with the opt-in it is a
// compile error (tests/sched/compile_fail/misspelled_prefix_probe.cpp, ctest sched.misspelled_hook).
#include <weft/sched/any_fair_queue.hpp>
#include <weft/sched/prefix_aware_queue.hpp>

namespace {

// Each queue counts the binds it received (shared, so a copy moved into a scheduler still reports).
struct probed_queue : weft_test::min_queue {
  static constexpr bool provides_prefix_probe = true;
  std::shared_ptr<int> binds = std::make_shared<int>(0);
  void bind_prefix_probe(prefix_probe p) { *binds += p ? 1 : 0; }
};

struct probed_queue_without_opt_in : weft_test::min_queue {  // user types written before the opt-in
  std::shared_ptr<int> binds = std::make_shared<int>(0);
  void bind_prefix_probe(prefix_probe p) { *binds += p ? 1 : 0; }
};

struct misspelled_probe_queue : weft_test::min_queue {  // "prefx": never called, as before the concept
  std::shared_ptr<int> binds = std::make_shared<int>(0);
  void bind_prefx_probe(prefix_probe p) { *binds += p ? 1 : 0; }
};

struct opted_out_queue : weft_test::min_queue {  // provides_prefix_probe = false: no check, no hook
  static constexpr bool provides_prefix_probe = false;
};

}  // namespace

static_assert(binds_prefix_probe<probed_queue>);
static_assert(binds_prefix_probe<probed_queue_without_opt_in>);
static_assert(binds_prefix_probe<prefix_aware_queue>);
static_assert(binds_prefix_probe<any_fair_queue>);
static_assert(!binds_prefix_probe<misspelled_probe_queue>);
static_assert(!binds_prefix_probe<opted_out_queue>);
static_assert(!binds_prefix_probe<weft_test::min_queue>);
static_assert(fair_queue<probed_queue> && fair_queue<misspelled_probe_queue>);

TEST_CASE("the scheduler binds the prefix probe of a queue that has the hook", "[sched][archetype]") {
  using kv = weft_test::min_kv;
  probed_queue with;
  iteration_scheduler<probed_queue, kv, min_victim> a(chunked_prefill(64, 8), with);
  CHECK(*with.binds == 1);
  probed_queue_without_opt_in without;
  iteration_scheduler<probed_queue_without_opt_in, kv, min_victim> b(chunked_prefill(64, 8), without);
  CHECK(*without.binds == 1);
  misspelled_probe_queue misspelled;
  iteration_scheduler<misspelled_probe_queue, kv, min_victim> c(chunked_prefill(64, 8), misspelled);
  CHECK(*misspelled.binds == 0);
  // Through the run-time adapter: any_fair_queue forwards to the wrapped queue's hook, if any.
  probed_queue wrapped;
  iteration_scheduler<any_fair_queue, kv, min_victim> d(chunked_prefill(64, 8), any_fair_queue{wrapped});
  CHECK(*wrapped.binds == 1);
  misspelled_probe_queue wrapped_misspelled;
  iteration_scheduler<any_fair_queue, kv, min_victim> e(chunked_prefill(64, 8), any_fair_queue{wrapped_misspelled});
  CHECK(*wrapped_misspelled.binds == 0);
}

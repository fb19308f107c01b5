// Archetypes: the weakest types that satisfy each sched concept, run through the scheduler. If the
// scheduler used anything beyond the concept, this file would not compile.
#include "harness.hpp"

#include <weft/sched/concepts.hpp>
#include <weft/sched/iteration_scheduler.hpp>

#include <deque>
#include <map>
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

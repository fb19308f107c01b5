// Archetypes: the weakest types that satisfy each sched concept, run through the scheduler. If the
// scheduler used anything beyond the concept, this file would not compile.
#include "harness.hpp"

#include <weft/sched/concepts.hpp>
#include <weft/sched/iteration_scheduler.hpp>

#include <deque>
#include <optional>
#include <unordered_map>

using namespace weft::sched;

namespace {

struct min_queue {
  std::deque<request> q;
  void push(const request& r, double) { q.push_back(r); }
  const request* peek(double) { return q.empty() ? nullptr : &q.front(); }
  request pop(double) {
    request r = q.front();
    q.pop_front();
    return r;
  }
  void on_admit(const request&) {}
  void on_tokens(const request&, std::int64_t) {}
  void on_finish(const request&, std::int64_t) {}
  std::size_t size() const { return q.size(); }
  bool empty() const { return q.empty(); }
};

// One block per token, no host tier, no prefix cache.
struct min_kv {
  std::int64_t capacity = 4096;
  std::int64_t used = 0;
  std::unordered_map<request_id, std::int64_t> held;
  std::int64_t block_tokens() const { return 1; }
  std::int64_t total_blocks() const { return capacity; }
  std::int64_t free_blocks() const { return capacity - used; }
  std::int64_t blocks_to_grow(const request& r, std::int64_t tokens) const {
    auto it = held.find(r.id);
    return std::max<std::int64_t>(0, tokens - (it == held.end() ? 0 : it->second));
  }
  bool grow(const request& r, std::int64_t tokens) {
    const std::int64_t need = blocks_to_grow(r, tokens);
    if (need > free_blocks()) return false;
    used += need;
    held[r.id] += need;
    return true;
  }
  void release(request_id id) {
    used -= held[id];
    held.erase(id);
  }
  std::optional<kv_transfer> swap_out(request_id) { return std::nullopt; }
  std::optional<kv_transfer> swap_in(request_id) { return std::nullopt; }
  std::int64_t held_blocks(request_id id) const {
    auto it = held.find(id);
    return it == held.end() ? 0 : it->second;
  }
  std::int64_t cached_prefix_tokens(const request&) const { return 0; }
};

struct min_victim {
  std::size_t choose(std::span<const victim_candidate>) const { return 0; }
};

}  // namespace

static_assert(fair_queue<min_queue>);
static_assert(kv_manager<min_kv>);
static_assert(victim_policy<min_victim>);
static_assert(batch_scheduler<iteration_scheduler<min_queue, min_kv, min_victim>>);
static_assert(batch_scheduler<iteration_scheduler<>>);
static_assert(kv_manager<block_kv_manager>);

TEST_CASE("the scheduler runs on archetype policies", "[sched][archetype]") {
  // 600 tokens of KV for 20 requests of up to 100 + 60 tokens: preemption is needed.
  min_kv kv;
  kv.capacity = 600;
  iteration_scheduler<min_queue, min_kv, min_victim> s(chunked_prefill(64, 8), min_queue{}, kv);
  std::vector<test::job> jobs;
  for (std::uint64_t i = 1; i <= 20; ++i) {
    test::job j;
    j.req.id = request_id(i);
    j.req.client = client_id(0);
    j.req.prompt_tokens = static_cast<std::int64_t>(40 + (i * 7) % 60);
    j.output = static_cast<std::int64_t>(10 + (i * 13) % 50);
    jobs.push_back(j);
  }
  const auto out = test::run_jobs(s, jobs, [](const batch& b, auto&) { CHECK(b.tokens() <= 64); });
  CHECK(out.completed == 20);
  CHECK(out.aborted == 0);
  CHECK(s.idle());
  CHECK(s.kv().used == 0);
}

#include <weft/sched/any_batch_scheduler.hpp>
#include <weft/sched/vtc_queue.hpp>

static_assert(batch_scheduler<any_batch_scheduler>);

TEST_CASE("any_batch_scheduler runs a scheduler chosen at run time", "[sched][any]") {
  for (int choice = 0; choice < 2; ++choice) {
    any_batch_scheduler s =
        choice == 0 ? any_batch_scheduler(std::make_unique<iteration_scheduler<vtc_queue>>(chunked_prefill(64, 8)))
                    : any_batch_scheduler(std::make_unique<iteration_scheduler<>>(continuous_batching(8, 256)));
    std::vector<test::job> jobs;
    for (std::uint64_t i = 1; i <= 10; ++i) {
      test::job j;
      j.req.id = request_id(i);
      j.req.client = client_id(static_cast<std::uint32_t>(i % 2));
      j.req.prompt_tokens = 50;
      j.output = 5;
      jobs.push_back(j);
    }
    const auto out = test::run_jobs(s, jobs, [](const batch&, auto&) {});
    CHECK(out.completed == 10);
    CHECK(s.idle());
  }
  CHECK_THROWS_AS(any_batch_scheduler(std::unique_ptr<iteration_scheduler<>>()), weft::error);
}

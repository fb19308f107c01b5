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

// One block per token, no host tier, no prefix cache, no sharing (a fork copies); transactions by
// saving its whole state. Everything the scheduler uses must be in sched::kv_manager.
struct min_kv {
  struct state {
    std::size_t used = 0;
    std::map<request_id, std::vector<weft::kv::block_id>> held;  // one (dummy) block per token slot
    std::map<request_id, std::vector<token_id>> ids;
  };
  std::size_t capacity = 4096;
  state st;
  std::optional<state> saved;

  std::size_t block_size() const { return 1; }
  std::size_t usable_blocks() const { return capacity; }
  std::size_t free_blocks() const { return capacity - st.used; }
  std::size_t bytes_per_block() const { return 0; }
  std::size_t cached_prefix_tokens(std::span<const token_id>, const weft::kv::request_options&) const { return 0; }
  std::optional<weft::kv::prompt_allocation> allocate_prompt(request_id id, std::span<const token_id> t,
                                                             const weft::kv::request_options& o, std::size_t slots) {
    auto r = allocate_prompt(id, t.size(), o, slots);
    if (r) st.ids[id].assign(t.begin(), t.end());
    return r;
  }
  std::optional<weft::kv::prompt_allocation> allocate_prompt(request_id id, std::size_t n,
                                                             const weft::kv::request_options&, std::size_t slots) {
    if (n > free_blocks()) return std::nullopt;
    st.held[id];
    grow(id, std::min(slots, n));
    return weft::kv::prompt_allocation{0, 0, 0, std::min(slots, n), std::min(slots, n), {}};
  }
  weft::kv::append_result grow(request_id id, std::size_t n) {
    auto& h = st.held.at(id);
    if (n <= h.size()) return {true, std::nullopt};
    if (n - h.size() > free_blocks()) return {};
    st.used += n - h.size();
    h.resize(n, weft::kv::block_id(1));
    return {true, std::nullopt};
  }
  weft::kv::append_result append(request_id id, std::span<const token_id> t) {
    const auto r = grow(id, st.held.at(id).size() + t.size());
    if (r.fits) st.ids[id].insert(st.ids[id].end(), t.begin(), t.end());
    return r;
  }
  void computed(request_id, std::size_t) {}
  bool fork(request_id parent, request_id child) {
    const auto& p = st.held.at(parent);
    if (p.size() > free_blocks()) return false;
    st.used += p.size();
    st.held[child] = p;
    st.ids[child] = st.ids[parent];
    return true;
  }
  void free(request_id id) {
    st.used -= st.held.at(id).size();
    st.held.erase(id);
    st.ids.erase(id);
  }
  std::optional<weft::kv::swap_plan> swap_out(request_id) { return std::nullopt; }
  std::optional<weft::kv::swap_plan> swap_in(request_id) { return std::nullopt; }
  std::span<const weft::kv::block_id> blocks(request_id id) const { return st.held.at(id); }
  std::span<const token_id> tokens(request_id id) const {
    auto it = st.ids.find(id);
    return it == st.ids.end() ? std::span<const token_id>() : std::span<const token_id>(it->second);
  }
  void begin_transaction() { saved = st; }
  void commit_transaction() { saved.reset(); }
  void rollback_transaction() {
    st = std::move(*saved);
    saved.reset();
  }
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
static_assert(kv_manager<weft::kv::kv_manager<>>);  // weft's KV manager models the concept directly

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
  CHECK(s.kv().st.used == 0);
}

#include <weft/sched/any_batch_scheduler.hpp>
#include <weft/sched/vtc_queue.hpp>

static_assert(batch_scheduler<any_batch_scheduler>);

TEST_CASE("any_batch_scheduler runs a scheduler chosen at run time", "[sched][any]") {
  for (int choice = 0; choice < 2; ++choice) {
    any_batch_scheduler s = choice == 0 ? any_batch_scheduler(std::make_unique<iteration_scheduler<vtc_queue>>(
                                              chunked_prefill(64, 8), vtc_queue{}, test::kv_of(256)))
                                        : any_batch_scheduler(std::make_unique<iteration_scheduler<>>(
                                              continuous_batching(8, 256), fcfs_queue{}, test::kv_of(256)));
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

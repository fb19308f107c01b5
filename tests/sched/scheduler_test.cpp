#include "harness.hpp"

#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/prefix_aware_queue.hpp>
#include <weft/sched/slo_priority_queue.hpp>
#include <weft/sched/vtc_queue.hpp>

#include <random>
#include <map>
#include <set>

using namespace weft::sched;

namespace {

std::vector<weft_test::job> random_jobs(std::uint32_t seed, int n, std::int64_t max_prompt = 600,
                                        std::int64_t max_out = 120) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> p(1, max_prompt), o(1, max_out);
  std::vector<weft_test::job> jobs;
  for (int i = 0; i < n; ++i) {
    weft_test::job j;
    j.req.id = request_id(static_cast<std::uint64_t>(i + 1));
    j.req.client = client_id(static_cast<std::uint32_t>(i % 3));
    j.req.prompt_tokens = p(rng);
    j.output = o(rng);
    jobs.push_back(j);
  }
  return jobs;
}

using weft_test::kv_of;

// Checks Sarathi's two rules on every batch: the token budget holds, and every request that emitted a
// token last iteration and did not finish decodes in this one (unless it was preempted now).
struct stall_free_checker {
  std::int64_t budget;
  std::map<request_id, std::int64_t> remaining;  // true output tokens still to come
  std::set<request_id> decoding;
  std::int64_t violations = 0;
  std::int64_t over_budget = 0;
  void operator()(const batch& b) {
    if (b.tokens() > budget) ++over_budget;
    std::set<request_id> in_batch, preempted(b.preempted_recompute.begin(), b.preempted_recompute.end());
    for (const auto& t : b.swapped_out) preempted.insert(t.id);
    for (const auto& e : b.entries) in_batch.insert(e.id);
    for (request_id id : decoding)
      if (!in_batch.count(id) && !preempted.count(id)) ++violations;
    decoding.clear();
    for (const auto& e : b.entries)
      if (e.emits_token && --remaining[e.id] > 0) decoding.insert(e.id);
  }
  static std::map<request_id, std::int64_t> outputs(const std::vector<weft_test::job>& jobs) {
    std::map<request_id, std::int64_t> m;
    for (const auto& j : jobs) m[j.req.id] = j.output;
    return m;
  }
};

}  // namespace

TEST_CASE("chunked prefill keeps the budget, never stalls a decode and completes every request", "[sched][chunked]") {
  for (std::uint32_t seed = 1; seed <= 5; ++seed) {
    CAPTURE(seed);
    const auto jobs = random_jobs(seed, 200);
    iteration_scheduler<vtc_queue> s(chunked_prefill(256, 64), vtc_queue{}, kv_of(2048));
    stall_free_checker check{256, stall_free_checker::outputs(jobs), {}, 0, 0};
    std::set<request_id> finished_seen;
    const auto out = weft_test::run_jobs(s, jobs, [&](const batch& b, auto&) {
      check(b);
      for (const auto& e : b.entries) CHECK(e.prefill_tokens + e.decode_tokens >= 1);
    });
    CHECK(check.over_budget == 0);
    CHECK(check.violations == 0);
    CHECK(out.completed == 200);
    CHECK(out.empty_iterations_with_work == 0);  // work conservation
    CHECK(s.idle());
    CHECK(s.kv().free_blocks() == 2048);
    CHECK(s.kv().num_requests() == 0);
  }
}

TEST_CASE("decodes are never stalled even when KV pressure preempts", "[sched][chunked][preemption]") {
  for (auto mode : {preemption_mode::recompute, preemption_mode::swap}) {
    const auto jobs = random_jobs(7, 150);
    scheduler_options o = chunked_prefill(128, 32);
    o.preemption = mode;
    iteration_scheduler<> s(o, fcfs_queue{}, kv_of(160, 400));  // 2560 tokens: heavy preemption
    stall_free_checker check{128, stall_free_checker::outputs(jobs), {}, 0, 0};
    const auto out = weft_test::run_jobs(
        s, jobs, [&](const batch& b, auto&) { check(b); }, 200000);
    CHECK(check.violations == 0);
    CHECK(check.over_budget == 0);
    CHECK(out.completed == 150);
    CHECK(out.aborted == 0);
    CHECK(out.empty_iterations_with_work == 0);
    const auto& st = s.stats();
    if (mode == preemption_mode::recompute) {
      CHECK(st.preempted_recompute > 0);
    } else {
      CHECK(st.preempted_swap > 0);
      CHECK(st.swapped_in == st.preempted_swap);
    }
  }
}

TEST_CASE("no livelock: preemption under a cache that fits two requests still finishes all", "[sched][preemption]") {
  // 40 blocks = 640 tokens; requests of up to 300 + 200 tokens: at most one or two fit at a time.
  const auto jobs = random_jobs(3, 60, 300, 200);
  iteration_scheduler<> s(chunked_prefill(256, 16), fcfs_queue{}, kv_of(40));
  const auto out = weft_test::run_jobs(
      s, jobs, [](const batch&, auto&) {}, 100000);
  CHECK(out.completed == 60);
  CHECK(out.iterations < 100000);
  CHECK(s.stats().preempted_recompute > 0);
}

TEST_CASE("continuous batching prefills whole prompts", "[sched][orca]") {
  const auto jobs = random_jobs(11, 80);
  iteration_scheduler<> s(continuous_batching(32, 1024), fcfs_queue{}, kv_of(4096));
  std::map<request_id, std::int64_t> prompt;
  for (const auto& j : jobs) prompt[j.req.id] = j.req.prompt_tokens;
  const auto out = weft_test::run_jobs(s, jobs, [&](const batch& b, auto&) {
    for (const auto& e : b.entries)
      if (e.prefill_tokens > 0) CHECK(e.prefill_tokens == prompt[e.id]);
  });
  CHECK(out.completed == 80);
  CHECK(out.empty_iterations_with_work == 0);
}

namespace {
// Six prompts of 200 tokens that share their first 160 token ids (a system prompt), each with 40 of
// its own; the ids live in `store`.
std::vector<weft_test::job> shared_prefix_jobs(std::vector<std::vector<token_id>>& store) {
  std::vector<weft_test::job> jobs;
  store.assign(6, {});
  for (std::uint64_t i = 1; i <= 6; ++i) {
    auto& t = store[i - 1];
    for (int k = 0; k < 160; ++k) t.push_back(static_cast<token_id>(1000 + k));
    for (int k = 0; k < 40; ++k) t.push_back(static_cast<token_id>(10000 * i + static_cast<std::uint64_t>(k)));
    weft_test::job j;
    j.req.id = request_id(i);
    j.req.client = client_id(0);
    j.req.prompt_tokens = 200;
    j.req.prompt = t;
    j.req.prefix_id = 42;  // only a grouping hint: the hits below come from the token ids
    j.output = 5;
    jobs.push_back(j);
  }
  return jobs;
}
}  // namespace

TEST_CASE("cached prefixes are not prefilled again", "[sched][prefix]") {
  std::vector<std::vector<token_id>> store;
  const auto jobs = shared_prefix_jobs(store);
  iteration_scheduler<prefix_aware_queue> s(chunked_prefill(512, 1), prefix_aware_queue{}, kv_of(256));
  std::int64_t prefilled = 0;
  const auto out = weft_test::run_jobs(s, jobs, [&](const batch& b, auto&) { prefilled += b.prefill_tokens; });
  CHECK(out.completed == 6);
  // First request prefills 200; the other five only their 40 private tokens.
  CHECK(prefilled == 200 + 5 * 40);
  CHECK(s.stats().cached_prompt_tokens == 5 * 160);
  // The same prompts counted by length only share nothing: without ids there is no content to match.
  auto counted = jobs;
  for (auto& j : counted) j.req.prompt = {};
  iteration_scheduler<prefix_aware_queue> c(chunked_prefill(512, 1), prefix_aware_queue{}, kv_of(256));
  prefilled = 0;
  weft_test::run_jobs(c, counted, [&](const batch& b, auto&) { prefilled += b.prefill_tokens; });
  CHECK(prefilled == 6 * 200);
}

TEST_CASE("verify on hit and per-tenant isolation through the scheduler: the client is the KV tenant",
          "[sched][prefix][tenant]") {
  std::vector<std::vector<token_id>> store;
  auto jobs = shared_prefix_jobs(store);
  for (auto& j : jobs) j.req.client = client_id(static_cast<std::uint32_t>(j.req.id.value() % 2));  // two tenants
  for (const bool isolate : {false, true}) {
    weft::kv::kv_config c;
    c.num_blocks = 257;
    c.block_size = 16;
    c.verify_on_hit = true;
    c.isolate_tenants = isolate;
    iteration_scheduler<> s(chunked_prefill(512, 1), fcfs_queue{}, weft::kv::kv_manager<>(c));
    std::int64_t prefilled = 0;
    const auto out = weft_test::run_jobs(s, jobs, [&](const batch& b, auto&) { prefilled += b.prefill_tokens; });
    CAPTURE(isolate);
    CHECK(out.completed == 6);
    // Shared: one request computes the 160-token prefix, five hit it. Isolated: each tenant computes
    // its own copy once, and its other two requests hit it.
    CHECK(s.stats().cached_prompt_tokens == (isolate ? 4u : 5u) * 160);
    CHECK(prefilled == (isolate ? 2 * 200 + 4 * 40 : 200 + 5 * 40));
    CHECK(s.kv().cache().collisions() == 0);
  }
}

TEST_CASE("a prompt arriving while its prefix is still being computed does not hit it", "[sched][prefix][publish]") {
  std::vector<std::vector<token_id>> store;
  const auto jobs = shared_prefix_jobs(store);
  iteration_scheduler<> s(chunked_prefill(512, 8), fcfs_queue{}, kv_of(256));
  std::vector<std::int64_t> first_chunk(7, -1);
  const auto out = weft_test::run_jobs(s, jobs, [&](const batch& b, auto&) {
    for (const auto& e : b.entries)
      if (first_chunk[e.id.value()] < 0 && e.prefill_tokens > 0) first_chunk[e.id.value()] = e.first_position();
  });
  CHECK(out.completed == 6);
  // Iteration 1 admits requests 1 and 2 whole and 3 in part: none of them can hit the shared blocks,
  // because no block's KV is computed yet. Iteration 2 admits 4, 5 and 6, which hit the 160 tokens
  // request 1 computed (and reported) in iteration 1.
  CHECK(first_chunk[1] == 0);
  CHECK(first_chunk[2] == 0);
  CHECK(first_chunk[3] == 0);
  CHECK(first_chunk[4] == 160);
  CHECK(first_chunk[5] == 160);
  CHECK(first_chunk[6] == 160);
}

TEST_CASE("inter-tenant preemption swaps out a lower priority tenant for an urgent one", "[sched][fastswitch]") {
  scheduler_options o = chunked_prefill(512, 16);
  o.inter_tenant_preemption = true;
  o.preemption = preemption_mode::swap;
  iteration_scheduler<slo_priority_queue> s(o, slo_priority_queue{}, kv_of(64, 256, 8));
  for (std::uint64_t i = 1; i <= 3; ++i) {
    request r;
    r.id = request_id(i);
    r.client = client_id(0);
    r.prompt_tokens = 300;  // 19 blocks each: 57 of 64 used
    r.counted_by_length = true;
    REQUIRE(s.submit(r, 0.0));
  }
  for (int it = 0; it < 3; ++it) {
    const batch& b = s.schedule(0.0);
    std::vector<request_id> none;
    (void)b;
    s.complete(none);
  }
  REQUIRE(s.running() == 3);
  request vip;
  vip.id = request_id(10);
  vip.client = client_id(1);
  vip.prompt_tokens = 200;
  vip.counted_by_length = true;
  vip.priority = 5;
  REQUIRE(s.submit(vip, 1.0));
  const batch& b = s.schedule(1.0);
  REQUIRE(b.swapped_out.size() >= 1);
  CHECK(b.swapped_out.front().copy_units == (b.swapped_out.front().blocks + 7) / 8);
  bool vip_in = false;
  for (const auto& e : b.entries) vip_in = vip_in || e.id == vip.id;
  CHECK(vip_in);
  CHECK(s.stats().preempted_swap >= 1);
}

TEST_CASE("scheduler rejects bad input and stays usable", "[sched][errors]") {
  CHECK_THROWS_AS(iteration_scheduler<>(chunked_prefill(0, 1), fcfs_queue{}, kv_of(16)), weft::error);  // zero budget
  CHECK_THROWS_AS(iteration_scheduler<>(chunked_prefill(8, 16), fcfs_queue{}, kv_of(16)),
                  weft::error);  // budget < batch
  iteration_scheduler<vtc_queue> s(chunked_prefill(64, 4), vtc_queue{}, kv_of(16));
  request r;
  r.id = request_id(1);
  r.client = client_id(0);
  r.prompt_tokens = -3;
  r.counted_by_length = true;
  CHECK_THROWS_AS(s.submit(r, 0.0), weft::error);  // negative length
  r.prompt_tokens = 10;
  r.arrival_s = -1.0;
  CHECK_THROWS_AS(s.submit(r, 0.0), weft::error);
  r.arrival_s = 0.0;
  request huge = r;
  huge.id = request_id(2);
  huge.prompt_tokens = 16 * 16 + 5;
  CHECK_FALSE(s.submit(huge, 0.0));  // can never fit: an outcome, not an error
  CHECK(s.stats().rejected == 1);
  REQUIRE(s.submit(r, 0.0));
  s.schedule(0.0);
  const request_id unknown[] = {request_id(99)};
  CHECK_THROWS_AS(s.complete(unknown), weft::error);
  const request_id done[] = {request_id(1)};
  s.complete(done);  // the failed call changed nothing: the prefill completes and the request ends
  CHECK(s.idle());
  CHECK(s.kv().free_blocks() == 16);
}

TEST_CASE("a finished request's decoded blocks are cached: the next turn of the conversation hits them",
          "[sched][prefix][publish]") {
  iteration_scheduler<> s(chunked_prefill(64, 4), fcfs_queue{}, kv_of(64));
  std::vector<token_id> turn1(20);
  for (std::size_t i = 0; i < turn1.size(); ++i) turn1[i] = static_cast<token_id>(i + 1);
  request r;
  r.id = request_id(1);
  r.client = client_id(0);
  r.prompt = turn1;
  r.prompt_tokens = 20;
  REQUIRE(s.submit(r, 0.0));
  std::vector<token_id> answer;
  for (int step = 0; !s.idle(); ++step) {
    const batch& b = s.schedule(step);
    REQUIRE(b.entries.size() == 1);
    const token_id t = static_cast<token_id>(500 + step);
    answer.push_back(t);
    std::vector<request_id> finished;
    if (answer.size() == 40) finished.push_back(r.id);
    s.complete(finished, std::vector<decoded_token>{{r.id, t}});
  }
  // Turn 2 resends the conversation: prompt, answer, a new question.
  std::vector<token_id> turn2 = turn1;
  turn2.insert(turn2.end(), answer.begin(), answer.end());
  turn2.insert(turn2.end(), {7, 7, 7, 7, 7});
  request r2 = r;
  r2.id = request_id(2);
  r2.prompt = turn2;
  r2.prompt_tokens = static_cast<std::int64_t>(turn2.size());
  REQUIRE(s.submit(r2, 100.0));
  const batch& b = s.schedule(100.0);
  REQUIRE(b.entries.size() == 1);
  // 59 tokens of turn 1 had KV (the last answer token was never fed back): 3 full blocks.
  CHECK(b.entries[0].first_position() == 48);
  CHECK(s.stats().cached_prompt_tokens == 48);
}

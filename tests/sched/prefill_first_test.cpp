#include "harness.hpp"

#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/prefill_first_scheduler.hpp>
#include <weft/sched/sim/cluster.hpp>

#include <catch2/catch.hpp>

#include <deque>
#include <optional>
#include <unordered_map>

using namespace weft::sched;
using namespace weft::sched::sim;

namespace {

using weft_test::min_kv;
using weft_test::min_queue;

request req(std::uint64_t id, std::int64_t prompt, double at = 0.0) {
  request r;
  r.id = request_id(id);
  r.prompt_tokens = prompt;
  r.arrival_s = at;
  r.counted_by_length = true;
  return r;
}

weft::kv::kv_manager<> kv_for(const cost_model& m) { return weft::kv::kv_manager<>(m.kv_manager_config(16)); }

}  // namespace

static_assert(batch_scheduler<prefill_first_scheduler<>>);
static_assert(batch_scheduler<prefill_first_scheduler<min_queue, min_kv>>);

TEST_CASE("prefill-first: waiting prompts get prefill-only iterations; decodes wait", "[sched][prefill_first]") {
  prefill_first_scheduler<> s(vllm_baseline(8, 1000), fcfs_queue{}, weft_test::kv_of(1000));
  CHECK(s.submit(req(1, 300), 0));
  CHECK(s.submit(req(2, 400), 0));
  CHECK(s.submit(req(3, 500), 0));  // 300 + 400 + 500 > 1000: waits for the next prefill iteration
  const batch& b1 = s.schedule(0);
  REQUIRE(b1.entries.size() == 2);
  CHECK(b1.prefill_tokens == 700);
  CHECK(b1.decode_tokens == 0);
  CHECK(b1.entries[0].emits_token);
  s.complete({});
  const batch& b2 = s.schedule(0.1);  // request 3 still waits: a prefill-only iteration again
  REQUIRE(b2.entries.size() == 1);
  CHECK(b2.entries[0].id == request_id(3));
  CHECK(b2.decode_tokens == 0);
  s.complete({});
  const batch& b3 = s.schedule(0.2);  // nothing waits: every running request decodes
  CHECK(b3.entries.size() == 3);
  CHECK(b3.prefill_tokens == 0);
  CHECK(b3.decode_tokens == 3);
  const request_id done[] = {request_id(2)};
  s.complete(done);
  CHECK(s.running() == 2);
  // A new arrival stalls both decodes.
  CHECK(s.submit(req(4, 50, 0.3), 0.3));
  const batch& b4 = s.schedule(0.3);
  REQUIRE(b4.entries.size() == 1);
  CHECK(b4.entries[0].prefill_tokens == 50);
  s.complete({});
  CHECK(s.schedule(0.4).decode_tokens == 3);
  // Contract: unknown ids change nothing.
  const request_id bogus[] = {request_id(99)};
  CHECK_THROWS_AS(s.complete(bogus), weft::error);
  const request_id twice[] = {request_id(1), request_id(1)};
  CHECK_THROWS_AS(s.complete(twice), weft::error);
  s.complete({});
  CHECK(s.running() == 3);
}

TEST_CASE("prefill-first: refuses what can never run; respects the running cap", "[sched][prefill_first]") {
  prefill_first_scheduler<> s(vllm_baseline(2, 1000), fcfs_queue{}, weft_test::kv_of(1000));
  CHECK_FALSE(s.submit(req(1, 1001), 0));  // longer than max_batched_tokens (vLLM ignores it)
  CHECK(s.stats().rejected == 1);
  for (std::uint64_t i = 2; i <= 5; ++i) CHECK(s.submit(req(i, 10), 0));
  CHECK(s.schedule(0).entries.size() == 2);
  s.complete({});
  CHECK(s.waiting() == 2);
  CHECK_THROWS_AS(prefill_first_scheduler<>(vllm_baseline(0, 10), fcfs_queue{}, weft_test::kv_of(64)), weft::error);
  prefill_first_options bad;
  bad.watermark = 1.0;
  CHECK_THROWS_AS(prefill_first_scheduler<>(bad, fcfs_queue{}, weft_test::kv_of(64)), weft::error);
}

TEST_CASE("prefill-first: KV pressure preempts the latest arrival by recompute; all finish", "[sched][prefill_first]") {
  // Archetype policies, 600 tokens of KV, 20 requests of up to 100 + 60 tokens.
  min_kv kv;
  kv.capacity = 600;
  prefill_first_scheduler<min_queue, min_kv> s(vllm_baseline(16, 2000), min_queue{}, kv);
  std::unordered_map<std::uint64_t, std::int64_t> left;
  for (std::uint64_t i = 1; i <= 20; ++i) {
    REQUIRE(s.submit(req(i, 40 + static_cast<std::int64_t>(i * 3) % 60, static_cast<double>(i)), 0));
    left[i] = 20 + static_cast<std::int64_t>(i * 7) % 40;
  }
  std::size_t finished = 0, steps = 0;
  bool preempted = false;
  while (!s.idle() && steps++ < 10000) {
    const batch& b = s.schedule(static_cast<double>(steps));
    preempted = preempted || !b.preempted_recompute.empty();
    CHECK((b.prefill_tokens == 0 || b.decode_tokens == 0));  // never mixed
    std::vector<request_id> done;
    for (const auto& e : b.entries)
      if (e.emits_token && --left[e.id.value()] == 0) done.push_back(e.id);
    CHECK(b.aborted.empty());
    s.complete(done);
    finished += done.size();
  }
  CHECK(finished == 20);
  CHECK(preempted);
  CHECK(s.stats().preempted_recompute > 0);
}

TEST_CASE("prefill-first: a request that outgrows the whole cache is aborted, not livelocked",
          "[sched][prefill_first]") {
  min_kv kv;
  kv.capacity = 100;
  prefill_first_scheduler<min_queue, min_kv> s(vllm_baseline(4, 1000), min_queue{}, kv);
  REQUIRE(s.submit(req(1, 90), 0));
  bool aborted = false;
  for (int step = 0; step < 100 && !s.idle(); ++step) {
    const batch& b = s.schedule(step);
    aborted = aborted || !b.aborted.empty();
    s.complete({});
  }
  CHECK(aborted);
  CHECK(s.idle());
}

TEST_CASE("prefill-first in the simulator: stalls raise TBT against Sarathi; runs in clusters",
          "[sched][prefill_first][sim]") {
  const cost_model m(mistral_7b_a100());
  generator_options g;
  g.seed = 4;
  g.requests = 300;
  g.rate_per_s = 1.5;
  g.prompt = {1500.0, 0.8, 16, 6000};
  g.output = {200.0, 1.0, 1, 1000};
  const workload w = poisson_workload(g);
  prefill_first_scheduler<> vllm(vllm_baseline(128, 8192), fcfs_queue{}, kv_for(m));
  iteration_scheduler<> sarathi(chunked_prefill(512, 128), fcfs_queue{}, kv_for(m));
  const sim_result a = simulate(vllm, w, m);
  const sim_result b = simulate(sarathi, w, m);
  CAPTURE(a.stats.tbt_p99, b.stats.tbt_p99);
  CHECK(a.stats.finished == 300);
  CHECK(b.stats.finished == 300);
  CHECK(a.stats.tbt_p99 > b.stats.tbt_p99);
  CHECK(a.stats.sched_delay_p50 <= b.stats.sched_delay_p50 + 1.0);
  using sched_t = prefill_first_scheduler<>;
  const std::function<std::unique_ptr<sched_t>()> make = [&] {
    return std::make_unique<sched_t>(vllm_baseline(128, 8192), fcfs_queue{}, kv_for(m));
  };
  cluster_options c;
  const cluster_result d = simulate_disaggregated(make, w, m, c);
  CHECK(d.result.stats.finished == 300);
  const cluster_result co = simulate_colocated(make, w, m, c);
  CHECK(co.result.stats.finished == 300);
}

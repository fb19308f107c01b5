// KV borrowing between colocated instances (Infinite-LLM) in the simulator.
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/sim/cluster.hpp>

#include <catch2/catch.hpp>

using namespace weft::sched;
using namespace weft::sched::sim;

namespace {
using sched_t = iteration_scheduler<>;

std::function<std::unique_ptr<sched_t>()> factory(const cost_model& m, std::int64_t blocks) {
  return [&m, blocks] {
    weft::kv::kv_config kv = m.kv_manager_config(16);
    kv.num_blocks = static_cast<std::size_t>(blocks) + 1;  // + the null block
    return std::make_unique<sched_t>(chunked_prefill(1024, 64), fcfs_queue{}, weft::kv::kv_manager<>(kv));
  };
}

// Short requests plus a few whose KV exceeds one instance's local_blocks (but not the cluster's).
workload mixed(std::int64_t long_prompt) {
  workload w;
  for (int i = 0; i < 40; ++i) {
    sim_request r;
    r.req.id = request_id(static_cast<std::uint64_t>(i + 1));
    r.req.prompt_tokens = (i % 10 == 3) ? long_prompt : 300 + 37 * (i % 7);
    r.req.arrival_s = 0.05 * i;
    r.output_tokens = 20 + i % 5;
    w.push_back(r);
  }
  return w;
}

cluster_options borrowing(std::int64_t local_blocks) {
  cluster_options c;
  c.instances = 3;
  c.borrowing.enabled = true;
  c.borrowing.local_blocks = local_blocks;
  c.borrowing.block_tokens = 16;
  c.borrowing.borrow_unit_blocks = 4;
  return c;
}
}  // namespace

TEST_CASE("distkv: requests larger than one instance finish by borrowing; alone they are rejected",
          "[sched][sim][distkv]") {
  const cost_model m(llama2_7b_a100());
  const std::int64_t local = 400;  // 6400 tokens per instance
  const workload w = mixed(9000);  // 4 requests of 9000-token prompts: > local, < 3 x local
  cluster_options alone;
  alone.instances = 3;
  const auto base = simulate_colocated<sched_t>(factory(m, local), w, m, alone);
  CHECK(base.result.stats.rejected == 4);
  CHECK(base.result.stats.finished == 36);

  const auto pooled = simulate_colocated<sched_t>(factory(m, 3 * local), w, m, borrowing(local));
  CHECK(pooled.result.stats.finished == 40);
  CHECK(pooled.result.stats.rejected == 0);
  CHECK(pooled.borrowing_requests >= 4);
  CHECK(pooled.peak_borrowed_blocks >= static_cast<std::size_t>((9000 + 20 + 15) / 16 - local));
  CHECK(pooled.remote_attention_bytes > 0.0);
  CHECK(pooled.remote_attention_s > 0.0);
  // Deterministic.
  const auto again = simulate_colocated<sched_t>(factory(m, 3 * local), w, m, borrowing(local));
  CHECK(again.result.stats.e2e_p99 == pooled.result.stats.e2e_p99);
  CHECK(again.remote_attention_bytes == pooled.remote_attention_bytes);
}

TEST_CASE("distkv: the remote-attention cost is charged to the borrowers' iterations", "[sched][sim][distkv]") {
  const cost_model m(llama2_7b_a100());
  const workload w = mixed(9000);
  cluster_options cheap = borrowing(400), dear = borrowing(400);
  cheap.borrowing.remote_round_trip_s = 0.0;
  dear.borrowing.remote_round_trip_s = 1e-3;  // 32 layers: +32 ms per iteration with remote KV
  const auto a = simulate_colocated<sched_t>(factory(m, 1200), w, m, cheap);
  const auto b = simulate_colocated<sched_t>(factory(m, 1200), w, m, dear);
  CHECK(a.result.stats.finished == 40);
  CHECK(b.result.stats.finished == 40);
  CHECK(b.remote_attention_s > a.remote_attention_s + 0.032);
  CHECK(b.result.stats.makespan_s > a.result.stats.makespan_s);
}

TEST_CASE("distkv: no borrowing when every request fits its own instance", "[sched][sim][distkv]") {
  const cost_model m(llama2_7b_a100());
  const workload w = mixed(900);
  const auto r = simulate_colocated<sched_t>(factory(m, 3 * 4000), w, m, borrowing(4000));
  CHECK(r.result.stats.finished == 40);
  CHECK(r.borrowing_requests == 0);
  CHECK(r.remote_attention_s == 0.0);
}

TEST_CASE("distkv: a request larger than the whole cluster is rejected, the rest finish", "[sched][sim][distkv]") {
  const cost_model m(llama2_7b_a100());
  const workload w = mixed(30000);  // 30000 tokens > 3 x 400 x 16
  const auto r = simulate_colocated<sched_t>(factory(m, 1200), w, m, borrowing(400));
  CHECK(r.result.stats.rejected == 4);
  CHECK(r.result.stats.finished == 36);
}

TEST_CASE("distkv: bad options are rejected", "[sched][sim][distkv]") {
  const cost_model m(llama2_7b_a100());
  const workload w = mixed(900);
  cluster_options c = borrowing(0);
  CHECK_THROWS_AS(simulate_colocated<sched_t>(factory(m, 1200), w, m, c), weft::error);
  c = borrowing(400);
  c.borrowing.borrow_unit_blocks = 0;
  CHECK_THROWS_AS(simulate_colocated<sched_t>(factory(m, 1200), w, m, c), weft::error);
  c = borrowing(400);
  c.borrowing.block_tokens = 0;
  CHECK_THROWS_AS(simulate_colocated<sched_t>(factory(m, 1200), w, m, c), weft::error);
  c.borrowing.block_tokens = std::int64_t{1} << 40;
  CHECK_THROWS_AS(simulate_colocated<sched_t>(factory(m, 1200), w, m, c), weft::error);
  c = borrowing(400);
  c.borrowing.remote_round_trip_s = -1.0;
  CHECK_THROWS_AS(simulate_colocated<sched_t>(factory(m, 1200), w, m, c), weft::error);
  c = borrowing(400);
  c.migration_interval_s = 1.0;
  CHECK_THROWS_AS(simulate_colocated<sched_t>(factory(m, 1200), w, m, c), weft::error);
  c = borrowing(400);
  CHECK_THROWS_AS(simulate_disaggregated<sched_t>(factory(m, 1200), w, m, c), weft::error);
}

TEST_CASE("distkv: attention over borrowed blocks runs on the creditors, in parallel", "[sched][sim][distkv]") {
  cost_params p = llama2_7b_a100();
  p.interconnect_bytes_per_s = 1e15;  // network nearly free: only the split of the attention shows
  const cost_model m(p);
  workload w(1);
  w[0].req.id = request_id(1);
  w[0].req.prompt_tokens = 18000;
  w[0].output_tokens = 50;
  cluster_options one;  // one instance holding the whole KV: all attention local
  one.instances = 3;
  const auto local = simulate_colocated<sched_t>(factory(m, 1200), w, m, one);
  cluster_options c = borrowing(400);  // a third local, two thirds on two creditors
  c.borrowing.remote_round_trip_s = 0.0;
  const auto split = simulate_colocated<sched_t>(factory(m, 1200), w, m, c);
  REQUIRE(local.result.stats.finished == 1);
  REQUIRE(split.result.stats.finished == 1);
  CHECK(split.borrowing_requests == 1);
  CHECK(split.result.stats.e2e_p50 < local.result.stats.e2e_p50);
}

TEST_CASE("distkv on demand: admission holds the prompt, blocks are added as requests grow", "[sched][sim][distkv]") {
  const cost_model m(llama2_7b_a100());
  // 60 requests of 300-600 prompt and 400-800 output tokens arriving together: whole reservations
  // (prompt + output, ~70 blocks each) let few run at once; on demand each holds ~30 blocks at first.
  workload w;
  for (int i = 0; i < 60; ++i) {
    sim_request r;
    r.req.id = request_id(static_cast<std::uint64_t>(i + 1));
    r.req.prompt_tokens = 300 + 5 * i;
    r.req.arrival_s = 0.001 * i;
    r.output_tokens = 400 + 7 * i;
    w.push_back(r);
  }
  const std::int64_t local = 300;  // 4800 tokens per instance, 3 instances
  cluster_options whole = borrowing(local), grown = borrowing(local);
  grown.borrowing.on_demand = true;
  const auto a = simulate_colocated<sched_t>(factory(m, 3 * local), w, m, whole);
  const auto b = simulate_colocated<sched_t>(factory(m, 3 * local), w, m, grown);
  CHECK(a.result.stats.finished == 60);
  CHECK(b.result.stats.finished == 60);
  CHECK(a.borrow_preemptions == 0);
  // Every request produced exactly its output, preempted or not.
  for (std::size_t i = 0; i < w.size(); ++i) CHECK(b.result.records[i].output_tokens == w[i].output_tokens);
  // More requests run at once: the run ends sooner and the queue is shorter.
  CHECK(b.result.stats.makespan_s < a.result.stats.makespan_s);
  CHECK(b.result.stats.ttft_p50 < a.result.stats.ttft_p50);
  // The cluster filled up as requests grew: latest arrivals were preempted by recompute, and owners
  // took lent blocks back for their own requests.
  CHECK(b.borrow_preemptions > 0);
  CHECK(b.reclaimed_blocks > 0);
  CHECK(b.reclaim_s > 0.0);
  // Deterministic.
  const auto c = simulate_colocated<sched_t>(factory(m, 3 * local), w, m, grown);
  CHECK(c.result.stats.e2e_p99 == b.result.stats.e2e_p99);
  CHECK(c.borrow_preemptions == b.borrow_preemptions);
  CHECK(c.reclaimed_blocks == b.reclaimed_blocks);

  // With room for everything, on demand changes nothing but when blocks are taken: no preemption.
  const auto roomy = simulate_colocated<sched_t>(factory(m, 3 * 4000), w, m, [] {
    cluster_options o = borrowing(4000);
    o.borrowing.on_demand = true;
    return o;
  }());
  CHECK(roomy.result.stats.finished == 60);
  CHECK(roomy.borrow_preemptions == 0);
  CHECK(roomy.reclaimed_blocks == 0);

  // on_demand without borrowing is a mistake, not ignored.
  cluster_options off;
  off.instances = 3;
  off.borrowing.on_demand = true;
  CHECK_THROWS_AS(simulate_colocated<sched_t>(factory(m, local), w, m, off), weft::error);
}

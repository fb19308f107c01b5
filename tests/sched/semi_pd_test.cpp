// semi-PD in the simulator (semi_pd.hpp): the partitioned cost, the share controller, one KV pool per
// instance, no KV transfer, option checks and determinism.
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/sim/semi_pd.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <utility>

using namespace weft::sched;
using namespace weft::sched::sim;

namespace {

const std::string data = WEFT_DATA_DIR;
using worker_t = iteration_scheduler<fcfs_queue, shared_kv_pool<>>;

struct factories {
  std::function<std::unique_ptr<weft::kv::kv_manager<>>()> pool;
  std::function<std::unique_ptr<worker_t>(shared_kv_pool<>, semi_pd_worker)> worker;
  int* made = nullptr;
};

factories make(const cost_model& m, int* made = nullptr, std::int64_t blocks = 0) {
  factories f;
  f.made = made;
  f.pool = [&m, made, blocks] {
    if (made) ++*made;
    weft::kv::kv_config kv = m.kv_manager_config(16);
    if (blocks > 0) kv.num_blocks = static_cast<std::size_t>(blocks) + 1;  // + the null block
    return std::make_unique<weft::kv::kv_manager<>>(kv);
  };
  f.worker = [made](shared_kv_pool<> kv, semi_pd_worker role) {
    if (made) ++*made;
    // Whole prompts on the prefill worker (they never grow there); decodes with a Sarathi budget.
    return std::make_unique<worker_t>(
        role == semi_pd_worker::prefill ? continuous_batching(256, 8192) : chunked_prefill(2048, 256), fcfs_queue{},
        kv);
  };
  return f;
}

workload load(std::uint64_t seed, std::size_t n, double rate, length_dist prompt, length_dist output) {
  generator_options g;
  g.seed = seed;
  g.requests = n;
  g.rate_per_s = rate;
  g.prompt = prompt;
  g.output = output;
  return poisson_workload(g);
}

std::size_t multi_token(const workload& w) {
  std::size_t n = 0;
  for (const auto& r : w) n += r.output_tokens > 1;
  return n;
}

iteration_shape prefill_chunk() {
  iteration_shape s;
  s.tokens = 2048;
  s.attention_pairs = 2048.0 * 2049.0 / 2.0;
  s.kv_read_tokens = 2048;
  s.requests = 1;
  return s;
}

iteration_shape decodes(double n, double ctx) {
  iteration_shape s;
  s.tokens = n;
  s.attention_pairs = n * ctx;
  s.kv_read_tokens = n * ctx;
  s.requests = n;
  return s;
}

}  // namespace

TEST_CASE("partitioned cost: the whole GPU is iteration_s; compute scales by 1/share, memory by bandwidth",
          "[sched][sim][semi_pd]") {
  semi_pd_options o;
  o.memory_interference = 0.0;
  const cost_model roof(llama2_7b_a100());
  cost_params p = llama2_7b_a100();
  const cost_model measured(p, load_vidur_profile(data + "/vidur", "a100", "Llama-2-7b-hf", p.model.shape(), 1));
  for (const cost_model* m : {&roof, &measured}) {
    for (const iteration_shape& s : {prefill_chunk(), decodes(64, 1000), decodes(1, 10)})
      CHECK(partitioned_iteration_s(*m, s, 1.0, o) == m->iteration_s(s));
    // A compute-bound prefill on half the SMs: its GPU time (not the CPU overheads) doubles.
    const double cpu = m->params().iteration_overhead_s + m->params().per_request_overhead_s;
    const double full = partitioned_iteration_s(*m, prefill_chunk(), 1.0, o) - cpu;
    const double half = partitioned_iteration_s(*m, prefill_chunk(), 0.5, o) - cpu;
    CHECK(half > 1.8 * full);
    CHECK(half < 2.0 * full + 1e-12);
    // Memory-bound decodes keep the whole bandwidth down to the saturation share, then slow down.
    const double d1 = partitioned_iteration_s(*m, decodes(16, 500), 1.0, o);
    CHECK(partitioned_iteration_s(*m, decodes(16, 500), 0.5, o) == Approx(d1).epsilon(1e-9));
    CHECK(partitioned_iteration_s(*m, decodes(16, 500), 0.2, o) > d1);
  }
  o.memory_interference = 0.1;  // the other worker's traffic slows memory-bound terms
  CHECK(partitioned_iteration_s(roof, decodes(16, 500), 0.5, o) > roof.iteration_s(decodes(16, 500)));
  CHECK_THROWS_AS(partitioned_iteration_s(roof, decodes(1, 1), 0.0, o), weft::error);
  CHECK_THROWS_AS(partitioned_iteration_s(roof, decodes(1, 1), 1.5, o), weft::error);
  cost_params nano = llama2_7b_a100();
  nano.nano.nano_batches = 2;
  CHECK_THROWS_AS(partitioned_iteration_s(cost_model(nano), decodes(1, 1), 0.5, o), weft::error);
}

TEST_CASE("semi-PD: one pool per instance, no KV transfer, every block back at the end", "[sched][sim][semi_pd]") {
  const cost_model m(llama2_7b_a100());
  const workload w = load(21, 300, 4.0, {1200.0, 0.8, 16, 6000}, {120.0, 1.0, 1, 800});
  for (const std::int64_t blocks :
       {std::int64_t{0},
        std::int64_t{960}}) {  // the model's pool, then a tight one (longest request + a prefill batch fit)
    CAPTURE(blocks);
    const factories f = make(m, nullptr, blocks);
    semi_pd_options o;
    o.instances = 2;
    sim_options so;
    so.token_ids = false;
    const semi_pd_result r = simulate_semi_pd<worker_t>(f.pool, f.worker, w, m, o, so);
    CAPTURE(r.cluster.result.stats.rejected, r.cluster.result.stats.aborted, r.cluster.result.stats.preemptions);
    CHECK(r.cluster.result.stats.finished == w.size());
    CHECK(r.cluster.result.stats.aborted == 0);
    CHECK(r.cluster.kv_transfers == 0);
    CHECK(r.cluster.kv_transfer_s == 0.0);
    CHECK(r.handovers == multi_token(w));
    REQUIRE(r.free_blocks.size() == 2);
    for (std::size_t k = 0; k < 2; ++k) CHECK(r.free_blocks[k] == r.usable_blocks[k]);
    if (blocks > 0) {  // the workers contend for the one pool: the decode worker preempts, nothing aborts
      CHECK(r.usable_blocks[0] <= static_cast<std::size_t>(blocks));
      CHECK(r.cluster.result.stats.preemptions > 0);
    }
  }
}

TEST_CASE("semi-PD controller: prefill-heavy load moves the share to prefill, decode-heavy to decode",
          "[sched][sim][semi_pd]") {
  const cost_model m(llama2_7b_a100());
  semi_pd_options o;
  o.prefill_share = 0.5;
  o.min_share = 0.2;
  o.max_share = 0.8;
  o.share_step = 0.1;
  o.control_interval_s = 1.0;
  o.ttft_slo_s = 0.5;
  o.tpot_slo_s = 0.1;
  const factories f = make(m);
  // Long prompts, a few output tokens: the prefill worker's queue sets the pace.
  const workload prefill_heavy = load(3, 300, 6.0, {3000.0, 0.3, 512, 6000}, {4.0, 0.5, 2, 8});
  const semi_pd_result p = simulate_semi_pd<worker_t>(f.pool, f.worker, prefill_heavy, m, o);
  // Short prompts, long answers: many concurrent decodes.
  const workload decode_heavy = load(4, 300, 8.0, {64.0, 0.3, 16, 128}, {400.0, 0.3, 200, 800});
  const semi_pd_result d = simulate_semi_pd<worker_t>(f.pool, f.worker, decode_heavy, m, o);
  CAPTURE(p.mean_prefill_share, d.mean_prefill_share, p.shares.size(), d.shares.size());
  CHECK(p.cluster.result.stats.finished == prefill_heavy.size());
  CHECK(d.cluster.result.stats.finished == decode_heavy.size());
  CHECK(p.shares.back().prefill_share > o.prefill_share);
  CHECK(p.mean_prefill_share > o.prefill_share);
  CHECK(d.shares.back().prefill_share < o.prefill_share);
  CHECK(d.mean_prefill_share < o.prefill_share);
  for (const semi_pd_result* r : {&p, &d}) {
    REQUIRE(r->shares.size() >= 2);
    CHECK(r->shares.front().time_s == Approx(0.0).margin(60.0));
    for (std::size_t i = 0; i < r->shares.size(); ++i) {
      CHECK(r->shares[i].prefill_share >= o.min_share - 1e-12);
      CHECK(r->shares[i].prefill_share <= o.max_share + 1e-12);
      if (i > 0) CHECK(r->shares[i].time_s >= r->shares[i - 1].time_s);
    }
  }
  // The prefill-heavy load pins the share at its bound and holds it there.
  CHECK(p.shares.back().prefill_share == Approx(o.max_share));
  // A fixed share never moves.
  o.adaptive = false;
  const semi_pd_result fixed = simulate_semi_pd<worker_t>(f.pool, f.worker, prefill_heavy, m, o);
  REQUIRE(fixed.shares.size() == 1);
  CHECK(fixed.mean_prefill_share == Approx(0.5));
  CHECK(fixed.cluster.result.stats.ttft_p50 > p.cluster.result.stats.ttft_p50);
}

TEST_CASE("semi-PD: deterministic", "[sched][sim][semi_pd]") {
  const cost_model m(llama2_7b_a100());
  const workload w = load(8, 200, 5.0, {800.0, 1.0, 16, 4000}, {150.0, 1.0, 1, 600});
  const factories f = make(m);
  semi_pd_options o;
  o.control_interval_s = 0.5;
  sim_options so;
  so.time_noise_cv = 0.1;
  so.seed = 7;
  const semi_pd_result a = simulate_semi_pd<worker_t>(f.pool, f.worker, w, m, o, so);
  const semi_pd_result b = simulate_semi_pd<worker_t>(f.pool, f.worker, w, m, o, so);
  CHECK(a.cluster.result.stats.e2e_p99 == b.cluster.result.stats.e2e_p99);
  CHECK(a.cluster.result.stats.ttft_p90 == b.cluster.result.stats.ttft_p90);
  CHECK(a.cluster.result.stats.makespan_s == b.cluster.result.stats.makespan_s);
  REQUIRE(a.shares.size() == b.shares.size());
  for (std::size_t i = 0; i < a.shares.size(); ++i) {
    CHECK(a.shares[i].time_s == b.shares[i].time_s);
    CHECK(a.shares[i].prefill_share == b.shares[i].prefill_share);
  }
  CHECK(a.mean_prefill_share == b.mean_prefill_share);
}

TEST_CASE("semi-PD: bad options are rejected before anything is made", "[sched][sim][semi_pd]") {
  const cost_model m(llama2_7b_a100());
  const workload w = load(1, 10, 1.0, {100.0, 0.5, 16, 400}, {10.0, 0.5, 1, 40});
  int made = 0;
  const factories f = make(m, &made);
  const auto bad = [&](auto change) {
    semi_pd_options o;
    change(o);
    CHECK_THROWS_AS(simulate_semi_pd<worker_t>(f.pool, f.worker, w, m, o), weft::error);
  };
  bad([](semi_pd_options& o) { o.instances = 0; });
  bad([](semi_pd_options& o) { o.prefill_share = 0.0; });
  bad([](semi_pd_options& o) { o.prefill_share = 1.0; });
  bad([](semi_pd_options& o) { o.prefill_share = std::nan(""); });
  bad([](semi_pd_options& o) { o.min_share = 0.6; });  // above the start share
  bad([](semi_pd_options& o) { o.max_share = 0.4; });
  bad([](semi_pd_options& o) { o.max_share = 1.0; });
  bad([](semi_pd_options& o) { o.share_step = 0.0; });
  bad([](semi_pd_options& o) { o.share_step = 1.0; });
  bad([](semi_pd_options& o) { o.control_interval_s = 0.0; });
  bad([](semi_pd_options& o) { o.ttft_slo_s = -1.0; });
  bad([](semi_pd_options& o) { o.tpot_slo_s = std::numeric_limits<double>::infinity(); });
  bad([](semi_pd_options& o) { o.bandwidth_saturation_share = 0.0; });
  bad([](semi_pd_options& o) { o.bandwidth_saturation_share = 1.5; });
  bad([](semi_pd_options& o) { o.memory_interference = -0.1; });
  CHECK(made == 0);
  cost_params nano = llama2_7b_a100();
  nano.nano.nano_batches = 2;
  CHECK_THROWS_AS(simulate_semi_pd<worker_t>(f.pool, f.worker, w, cost_model(nano)), weft::error);
  CHECK(made == 0);
  sim_options bad_sim;
  bad_sim.window_s = 0.0;
  CHECK_THROWS_AS(simulate_semi_pd<worker_t>(f.pool, f.worker, w, m, {}, bad_sim), weft::error);
  workload unsorted = w;
  std::swap(unsorted.front().req.arrival_s, unsorted.back().req.arrival_s);
  CHECK_THROWS_AS(simulate_semi_pd<worker_t>(f.pool, f.worker, unsorted, m), weft::error);
  CHECK(made == 0);
  const std::function<std::unique_ptr<weft::kv::kv_manager<>>()> none;
  CHECK_THROWS_AS(simulate_semi_pd<worker_t>(none, f.worker, w, m), weft::error);
  CHECK(made == 0);
  // Good options run.
  const semi_pd_result r = simulate_semi_pd<worker_t>(f.pool, f.worker, w, m);
  CHECK(r.cluster.result.stats.finished == w.size());
  CHECK(made == 3);
}

TEST_CASE("semi-PD model-based share search: predicts each split from the cost model, moves the right way",
          "[sched][sim][semi_pd]") {
  const cost_model m(llama2_7b_a100());
  semi_pd_options o;
  o.controller = semi_pd_options::control::model;
  o.min_share = 0.2;
  o.max_share = 0.8;
  o.share_step = 0.1;
  o.control_interval_s = 1.0;
  o.ttft_slo_s = 0.5;
  o.tpot_slo_s = 0.1;
  const factories f = make(m);
  const workload prefill_heavy = load(3, 300, 6.0, {3000.0, 0.3, 512, 6000}, {4.0, 0.5, 2, 8});
  const workload decode_heavy = load(4, 300, 8.0, {64.0, 0.3, 16, 128}, {400.0, 0.3, 200, 800});
  const semi_pd_result p = simulate_semi_pd<worker_t>(f.pool, f.worker, prefill_heavy, m, o);
  const semi_pd_result d = simulate_semi_pd<worker_t>(f.pool, f.worker, decode_heavy, m, o);
  CAPTURE(p.mean_prefill_share, d.mean_prefill_share);
  CHECK(p.cluster.result.stats.finished == prefill_heavy.size());
  CHECK(d.cluster.result.stats.finished == decode_heavy.size());
  CHECK(p.mean_prefill_share > 0.5);  // prompts dominate: prefill gets the SMs
  CHECK(d.mean_prefill_share < 0.5);  // decodes dominate
  for (const semi_pd_result* r : {&p, &d})
    for (const auto& x : r->shares)
      CHECK((x.prefill_share >= o.min_share - 1e-12 && x.prefill_share <= o.max_share + 1e-12));
  // It jumps to the predicted best share rather than stepping: its first move may be several steps.
  REQUIRE(p.shares.size() >= 2);
  // Deterministic.
  const semi_pd_result again = simulate_semi_pd<worker_t>(f.pool, f.worker, prefill_heavy, m, o);
  CHECK(again.cluster.result.stats.e2e_p99 == p.cluster.result.stats.e2e_p99);
  CHECK(again.shares.size() == p.shares.size());
  // A controller that is neither is refused.
  o.controller = static_cast<semi_pd_options::control>(7);
  CHECK_THROWS_AS(simulate_semi_pd<worker_t>(f.pool, f.worker, prefill_heavy, m, o), weft::error);
}

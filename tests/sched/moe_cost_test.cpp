// The MoE cost model (sim/moe_cost.hpp, cost_model with model_spec::moe): routing models and their
// bad input, the expert table against the formula it tabulates, chunked prefill reading the experts
// again per chunk where layered prefill does not, and the simulator reporting expert traffic.
#include <weft/sched/batch.hpp>
#include <weft/sched/chunked_prefill.hpp>
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/layered_prefill.hpp>
#include <weft/sched/sim/semi_pd.hpp>
#include <weft/sched/sim/simulator.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

using namespace weft::sched;
using namespace weft::sched::sim;

namespace {

batch_entry decode(std::uint64_t id, std::int64_t context) {
  batch_entry e;
  e.id = request_id(id);
  e.decode_tokens = 1;
  e.context_tokens = context;
  e.emits_token = true;
  return e;
}

batch_entry prefill(std::uint64_t id, std::int64_t tokens, std::int64_t context, layer_range layers = {}) {
  batch_entry e;
  e.id = request_id(id);
  e.prefill_tokens = tokens;
  e.context_tokens = context;
  e.layers = layers;
  e.emits_token = layers.reaches_output();
  return e;
}

// The formula moe_table tabulates, for one layer of a uniform routing.
double expert_layer_s(const cost_params& p, double tokens) {
  const model_spec& m = p.model;
  const double w = m.expert_params() / p.tensor_parallel, q = 1.0 * m.moe.top_k / m.moe.experts;
  const double flops = p.gpu.peak_flops * p.compute_efficiency, bw = p.gpu.hbm_bytes_per_s * p.memory_efficiency;
  const double active = 1.0 - std::pow(1.0 - q, tokens);
  double t = m.moe.experts * std::max(2.0 * tokens * q * w / flops, active * w * m.weight_bytes / bw);
  const double s = m.shared_expert_params() / p.tensor_parallel;
  if (s > 0) t += std::max(2.0 * tokens * s / flops, s * m.weight_bytes / bw);
  return t;
}

}  // namespace

TEST_CASE("routing models: probabilities sum to top_k, bad input is refused", "[sched][moe_cost]") {
  const routing_model u = routing_model::uniform(4, 8, 2);
  CHECK(u.layers() == 4);
  CHECK(u.experts() == 8);
  CHECK(u.top_k() == 2);
  CHECK(u.layer(3)[7] == Approx(0.25));
  // 16 tokens, each picking 2 of 8: 8 * (1 - 0.75^16) experts expected.
  CHECK(u.active_experts(0, 16) == Approx(8.0 * (1.0 - std::pow(0.75, 16))));
  CHECK(u.active_experts(0, 0) == 0.0);

  const routing_model z = routing_model::zipf(3, 16, 4, 1.2, 7);
  for (int l = 0; l < 3; ++l) {
    const auto row = z.layer(l);
    CHECK(std::accumulate(row.begin(), row.end(), 0.0) == Approx(4.0));
    for (double q : row) CHECK((q >= 0.0 && q <= 1.0));
    CHECK(*std::max_element(row.begin(), row.end()) > 0.25);  // skewed: a hot expert above uniform
  }
  // Skew makes fewer distinct experts active for the same tokens than uniform routing.
  CHECK(z.active_experts(0, 8) < routing_model::uniform(3, 16, 4).active_experts(0, 8));
  // Zipf(0) is uniform.
  const routing_model z0 = routing_model::zipf(2, 6, 3, 0.0);
  for (double q : z0.layer(1)) CHECK(q == Approx(0.5));
  // A very skewed Zipf caps the hottest experts at 1 and still sums to top_k.
  const routing_model hot = routing_model::zipf(1, 8, 3, 6.0);
  const auto hot_row = hot.layer(0);
  CHECK(std::count(hot_row.begin(), hot_row.end(), 1.0) >= 2);
  CHECK(std::accumulate(hot_row.begin(), hot_row.end(), 0.0) == Approx(3.0));

  // Counts of a trace of 10 tokens, top-2 of 4: p = count / 10.
  const routing_model c = routing_model::from_counts(2, {{10, 5, 5, 0}, {4, 4, 6, 6}});
  CHECK(c.layer(0)[0] == Approx(1.0));
  CHECK(c.layer(0)[1] == Approx(0.5));
  CHECK(c.layer(0)[3] == 0.0);
  CHECK(c.layer(1)[2] == Approx(0.6));
  CHECK(c.active_experts(0, 3) == Approx(1.0 + 2 * (1 - 0.125)));

  CHECK_THROWS_AS(routing_model::uniform(0, 8, 2), weft::error);
  CHECK_THROWS_AS(routing_model::uniform(4, 0, 1), weft::error);
  CHECK_THROWS_AS(routing_model::uniform(4, 8, 9), weft::error);
  CHECK_THROWS_AS(routing_model::uniform(4, 8, 0), weft::error);
  CHECK_THROWS_AS(routing_model::uniform(4, routing_model::max_experts + 1, 2), weft::error);
  CHECK_THROWS_AS(routing_model::zipf(4, 8, 2, -0.5), weft::error);
  CHECK_THROWS_AS(routing_model::zipf(4, 8, 2, std::numeric_limits<double>::quiet_NaN()), weft::error);
  CHECK_THROWS_AS(routing_model::from_counts(2, {}), weft::error);
  CHECK_THROWS_AS(routing_model::from_counts(2, {{}}), weft::error);
  CHECK_THROWS_AS(routing_model::from_counts(2, {{1, 1, 1}, {1, 1}}), weft::error);     // ragged
  CHECK_THROWS_AS(routing_model::from_counts(2, {{1, -1, 1}}), weft::error);            // negative
  CHECK_THROWS_AS(routing_model::from_counts(2, {{1, std::nan(""), 1}}), weft::error);  // not a number
  CHECK_THROWS_AS(routing_model::from_counts(2, {{3, 0, 0, 0}}), weft::error);          // one expert for top-2
  CHECK_THROWS_AS(routing_model::from_counts(0, {{1, 1}}), weft::error);
  CHECK_THROWS_AS(u.layer(4), weft::error);
  CHECK_THROWS_AS(u.layer(-1), weft::error);
  CHECK_THROWS_AS(u.active_experts(0, -1.0), weft::error);
}

TEST_CASE("MoE cost model: bad specs and combinations are refused", "[sched][moe_cost]") {
  CHECK_NOTHROW(cost_model(mixtral_8x7b_h100_tp2()));
  CHECK_NOTHROW(cost_model(qwen15_moe_a27b_a100()));
  const auto refused = [](auto change) {
    cost_params p = qwen15_moe_a27b_a100();
    change(p);
    CHECK_THROWS_AS(cost_model(p), weft::error);
  };
  refused([](cost_params& p) { p.model.moe.top_k = 61; });
  refused([](cost_params& p) { p.model.moe.top_k = 0; });
  refused([](cost_params& p) { p.model.moe.expert_intermediate = 0; });
  refused([](cost_params& p) { p.model.moe.shared_intermediate = 0; });  // one shared expert of width 0
  refused([](cost_params& p) { p.model.moe.shared_experts = -1; });
  refused([](cost_params& p) { p.model.moe.experts = -2; });
  refused([](cost_params& p) { p.moe_layer_overhead_s = -1e-6; });
  refused([](cost_params& p) { p.moe_layer_overhead_s = std::numeric_limits<double>::infinity(); });
  refused([](cost_params& p) { p.expert_compute_efficiency = 1.5; });
  refused([](cost_params& p) { p.expert_compute_efficiency = -0.1; });
  refused([](cost_params& p) { p.nano.nano_batches = 2; });                        // not modelled for MoE
  refused([](cost_params& p) { p.routing = routing_model::uniform(23, 60, 4); });  // wrong layer count
  refused([](cost_params& p) { p.routing = routing_model::uniform(24, 64, 4); });  // wrong expert count
  refused([](cost_params& p) { p.routing = routing_model::uniform(24, 60, 2); });  // wrong top_k
  // A routing model for a dense model is a mistake, not ignored.
  cost_params dense = llama2_7b_a100();
  dense.routing = routing_model::uniform(32, 8, 2);
  CHECK_THROWS_AS(cost_model(dense), weft::error);
  // semi-PD's SM partition of an MoE layer is not modelled.
  const cost_model m(qwen15_moe_a27b_a100());
  CHECK_THROWS_AS(partitioned_iteration_s(m, iteration_shape{64, 64 * 100.0, 64 * 100.0, 64}, 0.5, semi_pd_options{}),
                  weft::error);
}

TEST_CASE("MoE cost model: the expert table matches its formula, dense models are untouched", "[sched][moe_cost]") {
  for (const cost_params& p : {mixtral_8x7b_h100_tp2(), qwen15_moe_a27b_a100()}) {
    const cost_model m(p);
    const double layers = p.model.layers;
    for (double t : {1.0, 2.0, 7.0, 64.0, 127.5, 128.0, 300.0, 1000.0, 4096.0, 12345.0, 500000.0}) {
      // linear_layers_s less its dense part and overheads is the experts' time over all layers.
      const double w =
          (p.model.attention_params_per_layer() + 1.0 * p.model.hidden * p.model.moe.experts) / p.tensor_parallel;
      const double dense = p.layer_overhead_s + p.moe_layer_overhead_s +
                           std::max(2.0 * w * t / (p.gpu.peak_flops * p.compute_efficiency),
                                    w * p.model.weight_bytes / (p.gpu.hbm_bytes_per_s * p.memory_efficiency));
      const double experts = m.linear_layers_s(t, 0, layers) - layers * dense;
      CHECK(experts == Approx(layers * expert_layer_s(p, t)).epsilon(2e-3));
      // Half the layers cost half (uniform routing: every layer alike).
      CHECK(m.linear_layers_s(t, 0, layers / 2) == Approx(m.linear_layers_s(t, 0, layers) / 2).epsilon(1e-9));
    }
    // Bytes: few tokens read few experts; many read all of them once per layer.
    const double all = p.model.layers *
                       (p.model.moe.experts * p.model.expert_params() + p.model.shared_expert_params()) *
                       p.model.weight_bytes;
    CHECK(m.expert_bytes(iteration_shape{1, 1, 1, 1}) ==
          Approx(p.model.layers * (p.model.moe.top_k * p.model.expert_params() + p.model.shared_expert_params()) *
                 p.model.weight_bytes)
              .epsilon(1e-9));
    CHECK(m.expert_bytes(iteration_shape{50000, 0, 0, 1}) == Approx(all).epsilon(1e-6));
  }
  const cost_model dense(llama2_7b_a100());
  CHECK(dense.expert_bytes(iteration_shape{512, 512 * 256.0, 512, 1}) == 0.0);
  batch b;
  b.entries = {decode(1, 100), prefill(2, 512, 512)};
  CHECK(dense.expert_bytes(b) == 0.0);
  // Dense: linear_layers_s is the layer count times linear_layer_s.
  CHECK(dense.linear_layers_s(300, 0, 32) == Approx(32 * dense.linear_layer_s(300)));
}

TEST_CASE("MoE cost model: a layer-group batch is priced per stretch like a whole one", "[sched][moe_cost]") {
  cost_params p = qwen15_moe_a27b_a100();
  p.per_request_overhead_s = 0.0;  // the split batch has two entries for one request's work
  const cost_model m(p);
  // One prompt of 2000 tokens through layers [0, 23) and the same through [23, 24): every layer sees
  // exactly the tokens of one whole-model pass.
  batch split;
  split.entries = {prefill(1, 2000, 2000, {0, 23, 24}), prefill(2, 2000, 2000, {23, 24, 24})};
  batch whole;
  whole.entries = {prefill(1, 2000, 2000)};
  CHECK(m.iteration_s(split) == Approx(m.iteration_s(whole)).epsilon(1e-9));
  CHECK(m.expert_bytes(split) == Approx(m.expert_bytes(whole)).epsilon(1e-9));
}

TEST_CASE("MoE cost model: chunks reload experts, layer groups do not", "[sched][moe_cost]") {
  // Qwen1.5-MoE: 60 experts, top-4. 16 decodes activate ~40 of 60 experts per layer; a 4096-token
  // prompt activates all 60. Chunked prefill (8 chunks of 512) runs the prompt beside the decodes
  // for 8 iterations through every layer; layered prefill (8 groups) runs it through 3 layers each.
  const cost_model m(qwen15_moe_a27b_a100());
  const int layers = 24, groups = 8, chunk = 512, prompt = 4096, decodes = 16;
  double chunked_bytes = 0, layered_bytes = 0, chunked_s = 0, layered_s = 0;
  for (int i = 0; i < groups; ++i) {
    batch c, l;
    for (int d = 0; d < decodes; ++d) {
      c.entries.push_back(decode(10 + static_cast<std::uint64_t>(d), 1000));
      l.entries.push_back(decode(10 + static_cast<std::uint64_t>(d), 1000));
    }
    c.entries.push_back(prefill(1, chunk, chunk * (i + 1)));
    l.entries.push_back(prefill(1, prompt, prompt, {i * layers / groups, (i + 1) * layers / groups, layers}));
    chunked_bytes += m.expert_bytes(c);
    layered_bytes += m.expert_bytes(l);
    chunked_s += m.iteration_s(c);
    layered_s += m.iteration_s(l);
  }
  // Chunked: 8 x all 60 experts in all 24 layers. Layered: all 60 in each layer once, the decodes'
  // ~40 in the other 7 passes.
  const routing_model u = routing_model::uniform(layers, 60, 4);
  const double per_expert = qwen15_moe_a27b().expert_params() * 2;  // bytes
  const double shared = qwen15_moe_a27b().shared_expert_params() * 2;
  CHECK(chunked_bytes == Approx(groups * layers * (60 * per_expert + shared)).epsilon(1e-3));
  CHECK(layered_bytes == Approx(layers * (60 * per_expert + shared) +
                                (groups - 1) * layers * (u.active_experts(0, decodes) * per_expert + shared))
                             .epsilon(1e-3));
  CHECK(chunked_bytes > 1.2 * layered_bytes);
  // Time: below the experts' ridge (top_k * tokens / experts < ~100 tokens per expert) a chunk's
  // compute hides under the reads of every expert, so a 512-token chunk costs little more than a
  // 128-token one (both read all 60 experts) and the prompt's cost is the reads it repeats: chunks of
  // 128 take 32 such iterations, layered prefill 8 iterations of compute-bound groups.
  const auto with_chunk = [&](int n) {
    batch c;
    for (int d = 0; d < decodes; ++d) c.entries.push_back(decode(10 + static_cast<std::uint64_t>(d), 1000));
    c.entries.push_back(prefill(1, n, n));
    return m.iteration_s(c);
  };
  CHECK(with_chunk(512) < 1.1 * with_chunk(128));
  CHECK(prompt / 128 * with_chunk(128) > 2 * layered_s);

  // A dense model (Llama-2-7B) has nothing to reload: the two splits' costs are closer.
  const cost_model dense(llama2_7b_a100());
  double dc = 0, dl = 0;
  for (int i = 0; i < groups; ++i) {
    batch c, l;
    for (int d = 0; d < decodes; ++d) {
      c.entries.push_back(decode(10 + static_cast<std::uint64_t>(d), 1000));
      l.entries.push_back(decode(10 + static_cast<std::uint64_t>(d), 1000));
    }
    c.entries.push_back(prefill(1, chunk, chunk * (i + 1)));
    l.entries.push_back(prefill(1, prompt, prompt, {i * 32 / groups, (i + 1) * 32 / groups, 32}));
    dc += dense.iteration_s(c);
    dl += dense.iteration_s(l);
  }
  CHECK(dc / dl < chunked_s / layered_s);
}

TEST_CASE("MoE cost model in the simulator: expert traffic is reported, runs are deterministic", "[sched][moe_cost]") {
  cost_params p = qwen15_moe_a27b_a100();
  p.routing = routing_model::zipf(24, 60, 4, 0.8, 3);
  p.iteration_overhead_s = 2e-3;
  p.per_request_overhead_s = 20e-6;
  const cost_model m(p);
  generator_options g;
  g.requests = 60;
  g.rate_per_s = 20;
  g.prompt = {1500.0, 1.0, 1, 8192};
  g.output = {40.0, 1.0, 1, 256};
  const workload w = poisson_workload(g);
  const auto run_chunked = [&] {
    iteration_scheduler<> s(chunked_prefill(256, 64), fcfs_queue{}, weft::kv::kv_manager<>(m.kv_manager_config(16)));
    return simulate(s, w, m);
  };
  const auto run_layered = [&] {
    layered_prefill_scheduler<> s(layered_prefill(24, 6, 8192, 64), fcfs_queue{},
                                  weft::kv::kv_manager<>(m.kv_manager_config(16)));
    return simulate(s, w, m);
  };
  const sim_result a = run_chunked(), b = run_chunked(), c = run_layered();
  CHECK(a.stats.finished == 60);
  CHECK(c.stats.finished == 60);
  CHECK(a.stats.expert_bytes > 0.0);
  CHECK(a.stats.expert_bytes == b.stats.expert_bytes);
  CHECK(a.stats.ttft_p50 == b.stats.ttft_p50);
  // Chunks of 256 re-read the experts for every chunk of every prompt.
  CHECK(a.stats.expert_bytes > c.stats.expert_bytes);
  // A dense model's run reports none.
  const cost_model dense(llama2_7b_a100());
  iteration_scheduler<> s(chunked_prefill(256, 64), fcfs_queue{}, weft::kv::kv_manager<>(dense.kv_manager_config(16)));
  CHECK(simulate(s, w, dense).stats.expert_bytes == 0.0);
}

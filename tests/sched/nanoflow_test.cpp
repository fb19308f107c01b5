// NanoFlow's nano-batch overlap as a cost-model option (nano_batching.hpp, cost_model::resource_s) and
// the pipeline-parallel terms of the cost model.
#include <weft/sched/sim/cost_model.hpp>

#include <catch2/catch.hpp>

#include <string>

using namespace weft::sched::sim;

namespace {

const std::string data = WEFT_DATA_DIR;

cost_model profiled_70b_tp4(nano_batching nano = {}) {
  cost_params p = llama2_70b_a100_tp4();
  p.nano = nano;
  return cost_model(p, load_vidur_profile(data + "/vidur", "a100", "Llama-2-70b-hf", p.model.shape(), 4));
}

// A dense NanoFlow-style batch: 512 decodes over ~1000-token contexts plus a 1536-token prefill chunk.
iteration_shape dense_batch() {
  iteration_shape s;
  const double decodes = 512, ctx = 1000, chunk = 1536;
  s.tokens = decodes + chunk;
  s.attention_pairs = decodes * ctx + chunk * (chunk + 1) / 2;
  s.kv_read_tokens = decodes * ctx + chunk;
  s.requests = decodes + 1;
  return s;
}

}  // namespace

TEST_CASE("overlap model: one nano-batch is the sequential sum; more approach the bound", "[sched][nanoflow]") {
  resource_times r;
  r.compute_s = 2.0;
  r.memory_s = 1.0;
  r.network_s = 0.5;
  r.engine_s = 0.25;
  r.layers = 10;
  CHECK(r.device_s() == 3.5);
  CHECK(r.bound_s() == 2.0);
  nano_batching o;
  CHECK(overlapped_device_s(r, o) == 3.5);
  CHECK(overlapped_iteration_s(r, o) == 3.75);
  o.nano_batches = 2;
  o.interference = 0.0;
  // bound + fill: 2 + 1.5 / (2 * 10)
  CHECK(overlapped_device_s(r, o) == Approx(2.075));
  o.interference = 0.5;
  CHECK(overlapped_device_s(r, o) == Approx(2.0 + 0.75 + 0.075));
  o.interference = 1.0;  // no gain: clamped to the sequential sum
  CHECK(overlapped_device_s(r, o) == 3.5);
  o.interference = 0.0;
  o.overlap_engine = true;  // the CPU runs beside the device
  CHECK(overlapped_iteration_s(r, o) == Approx(2.075));
  r.engine_s = 5.0;
  CHECK(overlapped_iteration_s(r, o) == 5.0);
}

TEST_CASE("overlap model: bad options are refused", "[sched][nanoflow]") {
  cost_params p;
  p.nano.nano_batches = 0;
  CHECK_THROWS_AS(cost_model(p), weft::error);
  p.nano.nano_batches = 65;
  CHECK_THROWS_AS(cost_model(p), weft::error);
  p.nano.nano_batches = 2;
  p.nano.interference = -0.1;
  CHECK_THROWS_AS(cost_model(p), weft::error);
  p.nano.interference = 1.5;
  CHECK_THROWS_WITH(cost_model(p), Catch::Contains("interference"));
  p.nano.interference = 0.3;
  CHECK_NOTHROW(cost_model(p));
}

TEST_CASE("resource_s: the parts add up to the sequential iteration", "[sched][nanoflow]") {
  for (const cost_model& m : {cost_model(), profiled_70b_tp4()}) {
    for (const iteration_shape& s :
         {dense_batch(), iteration_shape{64, 64 * 500, 64 * 500, 64}, iteration_shape{4096, 4096.0 * 2048, 4096, 1}}) {
      const resource_times r = m.resource_s(s, 1);
      CHECK(r.engine_s + r.device_s() == Approx(m.iteration_s(s)).epsilon(1e-12));
      CHECK(r.layers == m.params().model.layers);
    }
  }
  // 64 decodes: GEMMs below the ridge point read weights (memory); decode attention reads KV (memory).
  const cost_model m = profiled_70b_tp4();
  const resource_times small = m.resource_s(iteration_shape{64, 64 * 500, 64 * 500, 64}, 1);
  CHECK(small.memory_s > 0.0);
  CHECK(small.compute_s == Approx(m.head_s(64)));
  CHECK(small.network_s > 0.0);  // TP 4: all-reduces
  // A 4096-token prefill is compute-bound throughout.
  const resource_times big = m.resource_s(iteration_shape{4096, 4096.0 * 2048, 4096, 1}, 1);
  CHECK(big.memory_s == 0.0);
  CHECK(m.gemm_ridge_tokens() == Approx(2.0 * 312e12 * 0.64 / (2.0 * 2.039e12 * 0.95)));
  CHECK(m.resource_s(iteration_shape{}, 4).device_s() == 0.0);
}

TEST_CASE("resource_s: splitting costs what the measured profile says", "[sched][nanoflow]") {
  const cost_model m = profiled_70b_tp4();
  const iteration_shape s = dense_batch();
  const resource_times one = m.resource_s(s, 1), four = m.resource_s(s, 4);
  // Four GEMMs of 512 tokens take at least one of 2048 (weights re-read, smaller tiles) ...
  CHECK(four.device_s() >= one.device_s());
  // ... and the all-reduces of four quarter messages pay four latency floors.
  CHECK(four.network_s >= one.network_s);
  // More nano-batches than tokens: one per token.
  const iteration_shape two_tokens{2, 2, 2, 2};
  CHECK(m.resource_s(two_tokens, 8).device_s() == Approx(m.resource_s(two_tokens, 2).device_s()));
}

TEST_CASE("nano-batching: a dense batch of 70B on TP 4 overlaps into a shorter iteration", "[sched][nanoflow]") {
  const cost_model seq = profiled_70b_tp4();
  nano_batching o;
  o.nano_batches = 2;
  o.interference = 0.3;
  const cost_model nano = profiled_70b_tp4(o);
  const iteration_shape s = dense_batch();
  const double t_seq = seq.iteration_s(s), t_nano = nano.iteration_s(s);
  CHECK(t_nano < t_seq);
  // Never below the per-resource bound of the unsplit batch plus the engine.
  const resource_times one = seq.resource_s(s, 1);
  CHECK(t_nano >= one.bound_s() + one.engine_s);
  // Perfect overlap and a hidden engine reach that bound up to the splitting cost and the fill.
  o.interference = 0.0;
  o.overlap_engine = true;
  const cost_model ideal = profiled_70b_tp4(o);
  CHECK(ideal.iteration_s(s) < t_nano);
  // The default option changes nothing.
  const cost_params defaults = llama2_70b_a100_tp4();
  CHECK(defaults.nano.nano_batches == 1);
  CHECK_FALSE(defaults.nano.overlap_engine);
}

TEST_CASE("pipeline parallelism: weights and KV spread over the stages; sends add to the iteration",
          "[sched][cost][pipeline]") {
  cost_params tp1 = llama2_70b_a100_tp4();
  tp1.tensor_parallel = 1;
  CHECK_THROWS_WITH(cost_model(tp1), Catch::Contains("do not fit"));  // 138 GB of weights > 0.9 * 80 GB
  cost_params tp2 = tp1;
  tp2.pipeline_parallel = 2;  // TP 1 x PP 2: the weights spread over two GPUs
  const cost_model pp(tp2);
  cost_params tp2_flat = tp1;
  tp2_flat.tensor_parallel = 2;
  const cost_model flat(tp2_flat);
  CHECK(pp.kv_bytes_available() == Approx(flat.kv_bytes_available()));
  CHECK(pp.pipeline_send_s(1000) == Approx(1000.0 * 8192 * 2 / tp2.tp_link_bytes_per_s));
  CHECK(flat.pipeline_send_s(1000) == 0.0);
  const iteration_shape s = dense_batch();
  cost_params tp2_only = tp2;
  tp2_only.pipeline_parallel = 1;
  tp2_only.model.parameters = 1e9;  // same layers and widths, weights that fit: isolates the send term
  cost_params tp2_pp = tp2;
  tp2_pp.model.parameters = 1e9;
  CHECK(cost_model(tp2_pp).iteration_s(s) - cost_model(tp2_only).iteration_s(s) ==
        Approx(cost_model(tp2_pp).pipeline_send_s(s.tokens)));
  tp2.pipeline_parallel = 0;
  CHECK_THROWS_AS(cost_model(tp2), weft::error);
  tp2.pipeline_parallel = 81;  // more stages than layers
  CHECK_THROWS_WITH(cost_model(tp2), Catch::Contains("pipeline_parallel"));
}

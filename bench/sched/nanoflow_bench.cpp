// NanoFlow (Zhu et al., "NanoFlow: Towards Optimal Large Language Model Serving Throughput", OSDI 2025,
// arXiv 2408.12757) reproduced in weft's simulator: the same scheduler and the same measured-profile cost
// model of Llama-2-70B on 4 x A100 (TP 4) and, as an ablation in the paper's regime, on 8 x A100 (TP 8:
// the shipped all-reduce profile stops at 4 GPUs, so TP 8's is extrapolated from it — see
// profile_for), once with every operation sequential (the baseline engine)
// and once with nano-batch overlap and asynchronous CPU scheduling (cost_params::nano). Offline
// throughput (every request at t = 0), as the paper measures it. Paper: 1.91x TensorRT-LLM's throughput,
// 59-72% of the optimal (peak FLOPs / 2 x parameters) for its models.
// The simulator is deterministic: one run per configuration gives the number; the wall time is printed.
//
//   bench_sched_nanoflow [quick]    (quick: 256 requests per workload instead of 1024)
#include <weft/sched/sim.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace ws = weft::sched;
namespace sim = weft::sched::sim;
using clk = std::chrono::steady_clock;

namespace {

const std::string data_dir = WEFT_DATA_DIR;

struct workload_spec {
  std::string name;
  std::vector<sim::length_pair> pairs;
};

// Constant-length workloads of the paper's offline evaluation, and ShareGPT-like lengths drawn from
// the ShareGPT4 quantiles bench_sched_repro uses (prompt median 1730, output median 415).
std::vector<workload_spec> workloads(std::size_t n) {
  std::vector<workload_spec> w;
  w.push_back({"constant 512 in / 512 out", std::vector<sim::length_pair>(n, {512, 512})});
  w.push_back({"constant 1024 in / 512 out", std::vector<sim::length_pair>(n, {1024, 512})});
  const double q[] = {0, 0.1, 0.3, 0.5, 0.7, 0.9, 1};
  const double prompt[] = {1, 74, 777, 1730, 3235, 5696, 8141};
  const double output[] = {2, 84, 271, 415, 581, 834, 1024};
  const auto inverse = [&](const double* x, double u) {
    std::size_t i = 1;
    while (i + 1 < std::size(q) && q[i] < u) ++i;
    return std::max<std::int64_t>(1, std::llround(x[i - 1] + (u - q[i - 1]) / (q[i] - q[i - 1]) * (x[i] - x[i - 1])));
  };
  weft::rng g(2408);
  std::vector<sim::length_pair> share(n);
  for (auto& p : share) p = {inverse(prompt, g.uniform()), inverse(output, g.uniform())};
  w.push_back({"ShareGPT4-like lengths", std::move(share)});
  return w;
}

struct run_result {
  double tokens_per_s_per_gpu = 0.0;  // prompt + output tokens of finished requests / makespan / GPUs
  double wall_s = 0.0;
  sim::summary stats;
};

// Vidur's measured profile of Llama-2-70B on A100 at p.tensor_parallel. Its layer rows go up to TP 8, its
// all-reduce rows only to 4 GPUs (A100 nodes of 4 in Vidur's runs). For TP 8 the 4-GPU all-reduce times
// are scaled by 7/6: a ring all-reduce sends 2(n - 1)/n of the data through each GPU's link, 1.75 at n = 8
// against 1.5 at n = 4, at the same per-GPU link bandwidth (NVSwitch) — an assumption, not a measurement.
sim::measured_profile profile_for(const sim::cost_params& p) {
  const std::string dir = data_dir + "/vidur";
  if (p.tensor_parallel <= 4)
    return sim::load_vidur_profile(dir, "a100", "Llama-2-70b-hf", p.model.shape(), p.tensor_parallel);
  const sim::all_reduce_profile four =
      sim::read_vidur_all_reduce_profile(dir + "/a100_pairwise_nvlink_all_reduce.csv", 4);
  const double ring = (2.0 * (p.tensor_parallel - 1) / p.tensor_parallel) / (2.0 * 3 / 4);
  std::vector<std::int64_t> sizes(four.elements().begin(), four.elements().end());
  std::vector<double> secs;
  for (std::size_t i = 0; i < sizes.size(); ++i) secs.push_back(four.fitted_s(i) * ring);
  return {sim::read_vidur_layer_profile(dir + "/a100_Llama-2-70b-hf_mlp.csv", p.model.shape(), p.tensor_parallel),
          sim::all_reduce_profile(four.source() + " (4 GPUs, extrapolated)", p.tensor_parallel, std::move(sizes),
                                  std::move(secs))};
}

run_result run(const sim::cost_params& p, const std::vector<sim::length_pair>& pairs) {
  const sim::cost_model m(p, profile_for(p));
  const std::vector<double> at_zero(pairs.size(), 0.0);
  sim::pairs_options a;
  a.seed = 19;
  const sim::workload w = sim::pairs_workload(pairs, at_zero, a);
  // NanoFlow's dense batch: 2048 tokens per iteration, decodes first, prefill chunks filling the rest.
  ws::iteration_scheduler<> s(ws::chunked_prefill(2048, 1024), ws::fcfs_queue{},
                              weft::kv::kv_manager<>(m.kv_manager_config(16)));
  const auto t0 = clk::now();
  run_result r;
  const sim::sim_result out = sim::simulate(s, w, m);
  r.wall_s = std::chrono::duration<double>(clk::now() - t0).count();
  double tokens = 0;
  for (const auto& rec : out.records)
    if (rec.finished()) tokens += static_cast<double>(rec.prompt_tokens + rec.output_tokens);
  r.stats = out.stats;
  r.tokens_per_s_per_gpu = out.stats.makespan_s > 0 ? tokens / out.stats.makespan_s / p.tensor_parallel : 0.0;
  return r;
}

}  // namespace

int main(int argc, char** argv) try {
  const bool quick = argc > 1 && std::string(argv[1]) == "quick";
  const std::size_t n = quick ? 256 : 1024;
  sim::cost_params base = sim::llama2_70b_a100_tp4();
  // A C++ engine with CUDA graphs (TensorRT-LLM, NanoFlow): little CPU work per iteration (assumed, the
  // lean engine of bench_sched_repro), paid after the device in the baseline.
  base.iteration_overhead_s = 2e-3;
  base.per_request_overhead_s = 20e-6;
  const double optimal = base.gpu.peak_flops / (2.0 * base.model.parameters);  // tokens/s/GPU
  std::printf(
      "NanoFlow reproduced: Llama-2-70B on 4 x A100-80G (TP 4, Vidur's measured profile; paper: TP 8), offline, %zu "
      "requests "
      "at t = 0;\nSarathi-style dense batches of 2048 tokens; optimal = peak / (2 x parameters) = %.0f "
      "tokens/s/GPU. Deterministic: one run each.\n",
      n, optimal);
  {
    // Where a dense iteration's time goes: overlap can hide at most the resources that do not bind.
    const sim::cost_model m(base, sim::load_vidur_profile(data_dir + "/vidur", "a100", "Llama-2-70b-hf",
                                                          base.model.shape(), base.tensor_parallel));
    sim::iteration_shape it;
    const double decodes = 512, context = 1000, chunk = 1536;
    it.tokens = decodes + chunk;
    it.attention_pairs = decodes * context + chunk * (chunk + 1) / 2;
    it.kv_read_tokens = decodes * context + chunk;
    it.requests = decodes + 1;
    const sim::resource_times r = m.resource_s(it, 1);
    std::printf(
        "A dense iteration (512 decodes over 1000 tokens + a 1536-token chunk), sequential: compute %.1f ms, "
        "memory %.1f ms, network %.1f ms, CPU %.1f ms -> the overlap bound is %.2fx\n",
        1e3 * r.compute_s, 1e3 * r.memory_s, 1e3 * r.network_s, 1e3 * r.engine_s,
        (r.device_s() + r.engine_s) / r.bound_s());
  }
  std::ofstream csv(std::string(WEFT_BENCH_OUT) + "/nanoflow.csv");
  csv << "workload,engine,nano_batches,interference,overlap_engine,tokens_per_s_per_gpu,ratio,share_of_optimal,"
         "makespan_s,iterations,wall_s\n";
  struct variant {
    std::string name;
    sim::nano_batching nano;
  };
  const std::vector<variant> variants = {
      {"sequential, CPU after device", {1, 0.3, false}},    {"sequential, async CPU", {1, 0.3, true}},
      {"2 nano-batches, interference 0.3", {2, 0.3, true}}, {"2 nano-batches, interference 0.0", {2, 0.0, true}},
      {"4 nano-batches, interference 0.3", {4, 0.3, true}}, {"4 nano-batches, interference 0.0", {4, 0.0, true}},
      {"4 nano-batches, interference 0.5", {4, 0.5, true}},
  };
  double best_ratio = 0, worst_ratio = 1e9, best_share = 0, worst_share = 1e9;
  for (const workload_spec& w : workloads(n)) {
    std::printf("\n%s\n", w.name.c_str());
    double baseline = 0, best_here = 0, best_share_here = 0;
    for (const variant& v : variants) {
      sim::cost_params p = base;
      p.nano = v.nano;
      const run_result r = run(p, w.pairs);
      if (baseline == 0) baseline = r.tokens_per_s_per_gpu;
      const double ratio = r.tokens_per_s_per_gpu / baseline, share = r.tokens_per_s_per_gpu / optimal;
      std::printf(
          "  %-36s %7.0f tokens/s/GPU  %.2fx  %4.1f%% of optimal  (makespan %.1f s, %llu iterations, %.2f s wall)\n",
          v.name.c_str(), r.tokens_per_s_per_gpu, ratio, 100 * share, r.stats.makespan_s,
          static_cast<unsigned long long>(r.stats.iterations), r.wall_s);
      csv << '"' << w.name << "\",\"" << v.name << "\"," << v.nano.nano_batches << ',' << v.nano.interference << ','
          << v.nano.overlap_engine << ',' << r.tokens_per_s_per_gpu << ',' << ratio << ',' << share << ','
          << r.stats.makespan_s << ',' << r.stats.iterations << ',' << r.wall_s << '\n';
      // NanoFlow's auto-search picks the nano-batch count: the best of 2 and 4 at the assumed interference.
      if (v.nano.nano_batches > 1 && v.nano.interference == 0.3) best_here = std::max(best_here, ratio);
      if (v.nano.nano_batches > 1 && v.nano.interference == 0.3) best_share_here = std::max(best_share_here, share);
    }
    best_ratio = std::max(best_ratio, best_here);
    worst_ratio = std::min(worst_ratio, best_here);
    best_share = std::max(best_share, best_share_here);
    worst_share = std::min(worst_share, best_share_here);
  }
  // The paper's regime: TP 8 (all-reduce extrapolated, see profile_for), the same variants' core.
  std::printf(
      "\nAblation, the paper's TP 8 on 8 x A100 (all-reduce extrapolated from 4 GPUs by the ring's traffic):\n");
  double tp8_best = 0, tp8_worst = 1e9, tp8_share_best = 0, tp8_share_worst = 1e9;
  for (const workload_spec& w : workloads(n)) {
    std::printf("%s\n", w.name.c_str());
    double baseline = 0, best_here = 0, best_share_here = 0;
    for (const variant& v : variants) {
      if (v.nano.nano_batches > 1 && v.nano.interference == 0.5) continue;
      sim::cost_params p = base;
      p.tensor_parallel = 8;
      p.nano = v.nano;
      const run_result r = run(p, w.pairs);
      if (baseline == 0) baseline = r.tokens_per_s_per_gpu;
      const double ratio = r.tokens_per_s_per_gpu / baseline, share = r.tokens_per_s_per_gpu / optimal;
      std::printf("  %-36s %7.0f tokens/s/GPU  %.2fx  %4.1f%% of optimal  (%.2f s wall)\n", v.name.c_str(),
                  r.tokens_per_s_per_gpu, ratio, 100 * share, r.wall_s);
      csv << '"' << w.name << " (TP 8)\",\"" << v.name << "\"," << v.nano.nano_batches << ',' << v.nano.interference
          << ',' << v.nano.overlap_engine << ',' << r.tokens_per_s_per_gpu << ',' << ratio << ',' << share << ','
          << r.stats.makespan_s << ',' << r.stats.iterations << ',' << r.wall_s << '\n';
      if (v.nano.nano_batches > 1 && v.nano.interference == 0.3) {
        best_here = std::max(best_here, ratio);
        best_share_here = std::max(best_share_here, share);
      }
    }
    tp8_best = std::max(tp8_best, best_here);
    tp8_worst = std::min(tp8_worst, best_here);
    tp8_share_best = std::max(tp8_share_best, best_share_here);
    tp8_share_worst = std::min(tp8_share_worst, best_share_here);
  }
  std::printf("at TP 8: %.2f-%.2fx, %.0f-%.0f%% of optimal (paper: 1.91x, 59-72%%)\n", tp8_worst, tp8_best,
              100 * tp8_share_worst, 100 * tp8_share_best);
  std::printf(
      "\nNanoFlow-style (best of 2 and 4 nano-batches, interference 0.3, async CPU) over the sequential engine: "
      "%.2f-%.2fx, "
      "%.0f-%.0f%% of optimal\n(paper: 1.91x TensorRT-LLM on its workloads, 59-72%% of optimal; see docs/sched.md "
      "for the conditions that differ)\nwrote %s/nanoflow.csv\n",
      worst_ratio, best_ratio, 100 * worst_share, 100 * best_share, WEFT_BENCH_OUT);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_sched_nanoflow: %s\n", e.what());
  return 1;
}

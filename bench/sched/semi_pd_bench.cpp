// semi-PD (Hong et al., arXiv 2504.19867, 2025) reproduced in weft's simulator: on 2 GPUs, colocated
// Sarathi-Serve instances (chunked prefill), DistServe-style disaggregation (1 prefill + 1 decode GPU, KV
// over the interconnect) and semi-PD (2 GPUs, each a prefill and a decode worker on an SM share over one
// KV pool; share fixed at 0.5, and adaptive) replay the Azure LLM conversation trace (data/) at rising
// rates, costed by Vidur's measured Llama-2-7B A100 profile. Prints mean/p99 latency, TTFT, TPOT, SLO
// attainment per rate, the highest rate each keeps >= 90% within SLO, and the paper's numbers beside.
//
//   bench_sched_semi_pd [quick]    (quick: 500 requests per rate instead of 1500)
#include <weft/sched/sim.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ws = weft::sched;
namespace sim = weft::sched::sim;
using clk = std::chrono::steady_clock;

namespace {

const std::string data_dir = WEFT_DATA_DIR;
constexpr double ttft_slo_s = 1.0, tpot_slo_s = 0.1;  // stated SLOs (see the header printed)

struct row {
  double mean_e2e = 0, e2e_p99 = 0, ttft_p50 = 0, ttft_p99 = 0, tpot_p50 = 0, tpot_p99 = 0, attainment = 0;
  double share = 0;  // semi-PD: time-weighted prefill share
  std::size_t finished = 0;
};

row summarise(const sim::sim_result& r) {
  row x;
  double sum = 0;
  for (const auto& rec : r.records)
    if (rec.finished()) sum += rec.e2e_s();
  x.finished = r.stats.finished;
  x.mean_e2e = x.finished ? sum / static_cast<double>(x.finished) : 0.0;
  x.e2e_p99 = r.stats.e2e_p99;
  x.ttft_p50 = r.stats.ttft_p50;
  x.ttft_p99 = r.stats.ttft_p99;
  x.tpot_p50 = r.stats.tpot_p50;
  x.tpot_p99 = r.stats.tpot_p99;
  x.attainment = r.stats.slo_attainment;
  return x;
}

}  // namespace

int main(int argc, char** argv) try {
  const bool quick = argc > 1 && std::string(argv[1]) == "quick";
  const std::size_t n = quick ? 500 : 1500;
  sim::cost_params p = sim::llama2_7b_a100();
  // A lean engine (CUDA graphs, C++ scheduler; assumed as bench_sched_repro's): semi-PD is built on SGLang,
  // and the comparison is of how prefill and decode share the GPUs, not of the engines' CPU paths.
  p.iteration_overhead_s = 2e-3;
  p.per_request_overhead_s = 20e-6;
  const sim::cost_model m(p, sim::load_vidur_profile(data_dir + "/vidur", "a100", "Llama-2-7b-hf", p.model.shape(), 1));
  const auto kv = [&] { return weft::kv::kv_manager<>(m.kv_manager_config(16)); };
  using sched_t = ws::iteration_scheduler<>;
  using worker_t = ws::iteration_scheduler<ws::fcfs_queue, sim::shared_kv_pool<>>;
  const std::function<std::unique_ptr<sched_t>()> sarathi = [&] {
    return std::make_unique<sched_t>(ws::chunked_prefill(512, 256), ws::fcfs_queue{}, kv());
  };
  const std::function<std::unique_ptr<sched_t>()> whole = [&] {
    return std::make_unique<sched_t>(ws::continuous_batching(256, 8192), ws::fcfs_queue{}, kv());
  };
  const std::function<std::unique_ptr<weft::kv::kv_manager<>>()> pool = [&] {
    return std::make_unique<weft::kv::kv_manager<>>(m.kv_manager_config(16));
  };
  const std::function<std::unique_ptr<worker_t>(sim::shared_kv_pool<>, sim::semi_pd_worker)> worker =
      [](sim::shared_kv_pool<> k, sim::semi_pd_worker) {
        return std::make_unique<worker_t>(ws::continuous_batching(256, 8192), ws::fcfs_queue{}, k);
      };

  std::printf(
      "semi-PD reproduced: Llama-2-7B on 2 x A100-80G (Vidur's measured profile, lean engine), the first %zu requests "
      "of the Azure LLM 2023 conversation trace (mean prompt ~1100, output ~265 tokens) with arrivals compressed "
      "to each rate.\nSLO: TTFT <= %.1f s and TPOT <= %.2f s (attainment = share of all requests meeting both).\n"
      "  colocated   : 2 instances, Sarathi-Serve chunked prefill (512-token budget), routed by queued prompt tokens\n"
      "  DistServe   : 1 prefill + 1 decode GPU (whole-prompt batches), KV over a 25 GB/s link\n"
      "  semi-PD x/y : 2 GPUs, each a prefill (share x of the SMs) and a decode worker (1 - x) over one KV pool; "
      "fixed 0.5, and adaptive (start 0.5, steps of 0.05 in [0.1, 0.9] every 5 s on the same SLOs)\n"
      "  cost under a share: compute-bound terms / share; memory-bound / (min(1, share / 0.5) / 1.1) (assumed; "
      "docs/sched.md)\n\n",
      n, ttft_slo_s, tpot_slo_s);

  std::ofstream csv(std::string(WEFT_BENCH_OUT) + "/semi_pd.csv");
  csv << "rate_req_s,system,mean_e2e_s,e2e_p99_s,ttft_p50_s,ttft_p99_s,tpot_p50_s,tpot_p99_s,slo_attainment,"
         "mean_prefill_share\n";
  const char* names[] = {"colocated (Sarathi)", "DistServe 1P+1D", "semi-PD fixed 0.5", "semi-PD adaptive"};
  constexpr std::size_t systems = 4;
  std::vector<double> rates;
  for (double r = 1.0; r <= 16.0 + 1e-9; r += 1.0) rates.push_back(r);
  std::vector<std::vector<row>> table(systems);
  double wall[systems] = {0, 0, 0, 0};
  const auto t_all = clk::now();
  // The trace's native rate over its first n rows sets the compression for each target rate.
  sim::trace_options probe;
  probe.max_rows = n;
  const sim::workload native = sim::read_azure_csv(data_dir + "/azure_llm_2023_conv.csv", probe);
  const double native_rate = static_cast<double>(native.size()) / native.back().req.arrival_s;
  for (const double rate : rates) {
    sim::trace_options t = probe;
    t.time_scale = native_rate / rate;
    t.ttft_slo_s = ttft_slo_s;
    t.tpot_slo_s = tpot_slo_s;
    const sim::workload w = sim::read_azure_csv(data_dir + "/azure_llm_2023_conv.csv", t);
    sim::cluster_options c;
    c.instances = 2;
    c.prefill_instances = 1;
    c.decode_instances = 1;
    auto t0 = clk::now();
    table[0].push_back(summarise(sim::simulate_colocated<sched_t>(sarathi, w, m, c).result));
    wall[0] += std::chrono::duration<double>(clk::now() - t0).count();
    t0 = clk::now();
    table[1].push_back(summarise(sim::simulate_disaggregated<sched_t>(whole, w, m, c).result));
    wall[1] += std::chrono::duration<double>(clk::now() - t0).count();
    for (int adaptive = 0; adaptive < 2; ++adaptive) {
      sim::semi_pd_options o;
      o.instances = 2;
      o.adaptive = adaptive == 1;
      o.ttft_slo_s = ttft_slo_s;
      o.tpot_slo_s = tpot_slo_s;
      t0 = clk::now();
      const sim::semi_pd_result r = sim::simulate_semi_pd<worker_t>(pool, worker, w, m, o);
      wall[2 + adaptive] += std::chrono::duration<double>(clk::now() - t0).count();
      row x = summarise(r.cluster.result);
      x.share = r.mean_prefill_share;
      table[2 + adaptive].push_back(x);
    }
  }
  // The controller where the SLOs tilt the best split away from 0.5: fixed 0.5, every fixed split of
  // 0.2..0.7, and adaptive, at 8 req/s.
  struct tilt {
    double ttft, tpot;
  };
  std::string tilted;
  for (const tilt slo : {tilt{2.0, 0.04}, tilt{0.3, 0.1}}) {
    sim::trace_options t = probe;
    t.time_scale = native_rate / 8.0;
    t.ttft_slo_s = slo.ttft;
    t.tpot_slo_s = slo.tpot;
    const sim::workload w = sim::read_azure_csv(data_dir + "/azure_llm_2023_conv.csv", t);
    double best_share = 0, best_att = -1, half = 0;
    for (int k = 2; k <= 7; ++k) {
      sim::semi_pd_options o;
      o.instances = 2;
      o.adaptive = false;
      o.prefill_share = 0.1 * k;
      const double a = sim::simulate_semi_pd<worker_t>(pool, worker, w, m, o).cluster.result.stats.slo_attainment;
      if (k == 5) half = a;
      if (a > best_att) {
        best_att = a;
        best_share = o.prefill_share;
      }
    }
    sim::semi_pd_options o;
    o.instances = 2;
    o.ttft_slo_s = slo.ttft;
    o.tpot_slo_s = slo.tpot;
    const sim::semi_pd_result r = sim::simulate_semi_pd<worker_t>(pool, worker, w, m, o);
    char line[256];
    std::snprintf(
        line, sizeof line,
        "  TTFT <= %.2f s, TPOT <= %.2f s: fixed 0.5 %.1f%%, best fixed split (%.1f) %.1f%%, adaptive %.1f%% (mean "
        "share %.2f, %zu moves)\n",
        slo.ttft, slo.tpot, 100 * half, best_share, 100 * best_att, 100 * r.cluster.result.stats.slo_attainment,
        r.mean_prefill_share, r.shares.size() - 2);
    tilted += line;
    csv << "8,\"tilted SLO " << slo.ttft << '/' << slo.tpot << " adaptive\",,,,,,,"
        << r.cluster.result.stats.slo_attainment << ',' << r.mean_prefill_share << '\n';
  }
  const double wall_all = std::chrono::duration<double>(clk::now() - t_all).count();

  std::printf("%-6s %-20s %9s %9s %9s %9s %9s %9s %7s %6s\n", "req/s", "system", "mean e2e", "e2e p99", "TTFT p50",
              "TTFT p99", "TPOT p50", "TPOT p99", "in SLO", "share");
  for (std::size_t i = 0; i < rates.size(); ++i) {
    for (std::size_t s = 0; s < systems; ++s) {
      const row& x = table[s][i];
      std::printf("%-6.1f %-20s %8.2fs %8.2fs %8.3fs %8.3fs %8.4fs %8.4fs %6.1f%% ", rates[i], names[s], x.mean_e2e,
                  x.e2e_p99, x.ttft_p50, x.ttft_p99, x.tpot_p50, x.tpot_p99, 100 * x.attainment);
      if (s >= 2)
        std::printf("%6.2f\n", x.share);
      else
        std::printf("%6s\n", "-");
      csv << rates[i] << ",\"" << names[s] << "\"," << x.mean_e2e << ',' << x.e2e_p99 << ',' << x.ttft_p50 << ','
          << x.ttft_p99 << ',' << x.tpot_p50 << ',' << x.tpot_p99 << ',' << x.attainment << ',' << x.share << '\n';
    }
  }
  // The highest rate of the sweep at which each keeps >= 90% of requests within SLO (DistServe's goodput).
  double best[systems] = {0, 0, 0, 0};
  for (std::size_t s = 0; s < systems; ++s)
    for (std::size_t i = 0; i < rates.size(); ++i)
      if (table[s][i].attainment >= 0.9) best[s] = rates[i];
  std::printf("\nhighest rate with >= 90%% within SLO (grid of 1 req/s):\n");
  for (std::size_t s = 0; s < systems; ++s) std::printf("  %-20s %5.1f req/s\n", names[s], best[s]);
  const auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  std::printf(
      "  semi-PD adaptive vs colocated %.2fx, vs DistServe %.2fx   (paper, Llama models: 1.55-1.72x more requests "
      "within SLO than the best of vLLM / DistServe)\n",
      ratio(best[3], best[0]), ratio(best[3], best[1]));
  // Mean end-to-end latency at the highest rate every system still finishes the trace.
  std::printf("\nmean end-to-end latency, baseline / semi-PD adaptive (paper, DeepSeek models: 1.27-2.58x lower):\n");
  for (std::size_t i = 0; i < rates.size(); ++i)
    std::printf("  %5.1f req/s: colocated %.2fx, DistServe %.2fx (semi-PD fixed 0.5: %.2fx, %.2fx)\n", rates[i],
                ratio(table[0][i].mean_e2e, table[3][i].mean_e2e), ratio(table[1][i].mean_e2e, table[3][i].mean_e2e),
                ratio(table[0][i].mean_e2e, table[2][i].mean_e2e), ratio(table[1][i].mean_e2e, table[2][i].mean_e2e));
  std::printf("\nthe controller where the SLOs tilt the best split, 8 req/s, share of requests within SLO:\n%s",
              tilted.c_str());
  // semi-PD's model-based share search (semi_pd_options::controller = model) beside the feedback rule:
  // the same rates, then the tilted SLOs.
  {
    std::printf(
        "\nsemi-PD with the model-based share search (predicts TTFT and TPOT under every share from the "
        "cost model each 5 s, takes the best) beside the feedback controller:\n");
    std::printf("%-6s %22s %22s %22s\n", "req/s", "model: in SLO / share", "feedback: in SLO / share",
                "model mean e2e / fb");
    double best_model = 0;
    double wall_model = 0;
    for (std::size_t i = 0; i < rates.size(); ++i) {
      sim::trace_options t = probe;
      t.time_scale = native_rate / rates[i];
      t.ttft_slo_s = ttft_slo_s;
      t.tpot_slo_s = tpot_slo_s;
      const sim::workload w = sim::read_azure_csv(data_dir + "/azure_llm_2023_conv.csv", t);
      sim::semi_pd_options o;
      o.instances = 2;
      o.ttft_slo_s = ttft_slo_s;
      o.tpot_slo_s = tpot_slo_s;
      o.controller = sim::semi_pd_options::control::model;
      const auto t0 = clk::now();
      const sim::semi_pd_result r = sim::simulate_semi_pd<worker_t>(pool, worker, w, m, o);
      wall_model += std::chrono::duration<double>(clk::now() - t0).count();
      row x = summarise(r.cluster.result);
      if (x.attainment >= 0.9) best_model = rates[i];
      std::printf("%-6.1f %14.1f%% / %.2f %14.1f%% / %.2f %14.2fs / %.2fs\n", rates[i], 100 * x.attainment,
                  r.mean_prefill_share, 100 * table[3][i].attainment, table[3][i].share, x.mean_e2e,
                  table[3][i].mean_e2e);
      csv << rates[i] << ",\"semi-PD model-based\"," << x.mean_e2e << ',' << x.e2e_p99 << ',' << x.ttft_p50 << ','
          << x.ttft_p99 << ',' << x.tpot_p50 << ',' << x.tpot_p99 << ',' << x.attainment << ',' << r.mean_prefill_share
          << '\n';
    }
    std::printf(
        "  highest rate with >= 90%% within SLO: model %.1f req/s (feedback %.1f): vs colocated %.2fx, vs "
        "DistServe %.2fx (paper 1.55-1.72x); %.2f s for the 16 runs\n",
        best_model, best[3], ratio(best_model, best[0]), ratio(best_model, best[1]), wall_model);
    for (const tilt slo : {tilt{2.0, 0.04}, tilt{0.3, 0.1}}) {
      sim::trace_options t = probe;
      t.time_scale = native_rate / 8.0;
      t.ttft_slo_s = slo.ttft;
      t.tpot_slo_s = slo.tpot;
      const sim::workload w = sim::read_azure_csv(data_dir + "/azure_llm_2023_conv.csv", t);
      sim::semi_pd_options o;
      o.instances = 2;
      o.ttft_slo_s = slo.ttft;
      o.tpot_slo_s = slo.tpot;
      o.controller = sim::semi_pd_options::control::model;
      const sim::semi_pd_result r = sim::simulate_semi_pd<worker_t>(pool, worker, w, m, o);
      std::printf(
          "  tilted SLO TTFT <= %.2f s, TPOT <= %.2f s at 8 req/s: model %.1f%% within SLO (mean share %.2f, "
          "%zu moves)\n",
          slo.ttft, slo.tpot, 100 * r.cluster.result.stats.slo_attainment, r.mean_prefill_share, r.shares.size() - 2);
    }
  }
  // Ablation: the assumption the result rests on, bandwidth_saturation_share (the SM share at which a
  // worker reaches full HBM bandwidth; 0.5 above), swept for adaptive semi-PD on a finer rate grid, with
  // colocated Sarathi (which does not depend on it) and DistServe beside.
  {
    std::vector<double> fine;
    for (double r = 6.0; r <= 12.0 + 1e-9; r += 0.5) fine.push_back(r);
    const auto highest = [&](const std::function<double(const sim::workload&)>& attainment) {
      double best_rate = 0;
      for (const double rate : fine) {
        sim::trace_options t = probe;
        t.time_scale = native_rate / rate;
        t.ttft_slo_s = ttft_slo_s;
        t.tpot_slo_s = tpot_slo_s;
        if (attainment(sim::read_azure_csv(data_dir + "/azure_llm_2023_conv.csv", t)) >= 0.9) best_rate = rate;
      }
      return best_rate;
    };
    sim::cluster_options c;
    c.instances = 2;
    c.prefill_instances = 1;
    c.decode_instances = 1;
    const double colocated = highest([&](const sim::workload& w) {
      return sim::simulate_colocated<sched_t>(sarathi, w, m, c).result.stats.slo_attainment;
    });
    const double distserve = highest([&](const sim::workload& w) {
      return sim::simulate_disaggregated<sched_t>(whole, w, m, c).result.stats.slo_attainment;
    });
    std::printf(
        "\nablation, highest rate >= 90%% within SLO on a 0.5 req/s grid: colocated %.1f, DistServe %.1f req/s; "
        "semi-PD adaptive by the SM share at which a worker reaches full HBM bandwidth:\n",
        colocated, distserve);
    std::ofstream ablation(std::string(WEFT_BENCH_OUT) + "/semi_pd_ablation.csv");
    ablation << "bandwidth_saturation_share,semi_pd_adaptive_req_s,colocated_req_s,distserve_req_s\n";
    for (const double saturation : {0.3, 0.5, 0.7, 1.0}) {
      const double semi = highest([&](const sim::workload& w) {
        sim::semi_pd_options o;
        o.instances = 2;
        o.adaptive = true;
        o.ttft_slo_s = ttft_slo_s;
        o.tpot_slo_s = tpot_slo_s;
        o.bandwidth_saturation_share = saturation;
        return sim::simulate_semi_pd<worker_t>(pool, worker, w, m, o).cluster.result.stats.slo_attainment;
      });
      std::printf("  saturation share %.1f: %.1f req/s, %.2fx colocated, %.2fx DistServe (paper 1.55-1.72x)\n",
                  saturation, semi, ratio(semi, colocated), ratio(semi, distserve));
      ablation << saturation << ',' << semi << ',' << colocated << ',' << distserve << '\n';
    }
  }
  std::printf(
      "\nconditions that differ from the paper: a simulator (no MPS, no real kernels; the partition's cost is the "
      "assumed model above), Llama-2-7B on A100s instead of DeepSeek / Llama on their GPUs, the Azure conversation "
      "trace instead of the paper's datasets, weft's schedulers as the baselines (not vLLM / SGLang / DistServe "
      "code), and no cost for changing the share.\n");
  std::printf("wall: colocated %.2f s, DistServe %.2f s, semi-PD fixed %.2f s, adaptive %.2f s; total %.2f s\n",
              wall[0], wall[1], wall[2], wall[3], wall_all);
  std::printf("wrote %s/semi_pd.csv\n", WEFT_BENCH_OUT);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_sched_semi_pd: %s\n", e.what());
  return 1;
}

// serve_sim: compares serving policies in weft's discrete-event simulator — the same scheduler objects
// an engine would run — on a generated multi-tenant workload and, when present, the Azure LLM
// conversation trace. Prints one table per workload; --out DIR also writes CSV (a summary, each
// request's latencies and each tenant's service over time, per policy) and draws them as PNG with
// plot.py next to this file (python3 with matplotlib; the CSVs are written either way).
//
//   serve_sim                         generated workload, then data/azure_llm_2023_conv.csv of the source tree
//   serve_sim TRACE.csv               that Azure-format trace instead
//   serve_sim --rows N --time-scale X --model 7b-a100|7b-h100|70b-a100|70b-h100 --engine lean|sarathi --out DIR
#include <weft/sched/sim.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <iostream>
#include <string>
#include <vector>

namespace ws = weft::sched;
namespace sim = weft::sched::sim;

// A user-written policy: shortest prompt first (a common latency heuristic). Satisfying
// ws::fair_queue is all it takes to plug it into every batch scheduler.
class shortest_prompt_first {
 public:
  void push(const ws::request& r, double) { q_.insert({r.prompt_tokens, r.id.value(), r}); }
  const ws::request* peek(double) const { return q_.empty() ? nullptr : &q_.begin()->r; }
  ws::request pop(double) {
    ws::request r = q_.begin()->r;
    q_.erase(q_.begin());
    return r;
  }
  void on_admit(const ws::request&) {}
  void on_tokens(const ws::request&, std::int64_t) {}
  void on_finish(const ws::request&, std::int64_t) {}
  std::size_t size() const { return q_.size(); }
  bool empty() const { return q_.empty(); }

 private:
  struct entry {
    std::int64_t prompt;
    std::uint64_t id;
    ws::request r;
    bool operator<(const entry& o) const { return prompt != o.prompt ? prompt < o.prompt : id < o.id; }
  };
  std::set<entry> q_;
};
static_assert(ws::fair_queue<shortest_prompt_first>);

struct setup {
  sim::cost_model model;
  std::int64_t budget;  // Sarathi token budget from the TBT target
  sim::sim_options options;
};

weft::kv::kv_manager<> make_kv(const sim::cost_model& m) {
  // As much host memory as HBM for swapping, copied in units of up to 16 blocks.
  weft::kv::kv_config o = m.kv_manager_config(16, static_cast<std::size_t>(m.kv_blocks(16)));
  o.max_copy_unit_blocks = 16;
  return weft::kv::kv_manager<>(o);
}

template <class Queue>
sim::sim_result run(const setup& s, const sim::workload& w, ws::scheduler_options so, Queue q = Queue{}) {
  ws::iteration_scheduler<Queue> sched(so, std::move(q), make_kv(s.model));
  return sim::simulate(sched, w, s.model, s.options);
}

struct row {
  std::string name;
  sim::sim_result result;
  double wall_s;
};

std::vector<row> compare(const setup& s, const sim::workload& w) {
  std::vector<std::pair<std::string, std::function<sim::sim_result()>>> policies;
  const auto chunked = ws::chunked_prefill(s.budget, 256);
  ws::scheduler_options fastswitch = chunked;
  fastswitch.inter_tenant_preemption = true;
  fastswitch.preemption = ws::preemption_mode::swap;
  // VTC with a length predictor: here a noisy oracle (true length times lognormal noise, cv 0.5).
  sim::workload predicted = w;
  weft::rng noise(7);
  for (auto& r : predicted)
    r.req.predicted_output_tokens =
        std::max<std::int64_t>(1, std::llround(r.output_tokens * noise.lognormal(1.0, 0.5)));
  policies.emplace_back("vllm+fcfs", [&] {
    ws::prefill_first_scheduler<> sched(ws::vllm_baseline(256, 8192), ws::fcfs_queue{}, make_kv(s.model));
    return sim::simulate(sched, w, s.model, s.options);
  });
  policies.emplace_back("orca+fcfs", [&] { return run<ws::fcfs_queue>(s, w, ws::continuous_batching(256, 8192)); });
  policies.emplace_back("sarathi+fcfs", [&] { return run<ws::fcfs_queue>(s, w, chunked); });
  policies.emplace_back("sarathi+vtc", [&] { return run<ws::vtc_queue>(s, w, chunked); });
  policies.emplace_back("sarathi+vtc-pred", [&] {
    return run<ws::vtc_queue>(s, predicted, chunked, ws::vtc_queue(ws::vtc_queue::options{{}, true}));
  });
  policies.emplace_back("sarathi+wfq", [&] { return run<ws::wfq_queue>(s, w, chunked); });
  policies.emplace_back("sarathi+drr", [&] { return run<ws::drr_queue>(s, w, chunked); });
  policies.emplace_back("fastswitch+slo", [&] { return run<ws::slo_priority_queue>(s, w, fastswitch); });
  policies.emplace_back("sarathi+user-spf", [&] { return run<shortest_prompt_first>(s, w, chunked); });
  std::vector<row> rows;
  for (auto& [name, fn] : policies) {
    const auto t0 = std::chrono::steady_clock::now();
    sim::sim_result r = fn();
    rows.push_back({name, std::move(r), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()});
  }
  return rows;
}

void print(const std::string& title, const std::vector<row>& rows, const setup& s) {
  std::printf("\n%s\n  model %s on %dx %s, KV %lld blocks of 16 tokens, Sarathi budget %lld tokens/iteration\n",
              title.c_str(), s.model.params().model.name.c_str(), s.model.params().tensor_parallel,
              s.model.params().gpu.name.c_str(), static_cast<long long>(s.model.kv_blocks(16)),
              static_cast<long long>(s.budget));
  std::printf("  SLOs for goodput: TTFT <= %.1f s, TPOT <= %.0f ms\n", s.options.ttft_slo_s,
              s.options.tpot_slo_s * 1e3);
  std::printf("  %-17s %6s %8s %8s %8s %8s %8s %8s %8s %8s %7s %6s %6s %6s\n", "policy", "done", "TTFTp50", "TTFTp99",
              "TPOTp99", "TBTp99", "E2Ep99", "tok/s", "goodput", "gap", "Jain", "preem", "swaps", "sim_s");
  for (const auto& r : rows) {
    const auto& t = r.result.stats;
    std::printf("  %-17s %6zu %8.2f %8.2f %8.3f %8.3f %8.1f %8.0f %8.2f %8.0f %7.3f %6llu %6llu %6.2f\n",
                r.name.c_str(), t.finished, t.ttft_p50, t.ttft_p99, t.tpot_p99, t.tbt_p99, t.e2e_p99,
                t.throughput_tok_s, t.goodput_req_s, t.max_service_gap, t.jain_index,
                static_cast<unsigned long long>(t.preemptions), static_cast<unsigned long long>(t.swaps), r.wall_s);
  }
}

void write(const std::string& dir, const std::string& tag, const std::vector<row>& rows) {
  if (dir.empty()) return;
  std::filesystem::create_directories(dir);
  std::ofstream summary(dir + "/" + tag + "_summary.csv");
  bool header = true;
  for (const auto& r : rows) {
    sim::write_summary_csv(summary, r.name, r.result.stats, header);
    header = false;
    std::ofstream service(dir + "/" + tag + "_service_" + r.name + ".csv");
    sim::write_service_csv(service, r.result.service);
    std::ofstream requests(dir + "/" + tag + "_requests_" + r.name + ".csv");
    sim::write_records_csv(requests, r.result.records);
  }
  std::cout << "  wrote " << dir << "/" << tag
            << "_summary.csv and per-policy request latencies and service timelines\n";
}

// Draws the CSVs of `dir` with plot.py (latency CDFs and per-tenant service per policy). The first
// python3 on PATH may lack matplotlib (e.g. pyenv); the system one is the fallback.
void plot(const std::string& dir) {
#ifdef WEFT_SERVE_SIM_PLOT
  if (dir.empty()) return;
  const std::string script = WEFT_SERVE_SIM_PLOT;
  const std::string args = " '" + script + "' '" + dir + "' >/dev/null 2>&1";
  if (std::system(("python3" + args + " || /usr/bin/python3" + args).c_str()) == 0)
    std::cout << "\nplots: " << dir << "/*_latency_cdf.png, " << dir << "/*_service.png\n";
  else
    std::cout << "\n(python3 with matplotlib not found: no PNG; the CSVs in " << dir << " have the data)\n";
#else
  (void)dir;
#endif
}

// Two GPUs, three ways: two colocated instances, the same with Llumnix migration, and DistServe's
// one prefill + one decode instance with the KV sent between them.
void two_gpus(const setup& s) {
  sim::generator_options g;
  g.seed = 11;
  g.requests = 800;
  g.rate_per_s = 7.0;
  g.prompt = {1500.0, 0.8, 16, 8000};
  g.output = {200.0, 1.0, 1, 1500};
  const sim::workload w = sim::poisson_workload(g);
  using sched_t = ws::iteration_scheduler<ws::fcfs_queue>;
  const sim::cost_model& m = s.model;
  const std::function<std::unique_ptr<sched_t>()> make = [&m] {
    return std::make_unique<sched_t>(ws::continuous_batching(256, 16384), ws::fcfs_queue{}, make_kv(m));
  };
  sim::cluster_options c;
  c.instances = 2;
  c.prefill_instances = 1;
  c.decode_instances = 1;
  std::printf("\nTwo GPUs (%s each), %zu Poisson requests at 7 req/s, Orca batching on every instance\n",
              m.params().gpu.name.c_str(), w.size());
  std::printf("  %-26s %8s %8s %8s %8s %8s %10s\n", "deployment", "TTFTp50", "TTFTp99", "TBTp99", "E2Ep99", "goodput",
              "KV moved");
  auto line = [](const char* name, const sim::cluster_result& r, double moved_s) {
    const auto& t = r.result.stats;
    std::printf("  %-26s %8.2f %8.2f %8.3f %8.1f %8.2f %9.1fs\n", name, t.ttft_p50, t.ttft_p99, t.tbt_p99, t.e2e_p99,
                t.goodput_req_s, moved_s);
  };
  const auto coloc = sim::simulate_colocated<sched_t>(make, w, m, c, s.options);
  line("2 x colocated", coloc, 0.0);
  c.migration_interval_s = 0.5;
  c.imbalance_blocks = 256;
  const auto llumnix = sim::simulate_colocated<sched_t>(make, w, m, c, s.options);
  line("2 x colocated + migration", llumnix, llumnix.migration_s);
  const auto distserve = sim::simulate_disaggregated<sched_t>(make, w, m, c, s.options);
  line("1 prefill + 1 decode", distserve, distserve.kv_transfer_s);
  std::printf(
      "  (disaggregation removes prefill stalls from decoding: compare TBT p99; it pays in TTFT and KV traffic)\n");
}

int main(int argc, char** argv) try {
  std::string trace, out, model = "7b-a100", engine = "lean";
  std::size_t rows = 0;
  double time_scale = 1.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("missing value after " + a);
      return argv[++i];
    };
    if (a == "--out")
      out = value();
    else if (a == "--rows")
      rows = std::stoul(value());
    else if (a == "--time-scale")
      time_scale = std::stod(value());
    else if (a == "--model")
      model = value();
    else if (a == "--engine")
      engine = value();
    else if (a == "--help" || a == "-h") {
      std::cout << "usage: serve_sim [TRACE.csv] [--rows N] [--time-scale X] [--model 7b-a100|7b-h100|70b-a100|"
                   "70b-h100] [--engine lean|sarathi] [--out DIR]\n";
      return 0;
    } else
      trace = a;
  }
  sim::cost_params params = model == "7b-h100"    ? sim::llama2_7b_h100()
                            : model == "70b-a100" ? sim::llama2_70b_a100_tp4()
                            : model == "70b-h100" ? sim::llama2_70b_h100_tp4()
                                                  : sim::llama2_7b_a100();
  // Engine CPU work per iteration and per request: a lean CUDA-graph engine (assumed), or the overheads
  // fitted to Sarathi-Serve's measured runs (the cost model's defaults; docs/sched.md).
  if (engine == "lean") {
    params.iteration_overhead_s = 2e-3;
    params.per_request_overhead_s = 20e-6;
  }
  // The measured-profile cost model when the Vidur profiles of this GPU and model are in data/vidur.
  const std::string gpu = model.ends_with("h100") ? "h100" : "a100";
  const std::string profile = model.starts_with("70b") ? "Llama-2-70b-hf" : "Llama-2-7b-hf";
  std::string vidur = "data/vidur";
#ifdef WEFT_DATA_DIR
  if (!std::filesystem::exists(vidur)) vidur = std::string(WEFT_DATA_DIR) + "/vidur";
#endif
  const bool measured = std::filesystem::exists(vidur + "/" + gpu + "_" + profile + "_mlp.csv");
  setup s{measured ? sim::cost_model(params, sim::load_vidur_profile(vidur, gpu, profile, params.model.shape(),
                                                                     params.tensor_parallel))
                   : sim::cost_model(params),
          0,
          {}};
  std::cout << "engine overheads: " << params.iteration_overhead_s * 1e3 << " ms/iteration + "
            << params.per_request_overhead_s * 1e3 << " ms/request (" << engine << ")\n";
  std::cout << "cost model: "
            << (measured ? "measured profile " + vidur + "/" + gpu + "_" + profile + "_mlp.csv"
                         : std::string("roofline (no profile found)"))
            << "\n";
  s.options.ttft_slo_s = 2.0;
  s.options.tpot_slo_s = 0.1;
  // Sarathi: the budget from a 200 ms TBT target, sized for 32 decodes over 1000-token contexts with the
  // chunk at the end of a 1000-token prompt (the query says whether the target can be met at all).
  sim::tbt_budget_query q;
  q.tbt_target_s = 0.2;
  q.decodes = 32;
  q.mean_context = 1000;
  q.prompt_tokens = 1000;
  const sim::tbt_budget b = sim::token_budget_for_tbt(s.model, q);
  s.budget = std::max<std::int64_t>(256, b.token_budget);
  if (!b.feasible) std::cout << "token_budget_for_tbt: " << b.reason << "\n";

  if (trace.empty()) {
    // Three tenants: tenant 0 floods in bursts, tenants 1 and 2 are steady. Tenants 1 and 2 have
    // priority 1 (for the SLO-aware policy); everyone has the same weight.
    sim::generator_options g;
    g.seed = 2024;
    g.requests = 4000;
    g.prompt = {600.0, 1.0, 16, 6000};
    g.output = {180.0, 1.0, 1, 1500};
    sim::workload w = sim::on_off_workload(g, {{30.0, 20.0, 10.0}, {4.0, 1e9, 0.0}, {4.0, 1e9, 0.0}}, 120.0);
    for (auto& r : w) r.req.priority = r.req.client.value() == 0 ? 0 : 1;
    for (auto& r : w)  // the steady tenants are interactive (TTFT SLO 2 s); the flood is batch work
      if (r.req.client.value() != 0) r.req.ttft_slo_s = 2.0;
    const auto result = compare(s, w);
    print("Generated workload: " + std::to_string(w.size()) +
              " requests over 120 s; tenant 0 bursts at 30 req/s (on 20 s / off 10 s), tenants 1-2 steady at 4 req/s",
          result, s);
    write(out, "generated", result);
    std::cout << "  Read: 'gap' is the largest service difference (weighted tokens, 10 s windows) between tenants\n"
                 "  queued throughout a window and Jain is the mean fairness index over those windows: VTC, WFQ and\n"
                 "  DRR keep the steady tenants' share while FCFS hands the flood everything; Sarathi's chunking\n"
                 "  cuts Orca's TBT tail.\n";
    two_gpus(s);
    const std::string candidates[] = {"data/azure_llm_2023_conv.csv",
#ifdef WEFT_DATA_DIR
                                      std::string(WEFT_DATA_DIR) + "/azure_llm_2023_conv.csv"
#endif
    };
    for (const auto& c : candidates)
      if (std::filesystem::exists(c)) {
        trace = c;
        break;
      }
    if (trace.empty()) {
      std::cout << "\n(no Azure trace at data/azure_llm_2023_conv.csv; pass a trace path to replay one)\n";
      plot(out);
      return 0;
    }
    // The demo replays the first 6000 requests (~18 minutes) at 1.25x the trace's rate, so that the
    // server is loaded and the policies differ; pass the trace path to replay it as recorded.
    if (rows == 0) rows = 6000;
    time_scale = 0.8;
  }
  sim::trace_options to;
  to.clients = 4;
  to.seed = 1;
  to.time_scale = time_scale;
  to.max_rows = rows;
  const sim::workload w = sim::read_azure_csv(trace, to);
  const auto result = compare(s, w);
  print("Azure LLM conversation trace (" + trace + "): " + std::to_string(w.size()) +
            " requests, clients assigned Zipf(1) over 4, time scale " + std::to_string(time_scale),
        result, s);
  write(out, "azure", result);
  plot(out);
  return 0;
} catch (const std::exception& e) {
  std::cerr << "serve_sim: " << e.what() << '\n';
  return 1;
}

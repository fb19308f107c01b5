// How well the simulator's cost model predicts measured GPU time.
//
//  1. Per-layer non-attention time for every profiled (GPU, model, tensor-parallel degree, token count)
//     in data/vidur: the roofline (today's defaults, and the defaults before they were fitted) and the
//     measured-profile model fitted on half the token counts and tested on the other half (both halves
//     in turn), against the measurement. Mean and worst relative error per group and overall.
//  2. All-reduce time, held out the same way.
//  3. The op-wise rescaling of a profile to another layer shape (Llama-2-7B's profile predicting
//     Llama-3-8B = Mistral-7B's layer), when the Llama-3-8B profile has been fetched
//     (scripts/fetch_traces.sh vidur-a100-llama3-8b-mlp).
//  4. Whole iterations against Sarathi-Serve's published measured runs (its OSDI'24 artifact,
//     osdi-experiments/figure-2: Yi-34B, two A100 80GB PCIe, TP 2): decode batches 1-128 at ~1k context
//     and prefills of 128-16384 tokens.
// Writes fidelity_rows.csv, fidelity_summary.csv, fidelity_iterations.csv; plot.py draws fidelity.png.
//
//   bench_sched_fidelity [data-dir]
#include <weft/sched/sim/cost_model.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace sim = weft::sched::sim;

namespace {

struct error_stats {
  double sum = 0.0, worst = 0.0;
  std::size_t n = 0;
  void add(double predicted, double measured) {
    const double e = std::abs(predicted - measured) / measured;
    sum += e;
    worst = std::max(worst, e);
    ++n;
  }
  double mean() const { return n == 0 ? 0.0 : sum / static_cast<double>(n); }
};

struct group {
  std::string gpu, model;
  sim::gpu_spec gpu_spec;
  sim::model_spec model_spec;
};

sim::cost_params old_defaults(sim::cost_params p) {  // the roofline before this bench fitted it
  p.compute_efficiency = 0.5;
  p.memory_efficiency = 0.8;
  p.layer_overhead_s = 0.0;
  return p;
}

void layer_fidelity(const std::string& dir, std::ofstream& rows, std::ofstream& summary) {
  const group groups[] = {{"a100", "Llama-2-7b-hf", sim::a100_80g(), sim::llama2_7b()},
                          {"a100", "Llama-2-70b-hf", sim::a100_80g(), sim::llama2_70b()},
                          {"h100", "Llama-2-7b-hf", sim::h100_80g(), sim::llama2_7b()},
                          {"h100", "Llama-2-70b-hf", sim::h100_80g(), sim::llama2_70b()}};
  rows << "gpu,model,tp,tokens,measured_s,roofline_s,roofline_old_s,profile_heldout_s,held_out_half\n";
  summary << "what,gpu,model,tp,points,roofline_mean,roofline_worst,roofline_old_mean,profile_mean,profile_worst,"
             "profile_even_mean,profile_even_worst,profile_odd_mean,profile_odd_worst\n";
  std::printf("\n1. Per-layer non-attention time (9 operators), measured in data/vidur vs predicted\n");
  std::printf("   profile model: fitted on every other token count, tested on the rest (both halves)\n");
  std::printf("   %-5s %-15s %3s %6s | %-17s %-10s | %-17s %-17s %-17s\n", "gpu", "model", "tp", "points",
              "roofline mean/max", "old mean", "profile mean/max", "held-out even", "held-out odd");
  error_stats all_roof, all_old, all_prof, all_even, all_odd, all_mid;
  for (const group& g : groups) {
    for (int tp : {1, 2, 4, 8}) {
      const sim::layer_profile p =
          sim::read_vidur_layer_profile(dir + "/" + g.gpu + "_" + g.model + "_mlp.csv", g.model_spec.shape(), tp);
      sim::cost_params params;
      params.model = g.model_spec;
      params.gpu = g.gpu_spec;
      params.tensor_parallel = tp;
      params.gpu.hbm_bytes = 1e15;  // Vidur timed single layers (70B at TP 1 too): memory is no question here
      const sim::cost_model roof(params), old(old_defaults(params));
      error_stats r, o, prof, half[2];
      const std::size_t n = p.tokens().size();
      for (int parity : {0, 1}) {
        std::vector<std::size_t> fit;
        for (std::size_t i = 0; i < n; ++i)
          if (i % 2 != static_cast<std::size_t>(parity) || i == 0 || i + 1 == n) fit.push_back(i);  // keep both ends
        const sim::layer_profile f = p.subset(fit);
        for (std::size_t i = 0; i < n; ++i) {
          if (i % 2 != static_cast<std::size_t>(parity) || i == 0 || i + 1 == n) continue;
          const double t = static_cast<double>(p.tokens()[i]), measured = p.measured_s(i);
          const double pred = f.layer_s(t);
          half[parity].add(pred, measured);
          prof.add(pred, measured);
          rows << g.gpu << ',' << g.model << ',' << tp << ',' << p.tokens()[i] << ',' << measured << ','
               << roof.roofline_linear_layer_s(t) << ',' << old.roofline_linear_layer_s(t) << ',' << pred << ','
               << (parity == 0 ? "even" : "odd") << '\n';
        }
      }
      for (std::size_t i = 0; i < n; ++i) {
        const double t = static_cast<double>(p.tokens()[i]);
        r.add(roof.roofline_linear_layer_s(t), p.measured_s(i));
        o.add(old.roofline_linear_layer_s(t), p.measured_s(i));
        all_roof.add(roof.roofline_linear_layer_s(t), p.measured_s(i));
        all_old.add(old.roofline_linear_layer_s(t), p.measured_s(i));
        if (t >= 16 && t <= 256) all_mid.add(roof.roofline_linear_layer_s(t), p.measured_s(i));
      }
      all_prof.sum += prof.sum, all_prof.n += prof.n, all_prof.worst = std::max(all_prof.worst, prof.worst);
      all_even.sum += half[0].sum, all_even.n += half[0].n, all_even.worst = std::max(all_even.worst, half[0].worst);
      all_odd.sum += half[1].sum, all_odd.n += half[1].n, all_odd.worst = std::max(all_odd.worst, half[1].worst);
      std::printf(
          "   %-5s %-15s %3d %6zu | %6.1f%% / %6.1f%% %7.1f%%   | %5.1f%% / %5.1f%%   %5.1f%% / %5.1f%%   %5.1f%% / "
          "%5.1f%%\n",
          g.gpu.c_str(), g.model.c_str(), tp, n, 100 * r.mean(), 100 * r.worst, 100 * o.mean(), 100 * prof.mean(),
          100 * prof.worst, 100 * half[0].mean(), 100 * half[0].worst, 100 * half[1].mean(), 100 * half[1].worst);
      summary << "layer," << g.gpu << ',' << g.model << ',' << tp << ',' << n << ',' << r.mean() << ',' << r.worst
              << ',' << o.mean() << ',' << prof.mean() << ',' << prof.worst << ',' << half[0].mean() << ','
              << half[0].worst << ',' << half[1].mean() << ',' << half[1].worst << '\n';
    }
  }
  std::printf(
      "   %-5s %-15s %3s %6zu | %6.1f%% / %6.1f%% %7.1f%%   | %5.1f%% / %5.1f%%   %5.1f%% / %5.1f%%   %5.1f%% / "
      "%5.1f%%\n",
      "all", "", "", all_roof.n, 100 * all_roof.mean(), 100 * all_roof.worst, 100 * all_old.mean(),
      100 * all_prof.mean(), 100 * all_prof.worst, 100 * all_even.mean(), 100 * all_even.worst, 100 * all_odd.mean(),
      100 * all_odd.worst);
  std::printf("   roofline where decode batches live (16-256 tokens, %zu points): mean %.1f%%, worst %.1f%%\n",
              all_mid.n, 100 * all_mid.mean(), 100 * all_mid.worst);
  std::printf("   targets: profile <= 5%% mean, <= 15%% worst held out; roofline <= 20%% mean\n");
  summary << "layer,all,all,0," << all_roof.n << ',' << all_roof.mean() << ',' << all_roof.worst << ','
          << all_old.mean() << ',' << all_prof.mean() << ',' << all_prof.worst << ',' << all_even.mean() << ','
          << all_even.worst << ',' << all_odd.mean() << ',' << all_odd.worst << '\n';
}

void all_reduce_fidelity(const std::string& dir, std::ofstream& summary) {
  std::printf("\n2. All-reduce time (isotonic fit), held out by halves, by message size\n");
  for (const char* gpu : {"a100", "h100"}) {
    for (int workers : {2, 4}) {
      const sim::all_reduce_profile a =
          sim::read_vidur_all_reduce_profile(dir + "/" + gpu + "_pairwise_nvlink_all_reduce.csv", workers);
      // The raw medians, to test against (the profile holds the isotonic fit).
      std::ifstream in(dir + "/" + gpu + "_pairwise_nvlink_all_reduce.csv");
      weft::csv_reader csv(in, gpu);
      const std::size_t tc = csv.column("time_stats.all_reduce.median"), wc = csv.column("num_workers"),
                        sc = csv.column("size");
      std::vector<std::pair<std::int64_t, double>> raw;
      while (csv.next())
        if (csv.number<int>(wc) == workers)
          raw.emplace_back(csv.number<std::int64_t>(sc), csv.number<double>(tc) * 1e-3);
      std::sort(raw.begin(), raw.end());
      raw.erase(std::unique(raw.begin(), raw.end(), [](auto& x, auto& y) { return x.first == y.first; }), raw.end());
      error_stats small, large;
      for (int parity : {0, 1}) {
        std::vector<std::int64_t> xs;
        std::vector<double> ys;
        for (std::size_t i = 0; i < raw.size(); ++i)
          if (i % 2 != static_cast<std::size_t>(parity) || i == 0 || i + 1 == raw.size()) {
            xs.push_back(raw[i].first);
            ys.push_back(raw[i].second);
          }
        const sim::all_reduce_profile f("half", workers, xs, ys);
        for (std::size_t i = 1; i + 1 < raw.size(); ++i)
          if (i % 2 == static_cast<std::size_t>(parity))
            (raw[i].first < (std::int64_t{1} << 22) ? small : large)
                .add(f.seconds_for(static_cast<double>(raw[i].first)), raw[i].second);
      }
      std::printf(
          "   %s %d GPUs: %zu sizes; < 4M elements: mean %.1f%% worst %.0f%%; >= 4M elements: mean %.1f%% worst "
          "%.1f%%\n",
          gpu, workers, a.elements().size(), 100 * small.mean(), 100 * small.worst, 100 * large.mean(),
          100 * large.worst);
      summary << "all_reduce_small," << gpu << ",-," << workers << ',' << small.n << ",0,0,0," << small.mean() << ','
              << small.worst << ",0,0,0,0\n";
      summary << "all_reduce_large," << gpu << ",-," << workers << ',' << large.n << ",0,0,0," << large.mean() << ','
              << large.worst << ",0,0,0,0\n";
    }
  }
  std::printf(
      "   (small messages are latency-bound and their medians jump between ~7 and ~60 us from size to size:\n"
      "    the fit is monotone, the noise is not; a decode's all-reduce is 1-256 tokens * width, i.e. small)\n");
}

void rescale_check(const std::string& dir, std::ofstream& summary) {
  const std::string fetched = dir + "/../fetched/vidur-a100-llama3-8b-mlp.csv";
  std::printf("\n3. Rescaling the Llama-2-7B profile to Llama-3-8B's layer (Mistral-7B's shape: GQA 8, MLP 14336)\n");
  if (!std::filesystem::exists(fetched)) {
    std::printf("   skipped: %s not found (scripts/fetch_traces.sh vidur-a100-llama3-8b-mlp)\n", fetched.c_str());
    return;
  }
  for (int tp : {1, 2, 4, 8}) {
    const sim::layer_profile src =
        sim::read_vidur_layer_profile(dir + "/a100_Llama-2-7b-hf_mlp.csv", sim::llama2_7b().shape(), tp);
    const sim::layer_profile scaled = src.rescaled(sim::llama3_8b().shape());
    const sim::layer_profile truth = sim::read_vidur_layer_profile(fetched, sim::llama3_8b().shape(), tp);
    error_stats e;
    for (std::size_t i = 0; i < truth.tokens().size(); ++i)
      if (truth.tokens()[i] <= src.tokens().back())
        e.add(scaled.layer_s(static_cast<double>(truth.tokens()[i])), truth.measured_s(i));
    std::printf("   TP %d: %zu token counts, mean %.1f%%, worst %.1f%%\n", tp, e.n, 100 * e.mean(), 100 * e.worst);
    summary << "rescale,a100,Llama-3-8B," << tp << ',' << e.n << ",0,0,0," << e.mean() << ',' << e.worst
            << ",0,0,0,0\n";
  }
}

void iteration_check(const std::string& dir, std::ofstream& out) {
  // Sarathi-Serve OSDI'24 artifact, osdi-experiments/figure-2/{decode,prefill}.csv (batch_execution_time, s).
  const double decode[][2] = {{1, 0.046803},  {2, 0.047502},  {4, 0.048845},  {8, 0.069676},
                              {16, 0.077254}, {32, 0.087897}, {64, 0.127807}, {128, 0.189331}};
  const double prefill[][2] = {{128, 0.048094},  {256, 0.121353},  {512, 0.105582},  {1024, 0.214301},
                               {2048, 0.366025}, {4096, 0.757603}, {8192, 1.863265}, {16384, 4.407501}};
  sim::cost_params p;
  p.model = sim::yi_34b();
  p.gpu = sim::a100_pcie_80g();
  p.tensor_parallel = 2;
  sim::measured_profile none{
      sim::read_vidur_layer_profile(dir + "/a100_Llama-2-7b-hf_mlp.csv", sim::llama2_7b().shape(), 2),
      sim::read_vidur_all_reduce_profile(dir + "/a100_pairwise_nvlink_all_reduce.csv", 2)};
  const sim::cost_model roof(p);
  // The layer profile rescaled from Llama-2-7B (no Yi-34B profile ships) with the measured all-reduce.
  const sim::cost_model prof(p, {none.layer.rescaled(p.model.shape()), none.all_reduce});
  sim::cost_params before = old_defaults(p);
  before.iteration_overhead_s = 2e-3;
  before.per_request_overhead_s = 0.0;
  before.attention_compute_efficiency = 1.0;  // the old model had one efficiency for everything
  before.attention_overhead_s = 0.0;
  const sim::cost_model old(before);
  std::printf("\n4. Whole iterations vs Sarathi-Serve's measured runs (Yi-34B, 2 x A100 80GB PCIe, TP 2)\n");
  std::printf("   %-22s %10s | %10s %7s | %10s %7s | %10s %7s\n", "iteration", "measured", "roofline", "error",
              "profile", "error", "old model", "error");
  out << "kind,size,measured_s,roofline_s,profile_s,old_s\n";
  error_stats er, ep, eo;
  const auto row = [&](const char* kind, double size, double measured, const sim::iteration_shape& s) {
    const double r = roof.iteration_s(s), q = prof.iteration_s(s), o = old.iteration_s(s);
    er.add(r, measured);
    ep.add(q, measured);
    eo.add(o, measured);
    char label[64];
    std::snprintf(label, sizeof label, "%s %.0f", kind, size);
    std::printf("   %-22s %8.1fms | %8.1fms %+6.0f%% | %8.1fms %+6.0f%% | %8.1fms %+6.0f%%\n", label, measured * 1e3,
                r * 1e3, 100 * (r / measured - 1), q * 1e3, 100 * (q / measured - 1), o * 1e3,
                100 * (o / measured - 1));
    out << kind << ',' << size << ',' << measured << ',' << r << ',' << q << ',' << o << '\n';
  };
  for (const auto& d : decode) {  // decodes of prompts of 1020 tokens (the artifact's 1024 with 4 decodes)
    const double b = d[0], ctx = 1021.5;
    row("decode batch", b, d[1], {b, b * ctx, b * ctx, b});
  }
  for (const auto& d : prefill) {
    const double t = d[0];
    row("prefill tokens", t, d[1], {t, t * (t + 1) / 2, t, 1.0});
  }
  std::printf(
      "   mean |error|: roofline %.1f%% (worst %.0f%%), profile %.1f%% (worst %.0f%%), old model %.1f%% (worst "
      "%.0f%%)\n",
      100 * er.mean(), 100 * er.worst, 100 * ep.mean(), 100 * ep.worst, 100 * eo.mean(), 100 * eo.worst);
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : std::string(WEFT_DATA_DIR) + "/vidur";
  const std::string out = WEFT_BENCH_OUT;
  std::ofstream rows(out + "/fidelity_rows.csv"), summary(out + "/fidelity_summary.csv"),
      iterations(out + "/fidelity_iterations.csv");
  std::printf("Cost-model fidelity against measured GPU time (profiles: %s)\n", dir.c_str());
  layer_fidelity(dir, rows, summary);
  all_reduce_fidelity(dir, summary);
  rescale_check(dir, summary);
  iteration_check(dir, iterations);
  std::printf("\nwrote %s/fidelity_rows.csv, fidelity_summary.csv, fidelity_iterations.csv\n", out.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_sched_fidelity: %s\n", e.what());
  return 1;
}

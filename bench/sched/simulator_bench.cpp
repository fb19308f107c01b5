// Simulator speed on the whole Azure LLM conversation trace (target < 2 s per policy) and the policy
// comparison on it, written as CSV (plotted by bench/sched/plot.py). Skips with a message when the
// trace is absent.
#include <weft/sched.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace ws = weft::sched;
namespace sim = weft::sched::sim;
using clk = std::chrono::steady_clock;

namespace {

weft::kv::kv_manager<> make_kv(const sim::cost_model& m) {
  weft::kv::kv_config o;
  o.block_size = 16;
  o.num_blocks = static_cast<std::size_t>(m.kv_blocks(16)) + 1;  // + the null block
  o.host_blocks = o.num_blocks;
  o.bytes_per_token = static_cast<std::size_t>(m.kv_bytes_per_token());
  o.max_copy_unit_blocks = 16;
  return weft::kv::kv_manager<>(o);
}

template <class Queue>
void run(const char* name, const sim::workload& w, const sim::cost_model& m, ws::scheduler_options so,
         const sim::sim_options& o, std::ofstream& summary, bool& header, const std::string& tag, double scale) {
  ws::iteration_scheduler<Queue> s(so, Queue{}, make_kv(m));
  const auto t0 = clk::now();
  const sim::sim_result r = sim::simulate(s, w, m, o);
  const double wall = std::chrono::duration<double>(clk::now() - t0).count();
  std::printf(
      "  %-14s x%.2f load: %zu requests, %llu iterations simulated in %.3f s (%.0f iterations/s); "
      "TTFT p99 %.2f s, TBT p99 %.3f s, goodput %.2f req/s, Jain %.3f\n",
      name, 1.0 / scale, w.size(), static_cast<unsigned long long>(r.stats.iterations), wall,
      static_cast<double>(r.stats.iterations) / wall, r.stats.ttft_p99, r.stats.tbt_p99, r.stats.goodput_req_s,
      r.stats.jain_index);
  sim::write_summary_csv(summary, tag + "," + std::to_string(wall) + "," + name, r.stats, header);
  header = false;
  std::ofstream service(std::string(WEFT_BENCH_OUT) + "/sched_service_" + tag + "_" + name + ".csv");
  sim::write_service_csv(service, r.service);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path =
      argc > 1 ? argv[1] : std::string(WEFT_SCHED_SOURCE_DIR) + "/../shared/data/azure_llm_2023_conv.csv";
  if (!std::filesystem::exists(path)) {
    std::printf("sched simulator bench skipped: %s not found\n", path.c_str());
    return 0;
  }
  const sim::cost_model m(sim::llama2_7b_a100());
  sim::sim_options o;
  o.ttft_slo_s = 2.0;
  o.tpot_slo_s = 0.1;
  const std::int64_t budget = std::max<std::int64_t>(256, sim::token_budget_for_tbt(m, 0.1, 64, 1000.0));
  std::ofstream summary(std::string(WEFT_BENCH_OUT) + "/sched_policies.csv");
  // write_summary_csv's header starts with "policy"; each row's label carries load,sim_wall_s,policy.
  summary << "load,sim_wall_s,";
  bool header = true;
  std::printf("sched simulator on the whole Azure conversation trace (%s), llama2-7b on A100, budget %lld\n",
              path.c_str(), static_cast<long long>(budget));
  for (double scale : {1.0, 0.8}) {
    sim::trace_options to;
    to.time_scale = scale;
    const auto t0 = clk::now();
    const sim::workload w = sim::read_azure_csv(path, to);
    std::printf("  read %zu rows in %.3f s\n", w.size(), std::chrono::duration<double>(clk::now() - t0).count());
    const std::string tag = scale == 1.0 ? "x1.00" : "x1.25";
    const auto chunked = ws::chunked_prefill(budget, 256);
    run<ws::fcfs_queue>("orca+fcfs", w, m, ws::continuous_batching(256, 8192), o, summary, header, tag, scale);
    run<ws::fcfs_queue>("sarathi+fcfs", w, m, chunked, o, summary, header, tag, scale);
    run<ws::vtc_queue>("sarathi+vtc", w, m, chunked, o, summary, header, tag, scale);
    run<ws::wfq_queue>("sarathi+wfq", w, m, chunked, o, summary, header, tag, scale);
    run<ws::drr_queue>("sarathi+drr", w, m, chunked, o, summary, header, tag, scale);
  }
  std::printf("  wrote %s/sched_policies.csv and sched_service_*.csv\n", WEFT_BENCH_OUT);
  return 0;
}

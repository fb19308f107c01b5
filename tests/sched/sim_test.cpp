#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/sim/simulator.hpp>
#include <weft/sched/vtc_queue.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace weft::sched;
using namespace weft::sched::sim;

namespace {

weft::kv::kv_manager<> kv_for(const cost_model& m, std::int64_t host_blocks = 0) {
  weft::kv::kv_config o;
  o.block_size = 16;
  o.num_blocks = static_cast<std::size_t>(m.kv_blocks(16)) + 1;  // + the null block
  o.host_blocks = host_blocks == 0 ? 0 : static_cast<std::size_t>(host_blocks) + 1;
  o.bytes_per_token = static_cast<std::size_t>(m.kv_bytes_per_token());
  return weft::kv::kv_manager<>(o);
}

generator_options load(std::uint64_t seed, std::size_t n, double rate) {
  generator_options g;
  g.seed = seed;
  g.requests = n;
  g.rate_per_s = rate;
  g.prompt = {1024.0, 1.0, 16, 8000};
  g.output = {128.0, 1.0, 1, 1024};
  return g;
}

std::string records_csv(const sim_result& r) {
  std::ostringstream out;
  out.precision(17);
  write_records_csv(out, r.records);
  write_summary_csv(out, "x", r.stats, true);
  return out.str();
}

}  // namespace

TEST_CASE("simulator: same seed, same bits; another seed, other bits", "[sched][sim][determinism]") {
  const cost_model m(llama2_7b_a100());
  const workload w = gamma_workload(load(5, 300, 8.0), 3.0);
  sim_options o;
  o.time_noise_cv = 0.1;
  o.seed = 42;
  auto run = [&](std::uint64_t seed) {
    iteration_scheduler<vtc_queue> s(chunked_prefill(512, 128), vtc_queue{}, kv_for(m));
    sim_options oo = o;
    oo.seed = seed;
    return records_csv(simulate(s, w, m, oo));
  };
  const std::string a = run(42), b = run(42), c = run(43);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(gamma_workload(load(5, 300, 8.0), 3.0).size() == 300);
  const workload w2 = gamma_workload(load(5, 300, 8.0), 3.0);
  for (std::size_t i = 0; i < w.size(); ++i) {
    REQUIRE(w[i].req.arrival_s == w2[i].req.arrival_s);
    REQUIRE(w[i].output_tokens == w2[i].output_tokens);
  }
}

TEST_CASE("simulator: chunked prefill lowers p99 TBT and completes everything", "[sched][sim][chunked]") {
  const cost_model m(llama2_7b_a100());
  const workload w = poisson_workload(load(9, 400, 6.0));
  iteration_scheduler<> plain(continuous_batching(128, 16384), fcfs_queue{}, kv_for(m));
  const std::int64_t budget = token_budget_for_tbt(m, 0.05, 64, 1500.0);
  CAPTURE(budget);
  REQUIRE(budget >= 128);
  iteration_scheduler<> chunked(chunked_prefill(budget, 128), fcfs_queue{}, kv_for(m));
  const sim_result a = simulate(plain, w, m);
  const sim_result b = simulate(chunked, w, m);
  CAPTURE(a.stats.tbt_p99, b.stats.tbt_p99, a.stats.ttft_p50, b.stats.ttft_p50);
  CHECK(a.stats.finished == 400);
  CHECK(b.stats.finished == 400);
  CHECK(b.stats.tbt_p99 < a.stats.tbt_p99);
  CHECK(a.idle_with_work == 0);
  CHECK(b.idle_with_work == 0);  // work conservation
}

TEST_CASE("simulator: VTC narrows the service gap of an overloaded server", "[sched][sim][vtc]") {
  const cost_model m(llama2_7b_a100());
  generator_options g = load(3, 3000, 1.0);
  g.prompt = {512.0, 0.5, 16, 4000};
  // Tenant 0 floods at 24 req/s, tenants 1 and 2 send 12 req/s each: all beyond their fair share.
  const workload w = on_off_workload(g, {{24.0, 1e9, 0.0}, {12.0, 1e9, 0.0}, {12.0, 1e9, 0.0}}, 120.0);
  iteration_scheduler<fcfs_queue> f(chunked_prefill(2048, 128), fcfs_queue{}, kv_for(m));
  iteration_scheduler<vtc_queue> v(chunked_prefill(2048, 128), vtc_queue{}, kv_for(m));
  sim_options o;
  o.max_time_s = 120.0;
  const sim_result a = simulate(f, w, m, o);
  const sim_result b = simulate(v, w, m, o);
  CAPTURE(a.stats.max_service_gap, b.stats.max_service_gap, a.stats.jain_index, b.stats.jain_index);
  CHECK(b.stats.max_service_gap < a.stats.max_service_gap);
  CHECK(b.stats.jain_index > a.stats.jain_index);
  CHECK(b.stats.jain_index > 0.95);
}

TEST_CASE("simulator: swap preemption under a small cache still finishes", "[sched][sim][preemption]") {
  const cost_model m(llama2_7b_a100());
  weft::kv::kv_config kv;
  kv.num_blocks = 601;  // ~9.6k tokens
  kv.host_blocks = 4001;
  kv.block_size = 16;
  kv.max_copy_unit_blocks = 16;
  kv.bytes_per_token = static_cast<std::size_t>(m.kv_bytes_per_token());
  scheduler_options so = chunked_prefill(512, 64);
  so.preemption = preemption_mode::swap;
  iteration_scheduler<> s(so, fcfs_queue{}, weft::kv::kv_manager<>(kv));
  generator_options g = load(4, 150, 20.0);
  g.output = {400.0, 0.5, 1, 1500};
  const sim_result r = simulate(s, poisson_workload(g), m);
  CHECK(r.stats.finished == 150);
  CHECK(r.stats.swaps > 0);
  CHECK(r.idle_with_work == 0);
}

TEST_CASE("azure trace reader parses rows and names the bad line", "[sched][sim][trace]") {
  std::istringstream good(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
      "2023-11-16 18:15:46.6805900,374,44\n"
      "2023-11-16 18:15:50.9951690,396,109\n"
      "2023-11-16 18:15:51.2224670,879,55\n");
  const workload w = read_azure_csv(good);
  REQUIRE(w.size() == 3);
  CHECK(w[0].req.arrival_s == 0.0);
  CHECK(w[1].req.arrival_s == Approx(4.314579).margin(1e-9));
  CHECK(w[2].req.prompt_tokens == 879);
  CHECK(w[2].output_tokens == 55);
  auto error_of = [](const std::string& text) {
    std::istringstream in(text);
    try {
      (void)read_azure_csv(in);
    } catch (const weft::error& e) {
      CHECK(e.code() == weft::errc::parse);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string head = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n";
  CHECK_THAT(error_of(head + "2023-11-16 18:15:47.1,-5,44\n"),
             Catch::Contains("line 3") && Catch::Contains("negative"));
  CHECK_THAT(error_of(head + "2023-11-16 18:15:47.1,12\n"), Catch::Contains("line 3"));
  CHECK_THAT(error_of(head + "\n2023-11-16 18:15:47.1,abc,4\n"), Catch::Contains("line 4"));
  CHECK_THAT(error_of(head + "yesterday,1,4\n"), Catch::Contains("line 3") && Catch::Contains("TIMESTAMP"));
  CHECK_THAT(error_of(head + "2023-11-16 18:15:47.1,10,0\n"), Catch::Contains("line 3"));
  CHECK_THAT(error_of("time,in,out\n"), Catch::Contains("line 1"));
  CHECK_THROWS_AS(read_azure_csv(std::string("/nonexistent/trace.csv")), weft::error);
}

TEST_CASE("burstgpt reader maps models to clients and skips failed rows", "[sched][sim][trace]") {
  std::istringstream in(
      "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
      "5,ChatGPT,472,18,490,Conversation log\n"
      "45,ChatGPT,1087,0,1087,Conversation log\n"
      "118,GPT-4,417,30,447,Conversation log\n");
  std::size_t skipped = 0;
  const workload w = read_burstgpt_csv(in, {}, &skipped);
  REQUIRE(w.size() == 2);
  CHECK(skipped == 1);
  CHECK(w[0].req.client == client_id(0));
  CHECK(w[1].req.client == client_id(1));
  CHECK(w[1].req.arrival_s == Approx(113.0));
  std::istringstream bad(
      "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
      "5,ChatGPT,47x,18,490,Conversation log\n");
  CHECK_THROWS_WITH(read_burstgpt_csv(bad), Catch::Contains("line 2") && Catch::Contains("Request tokens"));
}

TEST_CASE("the real Azure conversation trace, when present", "[sched][sim][trace][azure]") {
  const std::filesystem::path path =
      std::filesystem::path(WEFT_SCHED_SOURCE_DIR) / "../shared/data/azure_llm_2023_conv.csv";
  if (!std::filesystem::exists(path)) {
    WARN("skipped: " << path.string() << " not found (a checkout without ../shared/data)");
    return;
  }
  const workload w = read_azure_csv(path.string());
  CHECK(w.size() == 19366);  // data/README.md says 19,365; the file holds 19,366 rows
  CHECK(w.back().req.arrival_s > 3000.0);
  CHECK(w.back().req.arrival_s < 3700.0);
}

TEST_CASE("generators are seeded, valid and shaped as asked", "[sched][sim][generators]") {
  const workload p = poisson_workload(load(1, 5000, 10.0));
  CHECK(p.back().req.arrival_s / 5000.0 == Approx(0.1).epsilon(0.05));
  const workload s = session_workload(load(2, 200, 5.0), 4, 10.0, 128);
  REQUIRE(s.size() == 200);
  std::size_t with_history = 0;
  for (const auto& r : s) {
    CHECK(r.req.prefix_id != 0);
    CHECK(r.req.prefix_tokens >= 128);
    CHECK(r.req.prefix_tokens <= r.req.prompt_tokens);
    with_history += r.req.prefix_tokens > 128;
  }
  CHECK(with_history > 100);
  CHECK_THROWS_AS(poisson_workload(load(1, 10, 0.0)), weft::error);
  generator_options bad = load(1, 10, 1.0);
  bad.output.min = 0;
  CHECK_THROWS_AS(poisson_workload(bad), weft::error);
  CHECK_THROWS_AS(gamma_workload(load(1, 10, 1.0), -1.0), weft::error);
}

TEST_CASE("cost model is a roofline: decode memory-bound, prefill compute-bound", "[sched][sim][cost]") {
  const cost_model m(llama2_7b_a100());
  // One decode: weights / (bandwidth * efficiency) + overhead.
  const double decode = m.iteration_s(1, 1000, 1000);
  CHECK(decode == Approx(2e-3 + (6.74e9 * 2 + 1000 * 524288.0) / (2.039e12 * 0.8)).epsilon(1e-9));
  // 4096 prefill tokens: compute-bound.
  const double prefill = m.iteration_s(4096, 4096.0 * 4097 / 2, 4096);
  CHECK(prefill > 2e-3 + 2 * 6.74e9 * 4096 / (312e12 * 0.5));
  CHECK(m.kv_bytes_per_token() == 524288);
  CHECK(cost_model(llama2_70b_a100_tp4()).kv_bytes_per_token() == 327680);
  CHECK(cost_model(llama2_7b_h100()).iteration_s(1, 1000, 1000) < decode);
  const std::int64_t loose = token_budget_for_tbt(m, 0.2, 32, 1000), tight = token_budget_for_tbt(m, 0.03, 32, 1000);
  CHECK(loose > tight);
  CHECK(tight >= 32);
  CHECK_THROWS_AS(token_budget_for_tbt(m, 0.0, 1, 1), weft::error);
  cost_params too_big = llama2_70b_a100_tp4();
  too_big.tensor_parallel = 1;
  CHECK_THROWS_AS(cost_model(too_big), weft::error);
  CHECK(jain_index({1, 1, 1}) == Approx(1.0));
  CHECK(jain_index({1, 0, 0}) == Approx(1.0 / 3));
}

TEST_CASE("simulator rejects bad workloads", "[sched][sim][errors]") {
  const cost_model m;
  iteration_scheduler<> s(chunked_prefill(512, 64), fcfs_queue{}, kv_for(m));
  workload w = poisson_workload(load(1, 5, 1.0));
  workload unsorted = w;
  std::swap(unsorted[0], unsorted[4]);
  CHECK_THROWS_AS(simulate(s, unsorted, m), weft::error);
  workload zero = w;
  zero[2].output_tokens = 0;
  CHECK_THROWS_AS(simulate(s, zero, m), weft::error);
  sim_options o;
  o.window_s = 0.0;
  CHECK_THROWS_AS(simulate(s, w, m, o), weft::error);
  CHECK(simulate(s, w, m).stats.finished == 5);  // still usable
}

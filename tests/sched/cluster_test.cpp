#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/sim/cluster.hpp>

#include <catch2/catch.hpp>

using namespace weft::sched;
using namespace weft::sched::sim;

namespace {
using sched_t = iteration_scheduler<>;

std::function<std::unique_ptr<sched_t>()> factory(const cost_model& m, scheduler_options so, std::int64_t blocks = 0) {
  return [&m, so, blocks] {
    weft::kv::kv_config kv = m.kv_manager_config(16);
    if (blocks > 0) kv.num_blocks = static_cast<std::size_t>(blocks) + 1;  // + the null block
    return std::make_unique<sched_t>(so, fcfs_queue{}, weft::kv::kv_manager<>(kv));
  };
}

workload load(std::uint64_t seed, std::size_t n, double rate) {
  generator_options g;
  g.seed = seed;
  g.requests = n;
  g.rate_per_s = rate;
  g.prompt = {1500.0, 0.8, 16, 8000};
  g.output = {150.0, 1.0, 1, 1000};
  return poisson_workload(g);
}
}  // namespace

TEST_CASE("disaggregation: decode instances see no prefill, so TBT tails shrink", "[sched][sim][distserve]") {
  const cost_model m(llama2_7b_a100());
  const workload w = load(21, 400, 6.0);
  cluster_options c;
  c.prefill_instances = 1;
  c.decode_instances = 1;
  c.instances = 2;
  const auto disagg = simulate_disaggregated<sched_t>(factory(m, continuous_batching(128, 16384)), w, m, c);
  const auto coloc = simulate_colocated<sched_t>(factory(m, continuous_batching(128, 16384)), w, m, c);
  CAPTURE(disagg.result.stats.tbt_p99, coloc.result.stats.tbt_p99, disagg.result.stats.ttft_p50,
          coloc.result.stats.ttft_p50);
  CHECK(disagg.result.stats.finished == 400);
  CHECK(coloc.result.stats.finished == 400);
  std::size_t multi = 0;
  for (const auto& r : w) multi += r.output_tokens > 1;
  CHECK(disagg.kv_transfers == multi);
  CHECK(disagg.kv_transfer_s > 0.0);
  CHECK(disagg.result.stats.tbt_p99 < coloc.result.stats.tbt_p99);
  // Determinism.
  const auto again = simulate_disaggregated<sched_t>(factory(m, continuous_batching(128, 16384)), w, m, c);
  CHECK(again.result.stats.tbt_p99 == disagg.result.stats.tbt_p99);
  CHECK(again.result.stats.e2e_p99 == disagg.result.stats.e2e_p99);
}

TEST_CASE("migration moves decoding requests off a loaded instance and everything finishes", "[sched][sim][llumnix]") {
  const cost_model m(llama2_7b_a100());
  const workload w = load(5, 300, 10.0);
  cluster_options c;
  c.instances = 2;
  c.migration_interval_s = 0.5;
  c.imbalance_blocks = 64;
  const auto mig = simulate_colocated<sched_t>(factory(m, chunked_prefill(1024, 64), 1500), w, m, c);
  CHECK(mig.result.stats.finished == 300);
  CHECK(mig.migrations > 0);
  CHECK(mig.migration_s > 0.0);
  c.migration_interval_s = 0.0;
  const auto none = simulate_colocated<sched_t>(factory(m, chunked_prefill(1024, 64), 1500), w, m, c);
  CHECK(none.result.stats.finished == 300);
  CHECK(none.migrations == 0);
  cluster_options bad;
  bad.prefill_instances = 0;
  CHECK_THROWS_AS(simulate_disaggregated<sched_t>(factory(m, chunked_prefill(1024, 64)), w, m, bad), weft::error);
}

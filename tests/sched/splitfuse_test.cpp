// DeepSpeed-FastGen's Dynamic SplitFuse: the scheduler settings (dynamic_splitfuse.hpp) and the
// saturating forward size on a cost model (sim/forward_size.hpp).
#include <weft/sched/dynamic_splitfuse.hpp>
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/sim/forward_size.hpp>

#include "harness.hpp"

#include <catch2/catch.hpp>

#include <set>
#include <string>

using namespace weft::sched;
using weft_test::kv_of;

namespace {

weft_test::job job_of(std::uint64_t id, std::int64_t prompt, std::int64_t output) {
  weft_test::job j;
  j.req.id = request_id(id);
  j.req.prompt_tokens = prompt;
  j.output = output;
  return j;
}

}  // namespace

TEST_CASE("dynamic SplitFuse: short prompts fused, a long one split, every pass exactly full while work lasts",
          "[sched][splitfuse]") {
  // Four short prompts (100 tokens) and a long one (3000) against a 512-token pass.
  std::vector<weft_test::job> jobs = {job_of(1, 100, 4), job_of(2, 100, 4), job_of(3, 3000, 4), job_of(4, 100, 4),
                                      job_of(5, 100, 4)};
  iteration_scheduler<> s(dynamic_splitfuse(512, 64), fcfs_queue{}, kv_of(4096));
  std::vector<std::int64_t> sizes, prefills;
  std::int64_t long_chunks = 0;
  std::int64_t first_pass_prompts = -1;
  const auto out = weft_test::run_jobs(s, jobs, [&](const batch& b, auto&) {
    sizes.push_back(b.tokens());
    prefills.push_back(b.prefill_tokens);
    if (first_pass_prompts < 0) first_pass_prompts = static_cast<std::int64_t>(b.entries.size());
    for (const auto& e : b.entries)
      if (e.id == request_id(3) && e.prefill_tokens > 0) ++long_chunks;
  });
  CHECK(out.completed == 5);
  // The first pass fuses 100 + 100 and cuts the long prompt to the 312 tokens left: exactly 512.
  REQUIRE(!sizes.empty());
  CHECK(sizes[0] == 512);
  CHECK(first_pass_prompts == 3);
  // 3000 tokens in passes of at most 512 (less the decodes riding along): at least six chunks.
  CHECK(long_chunks >= 6);
  // Total prompt work is 3400 tokens: every pass is full while a pass's worth of prompt work is left.
  std::int64_t prompt_left = 3400;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (prompt_left >= 512) CHECK(sizes[i] == 512);
    prompt_left -= prefills[i];
  }
  CHECK(prompt_left == 0);
  for (std::int64_t t : sizes) CHECK(t <= 512);
}

TEST_CASE("dynamic SplitFuse: bad settings are refused", "[sched][splitfuse]") {
  CHECK_THROWS_AS(dynamic_splitfuse(0), weft::error);
  CHECK_THROWS_AS(dynamic_splitfuse(-5), weft::error);
  CHECK_THROWS_WITH(dynamic_splitfuse(128, 256), Catch::Contains("max_running"));
  CHECK_THROWS_AS(dynamic_splitfuse(128, 0), weft::error);
  const scheduler_options o = dynamic_splitfuse(1024, 128);
  CHECK(o.chunked_prefill);
  CHECK(o.token_budget == 1024);
  CHECK(o.max_running == 128);
}

TEST_CASE("saturating_forward_tokens: below it weights dominate, above it throughput barely grows",
          "[sched][splitfuse]") {
  using namespace weft::sched::sim;
  const cost_model m;  // Llama-2-7B on an A100, roofline
  const forward_size f = saturating_forward_tokens(m, 0.9, 8192);
  CHECK(f.tokens > 1);
  CHECK(f.tokens <= f.peak_at_tokens);
  CHECK(f.tokens_per_s >= 0.9 * f.peak_tokens_per_s);
  // One token fewer misses the share: it is the smallest.
  const double n = static_cast<double>(f.tokens - 1);
  CHECK(n / m.iteration_s(iteration_shape{n, n * (n + 1) / 2, n, 1}) < 0.9 * f.peak_tokens_per_s);
  // Asking for more of the peak needs a bigger pass; the whole peak is reached at the peak.
  CHECK(saturating_forward_tokens(m, 0.5, 8192).tokens <= f.tokens);
  CHECK(saturating_forward_tokens(m, 0.97, 8192).tokens >= f.tokens);
  CHECK(saturating_forward_tokens(m, 1.0, 8192).tokens == f.peak_at_tokens);
  // Engine overheads amortise over the pass: a lean engine saturates at a smaller pass.
  cost_params lean;
  lean.iteration_overhead_s = 2e-3;
  lean.per_request_overhead_s = 20e-6;
  CHECK(saturating_forward_tokens(cost_model(lean), 0.9, 8192).tokens < f.tokens);
  // It plugs straight into the scheduler settings.
  CHECK_NOTHROW(dynamic_splitfuse(f.tokens, 1));
}

TEST_CASE("saturating_forward_tokens: bad arguments are refused", "[sched][splitfuse]") {
  using namespace weft::sched::sim;
  const cost_model m;
  CHECK_THROWS_WITH(saturating_forward_tokens(m, 0.0), Catch::Contains("share"));
  CHECK_THROWS_AS(saturating_forward_tokens(m, 1.5), weft::error);
  CHECK_THROWS_AS(saturating_forward_tokens(m, -1.0), weft::error);
  CHECK_THROWS_WITH(saturating_forward_tokens(m, 0.9, 0), Catch::Contains("max_tokens"));
  CHECK_THROWS_AS(saturating_forward_tokens(m, 0.9, (std::int64_t{1} << 20) + 1), weft::error);
}

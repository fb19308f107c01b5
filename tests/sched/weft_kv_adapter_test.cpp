// The schedulers on the real weft::kv manager, through weft_kv_adapter.
#include "harness.hpp"

#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/sim/simulator.hpp>
#include <weft/sched/vtc_queue.hpp>
#include <weft/sched/weft_kv_adapter.hpp>

#include <random>

using namespace weft::sched;

static_assert(kv_manager<weft_kv_adapter<>>);

namespace {
weft::kv::kv_config config(std::size_t blocks, std::size_t host) {
  weft::kv::kv_config c;
  c.num_blocks = blocks + 1;  // + the null block
  c.block_size = 16;
  c.host_blocks = host == 0 ? 0 : host + 1;
  c.watermark = 0.0;
  return c;
}
}  // namespace

TEST_CASE("weft::kv adapter: prefix hits skip prefill", "[sched][kv-adapter]") {
  weft_kv_adapter<> kv(config(64, 0), 1024);
  request a;
  a.id = request_id(1);
  a.client = client_id(0);
  a.prompt_tokens = 100;
  a.prefix_id = 5;
  a.prefix_tokens = 64;
  CHECK(kv.cached_prefix_tokens(a) == 0);
  REQUIRE(kv.grow(a, 100));
  CHECK(kv.held_blocks(a.id) == 7);
  request b = a;
  b.id = request_id(2);
  CHECK(kv.cached_prefix_tokens(b) == 64);
  CHECK(kv.blocks_to_grow(b, 100) == 3);
  REQUIRE(kv.grow(b, 100));
  CHECK(kv.grow(b, 130));
  CHECK(kv.held_blocks(b.id) == 9);
  kv.release(a.id);
  kv.release(b.id);
  CHECK(kv.free_blocks() == 64);
  CHECK_THROWS_AS(kv.release(a.id), weft::error);
}

TEST_CASE("weft::kv adapter: chunked scheduler with swap preemption completes every request", "[sched][kv-adapter]") {
  std::mt19937_64 rng(17);
  std::uniform_int_distribution<std::int64_t> p(1, 400), o(1, 150);
  std::vector<test::job> jobs;
  for (std::uint64_t i = 1; i <= 120; ++i) {
    test::job j;
    j.req.id = request_id(i);
    j.req.client = client_id(static_cast<std::uint32_t>(i % 4));
    j.req.prompt_tokens = p(rng);
    j.req.prefix_id = i % 3 == 0 ? 7 : 0;
    j.req.prefix_tokens = j.req.prefix_id != 0 ? std::min<std::int64_t>(j.req.prompt_tokens, 48) : 0;
    j.output = o(rng);
    jobs.push_back(j);
  }
  for (auto mode : {preemption_mode::recompute, preemption_mode::swap}) {
    scheduler_options so = chunked_prefill(256, 32);
    so.preemption = mode;
    iteration_scheduler<vtc_queue, weft_kv_adapter<>> s(so, vtc_queue{}, weft_kv_adapter<>(config(120, 600), 4096));
    std::int64_t swap_units = 0, swap_blocks = 0;
    const auto out = test::run_jobs(
        s, jobs,
        [&](const batch& b, auto&) {
          CHECK(b.tokens() <= 256);
          for (const auto& t : b.swapped_out) {
            swap_units += t.copy_units;
            swap_blocks += t.blocks;
            CHECK(t.copy_units <= t.blocks);
          }
        },
        200000);
    CHECK(out.completed == 120);
    CHECK(out.empty_iterations_with_work == 0);
    CHECK(s.kv().free_blocks() == 120);
    if (mode == preemption_mode::swap) {
      CHECK(s.stats().preempted_swap > 0);
      CHECK(swap_units > 0);
    } else {
      CHECK(s.stats().preempted_recompute > 0);
    }
  }
}

// Archetypes: the weakest types that satisfy each sched concept, run through the scheduler. If the
// scheduler used anything beyond the concept, this file would not compile.
#include "harness.hpp"

#include <weft/sched/concepts.hpp>
#include <weft/sched/iteration_scheduler.hpp>

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

using namespace weft::sched;

namespace {

using weft_test::min_kv;
using weft_test::min_queue;

struct min_victim {
  std::size_t choose(std::span<const victim_candidate>) const { return 0; }
};

}  // namespace

static_assert(fair_queue<min_queue>);
static_assert(kv_manager<min_kv>);
static_assert(victim_policy<min_victim>);
static_assert(batch_scheduler<iteration_scheduler<min_queue, min_kv, min_victim>>);
static_assert(batch_scheduler<iteration_scheduler<>>);
static_assert(kv_manager<weft::kv::kv_manager<>>);  // weft's KV manager models the concept directly

TEST_CASE("the scheduler runs on archetype policies", "[sched][archetype]") {
  // 600 tokens of KV for 20 requests of up to 100 + 60 tokens: preemption is needed.
  min_kv kv;
  kv.capacity = 600;
  iteration_scheduler<min_queue, min_kv, min_victim> s(chunked_prefill(64, 8), min_queue{}, kv);
  std::vector<weft_test::job> jobs;
  for (std::uint64_t i = 1; i <= 20; ++i) {
    weft_test::job j;
    j.req.id = request_id(i);
    j.req.client = client_id(0);
    j.req.prompt_tokens = static_cast<std::int64_t>(40 + (i * 7) % 60);
    j.output = static_cast<std::int64_t>(10 + (i * 13) % 50);
    jobs.push_back(j);
  }
  const auto out = weft_test::run_jobs(s, jobs, [](const batch& b, auto&) { CHECK(b.tokens() <= 64); });
  CHECK(out.completed == 20);
  CHECK(out.aborted == 0);
  CHECK(s.idle());
  CHECK(s.kv().st.used == 0);
}

// The weakest scheduler_phase: a user-written phase built from the scheduler's steps alone — running
// decodes oldest first, then whole prompts admitted and prefilled at once — with its running cap as
// its whole options. Swap, recompute, forks and cancellation come from the scheduler, not the phase.
#include <weft/sched/layered_prefill.hpp>
#include <weft/sched/prefill_first_scheduler.hpp>

namespace {
struct min_phase {
  using options_type = std::size_t;  // max_running
  explicit min_phase(const std::size_t& max_running) : max_running_(max_running) {}
  const std::size_t& options() const noexcept { return max_running_; }
  std::size_t max_running() const noexcept { return max_running_; }
  preemption_mode preemption() const noexcept { return preemption_mode::recompute; }
  bool accepts(const request&) const noexcept { return true; }
  static constexpr bool ranks_by_preemptions = false;
  static constexpr bool batches_decoded_ids = false;
  template <class Steps>
  void plan(Steps& s, double now) const {
    s.decode_in_arrival_order();
    s.admit_whole(
        now, [](const typename Steps::candidate&) { return true; },
        [&](std::size_t i) {
          if (s.prefill_left(i) > 0) s.prefill_whole(i);
        });
  }
  std::size_t max_running_;
};
}  // namespace

static_assert(scheduler_phase<min_phase>);
static_assert(scheduler_phase<stall_free_phase>);
static_assert(scheduler_phase<prefill_first_phase>);
static_assert(scheduler_phase<layered_phase>);
static_assert(!scheduler_phase<int>);
static_assert(batch_scheduler<iteration_scheduler<min_queue, min_kv, min_victim, min_phase>>);

TEST_CASE("the scheduler runs a user-written phase on archetype policies", "[sched][archetype][phase]") {
  min_kv kv;
  kv.capacity = 300;  // 20 requests of up to 160 tokens, 6 at a time: preemption by recompute is needed
  iteration_scheduler<min_queue, min_kv, min_victim, min_phase> s(6, min_queue{}, kv);
  CHECK(s.options() == 6);
  std::vector<weft_test::job> jobs;
  for (std::uint64_t i = 1; i <= 20; ++i) {
    weft_test::job j;
    j.req.id = request_id(i);
    j.req.client = client_id(0);
    j.req.prompt_tokens = static_cast<std::int64_t>(40 + (i * 7) % 60);
    j.output = static_cast<std::int64_t>(10 + (i * 13) % 50);
    jobs.push_back(j);
  }
  std::size_t most = 0;
  const auto out =
      weft_test::run_jobs(s, jobs, [&](const batch&, auto& sched) { most = std::max(most, sched.running()); });
  CHECK(out.completed == 20);
  CHECK(out.aborted == 0);
  CHECK(most <= 6);
  CHECK(s.stats().preempted_recompute > 0);
  CHECK(s.stats().readmitted == s.stats().preempted_recompute);
  CHECK(s.idle());
  CHECK(s.kv().st.used == 0);
}

#include <weft/sched/any_batch_scheduler.hpp>
#include <weft/sched/vtc_queue.hpp>

static_assert(batch_scheduler<any_batch_scheduler>);

TEST_CASE("any_batch_scheduler runs a scheduler chosen at run time", "[sched][any]") {
  for (int choice = 0; choice < 2; ++choice) {
    any_batch_scheduler s = choice == 0 ? any_batch_scheduler(std::make_unique<iteration_scheduler<vtc_queue>>(
                                              chunked_prefill(64, 8), vtc_queue{}, weft_test::kv_of(256)))
                                        : any_batch_scheduler(std::make_unique<iteration_scheduler<>>(
                                              continuous_batching(8, 256), fcfs_queue{}, weft_test::kv_of(256)));
    std::vector<weft_test::job> jobs;
    for (std::uint64_t i = 1; i <= 10; ++i) {
      weft_test::job j;
      j.req.id = request_id(i);
      j.req.client = client_id(static_cast<std::uint32_t>(i % 2));
      j.req.prompt_tokens = 50;
      j.output = 5;
      jobs.push_back(j);
    }
    const auto out = weft_test::run_jobs(s, jobs, [](const batch&, auto&) {});
    CHECK(out.completed == 10);
    CHECK(s.idle());
  }
  CHECK_THROWS_AS(any_batch_scheduler(std::unique_ptr<iteration_scheduler<>>()), weft::error);
}

// The optional hook bind_prefix_probe: detected by the concept binds_prefix_probe, with or without the
// opt-in; a misspelled hook without the opt-in is (as before) not detected, and with the opt-in it is a
// compile error (tests/sched/compile_fail/misspelled_prefix_probe.cpp, ctest sched.misspelled_hook).
#include <weft/sched/any_fair_queue.hpp>
#include <weft/sched/prefix_aware_queue.hpp>

namespace {

// Each queue counts the binds it received (shared, so a copy moved into a scheduler still reports).
struct probed_queue : weft_test::min_queue {
  static constexpr bool provides_prefix_probe = true;
  std::shared_ptr<int> binds = std::make_shared<int>(0);
  void bind_prefix_probe(prefix_probe p) { *binds += p ? 1 : 0; }
};

struct probed_queue_without_opt_in : weft_test::min_queue {  // user types written before the opt-in
  std::shared_ptr<int> binds = std::make_shared<int>(0);
  void bind_prefix_probe(prefix_probe p) { *binds += p ? 1 : 0; }
};

struct misspelled_probe_queue : weft_test::min_queue {  // "prefx": never called, as before the concept
  std::shared_ptr<int> binds = std::make_shared<int>(0);
  void bind_prefx_probe(prefix_probe p) { *binds += p ? 1 : 0; }
};

struct opted_out_queue : weft_test::min_queue {  // provides_prefix_probe = false: no check, no hook
  static constexpr bool provides_prefix_probe = false;
};

}  // namespace

static_assert(binds_prefix_probe<probed_queue>);
static_assert(binds_prefix_probe<probed_queue_without_opt_in>);
static_assert(binds_prefix_probe<prefix_aware_queue>);
static_assert(binds_prefix_probe<any_fair_queue>);
static_assert(!binds_prefix_probe<misspelled_probe_queue>);
static_assert(!binds_prefix_probe<opted_out_queue>);
static_assert(!binds_prefix_probe<weft_test::min_queue>);
static_assert(fair_queue<probed_queue> && fair_queue<misspelled_probe_queue>);

TEST_CASE("the scheduler binds the prefix probe of a queue that has the hook", "[sched][archetype]") {
  using kv = weft_test::min_kv;
  probed_queue with;
  iteration_scheduler<probed_queue, kv, min_victim> a(chunked_prefill(64, 8), with);
  CHECK(*with.binds == 1);
  probed_queue_without_opt_in without;
  iteration_scheduler<probed_queue_without_opt_in, kv, min_victim> b(chunked_prefill(64, 8), without);
  CHECK(*without.binds == 1);
  misspelled_probe_queue misspelled;
  iteration_scheduler<misspelled_probe_queue, kv, min_victim> c(chunked_prefill(64, 8), misspelled);
  CHECK(*misspelled.binds == 0);
  // Through the run-time adapter: any_fair_queue forwards to the wrapped queue's hook, if any.
  probed_queue wrapped;
  iteration_scheduler<any_fair_queue, kv, min_victim> d(chunked_prefill(64, 8), any_fair_queue{wrapped});
  CHECK(*wrapped.binds == 1);
  misspelled_probe_queue wrapped_misspelled;
  iteration_scheduler<any_fair_queue, kv, min_victim> e(chunked_prefill(64, 8), any_fair_queue{wrapped_misspelled});
  CHECK(*wrapped_misspelled.binds == 0);
}

// The simulator's optional scheduler hooks stats().cached_prompt_tokens and migrate_out(): detected by
// reports_cached_prompt_tokens and migrates_out, with or without the opt-in; a misspelled hook
// without the opt-in is (as before) not detected and never read or called.
#include <weft/sched/prefill_first_scheduler.hpp>
#include <weft/sched/sim/cluster.hpp>

namespace {

struct spelled_stats {
  std::uint64_t cached_prompt_tokens = 7;
};
struct misspelled_stats {  // "tokns": never read
  std::uint64_t cached_prompt_tokns = 7;
};

// iteration_scheduler behind the batch_scheduler calls, with its own stats() and migrate_out (spelled
// right when Spelled, "migrat_out" otherwise), each counting its calls.
template <bool Spelled, bool OptIn>
class hooked_scheduler {
 public:
  using inner_t = iteration_scheduler<>;
  explicit hooked_scheduler(std::unique_ptr<inner_t> inner) : inner_(std::move(inner)) {}
  bool submit(const request& r, double now) { return inner_->submit(r, now); }
  const batch& schedule(double now) { return inner_->schedule(now); }
  void complete(std::span<const request_id> f, std::span<const decoded_token> d) { inner_->complete(f, d); }
  void complete(std::span<const request_id> f) { inner_->complete(f); }
  std::size_t waiting() const { return inner_->waiting(); }
  std::size_t running() const { return inner_->running(); }
  bool idle() const { return inner_->idle(); }
  const auto& kv() const { return inner_->kv(); }
  std::conditional_t<Spelled, spelled_stats, misspelled_stats> stats() const { return {}; }
  std::optional<inner_t::migrated> migrate_out() requires Spelled {
    ++migrate_calls;
    return inner_->migrate_out();
  }
  std::optional<inner_t::migrated> migrat_out() requires(!Spelled) {
    ++migrate_calls;
    return inner_->migrate_out();
  }
  static constexpr bool provides_cached_prompt_tokens = OptIn && Spelled;
  static constexpr bool provides_migrate_out = OptIn && Spelled;
  static inline int migrate_calls = 0;

 private:
  std::unique_ptr<inner_t> inner_;
};

template <class S>
std::function<std::unique_ptr<S>()> hooked_factory(const sim::cost_model& m) {
  return [&m] {
    weft::kv::kv_config kv = m.kv_manager_config(16);
    kv.num_blocks = 1501;  // + the null block: tight enough that instances become unbalanced
    return std::make_unique<S>(
        std::make_unique<iteration_scheduler<>>(chunked_prefill(1024, 64), fcfs_queue{}, weft::kv::kv_manager<>(kv)));
  };
}

}  // namespace

static_assert(reports_cached_prompt_tokens<hooked_scheduler<true, true>>);
static_assert(reports_cached_prompt_tokens<hooked_scheduler<true, false>>);
static_assert(!reports_cached_prompt_tokens<hooked_scheduler<false, false>>);
static_assert(reports_cached_prompt_tokens<iteration_scheduler<>>);
static_assert(reports_cached_prompt_tokens<prefill_first_scheduler<>>);
static_assert(!reports_cached_prompt_tokens<any_batch_scheduler>);
static_assert(migrates_out<hooked_scheduler<true, true>>);
static_assert(migrates_out<hooked_scheduler<true, false>>);
static_assert(!migrates_out<hooked_scheduler<false, false>>);
static_assert(migrates_out<iteration_scheduler<>>);
static_assert(migrates_out<prefill_first_scheduler<>>);  // a phase of the one scheduler: it migrates too
static_assert(migrates_out<layered_prefill_scheduler<>>);
static_assert(batch_scheduler<hooked_scheduler<false, false>>);

TEST_CASE(
    "the cluster simulator reads stats().cached_prompt_tokens and calls migrate_out() only when "
    "spelled right",
    "[sched][archetype][sim]") {
  const sim::cost_model m(sim::llama2_7b_a100());
  sim::generator_options g;
  g.seed = 5;
  g.requests = 300;
  g.rate_per_s = 10.0;
  g.prompt = {1500.0, 0.8, 16, 8000};
  g.output = {150.0, 1.0, 1, 1000};
  const sim::workload w = sim::poisson_workload(g);
  sim::cluster_options c;
  c.instances = 2;
  c.migration_interval_s = 0.5;
  c.imbalance_blocks = 64;
  using spelled = hooked_scheduler<true, true>;
  const auto with = sim::simulate_colocated<spelled>(hooked_factory<spelled>(m), w, m, c);
  CHECK(with.result.stats.finished == 300);
  CHECK(with.result.stats.cached_prompt_tokens == 2 * 7);  // each instance's stats() says 7
  CHECK(spelled::migrate_calls > 0);
  CHECK(with.migrations > 0);
  using misspelled = hooked_scheduler<false, false>;
  // Migration needs the hook: a misspelled one is not found (a run-time error, as before), and
  // without migration it is never called and its count never read.
  CHECK_THROWS_AS(sim::simulate_colocated<misspelled>(hooked_factory<misspelled>(m), w, m, c), weft::error);
  c.migration_interval_s = 0.0;
  const auto without = sim::simulate_colocated<misspelled>(hooked_factory<misspelled>(m), w, m, c);
  CHECK(without.result.stats.finished == 300);
  CHECK(without.result.stats.cached_prompt_tokens == 0);
  CHECK(misspelled::migrate_calls == 0);
}

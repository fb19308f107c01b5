#include "harness.hpp"

#include <weft/sched/chunked_prefill.hpp>
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/layered_prefill.hpp>
#include <weft/sched/sim/simulator.hpp>

#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <vector>

using namespace weft::sched;
using namespace weft::sched::sim;

namespace {

request req(std::uint64_t id, std::int64_t prompt, double at = 0.0) {
  request r;
  r.id = request_id(id);
  r.prompt_tokens = prompt;
  r.arrival_s = at;
  r.counted_by_length = true;
  return r;
}

// Checks, batch by batch, the policy's invariants; the test runs a workload through it.
struct invariant_checker {
  int layers = 0;
  std::map<request_id, int> next_layer;  // prefilling: where its next group must begin
  std::set<request_id> decoding;         // emitted a token and not finished
  std::map<request_id, std::int64_t> prompt;
  std::int64_t group_entries = 0, emitted_first = 0;

  void check(const batch& b) {
    std::set<request_id> seen;
    for (const auto& e : b.entries) {
      seen.insert(e.id);
      if (e.decode_tokens > 0) {
        CHECK(e.layers.all());  // decodes run every layer
        CHECK(e.prefill_tokens == 0);
        continue;
      }
      ++group_entries;
      // A prefill runs its whole prompt through consecutive groups: [0, a), [a, b), ..., [z, L).
      CHECK(e.prefill_tokens == prompt.at(e.id));
      const int begin = e.layers.all() ? 0 : e.layers.begin;
      const int end = e.layers.all() ? layers : e.layers.end;
      CHECK(begin == next_layer[e.id]);
      CHECK(end > begin);
      CHECK((e.layers.all() || e.layers.of == layers));
      CHECK(e.emits_token == (end == layers));  // the first token only after the last group
      next_layer[e.id] = end == layers ? 0 : end;
      if (e.emits_token) ++emitted_first;
    }
    for (request_id id : decoding) CHECK(seen.count(id) == 1);  // every running decode, every iteration
  }
  void ran(const batch& b, const std::vector<request_id>& finished) {
    for (const auto& e : b.entries)
      if (e.emits_token) decoding.insert(e.id);
    for (request_id id : finished) decoding.erase(id);
  }
};

}  // namespace

static_assert(batch_scheduler<layered_prefill_scheduler<>>);
static_assert(batch_scheduler<layered_prefill_scheduler<weft_test::min_queue, weft_test::min_kv>>);

TEST_CASE("layered prefill: layer groups partition [0, L) in order, sizes within one", "[sched][layered]") {
  for (int layers : {1, 4, 7, 32, 80})
    for (int groups = 1; groups <= std::min(layers, 12); ++groups) {
      const layered_prefill_options o = layered_prefill(layers, groups);
      int at = 0, smallest = layers, largest = 0;
      for (int g = 0; g < groups; ++g) {
        const layer_range r = layer_group(o, g);
        CHECK(r.begin == at);
        CHECK(r.of == layers);
        smallest = std::min(smallest, r.end - r.begin);
        largest = std::max(largest, r.end - r.begin);
        at = r.end;
      }
      CHECK(at == layers);
      CHECK(smallest >= 1);
      CHECK(largest - smallest <= 1);
    }
}

TEST_CASE("layered prefill: bad options are refused and nothing is built", "[sched][layered]") {
  CHECK_THROWS_AS(layered_prefill(0, 1), weft::error);
  CHECK_THROWS_AS(layered_prefill(4, 0), weft::error);
  CHECK_THROWS_AS(layered_prefill(4, 5), weft::error);
  CHECK_THROWS_AS(layered_prefill(4, -1), weft::error);
  CHECK_THROWS_AS(layered_prefill(4, 2, 0), weft::error);
  CHECK_THROWS_AS(layered_prefill(4, 2, 100, 0), weft::error);
  CHECK_THROWS_WITH(layered_prefill(4, 5), Catch::Contains("layer_groups") && Catch::Contains("5"));
  layered_prefill_options bad;
  bad.layer_groups = 33;  // layers is 32
  CHECK_THROWS_AS(layered_prefill_scheduler<>(bad, fcfs_queue{}, weft_test::kv_of(100)), weft::error);
  const layered_prefill_options o = layered_prefill(8, 4);
  CHECK_THROWS_AS(layer_group(o, 4), weft::error);
  CHECK_THROWS_AS(layer_group(o, -1), weft::error);
}

TEST_CASE("layered prefill: decodes every iteration, prefills by layer group, first token after the last",
          "[sched][layered]") {
  const int layers = 8, groups = 3;
  layered_prefill_scheduler<> s(layered_prefill(layers, groups, 600, 16), fcfs_queue{}, weft_test::kv_of(400));
  invariant_checker c;
  c.layers = layers;
  std::vector<weft_test::job> jobs;
  for (std::uint64_t i = 1; i <= 24; ++i) {
    const std::int64_t prompt = 40 + static_cast<std::int64_t>((i * 97) % 500);
    jobs.push_back({req(i, prompt, 0.0), 1 + static_cast<std::int64_t>((i * 13) % 30)});
    c.prompt[request_id(i)] = prompt;
  }
  // run_jobs completes each batch itself; the checker replays which requests decode from the batches.
  std::map<request_id, std::int64_t> left;
  for (const auto& j : jobs) left[j.req.id] = j.output;
  std::int64_t admitted_with_kv = 0;
  const weft_test::outcome out = weft_test::run_jobs(s, jobs, [&](const batch& b, auto& sched) {
    c.check(b);
    std::vector<request_id> finished;
    for (const auto& e : b.entries) {
      if (e.prefill_tokens > 0 && e.layers.begin == 0) {
        // Its whole prompt's KV is held from its first group on.
        CHECK(static_cast<std::int64_t>(sched.kv().blocks(e.id).size()) * 16 >= e.prefill_tokens);
        ++admitted_with_kv;
      }
      if (e.emits_token && --left[e.id] == 0) finished.push_back(e.id);
    }
    c.ran(b, finished);
  });
  CHECK(out.completed == 24);
  CHECK(out.aborted == 0);
  CHECK(c.emitted_first >= 24);
  CHECK(c.group_entries == c.emitted_first * groups);  // every prefill took exactly G groups
  CHECK(admitted_with_kv >= 24);
  CHECK(s.idle());
}

TEST_CASE("layered prefill: tight KV preempts by recompute and every request still finishes", "[sched][layered]") {
  layered_prefill_scheduler<> s(layered_prefill(4, 4, 256, 32), fcfs_queue{}, weft_test::kv_of(24));
  std::vector<weft_test::job> jobs;
  for (std::uint64_t i = 1; i <= 12; ++i) jobs.push_back({req(i, 60 + static_cast<std::int64_t>(i) * 7), 40});
  invariant_checker c;
  c.layers = 4;
  for (const auto& j : jobs) c.prompt[j.req.id] = j.req.prompt_tokens;
  std::map<request_id, std::int64_t> generated;
  const weft_test::outcome out = weft_test::run_jobs(s, jobs, [&](const batch& b, auto&) {
    for (const auto& e : b.entries) CHECK(e.emits_token == e.layers.reaches_output());
    for (request_id id : b.preempted_recompute)
      CHECK(std::none_of(b.entries.begin(), b.entries.end(), [&](const auto& e) { return e.id == id; }));
  });
  CHECK(out.completed == 12);
  CHECK(s.stats().preempted_recompute > 0);
  CHECK(s.idle());
}

TEST_CASE("layered prefill: requests with token ids finish and publish their prefix", "[sched][layered]") {
  layered_prefill_scheduler<> s(layered_prefill(6, 2, 4096, 8), fcfs_queue{}, weft_test::kv_of(200));
  std::vector<token_id> shared(96);
  for (std::size_t i = 0; i < shared.size(); ++i) shared[i] = static_cast<token_id>(i + 5);
  std::vector<weft_test::job> jobs;
  request a = req(1, 96);
  a.prompt = shared;
  jobs.push_back({a, 5});
  const weft_test::outcome first = weft_test::run_jobs(s, jobs, [](const batch&, auto&) {});
  CHECK(first.completed == 1);
  request b = req(2, 96, 1.0);
  b.prompt = shared;
  const weft_test::outcome second = weft_test::run_jobs(s, {{b, 3}}, [](const batch&, auto&) {});
  CHECK(second.completed == 1);
  CHECK(s.stats().cached_prompt_tokens > 0);  // the first request's KV was reported after its last group
}

TEST_CASE("layered prefill: bad complete() arguments throw and change nothing", "[sched][layered]") {
  layered_prefill_scheduler<> s(layered_prefill(4, 2, 1000, 8), fcfs_queue{}, weft_test::kv_of(100));
  REQUIRE(s.submit(req(1, 100), 0));
  CHECK_FALSE(s.submit(req(2, 100000), 0));  // longer than the whole cache
  CHECK_THROWS_AS(s.submit(req(1, 10), 0), weft::error);
  const batch& b = s.schedule(0);
  REQUIRE(b.entries.size() == 1);
  CHECK_FALSE(b.entries[0].emits_token);
  CHECK(b.entries[0].layers == layer_range{0, 2, 4});
  const request_id one[] = {request_id(1)};
  CHECK_THROWS_AS(s.complete(one), weft::error);  // its first group emitted nothing: it cannot finish
  const request_id other[] = {request_id(9)};
  CHECK_THROWS_AS(s.complete(other), weft::error);
  CHECK_THROWS_AS(s.schedule(0), weft::error);  // the batch is still in flight
  s.complete({});
  const batch& b2 = s.schedule(1);
  REQUIRE(b2.entries.size() == 1);
  CHECK(b2.entries[0].layers == layer_range{2, 4, 4});
  CHECK(b2.entries[0].emits_token);
  s.complete({});
  const batch& b3 = s.schedule(2);
  REQUIRE(b3.entries.size() == 1);
  CHECK(b3.entries[0].decode_tokens == 1);
  s.complete(one);
  CHECK(s.idle());
}

TEST_CASE("layered prefill: a schedule() that throws leaves scheduler and KV as they were", "[sched][layered]") {
  struct bad_victim {
    std::size_t choose(std::span<const victim_candidate> c) const { return c.size(); }  // out of range
  };
  layered_prefill_scheduler<fcfs_queue, weft::kv::kv_manager<>, bad_victim> s(layered_prefill(2, 2, 1000, 8),
                                                                              fcfs_queue{}, weft_test::kv_of(6));
  // Two requests of 3 blocks each fill the 6 blocks; the first one's decode soon needs a 7th.
  REQUIRE(s.submit(req(1, 47), 0));
  REQUIRE(s.submit(req(2, 47, 0.5), 0.5));
  bool threw = false;
  for (int it = 0; it < 20 && !threw; ++it) {
    const std::size_t waiting = s.waiting(), running = s.running(), free = s.kv().free_blocks();
    try {
      (void)s.schedule(it);
      s.complete({});  // counted by length: no tokens to feed back
    } catch (const weft::error&) {
      threw = true;
      CHECK(s.waiting() == waiting);
      CHECK(s.running() == running);
      CHECK(s.kv().free_blocks() == free);
    }
  }
  CHECK(threw);
}

TEST_CASE("layered prefill: with a group token budget the split follows the prompt", "[sched][layered]") {
  CHECK_THROWS_AS(layered_prefill_budget(8, 0), weft::error);
  CHECK_THROWS_AS(layered_prefill_budget(8, -5), weft::error);
  CHECK_THROWS_AS(layered_prefill_budget(0, 100), weft::error);
  layered_prefill_scheduler<> s(layered_prefill_budget(8, 100, 10000, 8), fcfs_queue{}, weft_test::kv_of(400));
  const auto groups_of = [&](std::uint64_t id, std::int64_t prompt) {
    REQUIRE(s.submit(req(id, prompt, static_cast<double>(id)), static_cast<double>(id)));
    int groups = 0;
    for (bool emitted = false; !emitted;) {
      const batch& b = s.schedule(static_cast<double>(id));
      for (const auto& e : b.entries)
        if (e.id == request_id(id)) {
          ++groups;
          emitted = e.emits_token;
        }
      s.complete({});
    }
    return groups;
  };
  CHECK(groups_of(1, 80) == 1);    // fits the budget: the whole model in one iteration
  CHECK(groups_of(2, 250) == 3);   // ceil(250 / 100)
  CHECK(groups_of(3, 5000) == 8);  // at most one layer per iteration
  CHECK(s.last_batch().entries.empty());
}

TEST_CASE("cost model: a prefill split in layer groups does the same layer work as a whole one",
          "[sched][layered][sim]") {
  cost_params p = llama2_7b_a100();
  p.model.vocab = 0;               // no LM head: it is paid per emitting entry, which differs
  p.per_request_overhead_s = 0.0;  // nor per-request CPU work
  const cost_model m(p);
  const int groups = 4;
  const layered_prefill_options o = layered_prefill(p.model.layers, groups);
  const auto decodes = [] {
    batch b;
    for (std::uint64_t i = 1; i <= 16; ++i) b.entries.push_back({request_id(i), {}, 0, 1, 900, true, 7});
    return b;
  };
  batch whole = decodes();
  whole.entries.push_back({request_id(99), {}, 2000, 0, 2000, true, -1});
  const double only_decodes = m.iteration_s(decodes());
  double split = 0.0;
  for (int g = 0; g < groups; ++g) {
    batch b = decodes();
    b.entries.push_back({request_id(99), {}, 2000, 0, 2000, g == groups - 1, -1});
    b.entries.back().layers = layer_group(o, g);
    const double t = m.iteration_s(b);
    CHECK(t > only_decodes);
    CHECK(t < m.iteration_s(whole));
    split += t - only_decodes;
  }
  CHECK(split == Approx(m.iteration_s(whole) - only_decodes).epsilon(1e-9));
  // An entry over every layer costs as a plain one, bit for bit.
  batch all = whole;
  all.entries.back().layers = layer_range{0, 32, 32};
  CHECK(m.iteration_s(all) == m.iteration_s(whole));
}

TEST_CASE("simulator: more layer groups trade TTFT for TBT; the split keeps decodes from stalling",
          "[sched][layered][sim]") {
  cost_params p = llama2_7b_a100();
  p.iteration_overhead_s = 2e-3;  // a lean engine: GPU work decides the direction
  p.per_request_overhead_s = 20e-6;
  const cost_model m(p);
  generator_options g;
  g.seed = 19;
  g.requests = 150;
  g.rate_per_s = 2.0;
  g.prompt = {3000.0, 0.5, 256, 8000};
  g.output = {64.0, 0.5, 8, 256};
  const workload w = poisson_workload(g);
  const auto run = [&](layered_prefill_options o) {
    layered_prefill_scheduler<> s(o, fcfs_queue{}, weft::kv::kv_manager<>(m.kv_manager_config(16)));
    return simulate(s, w, m).stats;
  };
  const summary whole = run(layered_prefill(32, 1));  // no split: a prompt stalls decodes for a whole prefill
  const summary four = run(layered_prefill(32, 4));
  const summary sixteen = run(layered_prefill(32, 16));
  CHECK(whole.finished == w.size());
  CHECK(sixteen.finished == w.size());
  // More groups: shorter iterations while a prompt is in flight, more of them before its first token.
  CHECK(four.tbt_p99 < whole.tbt_p99);
  CHECK(sixteen.tbt_p99 < four.tbt_p99);
  CHECK(four.ttft_p50 < sixteen.ttft_p50);
  CHECK(whole.ttft_p50 < sixteen.ttft_p50);
  // The split holds the iteration to about 1/G of a prefill: unsplit, the TBT tail is several times a
  // Sarathi 256-token chunk's; 16 groups (a 3000-token prompt / 16 ~ a 190-token chunk, but the longest
  // prompts run 8000 tokens) bring it within 2.5x of it (measured: 2.0x).
  iteration_scheduler<> chunked(chunked_prefill(256, 256), fcfs_queue{},
                                weft::kv::kv_manager<>(m.kv_manager_config(16)));
  const summary sarathi = simulate(chunked, w, m).stats;
  CHECK(sixteen.tbt_p99 < 2.5 * sarathi.tbt_p99);
  CHECK(whole.tbt_p99 > 5.0 * sarathi.tbt_p99);
}

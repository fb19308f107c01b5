// Scheduler decision cost per iteration with 1k running and 100k waiting requests (targets: 10 us
// steady, 40 us with 8 finishing and 8 admitted per iteration):
// weft's iteration_scheduler with each fair queue driving weft::kv::kv_manager with real token ids
// (prompt ids at admission, each decoded id fed back, computed KV reported), against a reference that
// re-sorts the waiting list by VTC counter every iteration (what a straightforward fair scheduler
// does). The same run with requests counted by length (the simulator's mode) is printed beside it,
// and with churn the CPU time of each submit() (which hashes the prompt's block keys, off the
// per-iteration path), the KV manager's share of a steady iteration (its block crossings, timed
// alone), and the floor of the interface (the same batch entries and tokens through a hot array, with
// nothing else: what any scheduler would spend). CSV to WEFT_BENCH_OUT.
#include <weft/sched.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ws = weft::sched;
using clk = std::chrono::steady_clock;

// CPU time of this thread: on a shared machine wall time also counts other processes' time slices.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct cost {
  double wall_us;
  double cpu_us;
  double submit_us = 0;  // CPU time per submit() of the requests that replace the finished ones
};

namespace {

constexpr std::size_t running = 1000, waiting = 100000;
// Prompts are 64 + [0, 512) tokens.
constexpr std::size_t shortest_prompt = 64, prompt_spread = 512, longest_prompt = shortest_prompt + prompt_spread - 1;
int iterations = 2000;  // `profile` runs more by default, so a profiler sees the loop, not the set-up

// Every prompt is a window of one pool of random token ids, at its own offset: distinct content per
// request, as with distinct user prompts, without storing 10^5 prompts.
const std::vector<ws::token_id>& token_pool() {
  static const std::vector<ws::token_id> pool = [] {
    weft::rng g(99);
    std::vector<ws::token_id> t(std::size_t{1} << 20);
    for (auto& x : t) x = static_cast<ws::token_id>(g.below(32000));
    return t;
  }();
  return pool;
}

std::vector<ws::request> make_requests(std::size_t n, std::uint64_t seed, bool with_ids) {
  weft::rng g(seed);
  std::vector<ws::request> out(n);
  const auto& pool = token_pool();
  for (std::size_t i = 0; i < n; ++i) {
    out[i].id = ws::request_id(i + 1);
    out[i].client = ws::client_id(static_cast<std::uint32_t>(g.below(64)));
    out[i].prompt_tokens = static_cast<std::int64_t>(shortest_prompt + g.below(prompt_spread));
    out[i].arrival_s = static_cast<double>(i) * 1e-3;
    if (with_ids)
      out[i].prompt = std::span<const ws::token_id>(pool).subspan((i * 7919) % (pool.size() - 600),
                                                                  static_cast<std::size_t>(out[i].prompt_tokens));
    else
      out[i].counted_by_length = true;
  }
  return out;
}

// The KV cache every measurement drives: blocks of 16 tokens, no watermark, and room for every running
// request to keep growing through the whole run (its longest prompt plus a token per iteration):
// 2^18 blocks (4M tokens) for the default 2,000 iterations, more for a longer `profile` run. A cache
// that ran out would preempt requests, and the loop would no longer measure the steady state.
weft::kv::kv_config kv_cache_config() {
  weft::kv::kv_config kv;
  kv.block_size = 16;
  const std::size_t warm_up = 200;  // decode steps before the measured loop, with room to spare
  const std::size_t tokens_per_request = longest_prompt + static_cast<std::size_t>(iterations) + warm_up;
  kv.num_blocks = std::max(std::size_t{1} << 18, std::bit_ceil(running * tokens_per_request / kv.block_size));
  kv.watermark = 0.0;
  return kv;
}

// A measurement that preempted anyone did not measure the steady state it reports: main exits non-zero.
bool preempted_in_a_run = false;

// Steady state: 1000 decoding, 100k queued; every iteration ~`churn` requests finish and as many are
// admitted (prefill chunks), so admission and queue costs are in the measurement.
template <class Queue>
cost measure(Queue q, std::size_t churn, bool with_ids) {
  ws::iteration_scheduler<Queue> s(ws::chunked_prefill(4096, running), std::move(q),
                                   weft::kv::kv_manager<>(kv_cache_config()));
  const auto reqs = make_requests(running + waiting + churn * static_cast<std::size_t>(iterations) + 10, 7, with_ids);
  std::size_t next = 0;
  for (; next < running + waiting; ++next) (void)s.submit(reqs[next], 0.0);
  std::vector<ws::request_id> finished;
  std::vector<ws::decoded_token> decoded;
  // The engine's sampled tokens, in entry order: any ids (their values do not change the decisions).
  auto sample = [&](const ws::batch& b) {
    decoded.clear();
    for (const ws::batch_entry& e : b.entries)
      if (e.emits_token)
        decoded.push_back({e.id, static_cast<ws::token_id>((e.id.value() * 31 + e.context_tokens) % 32000)});
  };
  // Warm up until the batch is full and every running request decodes.
  for (int i = 0; i < 100000; ++i) {
    const ws::batch& b = s.schedule(0.0);
    const bool steady = s.running() == running && b.prefill_tokens == 0;
    sample(b);
    s.complete({}, decoded);
    if (steady) break;
  }
  if (s.running() != running) std::printf("  warning: only %zu running after warm-up\n", s.running());
  double total = 0.0, cpu = 0.0, submit_cpu = 0.0;
  for (int it = 0; it < iterations; ++it) {
    // Timed: schedule() and complete(), not the engine's part between them (picking what finishes,
    // sampling a token per entry).
    const double c0 = thread_cpu_s();
    const auto t0 = clk::now();
    const ws::batch& b = s.schedule(1.0);
    const auto t1 = clk::now();
    const double c1 = thread_cpu_s();
    finished.clear();
    // Finish the first `churn` decoding requests of the batch.
    for (std::size_t k = 0; k < b.entries.size() && finished.size() < churn; ++k)
      if (b.entries[k].decode_tokens > 0) finished.push_back(b.entries[k].id);
    sample(b);
    const double c2 = thread_cpu_s();
    const auto t2 = clk::now();
    s.complete(finished, decoded);
    total += std::chrono::duration<double>(t1 - t0 + (clk::now() - t2)).count();
    cpu += thread_cpu_s() - c2 + (c1 - c0);
    // Keep 100k waiting. Timed apart: submit() hashes the prompt's block keys (once per request, off
    // the per-iteration path), so it is reported beside the decision cost.
    const double s0 = thread_cpu_s();
    for (std::size_t k = 0; k < churn; ++k) (void)s.submit(reqs[next++], 1.0);
    submit_cpu += thread_cpu_s() - s0;
  }
  if (s.stats().preempted_swap + s.stats().preempted_recompute > 0 || s.running() + churn < running) {
    std::fprintf(stderr, "  error: %llu preemptions, %zu running at the end: not the steady state this reports\n",
                 static_cast<unsigned long long>(s.stats().preempted_swap + s.stats().preempted_recompute),
                 s.running());
    preempted_in_a_run = true;
  }
  const double submits = static_cast<double>(churn) * iterations;
  return {total / iterations * 1e6, cpu / iterations * 1e6, churn > 0 ? submit_cpu / submits * 1e6 : 0.0};
}

// The KV manager's part of a steady iteration, alone: every running request crosses a block boundary
// once per block_size decode steps, and then the scheduler hands the KV manager the block's ids
// (kv_manager::append of block_size ids, which allocates the next block) inside schedule()'s
// transaction. Here the same calls on the same cache, running / block_size of them per iteration
// (round robin over the running requests, one transaction per iteration, nothing else between them):
// CPU time per call and per iteration.
struct crossing_cost {
  std::size_t appends_per_iteration;  // running / block_size: 62 here
  double ns_per_append;
  double us_per_iteration;
};
crossing_cost measure_block_crossings() {
  const weft::kv::kv_config c = kv_cache_config();
  weft::kv::kv_manager<> kv(c);
  const auto reqs = make_requests(running, 7, true);
  for (const ws::request& r : reqs) (void)kv.allocate_prompt(r.id, r.prompt, ws::kv_request_options(r));
  const auto& pool = token_pool();
  const std::size_t per_iteration = running / c.block_size;
  std::size_t next = 0;
  double cpu = 0.0;
  for (int it = 0; it < iterations; ++it) {
    const double c0 = thread_cpu_s();
    kv.begin_transaction();
    for (std::size_t k = 0; k < per_iteration; ++k, next = (next + 1) % running)
      (void)kv.append(reqs[next].id,
                      std::span<const ws::token_id>(pool).subspan(next * c.block_size % 4096, c.block_size));
    kv.commit_transaction();
    cpu += thread_cpu_s() - c0;
  }
  return {per_iteration, cpu / iterations / static_cast<double>(per_iteration) * 1e9, cpu / iterations * 1e6};
}

// The floor of the interface on this machine: the least any scheduler does per steady iteration for
// the same 1,000 decoding requests. schedule() writes each request's batch entry (id, client, context,
// input token) from one hot array; complete() checks each sampled token's id against its entry (tokens
// in entry order), makes the token the next input, keeps the decoded id in the request's block-sized buffer
// and counts a block boundary every block_size tokens. No KV manager, queue, fairness accounting, undo
// log or validation beyond the id check: what weft's scheduler costs above this row is theirs. Timed
// like measure(): schedule() and complete() only, thread CPU time and wall time.
cost measure_floor() {
  struct hot_request {
    std::int64_t context = 0;  // tokens with KV after the next step
    ws::request_id id{};
    ws::client_id client{};
    ws::token_id input = 0;
    std::uint32_t buffered = 0;  // decoded ids kept since the last block boundary
  };
  const std::size_t block_size = kv_cache_config().block_size;
  std::vector<hot_request> hot(running);
  std::vector<ws::token_id> decoded_ids(running * block_size);  // each request's block of ids
  const auto reqs = make_requests(running, 7, true);
  for (std::size_t i = 0; i < running; ++i)
    hot[i] = {reqs[i].prompt_tokens, reqs[i].id, reqs[i].client, reqs[i].prompt.back(), 0};
  ws::batch b;
  b.entries.resize(running, ws::batch_entry{{}, {}, 0, 1, 0, true, -1, ws::layer_range{}});
  std::vector<ws::decoded_token> decoded(running);
  std::size_t boundaries = 0;
  double total = 0.0, cpu = 0.0;
  for (int it = 0; it < iterations; ++it) {
    const double c0 = thread_cpu_s();
    const auto t0 = clk::now();
    for (std::size_t i = 0; i < running; ++i) {  // schedule()
      ws::batch_entry& e = b.entries[i];
      e.id = hot[i].id;
      e.client = hot[i].client;
      e.context_tokens = hot[i].context + 1;
      e.token = hot[i].input;
    }
    b.decode_tokens = static_cast<std::int64_t>(running);
    const auto t1 = clk::now();
    const double c1 = thread_cpu_s();
    for (std::size_t i = 0; i < running; ++i)  // the engine samples (untimed)
      decoded[i] = {b.entries[i].id, static_cast<ws::token_id>((b.entries[i].id.value() * 31 + it) % 32000)};
    const double c2 = thread_cpu_s();
    const auto t2 = clk::now();
    for (std::size_t i = 0; i < running; ++i) {  // complete()
      hot_request& h = hot[i];
      if (decoded[i].id != h.id) std::abort();  // a token for another request: the one check kept
      h.input = decoded[i].token;
      ++h.context;
      decoded_ids[i * block_size + h.buffered] = decoded[i].token;
      if (++h.buffered == block_size) {
        h.buffered = 0;
        ++boundaries;
      }
    }
    total += std::chrono::duration<double>(t1 - t0 + (clk::now() - t2)).count();
    cpu += thread_cpu_s() - c2 + (c1 - c0);
  }
  if (boundaries == 0) std::abort();  // keeps the loop's work observable
  return {total / iterations * 1e6, cpu / iterations * 1e6};
}

// What one reading of the thread CPU clock costs here (a system call on some virtual machines): every
// row's CPU time includes about two readings per iteration.
double cpu_clock_read_ns() {
  const int n = 20000;
  const auto t0 = clk::now();
  for (int i = 0; i < n; ++i) (void)thread_cpu_s();  // an opaque library call: never optimised away
  return std::chrono::duration<double>(clk::now() - t0).count() / n * 1e9;
}

// The reference: waiting requests in a vector, re-sorted by (client counter, arrival) each iteration,
// then the 1000 running ones visited once. O(W log W) per iteration.
cost measure_reference(std::size_t churn) {
  auto reqs = make_requests(running + waiting, 7, false);
  std::vector<ws::request> wait(reqs.begin() + running, reqs.end());
  std::vector<ws::request> run(reqs.begin(), reqs.begin() + running);
  std::vector<double> counter(64, 0.0);
  const int reps = 20;  // it is slow; fewer repetitions
  double total = 0.0, cpu = 0.0;
  for (int it = 0; it < reps; ++it) {
    const double c0 = thread_cpu_s();
    const auto t0 = clk::now();
    for (auto& r : run) counter[r.client.value()] += 2.0;  // one decode token each
    std::sort(wait.begin(), wait.end(), [&](const ws::request& a, const ws::request& b) {
      const double ca = counter[a.client.value()], cb = counter[b.client.value()];
      return ca != cb ? ca < cb : a.arrival_s < b.arrival_s;
    });
    for (std::size_t k = 0; k < churn; ++k) {
      counter[wait[k].client.value()] += static_cast<double>(wait[k].prompt_tokens);
      run[k] = wait[k];
    }
    total += std::chrono::duration<double>(clk::now() - t0).count();
    cpu += thread_cpu_s() - c0;
  }
  return {total / reps * 1e6, cpu / reps * 1e6};
}

}  // namespace

int main(int argc, char** argv) {
  // `decision_bench quick`: one pass (fcfs and vtc with token ids) for development.
  const bool quick = argc > 1 && std::string(argv[1]) == "quick";
  if (argc > 1 && std::string(argv[1]) == "profile") {  // one configuration, for perf record
    // `decision_bench profile [churn] [fcfs|vtc] [iterations]`; by default 10x the measured loop.
    const std::size_t churn = argc > 2 ? std::stoul(argv[2]) : 0;
    const bool vtc = argc > 3 && std::string(argv[3]) == "vtc";
    iterations = argc > 4 ? std::stoi(argv[4]) : iterations * 10;
    const cost c = vtc ? measure(ws::vtc_queue{}, churn, true) : measure(ws::fcfs_queue{}, churn, true);
    std::printf("%s, token ids: %.1f [%.1f] us; submit %.2f us\n", vtc ? "vtc" : "fcfs", c.cpu_us, c.wall_us,
                c.submit_us);
    return preempted_in_a_run ? 1 : 0;
  }
  std::printf(
      "sched decision cost per iteration (schedule + complete), %zu running, %zu waiting, %d iterations,\n"
      "driving weft::kv::kv_manager (thread CPU time, then wall time in brackets; targets 10 us steady, 40 us "
      "churn 8)\n",
      running, waiting, iterations);
  std::ofstream csv(std::string(WEFT_BENCH_OUT) + "/sched_decision.csv");
  csv << "policy,token_ids,churn_per_iteration,us_per_iteration,wall_us_per_iteration,submit_us_per_request\n";
  const cost ref = measure_reference(8);
  const cost floor_row = measure_floor();
  const crossing_cost crossings = measure_block_crossings();
  cost vtc_ids_churn{0, 0};
  for (const bool with_ids : {true, false}) {
    if (quick && !with_ids) break;
    for (std::size_t churn : {std::size_t{0}, std::size_t{8}}) {
      const cost fcfs = measure(ws::fcfs_queue{}, churn, with_ids);
      const cost vtc = measure(ws::vtc_queue{}, churn, with_ids);
      const cost wfq = quick ? cost{0, 0} : measure(ws::wfq_queue{}, churn, with_ids);
      const cost drr = quick ? cost{0, 0} : measure(ws::drr_queue{}, churn, with_ids);
      if (with_ids && churn == 8) vtc_ids_churn = vtc;
      std::printf(
          "  %s, churn %zu/iter: fcfs %.1f [%.1f] us, vtc %.1f [%.1f] us, wfq %.1f [%.1f] us, drr %.1f [%.1f] us",
          with_ids ? "token ids" : "counted  ", churn, fcfs.cpu_us, fcfs.wall_us, vtc.cpu_us, vtc.wall_us, wfq.cpu_us,
          wfq.wall_us, drr.cpu_us, drr.wall_us);
      if (churn > 0) std::printf("; submit %.2f us/request (fcfs)", fcfs.submit_us);
      std::printf("\n");
      for (auto [name, c] :
           {std::pair{"fcfs", fcfs}, std::pair{"vtc", vtc}, std::pair{"wfq", wfq}, std::pair{"drr", drr}})
        csv << name << ',' << (with_ids ? 1 : 0) << ',' << churn << ',' << c.cpu_us << ',' << c.wall_us << ','
            << c.submit_us << '\n';
    }
  }
  std::printf(
      "  reference (re-sort 100k waiting by VTC counter each iteration): %.1f [%.1f] us -> weft vtc (token ids, "
      "churn 8) is %.0fx faster (CPU time)\n",
      ref.cpu_us, ref.wall_us, ref.cpu_us / vtc_ids_churn.cpu_us);
  std::printf(
      "  of a steady iteration with token ids, the KV manager's block crossings alone (%zu appends of a block's "
      "ids, each into a new block, in one transaction): %.1f us (%.0f ns per append)\n",
      crossings.appends_per_iteration, crossings.us_per_iteration, crossings.ns_per_append);
  std::printf(
      "  floor of the interface (the same 1,000 batch entries written from a hot array and the same tokens "
      "applied; no KV manager, queue, accounting or undo): %.1f [%.1f] us; a thread CPU clock reading costs "
      "%.0f ns here (about two per iteration are inside every row's CPU time)\n",
      floor_row.cpu_us, floor_row.wall_us, cpu_clock_read_ns());
  csv << "floor_hot_array,1,0," << floor_row.cpu_us << ',' << floor_row.wall_us << ",0\n";
  csv << "reference_resort,0,8," << ref.cpu_us << ',' << ref.wall_us << ",0\n";
  csv << "kv_block_crossings_alone,1,0," << crossings.us_per_iteration << ",0,0\n";
  return preempted_in_a_run ? 1 : 0;
}

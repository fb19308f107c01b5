// mini_engine: weft's modules composed into a real (tiny) engine. A 4-layer, width-256 transformer on
// the CPU serves three tenants — multi-turn chats over a shared system prompt, an agent sampling three
// answers per prompt on its own LoRA adapter and cache salt, and long documents (one with an image)
// that need several prefill chunks — through weft::sched (VTC fair queue, chunked prefill) over paged
// KV from weft::kv, in a cache small enough to force preemption by swap and by recompute. Then every
// output is checked against the same model run densely, one request at a time: they must be equal.
//
//   mini_engine [scale]   (default 2; larger numbers serve proportionally more requests)
#include "mini_engine.hpp"

#include <weft/kv/kv_manager.hpp>
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/vtc_queue.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using namespace mini_engine;

std::vector<token_id> random_tokens(weft::rng& g, std::size_t n, int vocab) {
  std::vector<token_id> t(n);
  for (auto& x : t) x = static_cast<token_id>(g.below(static_cast<std::uint64_t>(vocab)));
  return t;
}

// A request of `tenant` arriving at `arrival` whose prompt is `shared` followed by `own` fresh tokens.
workload_request on_shared_prompt(std::uint64_t& id, std::uint32_t tenant, int arrival,
                                  const std::vector<token_id>& shared, weft::rng& g, std::size_t own, int vocab) {
  workload_request r;
  r.id = request_id(id++);
  r.tenant = tenant_id(tenant);
  r.arrival = arrival;
  r.spec.prompt = shared;
  const auto tail = random_tokens(g, own, vocab);
  r.spec.prompt.insert(r.spec.prompt.end(), tail.begin(), tail.end());
  return r;
}

std::vector<workload_request> make_workload(int scale, int vocab) {
  weft::rng g(2026);
  std::vector<workload_request> w;
  std::uint64_t id = 1;
  const auto system_chat = random_tokens(g, 96, vocab), system_agent = random_tokens(g, 64, vocab);
  // Tenant 1: multi-turn chats sharing a system prompt; each turn resends the whole conversation.
  for (int i = 0; i < 4 * scale; ++i) {
    workload_request r = on_shared_prompt(id, 1, i, system_chat, g, 16, vocab);
    r.spec.max_new = 12;
    r.turns = 2;
    r.follow_up = random_tokens(g, 12, vocab);
    w.push_back(r);
  }
  // Tenant 2: an agent on LoRA adapter 7 with its own cache salt, three parallel samples per prompt.
  for (int i = 0; i < 3 * scale; ++i) {
    workload_request r = on_shared_prompt(id, 2, i, system_agent, g, 20, vocab);
    r.spec.adapter = 7;
    r.cache_salt = 0xA6E27;
    r.spec.max_new = 10;
    r.samples = 3;
    w.push_back(r);
  }
  // Tenant 3: long documents, prefilled in several chunks; the first carries an image.
  for (int i = 0; i < 3 * scale; ++i) {
    workload_request r;
    r.id = request_id(id++);
    r.tenant = tenant_id(3);
    r.arrival = i;
    r.spec.prompt = random_tokens(g, 180, vocab);
    if (i == 0) r.spec.media.push_back({0x1A6E, 20, 24});
    r.spec.max_new = 8;
    w.push_back(r);
  }
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  const int scale = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2;
  model_config mc;  // 4 layers, width 256, 8 heads, vocab 2048, fp32
  const model m(mc);
  const auto work = make_workload(scale, mc.vocab);

  // A KV cache of 32 blocks of 16 tokens (512 tokens) and a host tier of 6: too small for everyone.
  weft::kv::kv_config kc;
  kc.num_blocks = 32 + 1;
  kc.block_size = 16;
  kc.host_blocks = 6 + 1;
  kc.max_copy_unit_blocks = 8;
  kc.bytes_per_token = static_cast<std::size_t>(2 * mc.layers * mc.width) * sizeof(float);
  weft::sched::scheduler_options so = weft::sched::chunked_prefill(/*token_budget=*/96, /*max_running=*/12);
  so.preemption = weft::sched::preemption_mode::swap;  // recompute when the host tier is full
  weft::sched::iteration_scheduler<weft::sched::vtc_queue> sched(so, weft::sched::vtc_queue{},
                                                                 weft::kv::kv_manager<>(kc));
  kv_tensor kv(m, kc.num_blocks, kc.host_blocks, kc.block_size);

  std::printf("mini_engine: %d layers, width %d, %d heads, vocab %d (fp32); %zu requests from 3 tenants\n", mc.layers,
              mc.width, mc.heads, mc.vocab, work.size());
  std::printf("KV: %zu device blocks + %zu host blocks of %zu tokens; VTC, chunked prefill (budget %lld)\n\n",
              kc.num_blocks - 1, kc.host_blocks - 1, kc.block_size, static_cast<long long>(so.token_budget));
  const serve_result r = serve(m, sched, kv, work);

  const auto& st = sched.stats();
  const auto& prefix = sched.kv().stats();
  std::printf("served %zu requests (%llu forks) in %llu iterations: %llu tokens computed in %.2f s -> %.0f tokens/s\n",
              r.outputs.size(), static_cast<unsigned long long>(r.forks), static_cast<unsigned long long>(r.iterations),
              static_cast<unsigned long long>(r.computed_tokens), r.forward_seconds,
              static_cast<double>(r.computed_tokens) / r.forward_seconds);
  // The KV manager counts every allocation, re-admissions after a recompute too (which mostly hit what
  // they published themselves); the scheduler's counters keep first admissions apart.
  std::printf(
      "prefix cache: %.1f%% of first admissions' prompt tokens hit (%llu of %llu); %.1f%% counting "
      "re-admissions (%llu re-admitted); %llu copy-on-write copies\n",
      100.0 * st.first_admission_hit_rate(), static_cast<unsigned long long>(st.first_admission_cached_tokens),
      static_cast<unsigned long long>(st.first_admission_prompt_tokens), 100.0 * prefix.hit_rate(),
      static_cast<unsigned long long>(st.readmitted), static_cast<unsigned long long>(r.copies_on_write));
  std::printf("preemptions: %llu by recompute, %llu by swap (%llu swapped back in)\n",
              static_cast<unsigned long long>(st.preempted_recompute),
              static_cast<unsigned long long>(st.preempted_swap), static_cast<unsigned long long>(st.swapped_in));
  std::printf("%-8s %9s %14s %11s %9s\n", "tenant", "requests", "output tokens", "recomputed", "swapped");
  for (const auto& [t, ts] : r.tenants)
    std::printf("%-8u %9llu %14llu %11llu %9llu\n", t.value(), static_cast<unsigned long long>(ts.requests),
                static_cast<unsigned long long>(ts.tokens), static_cast<unsigned long long>(ts.preempted_recompute),
                static_cast<unsigned long long>(ts.preempted_swap));

  const auto t0 = std::chrono::steady_clock::now();
  std::size_t checked = 0;
  const std::size_t bad = count_mismatches(m, r, &checked);
  const double dense_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\nequality with the dense run (each request alone, no cache, %.2f s): %zu of %zu requests identical%s\n",
              dense_s, checked - bad, checked, bad == 0 ? " -- bit for bit" : "  <-- MISMATCH");
  return bad == 0 ? 0 : 1;
}

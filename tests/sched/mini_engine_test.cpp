// Proof that the parts compose: randomized workloads (shared prefixes, multi-turn, several tenants,
// long prompts needing several chunks, memory pressure forcing swaps and recomputes, forks, salts,
// adapters, images) run through examples/mini_engine — weft::sched driving weft::kv over a paged KV
// tensor, keyed by the default SHA-256 hasher, and in some workloads verifying every hit and isolating
// tenants — and every request's output must equal the same model run densely, one request at a time,
// with no cache. Deliberately broken variants (publishing a block before its KV is computed, skipping a
// copy-on-write, a swap that copies the wrong blocks) must make the check fail.
#include "mini_engine.hpp"

#include <weft/kv/kv_manager.hpp>
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/layered_prefill.hpp>
#include <weft/sched/prefill_first_scheduler.hpp>
#include <weft/sched/vtc_queue.hpp>
#include <weft/sched/wfq_queue.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

using namespace mini_engine;
namespace wk = weft::kv;
namespace ws = weft::sched;

namespace {

// A model small enough for sanitizer builds: 2 layers, width 64, 4 heads, vocab 256.
model_config small_model() {
  model_config c;
  c.layers = 2;
  c.width = 64;
  c.heads = 4;
  c.vocab = 256;
  c.ffn = 128;
  c.seed = 7;
  return c;
}

wk::kv_config kv_config_of(std::size_t device, std::size_t host, std::size_t block) {
  wk::kv_config c;
  c.num_blocks = device + 1;
  c.host_blocks = host == 0 ? 0 : host + 1;
  c.block_size = block;
  c.max_copy_unit_blocks = 4;
  return c;
}

// The broken KV manager: what weft::kv did before compute-aware publishing. At admission it gives the
// whole prompt its slots and publishes every full block at once, before the engine computed any of
// their KV; so does every later slot it hands out.
struct publish_early_kv {
  wk::kv_manager<> inner;
  void early(request_id id) { inner.computed(id, inner.num_tokens(id)); }
  std::size_t block_size() const { return inner.block_size(); }
  std::size_t usable_blocks() const { return inner.usable_blocks(); }
  std::size_t free_blocks() const { return inner.free_blocks(); }
  std::size_t bytes_per_block() const { return inner.bytes_per_block(); }
  std::size_t cached_prefix_tokens(std::span<const token_id> t, const wk::request_options& o) const {
    return inner.cached_prefix_tokens(t, o);
  }
  std::optional<wk::prompt_allocation> allocate_prompt(request_id id, std::span<const token_id> t,
                                                       const wk::request_options& o, std::size_t slots) {
    auto r = inner.allocate_prompt(id, t, o, wk::kv_manager<>::whole_prompt);
    if (!r) return r;
    r->slots = std::max(slots, r->cached_tokens);  // the scheduler sees what it asked for
    early(id);
    return r;
  }
  std::optional<wk::prompt_allocation> allocate_prompt(request_id id, std::size_t n, const wk::request_options& o,
                                                       std::size_t slots) {
    return inner.allocate_prompt(id, n, o, slots);
  }
  wk::append_result grow(request_id id, std::size_t n) {
    auto r = inner.grow(id, n);
    if (r.fits) early(id);
    return r;
  }
  wk::append_result append(request_id id, std::span<const token_id> t) {
    auto r = inner.append(id, t);
    if (r.fits) early(id);
    return r;
  }
  void computed(request_id id, std::size_t n) {
    if (n > inner.computed_tokens(id)) inner.computed(id, n);
  }
  bool fork(request_id p, request_id c) { return inner.fork(p, c); }
  void free(request_id id) { inner.free(id); }
  std::optional<wk::swap_plan> swap_out(request_id id) { return inner.swap_out(id); }
  std::optional<wk::swap_plan> swap_in(request_id id) { return inner.swap_in(id); }
  std::span<const wk::block_id> blocks(request_id id) const { return inner.blocks(id); }
  std::span<const token_id> tokens(request_id id) const { return inner.tokens(id); }
  void begin_transaction() { inner.begin_transaction(); }
  void commit_transaction() { inner.commit_transaction(); }
  void rollback_transaction() { inner.rollback_transaction(); }
};
static_assert(ws::kv_manager<publish_early_kv>);

// A random workload over three tenants: system prompts shared within a tenant, multi-turn chats,
// parallel samples, long prompts, salted and adapted requests, some images.
std::vector<workload_request> random_workload(std::uint64_t seed, int n, int vocab) {
  weft::rng g(seed);
  auto tokens = [&](std::size_t len) {
    std::vector<token_id> t(len);
    for (auto& x : t) x = static_cast<token_id>(g.below(static_cast<std::uint64_t>(vocab)));
    return t;
  };
  const std::vector<std::vector<token_id>> systems{tokens(21), tokens(34), tokens(9)};
  std::vector<workload_request> w;
  for (int i = 0; i < n; ++i) {
    workload_request r;
    r.id = request_id(static_cast<std::uint64_t>(i + 1));
    const auto tenant = g.below(3);
    r.tenant = tenant_id(static_cast<std::uint32_t>(tenant + 1));
    r.arrival = static_cast<double>(g.below(static_cast<std::uint64_t>(n)));
    if (g.below(4) != 0) r.spec.prompt = systems[tenant];
    const auto own = tokens(1 + g.below(g.below(5) == 0 ? 70 : 14));  // now and then a long prompt
    r.spec.prompt.insert(r.spec.prompt.end(), own.begin(), own.end());
    r.spec.max_new = 1 + static_cast<int>(g.below(9));
    if (tenant == 1) r.spec.adapter = 1 + g.below(2);  // two LoRA adapters: never shared
    if (g.below(5) == 0) r.cache_salt = 1 + g.below(2);
    if (g.below(6) == 0 && r.spec.prompt.size() > 12) {
      const auto at = g.below(r.spec.prompt.size() - 8);
      r.spec.media.push_back({g.below(3), static_cast<std::size_t>(at), 1 + static_cast<std::size_t>(g.below(7))});
    }
    if (g.below(4) == 0) r.samples = 2 + static_cast<int>(g.below(2));
    if (g.below(4) == 0) {
      r.turns = 2 + static_cast<int>(g.below(2));
      r.follow_up = tokens(1 + g.below(6));
    }
    w.push_back(r);
  }
  return w;
}

// Dense outputs memoized across runs (the broken variants, and the phases and preemption modes, rerun
// the same workloads): the check's cost is the dense model, and greedy outputs of the same request only
// ever extend. Keyed by the model too (the tests use a 2-layer and a 4-layer one).
std::size_t mismatches(const model& m, const serve_result& r, std::size_t& checked) {
  static std::map<std::vector<std::uint64_t>, std::vector<token_id>> memo;
  std::size_t bad = 0;
  checked = 0;
  for (const auto& [id, out] : r.outputs) {
    const request_spec& spec = r.specs.at(id);
    std::vector<std::uint64_t> key(spec.prompt.begin(), spec.prompt.end());
    key.insert(key.end(), {~0ull, spec.adapter, static_cast<std::uint64_t>(spec.first_rank),
                           static_cast<std::uint64_t>(m.layers()), m.config().seed});
    for (const auto& item : spec.media) key.insert(key.end(), {item.content_hash, item.offset, item.length});
    auto& dense = memo[key];
    if (dense.size() < out.size()) {
      request_spec s = spec;
      s.max_new = static_cast<int>(out.size());
      dense = generate_dense(m, s);
    }
    ++checked;
    if (!std::equal(out.begin(), out.end(), dense.begin())) ++bad;
  }
  return bad;
}

struct outcome {
  std::size_t requests = 0, mismatches = 0;
  serve_result served;
  ws::scheduler_stats stats;
  std::uint64_t collisions = 0;  // verify-on-hit mismatches, device and host tier
};

template <class Queue = ws::vtc_queue, class KV = wk::kv_manager<>>
outcome run(const model& m, const std::vector<workload_request>& w, ws::scheduler_options so, wk::kv_config kc,
            faults f = {}) {
  ws::iteration_scheduler<Queue, KV> s(so, Queue{}, KV{wk::kv_manager<>(kc)});
  kv_tensor kv(m, kc.num_blocks, kc.host_blocks, kc.block_size);
  outcome o;
  o.served = serve(m, s, kv, w, f);
  o.mismatches = mismatches(m, o.served, o.requests);
  o.stats = s.stats();
  if constexpr (requires { s.kv().cache().collisions(); }) {
    o.collisions = s.kv().cache().collisions();
    if (s.kv().host_cache() != nullptr) o.collisions += s.kv().host_cache()->collisions();
  }
  return o;
}

}  // namespace

TEST_CASE("the mini engine equals the dense model on randomized workloads", "[sched][engine]") {
  const model m(small_model());
  ws::scheduler_stats total;
  std::uint64_t forks = 0, cow = 0, requests = 0;
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    for (const auto mode : {ws::preemption_mode::swap, ws::preemption_mode::recompute}) {
      CAPTURE(seed, static_cast<int>(mode));
      ws::scheduler_options so = ws::chunked_prefill(/*token_budget=*/24, /*max_running=*/8);
      so.preemption = mode;
      // 40 blocks of 4 tokens: a handful of requests at a time, so preemption is routine. Every other
      // seed verifies each hit against the stored tokens and keeps one prefix cache per tenant.
      const auto w = random_workload(seed, 32, m.vocab());
      wk::kv_config kc = kv_config_of(40, 10, 4);
      kc.verify_on_hit = kc.isolate_tenants = seed % 2 == 0;
      const outcome o = run(m, w, so, kc);
      CHECK(o.mismatches == 0);
      CHECK(o.collisions == 0);  // SHA-256 keys: a verified hit never disagrees
      CHECK(o.requests >= w.size());
      total.preempted_recompute += o.stats.preempted_recompute;
      total.preempted_swap += o.stats.preempted_swap;
      total.cached_prompt_tokens += o.stats.cached_prompt_tokens;
      forks += o.served.forks;
      cow += o.served.copies_on_write;
      requests += o.requests;
    }
  }
  // The workloads exercised every mechanism the equality depends on.
  CHECK(total.preempted_recompute > 0);
  CHECK(total.preempted_swap > 0);
  CHECK(total.cached_prompt_tokens > 0);
  CHECK(forks > 0);
  CHECK(cow > 0);
  CHECK(requests > 300);
}

TEST_CASE("the mini engine under WFQ, unchunked batching and a roomy cache equals the dense model too",
          "[sched][engine]") {
  const model m(small_model());
  const auto w = random_workload(11, 24, m.vocab());
  CHECK(run<ws::wfq_queue>(m, w, ws::continuous_batching(6, 64), kv_config_of(64, 0, 8)).mismatches == 0);
  wk::kv_config verified = kv_config_of(64, 0, 8);
  verified.verify_on_hit = verified.isolate_tenants = true;
  CHECK(run<ws::wfq_queue>(m, w, ws::continuous_batching(6, 64), verified).mismatches == 0);
  CHECK(run(m, w, ws::chunked_prefill(16, 16), kv_config_of(200, 0, 16)).mismatches == 0);
}

TEST_CASE("the mini engine under layered prefill equals the dense model", "[sched][engine][layered]") {
  model_config c = small_model();
  c.layers = 4;  // room for groups of 1, 2 and 4 layers
  const model m(c);
  std::uint64_t preempted = 0, requests = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const auto w = random_workload(seed, 24, m.vocab());
    for (const auto o : {ws::layered_prefill(4, 2, 64, 8), ws::layered_prefill(4, 4, 64, 8),
                         ws::layered_prefill_budget(4, 20, 64, 8)}) {
      CAPTURE(seed, o.layer_groups, o.group_token_budget);
      const wk::kv_config kc = kv_config_of(40, 0, 4);  // tight: prefills in flight get preempted too
      ws::layered_prefill_scheduler<ws::vtc_queue> s(o, ws::vtc_queue{}, wk::kv_manager<>(kc));
      kv_tensor kv(m, kc.num_blocks, kc.host_blocks, kc.block_size);
      const serve_result served = serve(m, s, kv, w);
      std::size_t checked = 0;
      CHECK(mismatches(m, served, checked) == 0);
      CHECK(checked >= w.size());
      preempted += s.stats().preempted_recompute;
      requests += checked;
    }
  }
  CHECK(preempted > 0);
  CHECK(requests > 200);
}

TEST_CASE("broken variants make the equality check fail", "[sched][engine][faults]") {
  const model m(small_model());
  SECTION("publishing a block before its KV is computed") {
    // Shared prefixes under memory pressure: a request preempted in the middle of its chunked prefill
    // leaves published blocks that were never computed, and the next request with that prefix (or
    // itself, readmitted) reads them.
    std::size_t broken = 0;
    for (const std::uint64_t seed : {1u, 2u, 3u}) {
      const auto w = random_workload(seed, 28, m.vocab());
      const auto so = ws::chunked_prefill(24, 8);
      wk::kv_config kc = kv_config_of(40, 0, 4);
      kc.verify_on_hit = seed == 2;              // verifying tokens cannot tell computed KV from garbage
      CHECK(run(m, w, so, kc).mismatches == 0);  // the real manager: correct
      broken += run<ws::vtc_queue, publish_early_kv>(m, w, so, kc).mismatches;
    }
    CHECK(broken > 0);
  }
  SECTION("skipping a copy-on-write") {
    std::vector<workload_request> w;
    for (int i = 0; i < 4; ++i) {
      workload_request r;
      r.id = request_id(static_cast<std::uint64_t>(i + 1));
      r.tenant = tenant_id(2);
      r.spec.prompt = {1, 2, 3, 4, 5, 6, static_cast<token_id>(10 + i)};  // ends inside a block
      r.spec.max_new = 6;
      r.samples = 3;
      w.push_back(r);
    }
    const auto so = ws::chunked_prefill(32, 16);
    const outcome good = run(m, w, so, kv_config_of(64, 0, 4));
    CHECK(good.mismatches == 0);
    CHECK(good.served.copies_on_write > 0);
    faults f;
    f.skip_copy_on_write = true;
    CHECK(run(m, w, so, kv_config_of(64, 0, 4), f).mismatches > 0);
  }
  SECTION("a swap plan that copies the wrong blocks") {
    const auto w = random_workload(3, 28, m.vocab());
    ws::scheduler_options so = ws::chunked_prefill(24, 8);
    so.preemption = ws::preemption_mode::swap;
    const outcome good = run(m, w, so, kv_config_of(40, 60, 4));
    CHECK(good.mismatches == 0);
    CHECK(good.served.swap_ins > 0);
    faults f;
    f.wrong_swap_blocks = true;
    CHECK(run(m, w, so, kv_config_of(40, 60, 4), f).mismatches > 0);
  }
}

TEST_CASE("every phase of the one scheduler equals the dense model with swap, recompute, forks and cancellations",
          "[sched][engine][phase]") {
  // Sarathi's stall-free chunks, vLLM v0's prefill-first batches and layered prefill are phases of one
  // scheduler: each runs the same workloads — parallel samples, multi-turn chats, shared prefixes,
  // clients that go away — under swap and recompute preemption in a cache too small for everyone. A
  // sixth of the requests are cancelled a few iterations after they arrive: some still waiting, some
  // mid-prefill (chunked or between layer groups), some swapped out or preempted, some decoding. What
  // each produced before it went must equal the dense run's first tokens; everything else is
  // unchanged, and at the end the cache holds nothing.
  model_config c = small_model();
  c.layers = 4;
  const model m(c);
  const wk::kv_config kc = kv_config_of(40, 10, 4);
  std::map<std::string, std::uint64_t> forks, swaps, recomputes, cancels;
  const auto check = [&](const std::string& name, auto& s, const std::vector<workload_request>& w) {
    kv_tensor kv(m, kc.num_blocks, kc.host_blocks, kc.block_size);
    const serve_result served = serve(m, s, kv, w);
    std::size_t checked = 0;
    CHECK(mismatches(m, served, checked) == 0);
    CHECK(checked >= w.size());
    CHECK(s.kv().free_blocks() == s.kv().usable_blocks());
    CHECK(s.kv().host_free_blocks() == kc.host_blocks - 1);
    CHECK(s.stats().cancelled == served.cancelled);
    forks[name] += served.forks;
    // Request-level n: every sample started (one made while the batch is full waits: never dropped).
    CHECK(s.stats().forked == served.forks);
    swaps[name] += s.stats().preempted_swap;
    recomputes[name] += s.stats().preempted_recompute;
    cancels[name] += served.cancelled;
  };
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    auto w = random_workload(seed, 26, m.vocab());
    weft::rng g(seed);
    for (auto& r : w)
      if (g.below(6) == 0) r.cancel_at = r.arrival + static_cast<double>(g.below(8));
    for (const auto mode : {ws::preemption_mode::swap, ws::preemption_mode::recompute}) {
      CAPTURE(seed, static_cast<int>(mode));
      ws::scheduler_options so = ws::chunked_prefill(24, 8);
      so.preemption = mode;
      ws::iteration_scheduler<ws::vtc_queue> sarathi(so, ws::vtc_queue{}, wk::kv_manager<>(kc));
      check("sarathi", sarathi, w);
      ws::prefill_first_options po = ws::vllm_baseline(8, 256);
      po.watermark = 0.0;
      po.preemption = mode;
      ws::prefill_first_scheduler<ws::vtc_queue> vllm(po, ws::vtc_queue{}, wk::kv_manager<>(kc));
      check("vllm", vllm, w);
      ws::layered_prefill_options lo = ws::layered_prefill(4, 2, 64, 8);
      lo.preemption = mode;
      ws::layered_prefill_scheduler<ws::vtc_queue> layered(lo, ws::vtc_queue{}, wk::kv_manager<>(kc));
      check("layered", layered, w);
    }
  }
  for (const std::string name : {"sarathi", "vllm", "layered"}) {
    CAPTURE(name);
    CHECK(forks[name] > 0);
    CHECK(swaps[name] > 0);
    CHECK(recomputes[name] > 0);
    CHECK(cancels[name] > 0);
  }
}

// The engine contract a newcomer cannot get wrong silently, under each batch scheduler: the scheduler
// keeps its own copy of a request's prompt ids (the caller's buffer may be reused and freed right after
// submit); a request without ids is scheduled by length only when it says so; complete() matches the
// decoded tokens to requests by id (another order feeds each request its own token; a stray or
// repeated token is an error); cancel() ends a request wherever it is and releases everything; and the
// statistics keep first admissions apart from re-admissions after a recompute.
#include "harness.hpp"

#include <weft/kv/kv_manager.hpp>
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/layered_prefill.hpp>
#include <weft/sched/prefill_first_scheduler.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <vector>

using namespace weft::sched;

namespace {

// Counts the Queue hooks per request, so a test can see that a cancelled request ended for its Queue
// exactly once if it had been handed out, and never otherwise.
struct counting_queue {
  fcfs_queue inner;
  std::shared_ptr<std::map<request_id, int>> admitted = std::make_shared<std::map<request_id, int>>();
  std::shared_ptr<std::map<request_id, int>> finished = std::make_shared<std::map<request_id, int>>();
  void push(const request& r, double now) { inner.push(r, now); }
  const request* peek(double now) { return inner.peek(now); }
  request pop(double now) { return inner.pop(now); }
  void on_admit(const request& r) { ++(*admitted)[r.id]; }
  void on_tokens(const request&, std::int64_t) {}
  void on_finish(const request& r, std::int64_t) { ++(*finished)[r.id]; }
  std::size_t size() const { return inner.size(); }
  bool empty() const { return inner.empty(); }
};
static_assert(fair_queue<counting_queue>);

using iteration_t = iteration_scheduler<counting_queue>;
using prefill_first_t = prefill_first_scheduler<counting_queue>;
using layered_t = layered_prefill_scheduler<counting_queue>;

// Each scheduler with a token budget of 16 (chunked), 16-token blocks, `blocks` device blocks and
// `host` host blocks.
template <class S>
std::unique_ptr<S> make(std::int64_t blocks, std::int64_t host = 0, std::size_t max_running = 8,
                        preemption_mode mode = preemption_mode::recompute) {
  if constexpr (std::is_same_v<S, iteration_t>) {
    scheduler_options o = chunked_prefill(16, max_running);
    o.preemption = mode;
    return std::make_unique<S>(o, counting_queue{}, weft_test::kv_of(blocks, host));
  } else if constexpr (std::is_same_v<S, prefill_first_t>) {
    prefill_first_options o = vllm_baseline(max_running, 4096);
    o.watermark = 0.0;
    return std::make_unique<S>(o, counting_queue{}, weft_test::kv_of(blocks, host));
  } else {
    return std::make_unique<S>(layered_prefill(4, 2, 4096, max_running), counting_queue{},
                               weft_test::kv_of(blocks, host));
  }
}

std::vector<token_id> iota_ids(std::size_t n, token_id first) {
  std::vector<token_id> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

request with_ids(std::uint64_t id, std::span<const token_id> ids, double at = 0.0) {
  request r;
  r.id = request_id(id);
  r.client = client_id(1);
  r.prompt_tokens = static_cast<std::int64_t>(ids.size());
  r.prompt = ids;
  r.arrival_s = at;
  return r;
}

request counted(std::uint64_t id, std::int64_t prompt, double at = 0.0) {
  request r;
  r.id = request_id(id);
  r.client = client_id(1);
  r.prompt_tokens = prompt;
  r.counted_by_length = true;
  r.arrival_s = at;
  return r;
}

// One iteration: schedule, then complete with a token for every emitting entry (listed in reverse
// entry order, which complete() must match by id) and the requests in `finish` that emitted. Returns
// a copy of the batch (complete() empties the scheduler's).
template <class S>
batch step(S& s, double now, std::map<request_id, std::vector<token_id>>* fed = nullptr,
           const std::vector<request_id>& finish = {}) {
  const batch b = s.schedule(now);
  std::vector<decoded_token> decoded;
  std::vector<request_id> finished;
  for (const batch_entry& e : b.entries) {
    if (!e.emits_token) continue;
    const auto t = static_cast<token_id>(1000 * (e.id.value() % 50) + e.context_tokens);
    decoded.push_back({e.id, t});
    if (fed) (*fed)[e.id].push_back(t);
    if (std::find(finish.begin(), finish.end(), e.id) != finish.end()) finished.push_back(e.id);
  }
  std::reverse(decoded.begin(), decoded.end());
  s.complete(finished, decoded);
  return b;
}

}  // namespace

TEMPLATE_TEST_CASE("the scheduler owns a request's prompt ids: the caller's buffer may go after submit",
                   "[sched][lifecycle]", iteration_t, prefill_first_t, layered_t) {
  auto owned = make<TestType>(64);
  TestType& s = *owned;
  const std::vector<token_id> expected = iota_ids(40, 100);
  const std::vector<weft::kv::multimodal_item> media_expected{{77, 3, 5}};
  {
    auto ids = std::make_unique<std::vector<token_id>>(expected);
    auto media = std::make_unique<std::vector<weft::kv::multimodal_item>>(media_expected);
    request r = with_ids(1, *ids);
    r.media = *media;
    REQUIRE(s.submit(r, 0.0));
    // The engine reuses its buffers, then frees them (ASan would report a read of either below).
    std::fill(ids->begin(), ids->end(), -7);
    (*media)[0] = {1, 0, 1};
  }
  std::map<request_id, std::vector<token_id>> fed;
  for (int it = 0; it < 12; ++it) {
    (void)step(s, it, &fed);
    if (s.kv().contains(request_id(1))) {
      const auto t = s.kv().tokens(request_id(1));
      REQUIRE(t.size() >= expected.size());
      CHECK(std::equal(expected.begin(), expected.end(), t.begin()));  // the ids as submitted
    }
  }
  CHECK(fed[request_id(1)].size() >= 2);  // it decoded, from its own ids
  // A second request with the same ids and media (from another short-lived buffer) hits the first's
  // published blocks: the keys were computed from the copies, which equal what was submitted.
  {
    std::vector<token_id> again = expected;
    std::vector<weft::kv::multimodal_item> media = media_expected;
    request r = with_ids(2, again, 20.0);
    r.media = media;
    REQUIRE(s.submit(r, 20.0));
  }
  (void)step(s, 20.0, &fed);
  CHECK(s.stats().first_admission_cached_tokens >= 32);
}

TEMPLATE_TEST_CASE("a request without ids is counted by length only when it says so", "[sched][lifecycle]", iteration_t,
                   prefill_first_t, layered_t) {
  auto owned = make<TestType>(64);
  TestType& s = *owned;
  request r;
  r.id = request_id(1);
  r.client = client_id(1);
  r.prompt_tokens = 12;  // and no ids: an engine that indexes the prompt would read past its end
  CHECK_THROWS_WITH(s.submit(r, 0.0), Catch::Contains("request 1 has no prompt token ids") &&
                                          Catch::Contains("prompt_tokens is 12") &&
                                          Catch::Contains("counted_by_length = true"));
  CHECK(s.idle());
  const std::vector<token_id> ids = iota_ids(12, 1);
  request both = with_ids(1, ids);
  both.counted_by_length = true;
  CHECK_THROWS_WITH(s.submit(both, 0.0), Catch::Contains("counted_by_length is set but prompt holds 12"));
  CHECK(s.idle());
  r.counted_by_length = true;
  CHECK(s.submit(r, 0.0));
  CHECK(s.waiting() == 1);
}

TEMPLATE_TEST_CASE("complete() feeds each request its own token whatever the order; stray tokens are errors",
                   "[sched][lifecycle]", iteration_t, prefill_first_t, layered_t) {
  auto owned = make<TestType>(64);
  TestType& s = *owned;
  const std::vector<token_id> a = iota_ids(5, 10), b = iota_ids(6, 20), c = iota_ids(7, 30);
  REQUIRE(s.submit(with_ids(1, a), 0.0));
  REQUIRE(s.submit(with_ids(2, b), 0.0));
  REQUIRE(s.submit(with_ids(3, c), 0.0));
  std::map<request_id, std::vector<token_id>> fed;
  int checked = 0;
  // Until all three decode, then a few steps more; every token goes back in reverse entry order.
  for (int it = 0; it < 6; ++it) {
    const batch& bt = s.schedule(it);
    const bool all_decode =
        bt.entries.size() == 3 &&
        std::all_of(bt.entries.begin(), bt.entries.end(), [](const batch_entry& e) { return e.decode_tokens == 1; });
    if (all_decode) {
      // Each decode step's input is the token fed back for that very request.
      for (const batch_entry& e : bt.entries) CHECK(e.token == fed.at(e.id).back());
      ++checked;
      // A token that names a request outside the batch, or one twice, changes nothing and says why.
      using tokens = std::vector<decoded_token>;
      CHECK_THROWS_WITH(
          s.complete({}, tokens{{request_id(3), 1}, {request_id(2), 2}, {request_id(1), 3}, {request_id(8), 4}}),
          Catch::Contains("request 8 is given a decoded token but is not in the last batch"));
      CHECK_THROWS_WITH(s.complete({}, tokens{{request_id(3), 1}, {request_id(3), 2}, {request_id(1), 3}}),
                        Catch::Contains("request 3 is given two decoded tokens"));
      CHECK_THROWS_WITH(s.complete({}, tokens{{request_id(3), 1}, {request_id(1), 3}}),
                        Catch::Contains("request 2 carries token ids") && Catch::Contains("needs its decoded token"));
    }
    std::vector<decoded_token> decoded;
    for (const batch_entry& e : bt.entries)
      if (e.emits_token) {
        decoded.push_back({e.id, static_cast<token_id>(100 * e.id.value() + static_cast<std::uint64_t>(it))});
        fed[e.id].push_back(decoded.back().token);
      }
    std::reverse(decoded.begin(), decoded.end());
    s.complete({}, decoded);
  }
  CHECK(checked >= 2);
  // The KV manager holds each request's own sampled tokens after its prompt.
  for (const auto& [id, tokens] : fed) {
    const auto held = s.kv().tokens(id);
    const std::size_t prompt = id.value() == 1 ? a.size() : id.value() == 2 ? b.size() : c.size();
    // (iteration_scheduler hands decoded ids to the KV manager a block at a time: it may hold fewer.)
    REQUIRE(held.size() >= prompt);
    for (std::size_t i = prompt; i < held.size(); ++i) CHECK(held[i] == tokens[i - prompt]);
  }
}

TEMPLATE_TEST_CASE("cancel() ends a request wherever it is and releases everything", "[sched][lifecycle][cancel]",
                   iteration_t, prefill_first_t, layered_t) {
  auto owned = make<TestType>(64, 0, /*max_running=*/2);
  TestType& s = *owned;
  const auto admitted = s.queue().admitted;
  const auto finished = s.queue().finished;
  const std::vector<token_id> long_prompt = iota_ids(40, 1), other = iota_ids(20, 500), third = iota_ids(9, 900);
  REQUIRE(s.submit(with_ids(1, long_prompt), 0.0));
  REQUIRE(s.submit(with_ids(2, other), 0.5));
  REQUIRE(s.submit(with_ids(3, third), 0.7));  // max_running 2: waits in the Queue
  (void)step(s, 0.0);
  REQUIRE(s.kv().contains(request_id(1)));
  // Between iterations only.
  (void)s.schedule(1.0);
  CHECK_THROWS_WITH(s.cancel(request_id(1)), Catch::Contains("a batch is in flight"));
  s.complete({}, [&] {
    std::vector<decoded_token> d;
    for (const auto& e : s.last_batch().entries)
      if (e.emits_token) d.push_back({e.id, 7});
    return d;
  }());
  // Waiting inside the Queue: gone from waiting() at once, never charged; its id stays taken until the
  // Queue hands the stale copy out.
  const std::size_t waiting = s.waiting(), running = s.running();
  CHECK(s.cancel(request_id(3)));
  CHECK(s.waiting() == waiting - 1);
  CHECK_FALSE(s.cancel(request_id(3)));  // cancelled already
  CHECK_THROWS_WITH(s.submit(with_ids(3, third), 1.0), Catch::Contains("was cancelled while waiting in the queue"));
  // Running, whatever its phase (request 1's 40-token prompt may be mid-prefill here): its KV goes.
  CHECK(s.cancel(request_id(1)));
  CHECK_FALSE(s.kv().contains(request_id(1)));
  CHECK(s.running() == running - 1);
  CHECK(finished->at(request_id(1)) == 1);
  CHECK_FALSE(s.cancel(request_id(42)));  // never submitted
  // The rest runs to the end; the stale copy of request 3 is dropped on the way and its id freed.
  for (int it = 2; !s.idle() && it < 100; ++it) (void)step(s, it, nullptr, {request_id(2)});
  CHECK(s.idle());
  CHECK(s.kv().free_blocks() == s.kv().usable_blocks());
  CHECK_FALSE(admitted->contains(request_id(3)));
  CHECK_FALSE(finished->contains(request_id(3)));
  CHECK(s.stats().cancelled == 2);
  (void)step(s, 200.0);  // an empty iteration drains the Queue's stale copy
  CHECK(s.submit(with_ids(3, third), 201.0));
  CHECK(s.cancel(request_id(3)));
}

TEMPLATE_TEST_CASE("cancel() of a request preempted by recompute, mid-prefill and decoding",
                   "[sched][lifecycle][cancel]", iteration_t, prefill_first_t, layered_t) {
  // Four blocks of 16 tokens: two 30-token prompts fill them; their decodes then need a fifth block,
  // so the later arrival is preempted by recompute and waits to prefill again.
  auto owned = make<TestType>(4);
  TestType& s = *owned;
  const auto finished = s.queue().finished;
  REQUIRE(s.submit(counted(1, 30, 0.0), 0.0));
  REQUIRE(s.submit(counted(2, 30, 1.0), 1.0));
  int it = 0;
  for (; it < 40 && s.stats().preempted_recompute == 0; ++it) (void)step(s, it);
  REQUIRE(s.stats().preempted_recompute == 1);
  CHECK(s.waiting() == 1);
  CHECK(s.cancel(request_id(2)));  // preempted, waiting to prefill again
  CHECK(s.waiting() == 0);
  CHECK(finished->at(request_id(2)) == 1);
  CHECK(s.cancel(request_id(1)));  // decoding
  CHECK(s.running() == 0);
  // A new request, cancelled while its prefill has run part of the way (chunks of 16, or layer
  // groups).
  REQUIRE(s.submit(counted(3, 33, 50.0), 50.0));
  bool mid = false;
  for (int k = 0; k < 10 && !mid; ++k, ++it) {
    const batch b = step(s, it);
    for (const batch_entry& e : b.entries) mid = mid || (e.id == request_id(3) && !e.emits_token);
  }
  if constexpr (!std::is_same_v<TestType, prefill_first_t>) CHECK(mid);  // vLLM v0 prefills whole prompts
  CHECK(s.cancel(request_id(3)));
  CHECK(s.idle());
  CHECK(s.kv().free_blocks() == s.kv().usable_blocks());
  CHECK(s.stats().cancelled == 3);
  CHECK(s.schedule(it).empty());
}

TEST_CASE("cancel() of a swapped-out request frees its host blocks; of a fork's parent, the child goes on",
          "[sched][lifecycle][cancel]") {
  auto owned = make<iteration_t>(4, 8, 8, preemption_mode::swap);
  iteration_t& s = *owned;
  const std::vector<token_id> a = iota_ids(30, 1), b = iota_ids(30, 300);
  REQUIRE(s.submit(with_ids(1, a, 0.0), 0.0));
  REQUIRE(s.submit(with_ids(2, b, 1.0), 1.0));
  int it = 0;
  for (; it < 40 && s.stats().preempted_swap == 0; ++it) (void)step(s, it);
  REQUIRE(s.stats().preempted_swap == 1);
  CHECK(s.kv().host_free_blocks() < 8);
  CHECK(s.cancel(request_id(2)));  // swapped out
  CHECK(s.kv().host_free_blocks() == 8);
  CHECK_FALSE(s.kv().contains(request_id(2)));
  // Request 1 decodes; fork it, cancel the parent: the child keeps the shared blocks and finishes.
  (void)step(s, it++);
  REQUIRE(s.fork(request_id(1), request_id(5), 4242));
  CHECK(s.cancel(request_id(1)));
  CHECK(s.running() == 1);
  std::map<request_id, std::vector<token_id>> fed;
  const batch next = step(s, it++, &fed, {request_id(5)});
  REQUIRE(next.entries.size() == 1);
  CHECK(next.entries[0].token == 4242);
  CHECK(s.idle());
  CHECK(s.kv().free_blocks() == s.kv().usable_blocks());
  CHECK(s.stats().cancelled == 2);
}

TEMPLATE_TEST_CASE("statistics keep first admissions apart from re-admissions after a recompute", "[sched][lifecycle]",
                   iteration_t, prefill_first_t, layered_t) {
  // Shared 32-token system prompt plus private tails, in a cache small enough to force recomputes.
  const std::vector<token_id> system = iota_ids(32, 1);
  std::vector<std::vector<token_id>> prompts;
  std::vector<weft_test::job> jobs;
  std::uint64_t prompt_tokens = 0;
  for (std::uint64_t i = 1; i <= 12; ++i) {
    std::vector<token_id> p = system;
    const auto tail = iota_ids(5 + 3 * (i % 4), static_cast<token_id>(1000 * i));
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(std::move(p));
    prompt_tokens += prompts.back().size();
  }
  for (std::uint64_t i = 1; i <= 12; ++i) {
    weft_test::job j;
    j.req = with_ids(i, prompts[i - 1], static_cast<double>(i));
    j.output = 20 + static_cast<std::int64_t>(i % 5) * 7;
    jobs.push_back(j);
  }
  auto owned = make<TestType>(14);
  TestType& s = *owned;
  const auto out = weft_test::run_jobs(s, jobs, [](const batch&, auto&) {});
  CHECK(out.completed == 12);
  const scheduler_stats& st = s.stats();
  CHECK(st.preempted_recompute > 0);
  CHECK(st.readmitted == st.preempted_recompute);  // every preempted request came back
  CHECK(st.admitted == 12);
  CHECK(st.first_admission_prompt_tokens == prompt_tokens);
  CHECK(st.cached_prompt_tokens == st.first_admission_cached_tokens + st.readmission_cached_tokens);
  CHECK(st.first_admission_cached_tokens > 0);  // the shared system prompt
  CHECK(st.readmission_cached_tokens > 0);      // a re-admission hits what it published when preempted
  CHECK(st.first_admission_hit_rate() > 0.0);
  CHECK(st.first_admission_hit_rate() < 1.0);
}

TEMPLATE_TEST_CASE("a fork made while the batch is full waits for room and is never dropped",
                   "[sched][lifecycle][fork]", iteration_t, prefill_first_t, layered_t) {
  auto owned = make<TestType>(64, 0, /*max_running=*/2);
  TestType& s = *owned;
  const std::vector<token_id> a = iota_ids(10, 1), b = iota_ids(12, 50);
  REQUIRE(s.submit(with_ids(1, a, 0.0), 0.0));
  REQUIRE(s.submit(with_ids(2, b, 0.5), 0.5));
  int it = 0;
  std::map<request_id, std::vector<token_id>> fed;
  while (fed[request_id(1)].empty() || fed[request_id(2)].empty()) (void)step(s, it++, &fed);
  REQUIRE(s.running() == 2);  // the batch is full
  const std::size_t waiting = s.waiting();
  const auto parent_tokens = static_cast<std::int64_t>(a.size() + fed[request_id(1)].size());  // at the fork
  REQUIRE(s.fork(request_id(1), request_id(7), 4242));
  CHECK(s.running() == 2);
  CHECK(s.waiting() == waiting + 1);
  CHECK_THROWS_WITH(s.fork(request_id(1), request_id(7), 1), Catch::Contains("request 7 is already"));
  // While the batch stays full the sample waits; when request 2 ends it joins, from its own token.
  batch next = step(s, it++, &fed, {request_id(2)});
  for (const batch_entry& e : next.entries) CHECK(e.id != request_id(7));
  next = step(s, it++, &fed);
  bool seen = false;
  for (const batch_entry& e : next.entries)
    if (e.id == request_id(7)) {
      seen = true;
      CHECK(e.token == 4242);
      CHECK(e.context_tokens == parent_tokens);  // its first step computes its first token's KV
    }
  CHECK(seen);
  CHECK(s.stats().forked == 1);
  // A waiting sample can be cancelled too: it frees its share of the blocks.
  REQUIRE(s.fork(request_id(7), request_id(8), 5));  // full again (1 and 7 run): 8 waits
  CHECK(s.cancel(request_id(8)));
  for (; !s.idle() && it < 100; ++it) (void)step(s, it, &fed, {request_id(1), request_id(7)});
  CHECK(s.idle());
  CHECK(s.kv().free_blocks() == s.kv().usable_blocks());
}

TEMPLATE_TEST_CASE("a request that ended is gone at once: its id may come back, running() counts live ones",
                   "[sched][lifecycle]", iteration_t, prefill_first_t, layered_t) {
  // The slot of a request that ends may stay in the running set for a while (compacted lazily): no
  // call may see it.
  auto s = make<TestType>(256);
  std::vector<std::vector<token_id>> prompts;
  for (std::uint64_t i = 1; i <= 8; ++i) prompts.push_back(iota_ids(20, static_cast<token_id>(100 * i)));
  for (std::uint64_t i = 1; i <= 8; ++i) REQUIRE(s->submit(with_ids(i, prompts[i - 1]), 0.0));
  std::map<request_id, std::vector<token_id>> fed;
  for (int it = 0; it < 40 && s->running() < 8; ++it) step(*s, 1.0, &fed);
  for (int it = 0; it < 4; ++it) step(*s, 1.0, &fed);
  REQUIRE(s->running() == 8);
  step(*s, 1.0, &fed, {request_id(3)});
  CHECK(s->running() == 7);
  CHECK(s->waiting() == 0);
  CHECK_FALSE(s->cancel(request_id(3)));
  CHECK_THROWS_WITH(s->fork(request_id(3), request_id(30), 5), Catch::Contains("is not running"));
  // The same id, a new request: admitted and fed its own tokens.
  const auto again = iota_ids(20, 5000);
  REQUIRE(s->submit(with_ids(3, again), 2.0));
  CHECK(s->waiting() == 1);
  fed.erase(request_id(3));
  bool decoded = false;
  for (int it = 0; it < 40 && !decoded; ++it) {
    const batch b = step(*s, 3.0, &fed);
    for (const batch_entry& e : b.entries)
      if (e.id == request_id(3) && e.decode_tokens > 0) {
        decoded = true;
        CHECK(e.token == fed[request_id(3)].front());  // its own first token, not the old request's
      }
    CHECK(std::count_if(b.entries.begin(), b.entries.end(),
                        [](const batch_entry& e) { return e.id == request_id(3); }) <= 1);
  }
  CHECK(decoded);
  CHECK(s->running() == 8);
  const auto ids = s->kv().tokens(request_id(3));
  REQUIRE(ids.size() >= again.size());
  CHECK(std::equal(again.begin(), again.end(), ids.begin()));
  CHECK(s->cancel(request_id(3)));
  CHECK(s->running() == 7);
}

namespace {
// The default KV manager without compute_prompt_keys: the scheduler then hashes prompts at admission.
struct kv_without_prompt_keys : weft::kv::kv_manager<> {
  using weft::kv::kv_manager<>::kv_manager;
  weft::kv::prompt_keys compute_prompt_keys(std::span<const token_id>, const weft::kv::request_options&) const = delete;
};
static_assert(kv_manager<kv_without_prompt_keys>);
static_assert(!precomputes_prompt_keys<kv_without_prompt_keys>);
static_assert(precomputes_prompt_keys<weft::kv::kv_manager<>>);
}  // namespace

TEST_CASE("prompt keys hashed at submit give the batches and hits of hashing at admission", "[sched][lifecycle]") {
  // Shared prefixes (hits), a small cache (recompute preemptions, readmitted with their decoded ids).
  auto run = [](auto kv) {
    iteration_scheduler<fcfs_queue, decltype(kv)> s(chunked_prefill(32, 6), fcfs_queue{}, std::move(kv));
    std::vector<std::vector<token_id>> prompts;
    for (std::uint64_t i = 0; i < 24; ++i) {
      auto p = iota_ids(48, static_cast<token_id>(1 + (i % 3) * 1000));  // three shared prefixes
      for (std::uint64_t k = 0; k < 5 + i; ++k) p.push_back(static_cast<token_id>(50000 + 100 * i + k));
      prompts.push_back(std::move(p));
    }
    for (std::uint64_t i = 0; i < prompts.size(); ++i)
      REQUIRE(s.submit(with_ids(i + 1, prompts[i], 0.01 * static_cast<double>(i)), 0.0));
    std::vector<batch> batches;
    for (int it = 0; it < 400 && !s.idle(); ++it) {
      const batch& b = s.schedule(1.0);
      batches.push_back(b);
      std::vector<decoded_token> decoded;
      std::vector<request_id> finished;
      for (const batch_entry& e : b.entries) {
        if (!e.emits_token) continue;
        decoded.push_back({e.id, static_cast<token_id>(7 * e.id.value() + e.context_tokens)});
        if (e.context_tokens >= 48 + 40) finished.push_back(e.id);
      }
      s.complete(finished, decoded);
    }
    CHECK(s.idle());
    return std::pair(batches, s.stats());
  };
  const auto [with_keys, stats_keys] = run(weft_test::kv_of(24));
  weft::kv::kv_config c = weft_test::kv_of(24).config();
  const auto [without, stats_without] = run(kv_without_prompt_keys(c));
  CHECK(stats_keys.cached_prompt_tokens > 0);
  CHECK(stats_keys.preempted_recompute > 0);
  CHECK(stats_keys.cached_prompt_tokens == stats_without.cached_prompt_tokens);
  CHECK(stats_keys.readmission_cached_tokens == stats_without.readmission_cached_tokens);
  REQUIRE(with_keys.size() == without.size());
  for (std::size_t i = 0; i < with_keys.size(); ++i) {
    const auto& a = with_keys[i].entries;
    const auto& b = without[i].entries;
    REQUIRE(a.size() == b.size());
    for (std::size_t k = 0; k < a.size(); ++k) {
      CHECK(a[k].id == b[k].id);
      CHECK(a[k].prefill_tokens == b[k].prefill_tokens);
      CHECK(a[k].context_tokens == b[k].context_tokens);
      CHECK(a[k].token == b[k].token);
    }
  }
}

namespace {
// One iteration for a workload with parallel samples: a token for every emitting entry and, when an
// entry emits the first token of a request with samples, one for each of its samples (`first` says
// which requests have not emitted yet). Tokens are a function of (id, position), so every sequence
// can be checked.
template <class S>
batch step_samples(S& s, double now, std::map<request_id, std::vector<request_id>>& samples_of,
                   std::map<request_id, std::vector<token_id>>& fed, bool give_sample_tokens = true) {
  const batch b = s.schedule(now);
  std::vector<decoded_token> decoded;
  for (const batch_entry& e : b.entries) {
    if (!e.emits_token) continue;
    const bool first = fed[e.id].empty();
    const auto t = static_cast<token_id>(1000 * (e.id.value() % 50) + e.context_tokens);
    decoded.push_back({e.id, t});
    fed[e.id].push_back(t);
    if (first && give_sample_tokens)
      for (const request_id c : samples_of[e.id]) {
        const auto tc = static_cast<token_id>(1000 * (c.value() % 50) + e.context_tokens);
        decoded.push_back({c, tc});
        fed[c].push_back(tc);
      }
  }
  s.complete({}, decoded);
  return b;
}
}  // namespace

TEMPLATE_TEST_CASE("request-level n: the samples start at the first token, share the prompt and are never dropped",
                   "[sched][lifecycle][samples]", iteration_t, prefill_first_t, layered_t) {
  // max_running 3: the parent and two of its four samples fit; the others wait for room.
  auto s = make<TestType>(256, 0, 3);
  const auto prompt = iota_ids(40, 100);
  const std::vector<request_id> sample_ids{request_id(11), request_id(12), request_id(13), request_id(14)};
  request r = with_ids(1, prompt);
  r.n = 5;
  r.sample_ids = sample_ids;
  REQUIRE(s->submit(r, 0.0));
  // The sample ids are held from submit on.
  CHECK_THROWS_WITH(s->submit(with_ids(12, prompt), 0.0), Catch::Contains("already in this scheduler"));
  std::map<request_id, std::vector<request_id>> samples_of{{request_id(1), sample_ids}};
  std::map<request_id, std::vector<token_id>> fed;
  // The first token without the samples' tokens is an error that changes nothing.
  bool checked_missing = false;
  for (int it = 0; it < 20 && fed[request_id(1)].empty(); ++it) {
    const batch& b = s->schedule(1.0);
    const auto e = std::find_if(b.entries.begin(), b.entries.end(),
                                [](const batch_entry& x) { return x.id == request_id(1) && x.emits_token; });
    if (e == b.entries.end()) {
      s->complete({}, {});
      continue;
    }
    const auto t = static_cast<token_id>(1000 + e->context_tokens);
    const std::vector<decoded_token> only_parent{{request_id(1), t}};
    CHECK_THROWS_WITH(s->complete({}, only_parent), Catch::Contains("needs the first token of sample"));
    CHECK(s->running() == 1);
    std::vector<decoded_token> all{{request_id(1), t}};
    fed[request_id(1)].push_back(t);
    for (const request_id c : sample_ids) {
      const auto tc = static_cast<token_id>(1000 * (c.value() % 50) + e->context_tokens);
      all.push_back({c, tc});
      fed[c].push_back(tc);
    }
    std::reverse(all.begin(), all.end());  // any order
    s->complete({}, all);
    checked_missing = true;
  }
  REQUIRE(checked_missing);
  CHECK(s->running() == 3);  // the parent and two samples; the other two wait, holding their share
  CHECK(s->waiting() == 2);
  CHECK(s->stats().forked == 4);
  // Every sample shares the parent's two full prompt blocks.
  const auto parent_blocks = s->kv().blocks(request_id(1));
  for (const request_id c : sample_ids) {
    const auto cb = s->kv().blocks(c);
    REQUIRE(cb.size() >= 2);
    CHECK(std::equal(parent_blocks.begin(), parent_blocks.begin() + 2, cb.begin()));
  }
  // Each sample decodes from its own first token; the waiting ones join when room frees.
  std::map<request_id, bool> decoded_own;
  for (int it = 0; it < 30; ++it) {
    std::vector<request_id> finish;
    const batch b = s->schedule(2.0);
    std::vector<decoded_token> decoded;
    for (const batch_entry& e : b.entries) {
      if (e.decode_tokens > 0) {
        CHECK(e.token == fed[e.id].back());  // its own last token, never a sibling's
        decoded_own[e.id] = true;
      }
      if (!e.emits_token) continue;
      const auto t = static_cast<token_id>(1000 * (e.id.value() % 50) + e.context_tokens);
      decoded.push_back({e.id, t});
      fed[e.id].push_back(t);
      if (fed[e.id].size() >= 4) finish.push_back(e.id);
    }
    s->complete(finish, decoded);
    if (s->idle()) break;
  }
  CHECK(s->idle());
  CHECK(decoded_own.size() == 5);
  for (const request_id c : sample_ids) {
    CHECK(fed[c].size() == 4);
    CHECK(fed[c].front() == static_cast<token_id>(1000 * (c.value() % 50) + 40));
  }
}

TEMPLATE_TEST_CASE("request-level n: bad input is an error that changes nothing", "[sched][lifecycle][samples]",
                   iteration_t, prefill_first_t, layered_t) {
  auto s = make<TestType>(16);            // 16 blocks of 16 tokens
  const auto prompt = iota_ids(40, 100);  // 3 blocks to its first token
  const std::vector<request_id> ids{request_id(11), request_id(12)};
  auto bad = [&](request r, const char* what) {
    CHECK_THROWS_WITH(s->submit(r, 0.0), Catch::Contains(what));
    CHECK(s->waiting() == 0);
    CHECK(s->stats().rejected == 0);
  };
  request r = with_ids(1, prompt);
  r.n = 0;
  bad(r, "must be >= 1");
  r.n = 2;
  bad(r, "sample_ids must hold 1 ids");
  r.n = 3;
  r.sample_ids = ids;
  const std::vector<request_id> twice{request_id(11), request_id(11)};
  request dup = r;
  dup.sample_ids = twice;
  bad(dup, "listed twice");
  const std::vector<request_id> own{request_id(1), request_id(12)};
  request self = r;
  self.sample_ids = own;
  bad(self, "differ from the request's own id");
  // n too large for the KV pool: 3 blocks for the prompt's first token plus one per sample > 16.
  std::vector<request_id> many;
  for (std::uint64_t i = 0; i < 14; ++i) many.push_back(request_id(100 + i));
  request big = with_ids(1, prompt);
  big.n = 15;
  big.sample_ids = many;
  bad(big, "lower n");
  // Nothing was kept: every id is free, and the valid request goes through.
  for (const request_id c : many) REQUIRE(s->submit(with_ids(c.value(), prompt), 0.0));
  for (const request_id c : many) CHECK(s->cancel(c));
  REQUIRE(s->submit(r, 0.0));
  // Cancelled before its first token: the samples never start and their ids are free again.
  CHECK(s->cancel(request_id(1)));
  for (const request_id c : ids) REQUIRE(s->submit(with_ids(c.value(), prompt), 0.0));
}

TEMPLATE_TEST_CASE("request-level n: a sample may end at its first token", "[sched][lifecycle][samples]", iteration_t,
                   prefill_first_t, layered_t) {
  auto s = make<TestType>(64);
  const auto prompt = iota_ids(24, 100);
  const std::vector<request_id> ids{request_id(21), request_id(22)};
  request r = with_ids(1, prompt);
  r.n = 3;
  r.sample_ids = ids;
  REQUIRE(s->submit(r, 0.0));
  bool started = false;
  for (int it = 0; it < 20 && !started; ++it) {
    const batch& b = s->schedule(1.0);
    std::vector<decoded_token> decoded;
    for (const batch_entry& e : b.entries)
      if (e.emits_token) {
        decoded.push_back({e.id, 7});
        decoded.push_back({request_id(21), 8});
        decoded.push_back({request_id(22), 9});
        started = true;
      }
    const std::vector<request_id> ends{request_id(21)};
    if (started) {
      const std::vector<request_id> twice{request_id(21), request_id(21)};
      CHECK_THROWS_WITH(s->complete(twice, decoded), Catch::Contains("finished twice"));
      s->complete(ends, decoded);
    } else {
      s->complete({}, decoded);
    }
  }
  REQUIRE(started);
  CHECK(s->stats().forked == 2);
  CHECK(s->running() == 2);  // the parent and sample 22; sample 21 ended at its first token
  CHECK_FALSE(s->kv().contains(request_id(21)));
  CHECK(s->submit(with_ids(21, prompt), 2.0));  // its id is free again
  // Sample 22 decodes from its own first token (a prefill-first batch may make it wait a step).
  token_id first_input = -1;
  for (int it = 0; it < 10 && first_input < 0; ++it) {
    const batch b = step(*s, 2.0);
    for (const batch_entry& e : b.entries)
      if (e.id == request_id(22) && e.decode_tokens > 0) first_input = e.token;
  }
  CHECK(first_input == 9);
}

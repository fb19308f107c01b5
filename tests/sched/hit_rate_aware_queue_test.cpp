#include "harness.hpp"

#include <weft/kv/similar_prompt_index.hpp>
#include <weft/sched/any_fair_queue.hpp>
#include <weft/sched/concepts.hpp>
#include <weft/sched/hit_rate_aware_queue.hpp>
#include <weft/sched/iteration_scheduler.hpp>

#include <catch2/catch.hpp>

#include <map>
#include <vector>

using namespace weft::sched;

namespace {
request make(std::uint64_t id, std::int64_t prompt, double arrival) {
  request r;
  r.id = request_id(id);
  r.client = client_id(0);
  r.prompt_tokens = prompt;
  r.arrival_s = arrival;
  return r;
}
std::vector<std::uint64_t> drain(hit_rate_aware_queue& q, double now) {
  std::vector<std::uint64_t> order;
  while (!q.empty()) {
    const request_id expected = q.peek(now)->id;
    const request r = q.pop(now);
    CHECK(r.id == expected);
    order.push_back(r.id.value());
  }
  CHECK(q.peek(now) == nullptr);
  return order;
}
}  // namespace

static_assert(fair_queue<hit_rate_aware_queue>);

TEST_CASE("hit-rate-aware queue: highest reuse first, arrival order within a bucket", "[sched][queue][hitrate]") {
  // Reusable tokens per request id (of 100-token prompts).
  std::map<std::uint64_t, std::int64_t> reuse{{1, 0}, {2, 90}, {3, 40}, {4, 95}, {5, 0}};
  hit_rate_aware_queue::options o;
  o.max_wait_s = 100.0;
  o.hit_rate_buckets = 10;
  o.reuse_probe = [&](const request& r) { return reuse.at(r.id.value()); };
  hit_rate_aware_queue q(std::move(o));
  for (std::uint64_t i = 1; i <= 5; ++i) q.push(make(i, 100, static_cast<double>(i)), static_cast<double>(i));
  // 2 and 4 share the 0.9 bucket: arrival order. Then 3 (0.4), then the cold ones by arrival.
  CHECK(drain(q, 10.0) == std::vector<std::uint64_t>{2, 4, 3, 1, 5});
}

TEST_CASE("hit-rate-aware queue: aging bounds the wait of cold requests", "[sched][queue][hitrate]") {
  hit_rate_aware_queue::options o;
  o.max_wait_s = 5.0;
  o.reuse_probe = [](const request& r) { return r.id.value() == 1 ? std::int64_t{0} : std::int64_t{100}; };
  hit_rate_aware_queue q(std::move(o));
  q.push(make(1, 100, 0.0), 0.0);  // cold
  q.push(make(2, 100, 1.0), 1.0);  // hot
  q.push(make(3, 100, 2.0), 2.0);  // hot
  CHECK(q.peek(4.0)->id == request_id(2));
  CHECK(q.pop(4.0).id == request_id(2));
  // At t = 5 the cold request has waited max_wait_s: it goes before the hot one.
  CHECK(q.pop(5.0).id == request_id(1));
  CHECK(q.pop(5.0).id == request_id(3));
}

TEST_CASE("hit-rate-aware queue: without probes it is FCFS; bad input changes nothing", "[sched][queue][hitrate]") {
  hit_rate_aware_queue q;
  for (std::uint64_t i = 1; i <= 4; ++i) q.push(make(i, 10, 0.0), 0.0);
  CHECK(drain(q, 0.0) == std::vector<std::uint64_t>{1, 2, 3, 4});
  CHECK_THROWS_AS(q.pop(0.0), weft::error);

  hit_rate_aware_queue::options o;
  o.reuse_probe = [](const request& r) { return r.id.value() == 7 ? std::int64_t{11} : std::int64_t{-1}; };
  hit_rate_aware_queue bad(std::move(o));
  CHECK_THROWS_AS(bad.push(make(7, 10, 0.0), 0.0), weft::error);  // more than the prompt
  CHECK_THROWS_AS(bad.push(make(8, 10, 0.0), 0.0), weft::error);  // negative
  CHECK_THROWS_AS(bad.push(make(9, 0, 0.0), 0.0), weft::error);   // invalid request
  CHECK(bad.empty());
  CHECK_THROWS_AS(q.on_tokens(make(1, 10, 0.0), -1), weft::error);
  CHECK_THROWS_AS(hit_rate_aware_queue(hit_rate_aware_queue::options{0.0, 8, {}}), weft::error);
  CHECK_THROWS_AS(hit_rate_aware_queue(hit_rate_aware_queue::options{1.0, 0, {}}), weft::error);
  CHECK_THROWS_AS(hit_rate_aware_queue(hit_rate_aware_queue::options{1.0, 2000, {}}), weft::error);
}

TEST_CASE("hit-rate-aware queue behind the scheduler: exact prefix hits and similar-prompt reuse",
          "[sched][queue][hitrate]") {
  // Request 1 (cold) and 2 share nothing; 3 repeats 1's prompt exactly. The scheduler's KV manager
  // sees 1's prefix only after 1 ran, so push order matters: run 1 first, then queue 2 and 3 together.
  std::vector<token_id> a(64), b(64);
  for (int i = 0; i < 64; ++i) {
    a[static_cast<std::size_t>(i)] = 100 + i;
    b[static_cast<std::size_t>(i)] = 500 + i;
  }
  // Similar-prompt reuse through the index: a prompt like a but with one token changed.
  weft::kv::similar_prompt_index idx(weft::kv::similar_prompt_options{.band = 8});
  idx.insert(1, a);
  auto c = a;
  c[30] = 9999;
  hit_rate_aware_queue::options o;
  o.max_wait_s = 1000.0;
  o.reuse_probe = [&](const request& r) {
    const auto p = idx.lookup(r.prompt);
    return p ? static_cast<std::int64_t>(p->reused) : std::int64_t{0};
  };
  any_fair_queue erased{hit_rate_aware_queue(std::move(o))};
  request rb = make(2, 64, 0.0), rc = make(3, 64, 0.0);
  rb.prompt = b;
  rc.prompt = c;
  erased.push(rb, 0.0);
  erased.push(rc, 0.0);
  CHECK(erased.pop(0.0).id == request_id(3));  // 63 of 64 reusable beats 0
  CHECK(erased.pop(0.0).id == request_id(2));

  // The exact-prefix probe bound by iteration_scheduler: a repeat of a computed prompt goes first.
  std::vector<std::vector<token_id>> store{a, b, a};
  iteration_scheduler<hit_rate_aware_queue> s(chunked_prefill(512, 1), hit_rate_aware_queue{}, weft_test::kv_of(64));
  std::vector<weft_test::job> jobs;
  for (std::uint64_t i = 1; i <= 3; ++i) {
    weft_test::job j;
    j.req = make(i, 64, 0.0);
    j.req.prompt = store[i - 1];
    j.output = 2;
    jobs.push_back(j);
  }
  const auto out = weft_test::run_jobs(s, jobs, [](const batch&, auto&) {});
  CHECK(out.completed == 3);
}

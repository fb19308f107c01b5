#include <weft/sched/aging_priority_queue.hpp>
#include <weft/sched/any_fair_queue.hpp>
#include <weft/sched/drr_queue.hpp>
#include <weft/sched/fcfs_queue.hpp>
#include <weft/sched/prefix_aware_queue.hpp>
#include <weft/sched/prefix_group_queue.hpp>
#include <weft/sched/slo_priority_queue.hpp>
#include <weft/sched/vtc_queue.hpp>
#include <weft/sched/wfq_queue.hpp>

#include <catch2/catch.hpp>

#include <map>
#include <vector>

using namespace weft::sched;

namespace {
request make(std::uint64_t id, std::uint32_t client, std::int64_t prompt, double arrival = 0.0) {
  request r;
  r.id = request_id(id);
  r.client = client_id(client);
  r.prompt_tokens = prompt;
  r.arrival_s = arrival;
  return r;
}
template <class Q>
std::vector<std::uint64_t> drain(Q& q, double now = 0.0) {
  std::vector<std::uint64_t> order;
  while (!q.empty()) {
    const request* head = q.peek(now);
    REQUIRE(head != nullptr);
    const request_id expected = head->id;  // peek's pointer is invalidated by pop
    const request r = q.pop(now);
    CHECK(r.id == expected);
    order.push_back(r.id.value());
  }
  CHECK(q.peek(now) == nullptr);
  return order;
}
}  // namespace

static_assert(fair_queue<vtc_queue> && fair_queue<wfq_queue> && fair_queue<drr_queue> && fair_queue<fcfs_queue> &&
              fair_queue<aging_priority_queue> && fair_queue<slo_priority_queue> && fair_queue<prefix_aware_queue> &&
              fair_queue<prefix_group_queue> && fair_queue<any_fair_queue>);

TEST_CASE("fcfs serves in push order", "[sched][queue]") {
  fcfs_queue q;
  for (std::uint64_t i = 1; i <= 5; ++i) q.push(make(i, static_cast<std::uint32_t>(i % 2), 10), 0.0);
  CHECK(q.size() == 5);
  CHECK(drain(q) == std::vector<std::uint64_t>{1, 2, 3, 4, 5});
  CHECK_THROWS_AS(q.pop(0.0), weft::error);
}

TEST_CASE("vtc picks the client with the least counter and lifts newcomers", "[sched][queue][vtc]") {
  vtc_queue q;
  // Client 0 queues three requests first; client 1 one request.
  q.push(make(1, 0, 100), 0.0);
  q.push(make(2, 0, 100), 0.0);
  q.push(make(3, 0, 100), 0.0);
  q.push(make(4, 1, 100), 0.0);
  request a = q.pop(0.0);  // tie at 0: smaller client id
  CHECK(a.client == client_id(0));
  q.on_admit(a);  // client 0 counter 100
  CHECK(q.counter(client_id(0)) == Approx(100.0));
  request b = q.pop(0.0);
  CHECK(b.client == client_id(1));
  q.on_admit(b);
  q.on_tokens(b, 10);  // client 1: 100 + 2*10 = 120
  CHECK(q.counter(client_id(1)) == Approx(120.0));
  // Client 1 left the backlog; client 0 (counter 100) goes next.
  CHECK(q.peek(0.0)->client == client_id(0));
  // A new client arrives while client 0 (counter 100) is backlogged: lifted to 100, not 0.
  q.push(make(5, 2, 50), 0.0);
  CHECK(q.counter(client_id(2)) == Approx(100.0));
}

TEST_CASE("vtc with predicted output charges at admission and corrects later", "[sched][queue][vtc]") {
  vtc_queue q(vtc_queue::options{{1.0, 2.0}, true});
  request r = make(1, 0, 10);
  r.predicted_output_tokens = 5;
  q.push(r, 0.0);
  q.pop(0.0);
  q.on_admit(r);
  CHECK(q.counter(client_id(0)) == Approx(10 + 2 * 5));
  q.on_tokens(r, 4);  // within prediction: no new charge
  CHECK(q.counter(client_id(0)) == Approx(20.0));
  q.on_tokens(r, 3);  // 7 > 5: two tokens beyond
  CHECK(q.counter(client_id(0)) == Approx(24.0));
  q.on_finish(r, 7);
  CHECK(q.counter(client_id(0)) == Approx(24.0));
  request s = make(2, 0, 10);
  s.predicted_output_tokens = 10;
  q.push(s, 0.0);
  q.pop(0.0);
  q.on_admit(s);  // +10 +20
  q.on_tokens(s, 2);
  q.on_finish(s, 2);  // refund 8 tokens
  CHECK(q.counter(client_id(0)) == Approx(24.0 + 10 + 4));
}

TEST_CASE("vtc rejects bad input and leaves state unchanged", "[sched][queue][vtc][errors]") {
  vtc_queue q;
  CHECK_THROWS_AS(q.on_tokens(make(1, 7, 10), 1), weft::error);  // unknown client
  CHECK_THROWS_AS(q.counter(client_id(7)), weft::error);
  request bad = make(1, 0, -5);
  CHECK_THROWS_AS(q.push(bad, 0.0), weft::error);  // negative length
  CHECK(q.empty());
  q.push(make(2, 0, 5), 0.0);
  CHECK_THROWS_AS(q.on_tokens(make(2, 0, 5), -1), weft::error);
  CHECK(q.counter(client_id(0)) == 0.0);
  CHECK_THROWS_AS(q.set_weight(client_id(0), 0.0), weft::error);
  CHECK_THROWS_AS(vtc_queue(vtc_queue::options{{-1.0, 2.0}, false}), weft::error);
  request bad_prefix = make(3, 0, 5);
  bad_prefix.prefix_tokens = 6;
  CHECK_THROWS_AS(q.push(bad_prefix, 0.0), weft::error);
  CHECK(q.size() == 1);
}

TEST_CASE("weights split vtc service proportionally", "[sched][queue][vtc]") {
  vtc_queue q;
  q.set_weight(client_id(0), 3.0);
  q.set_weight(client_id(1), 1.0);
  std::uint64_t id = 1;
  for (int i = 0; i < 400; ++i) {
    q.push(make(id++, 0, 100), 0.0);
    q.push(make(id++, 1, 100), 0.0);
  }
  std::map<std::uint32_t, int> served;
  for (int i = 0; i < 400; ++i) {
    request r = q.pop(0.0);
    q.on_admit(r);
    ++served[r.client.value()];
  }
  CHECK(served[0] == 300);
  CHECK(served[1] == 100);
}

TEST_CASE("wfq interleaves a flooding client with a light one", "[sched][queue][wfq]") {
  wfq_queue q(wfq_queue::options{{1.0, 0.0}, 0});
  std::uint64_t id = 1;
  for (int i = 0; i < 10; ++i) q.push(make(id++, 0, 100), 0.0);  // flood first
  q.push(make(id++, 1, 100), 0.0);
  q.push(make(id++, 1, 100), 0.0);
  const auto order = drain(q);
  // Client 1's two requests have finish tags 100 and 200, so they are served by the fourth pop.
  std::vector<std::uint64_t> first4(order.begin(), order.begin() + 4);
  CHECK(std::count(first4.begin(), first4.end(), 11) == 1);
  CHECK(std::count(first4.begin(), first4.end(), 12) == 1);
  CHECK_THROWS_AS(q.on_finish(make(99, 5, 1), 1), weft::error);  // unknown client
}

TEST_CASE("drr shares tokens per round by quantum and weight", "[sched][queue][drr]") {
  drr_queue q(drr_queue::options{{1.0, 0.0}, 100.0, 0});
  q.set_weight(client_id(1), 2.0);
  std::uint64_t id = 1;
  for (int i = 0; i < 30; ++i) q.push(make(id++, 0, 100), 0.0);
  for (int i = 0; i < 30; ++i) q.push(make(id++, 1, 100), 0.0);
  std::map<std::uint32_t, int> served;
  for (int i = 0; i < 30; ++i) ++served[q.pop(0.0).client.value()];
  CHECK(served[0] == 10);
  CHECK(served[1] == 20);
  CHECK_THROWS_AS(drr_queue(drr_queue::options{{1.0, 2.0}, 0.0, 0}), weft::error);  // zero quantum
}

TEST_CASE("aging priority is strict at rate zero and lets old requests through otherwise", "[sched][queue]") {
  aging_priority_queue strict(aging_priority_queue::options{0.0});
  request low = make(1, 0, 10, 0.0);
  request high = make(2, 0, 10, 100.0);
  high.priority = 5;
  strict.push(low, 100.0);
  strict.push(high, 100.0);
  CHECK(strict.pop(100.0).id == request_id(2));
  aging_priority_queue aging(aging_priority_queue::options{0.1});
  aging.push(low, 100.0);
  aging.push(high, 100.0);
  // low waited 100 s: effective 10 > 5.
  CHECK(aging.effective_priority(low, 100.0) == Approx(10.0));
  CHECK(aging.pop(100.0).id == request_id(1));
  CHECK_THROWS_AS(aging_priority_queue(aging_priority_queue::options{-1.0}), weft::error);
}

TEST_CASE("slo priority promotes a request near its TTFT deadline", "[sched][queue]") {
  slo_priority_queue q;
  request batchy = make(1, 0, 10, 0.0);
  batchy.ttft_slo_s = 2.0;  // urgent from t = 1
  request vip = make(2, 1, 10, 0.5);
  vip.priority = 9;
  q.push(batchy, 0.5);
  q.push(vip, 0.5);
  CHECK(q.peek(0.6)->id == request_id(2));
  CHECK(q.peek(1.0)->id == request_id(1));
  CHECK(q.urgent() == 1);
  CHECK(q.pop(1.0).id == request_id(1));
  CHECK(q.pop(1.0).id == request_id(2));
  CHECK(q.empty());
}

TEST_CASE("prefix-aware queue prefers cached prefixes and ages cold ones", "[sched][queue][prefix]") {
  prefix_aware_queue q(prefix_aware_queue::options{5.0});
  request cold = make(1, 0, 100, 0.0);
  cold.prefix_id = 7;
  cold.prefix_tokens = 64;
  request hot = make(2, 0, 100, 1.0);
  hot.prefix_id = 9;
  hot.prefix_tokens = 64;
  q.push(cold, 1.0);
  q.push(hot, 1.0);
  CHECK(q.peek(1.0)->id == request_id(1));  // no probe: FCFS
  q.bind_prefix_probe([](const request& r) { return r.prefix_id == 9 ? std::int64_t{64} : std::int64_t{0}; });
  CHECK(q.peek(2.0)->id == request_id(2));  // hot first
  CHECK(q.peek(5.0)->id == request_id(1));  // cold waited 5 s: aging wins
  CHECK(drain(q, 5.0) == std::vector<std::uint64_t>{1, 2});
}

TEST_CASE("prefix grouping drains one group before the next", "[sched][queue][prefix]") {
  prefix_group_queue q;
  const std::uint64_t prefixes[] = {1, 2, 1, 0, 2, 1};
  for (std::uint64_t i = 0; i < 6; ++i) {
    request r = make(i + 1, 0, 50, static_cast<double>(i));
    r.prefix_id = prefixes[i];
    r.prefix_tokens = prefixes[i] == 0 ? 0 : 32;
    q.push(r, 0.0);
  }
  CHECK(drain(q) == std::vector<std::uint64_t>{1, 3, 6, 2, 5, 4});
}

TEST_CASE("any_fair_queue forwards to the chosen queue", "[sched][queue]") {
  any_fair_queue q(vtc_queue{});
  q.push(make(1, 0, 10), 0.0);
  q.push(make(2, 1, 10), 0.0);
  const request r = q.pop(0.0);
  q.on_admit(r);
  CHECK(q.peek(0.0)->client != r.client);
  CHECK(q.size() == 1);
  CHECK_THROWS_AS(q.on_tokens(make(3, 9, 1), 1), weft::error);
}

// The fair queues find a client's state by indexing for ids below 2^16 and by hashing above: the same
// workload under order-preserving renumberings into either range (and across it) is served the same,
// and a copy of a queue is independent of the original.
template <class Q>
std::vector<std::uint64_t> serve_mixed(const std::vector<std::uint32_t>& ids, bool copy_midway) {
  Q q;
  std::uint64_t next = 1;
  std::vector<std::uint64_t> order;
  for (int round = 0; round < 6; ++round) {
    for (std::size_t c = 0; c < ids.size(); ++c)
      for (std::size_t k = 0; k <= c; ++k)  // client c queues c + 1 requests of different sizes per round
        q.push(make(next++, ids[c], 20 + static_cast<std::int64_t>(7 * c + 3 * k)), 0.0);
    for (int k = 0; k < 5 && !q.empty(); ++k) {
      request r = q.pop(0.0);
      q.on_admit(r);
      q.on_tokens(r, 3 + r.prompt_tokens % 5);
      q.on_finish(r, 3 + r.prompt_tokens % 5);
      order.push_back(r.id.value());
    }
    if (copy_midway && round == 2) {
      Q copy = q;                     // the copy serves what the original would have...
      const auto rest = drain(copy);  // ...and draining it leaves the original untouched
      CHECK(copy.empty());
      CHECK(q.size() == rest.size());
    }
  }
  const auto rest = drain(q);
  order.insert(order.end(), rest.begin(), rest.end());
  return order;
}

TEMPLATE_TEST_CASE("fair queues serve small, large and mixed client ids alike", "[sched][queue]", vtc_queue, wfq_queue,
                   drr_queue) {
  const std::vector<std::uint32_t> small{0, 1, 2, 3};
  const auto expected = serve_mixed<TestType>(small, false);
  CHECK(serve_mixed<TestType>({7, 65535, 65536, 4000000000u}, false) == expected);  // both sides of 2^16
  CHECK(serve_mixed<TestType>({70000, 80000, 90000, 100000}, false) == expected);   // hashed only
  CHECK(serve_mixed<TestType>(small, true) == expected);                            // copies are values
  TestType q;
  const request stranger = make(1, 123456, 10);
  CHECK_THROWS_AS(q.on_admit(stranger), weft::error);  // an id never queued is unknown in either range
  CHECK_THROWS_AS(q.on_admit(make(2, 5, 10)), weft::error);
}

#include "../job_secret.hpp"
#include "in_process_member.hpp"

#include <weft/comm/elastic.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace we = weft::comm::elastic;
using namespace std::chrono_literals;

namespace {

// A member's model: a vector and a revision; each step adds the allreduced per-member gradient.
using model = weft_test::elastic_model;

we::group_options member(const we::coordinator& c, std::string name) {
  return weft_test::member_options(c, std::move(name), 3s, 3s, 10s);
}

// One deterministic step: every member contributes a gradient that depends on its name and the
// shared revision; the sum is the same bits everywhere, so the states stay identical.
void step(we::elastic_group& g, model& m) {
  std::vector<float> grad(m.w.size());
  const auto salt = static_cast<float>(std::hash<std::string>{}(g.name()) % 7);
  for (std::size_t i = 0; i < grad.size(); ++i)
    grad[i] = 0.01f * (salt + static_cast<float>((i + m.state.revision()) % 5)) - m.w[i] * 0.001f;
  g.allreduce(std::span<float>(grad));
  for (std::size_t i = 0; i < grad.size(); ++i) m.w[i] += grad[i];
  m.state.advance();
}

// Runs `steps` steps, re-syncing after every failure (a member left or died), for at most 30 s.
void run_steps(we::elastic_group& g, model& m, int steps,
               const std::function<void(const we::epoch_info&, int)>& seen = {}) {
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  for (int done = 0; done < steps && std::chrono::steady_clock::now() < give_up;) {
    try {
      const auto info = g.sync();
      if (seen) seen(info, done);
      step(g, m);
      ++done;
      std::this_thread::sleep_for(5ms);
    } catch (const weft::error&) {
    }
  }
}

}  // namespace

TEST_CASE("members join, newcomers pull the state, leaves are graceful or abrupt", "[comm][elastic]") {
  we::coordinator_options co;
  co.min_members = 3;
  co.heartbeat_timeout = 1s;
  we::coordinator coord(co);
  coord.start();
  std::mutex mu;
  std::map<std::uint64_t, std::set<std::uint64_t>> hashes;  // revision -> hashes held after a sync
  std::atomic<bool> stop{false};
  std::atomic<int> pulled{0};
  auto run = [&](std::string name, int steps, bool crash_at_end) {
    model m;
    we::elastic_group g(m.state, member(coord, name));
    int done = 0;
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    while (done < steps && !stop && std::chrono::steady_clock::now() < give_up) {
      try {
        const auto info = g.sync();
        if (info.pulled_state) ++pulled;
        {
          // After sync() the state is the majority's: this is the state every live member holds.
          std::lock_guard lock(mu);
          hashes[m.state.revision()].insert(m.state.hash());
        }
        step(g, m);
        ++done;
        std::this_thread::sleep_for(10ms);
      } catch (const weft::error& e) {
        (void)e;  // a member changed under us: the next sync() rebuilds
      }
    }
    if (crash_at_end) g.crash();
  };
  std::vector<std::thread> threads;
  threads.emplace_back(run, "a", 60, false);
  threads.emplace_back(run, "b", 60, false);
  threads.emplace_back(run, "c", 10, false);  // leaves gracefully after 10 steps
  while (coord.epoch() < 1) std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(150ms);
  threads.emplace_back(run, "d", 15, true);  // joins late, crashes (abruptly) after 15 steps
  for (auto& t : threads) t.join();
  coord.stop();
  CHECK(pulled >= 1);  // d pulled the state when it joined
  for (const auto& [rev, hs] : hashes) {
    INFO("revision " << rev);
    CHECK(hs.size() == 1);  // every member that finished this revision holds the same bits
  }
  const auto events = coord.events();
  auto has = [&](const std::string& s) {
    for (const auto& e : events)
      if (e.find(s) != std::string::npos) return true;
    return false;
  };
  CHECK(has("admitted d"));
  CHECK(has("c dropped: left gracefully"));
  CHECK(coord.epoch() >= 3);
}

TEST_CASE("joining with a different state shape or dtype is refused with a clear error", "[comm][elastic][errors]") {
  we::coordinator coord(we::coordinator_options{});
  coord.start();
  model m;
  we::elastic_group first(m.state, member(coord, "first"));
  first.sync();  // the first epoch's members fix the spec (none was configured)
  std::vector<float> other(65);
  we::shared_state wrong_shape;
  wrong_shape.add("w", std::span<float>(other));
  try {
    we::elastic_group g(wrong_shape, member(coord, "second"));
    FAIL("a member with another shape joined");
  } catch (const weft::error& e) {
    const std::string what = e.what();
    CHECK(what.find("state spec 'w:f32[65]' of peer second differs from the group's") != std::string::npos);
    CHECK(what.find("f32[64]") == std::string::npos);  // the group's spec is never disclosed in a refusal
  }
  std::vector<double> dbl(64);
  we::shared_state wrong_type;
  wrong_type.add("w", std::span<double>(dbl));
  try {
    we::elastic_group g(wrong_type, member(coord, "third"));
    FAIL("a member with f64 state joined an f32 group");
  } catch (const weft::error& e) {
    CHECK(e.code() == weft::errc::mismatch);
    CHECK(std::string(e.what()).find("w:f64[64]") != std::string::npos);
  }
  CHECK_THROWS_WITH(we::elastic_group(m.state, member(coord, "first")), Catch::Contains("the name 'first' is taken"));
  we::shared_state empty;
  CHECK_THROWS_WITH(we::elastic_group(empty, member(coord, "x")), Catch::Contains("no tensors"));
  std::vector<float> v(6);
  we::shared_state s;
  CHECK_THROWS_WITH(s.add("m", std::span<float>(v), {2, 2}), Catch::Contains("has 6 elements but its shape holds 4"));
  s.add("m", std::span<float>(v), {2, 3});
  CHECK_THROWS_AS(s.add("m", std::span<float>(v)), weft::error);
  CHECK(s.spec() == "m:f32[2x3]");
  we::coordinator_options bad;
  bad.min_members = 0;
  CHECK_THROWS_WITH(we::coordinator(bad), Catch::Contains("min_members 0"));
  coord.stop();
}

TEST_CASE("a join waits until every member agrees", "[comm][elastic]") {
  we::coordinator_options co;
  co.min_members = 2;
  we::coordinator coord(co);
  coord.start();
  std::atomic<int> phase{0};
  std::atomic<int> size_seen_by_c{0};
  std::atomic<int> veto_broken{0};  // (Catch assertions stay on the main thread: Catch is not thread-safe)
  auto run = [&](std::string name, bool veto_first) {
    model m;
    we::elastic_group g(m.state, member(coord, name));
    g.set_accept_joins(!veto_first);
    run_steps(g, m, 40, [&](const we::epoch_info& info, int s) {
      if (phase >= 1 && s >= 20) g.set_accept_joins(true);
      if (phase == 1 && s < 20 && info.size != 2) ++veto_broken;  // the veto must hold c out
    });
  };
  std::thread a(run, "a", true), b(run, "b", false);
  while (coord.epoch() < 1) std::this_thread::sleep_for(5ms);
  std::thread c([&] {
    model m;
    we::elastic_group g(m.state, member(coord, "c"));
    phase = 1;
    run_steps(g, m, 5, [&](const we::epoch_info& info, int s) {
      if (s == 0) size_seen_by_c = info.size;  // admitted only once a lifts its veto
    });
  });
  a.join();
  b.join();
  c.join();
  coord.stop();
  CHECK(size_seen_by_c == 3);
  CHECK(veto_broken == 0);
}

TEST_CASE("ring order planned from bandwidth crosses the slow links only twice", "[comm][elastic]") {
  // Members 0,2,4 share a fast switch, 1,3,5 another; across them bandwidth is 10x lower.
  we::bandwidth_matrix bw(6, std::vector<double>(6, 0));
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j)
      if (i != j) bw[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] = (i % 2 == j % 2) ? 10e9 : 1e9;
  const std::vector<int> naive{0, 1, 2, 3, 4, 5};
  const auto planned = we::plan_ring(bw);
  int slow = 0;
  for (std::size_t i = 0; i < 6; ++i) slow += planned[i] % 2 != planned[(i + 1) % 6] % 2;
  CHECK(slow == 2);
  CHECK(we::ring_cost(bw, planned) < we::ring_cost(bw, naive) / 2);
  CHECK(planned.front() == 0);
  CHECK_THROWS_WITH(we::plan_ring({{0, 1}, {0, 0}}), Catch::Contains("must be positive"));

  // The coordinator applies the plan to the epoch's ring order.
  we::coordinator_options co;
  co.min_members = 4;
  co.ring_planner = [](const std::vector<std::string>& names) {
    we::bandwidth_matrix m(names.size(), std::vector<double>(names.size()));
    for (std::size_t i = 0; i < names.size(); ++i)
      for (std::size_t j = 0; j < names.size(); ++j)
        m[i][j] = names[i][0] == names[j][0] ? 10e9 : 1e9;  // same first letter: same switch
    return we::plan_ring(m);
  };
  we::coordinator coord(co);
  coord.start();
  std::vector<std::thread> ts;
  std::mutex mu;
  std::vector<std::string> order;
  bool measured_ok = true;
  for (const char* n : {"x1", "y1", "x2", "y2"})
    ts.emplace_back([&, name = std::string(n)] {
      model m;
      we::elastic_group g(m.state, member(coord, name));
      const auto info = g.sync();
      auto bwm = we::measure_bandwidth(g.transport(), 1 << 16);
      std::lock_guard lock(mu);
      measured_ok = measured_ok && bwm.size() == 4 && bwm[0][1] > 0 && bwm[3][2] > 0;
      order = info.members;
    });
  for (auto& t : ts) t.join();
  coord.stop();
  CHECK(measured_ok);
  REQUIRE(order.size() == 4);
  int crossings = 0;
  for (std::size_t i = 0; i < 4; ++i) crossings += order[i][0] != order[(i + 1) % 4][0];
  CHECK(crossings == 2);
}

TEST_CASE("state hash covers revision and bytes; a mismatching pull is detected", "[comm][elastic]") {
  model a, b;
  CHECK(a.state.hash() == b.state.hash());
  b.w[3] = 1e-30f;
  CHECK(a.state.hash() != b.state.hash());
  b.w[3] = 0;
  b.state.advance();
  CHECK(a.state.hash() != b.state.hash());
  CHECK(weft::hash_bytes(std::span<const std::byte>{}, 1) != weft::hash_bytes(std::span<const std::byte>{}, 2));
}

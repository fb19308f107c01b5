// The schedulers' contract: duplicate ids are refused at submit; complete() checks its input and
// names the request and the rule; and every public call either succeeds or throws leaving the
// scheduler and its KV manager exactly as they were — checked by a KV manager that fails on its k-th
// call, for every k, at every call of a whole run (submit, schedule, complete with tokens in and out of
// entry order, fork, migrate_out, cancel), whose trace must then equal an unfailed run's
// (iteration_scheduler and prefill_first_scheduler; with and without verify on hit).
#include "harness.hpp"

#include <weft/kv/kv_manager.hpp>
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/layered_prefill.hpp>
#include <weft/sched/prefill_first_scheduler.hpp>
#include <weft/sched/vtc_queue.hpp>

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

using namespace weft::sched;
namespace wk = weft::kv;

namespace {

// Counts the KV manager calls and throws weft::error on the k-th one after arm(k).
struct fault_control {
  long countdown = 0;
  long calls = 0;
  long injected = 0;
  void tick() {
    ++calls;
    if (countdown > 0 && --countdown == 0) {
      ++injected;
      throw weft::error(weft::errc::aborted, "faulty_kv", "injected failure");
    }
  }
};

// weft::kv::kv_manager behind a wrapper that can fail any call (queries included) before it runs.
struct faulty_kv {
  wk::kv_manager<> inner;
  std::shared_ptr<fault_control> ctl = std::make_shared<fault_control>();

  std::size_t block_size() const { return inner.block_size(); }
  std::size_t usable_blocks() const { return inner.usable_blocks(); }
  std::size_t free_blocks() const { return inner.free_blocks(); }
  std::size_t bytes_per_block() const { return inner.bytes_per_block(); }
  std::size_t cached_prefix_tokens(std::span<const token_id> t, const wk::request_options& o) const {
    ctl->tick();
    return inner.cached_prefix_tokens(t, o);
  }
  std::optional<wk::prompt_allocation> allocate_prompt(request_id id, std::span<const token_id> t,
                                                       const wk::request_options& o, std::size_t slots) {
    ctl->tick();
    return inner.allocate_prompt(id, t, o, slots);
  }
  std::optional<wk::prompt_allocation> allocate_prompt(request_id id, std::size_t n, const wk::request_options& o,
                                                       std::size_t slots) {
    ctl->tick();
    return inner.allocate_prompt(id, n, o, slots);
  }
  wk::append_result grow(request_id id, std::size_t n) {
    ctl->tick();
    return inner.grow(id, n);
  }
  wk::append_result append(request_id id, std::span<const token_id> t) {
    ctl->tick();
    return inner.append(id, t);
  }
  void computed(request_id id, std::size_t n) {
    ctl->tick();
    inner.computed(id, n);
  }
  bool fork(request_id p, request_id c) {
    ctl->tick();
    return inner.fork(p, c);
  }
  void free(request_id id) {
    ctl->tick();
    inner.free(id);
  }
  std::optional<wk::swap_plan> swap_out(request_id id) {
    ctl->tick();
    return inner.swap_out(id);
  }
  std::optional<wk::swap_plan> swap_in(request_id id) {
    ctl->tick();
    return inner.swap_in(id);
  }
  std::span<const wk::block_id> blocks(request_id id) const {
    ctl->tick();
    return inner.blocks(id);
  }
  std::span<const token_id> tokens(request_id id) const {
    ctl->tick();
    return inner.tokens(id);
  }
  void begin_transaction() { inner.begin_transaction(); }
  void commit_transaction() { inner.commit_transaction(); }
  void rollback_transaction() { inner.rollback_transaction(); }
};
static_assert(kv_manager<faulty_kv>);

using sched_t = iteration_scheduler<vtc_queue, faulty_kv>;
using baseline_t = prefill_first_scheduler<vtc_queue, faulty_kv>;
using layered_faulty_t = layered_prefill_scheduler<vtc_queue, faulty_kv>;

// Keyed with a fixed secret, so two runs' block keys can be compared.
faulty_kv make_kv(std::size_t blocks, std::size_t host, bool verify_on_hit) {
  wk::kv_config c;
  c.num_blocks = blocks + 1;
  c.host_blocks = host == 0 ? 0 : host + 1;
  c.block_size = 4;
  c.watermark = 0.0;
  c.max_copy_unit_blocks = 3;
  c.verify_on_hit = verify_on_hit;
  return faulty_kv{wk::kv_manager<>(c, wk::sha256_block_hasher(std::string_view("weft contract test: fixed key")))};
}

std::string describe(const batch& b) {
  std::ostringstream o;
  for (const auto& e : b.entries)
    o << e.id << ':' << e.prefill_tokens << '+' << e.decode_tokens << '@' << e.context_tokens
      << (e.emits_token ? "!" : "") << ' ';
  o << "| copies";
  for (const auto& c : b.copies) {
    o << ' ' << static_cast<int>(c.what) << '/' << c.id << '/';
    if (c.what == kv_copy::kind::copy_on_write) o << c.block;
    for (const auto& u : c.plan.units) o << u;
  }
  o << " | out";
  for (const auto& t : b.swapped_out) o << ' ' << t.id << 'x' << t.blocks << '/' << t.copy_units;
  o << " | in";
  for (const auto& t : b.swapped_in) o << ' ' << t.id << 'x' << t.blocks;
  o << " | rc";
  for (auto id : b.preempted_recompute) o << ' ' << id;
  o << " | ab";
  for (auto id : b.aborted) o << ' ' << id;
  return o.str();
}

// Everything observable about the scheduler and its KV manager: a text, and the key every device and
// host block carries (compared, not printed: a block key need not be printable).
struct state_print {
  std::string text;
  std::vector<std::optional<wk::block_key>> keys;
  bool operator==(const state_print&) const = default;
};

template <class S>
state_print fingerprint(const S& s) {
  state_print out;
  std::ostringstream o;
  const auto& st = s.stats();
  o << s.waiting() << '/' << s.running() << '/' << st.admitted << '/' << st.preempted_recompute << '/'
    << st.preempted_swap << '/' << st.swapped_in << '/' << st.aborted << '/' << st.forked << '/'
    << st.cached_prompt_tokens << '/' << st.readmitted << '/' << st.cancelled << '/' << st.first_admission_prompt_tokens
    << '/' << st.first_admission_cached_tokens << '/' << st.readmission_cached_tokens << " ["
    << describe(s.last_batch()) << "]\n";
  const auto& kv = s.kv().inner;
  std::map<std::uint64_t, std::string> reqs;
  kv.for_each_request([&](request_id id, const wk::block_table& t, bool swapped) {
    std::ostringstream r;
    r << (swapped ? "S " : "R ") << kv.num_tokens(id) << '/' << kv.computed_tokens(id) << " b";
    for (auto b : t.blocks()) r << ' ' << b;
    r << " h";
    for (auto h : kv.host_blocks(id)) r << ' ' << h;
    r << " t";
    for (auto x : kv.tokens(id)) r << ' ' << x;
    reqs[id.value()] = r.str();
  });
  for (const auto& [id, r] : reqs) o << id << ": " << r << '\n';
  o << "free";
  kv.cache().pool().for_each_free([&](wk::block_id b) { o << ' ' << b; });
  for (std::uint32_t b = 1; b < kv.cache().pool().capacity(); ++b)
    out.keys.push_back(kv.cache().key_of(wk::block_id(b)));
  o << "\nhost";
  kv.host_cache()->pool().for_each_free([&](wk::block_id b) { o << ' ' << b; });
  for (std::uint32_t b = 1; b < kv.host_cache()->pool().capacity(); ++b)
    out.keys.push_back(kv.host_cache()->key_of(wk::block_id(b)));
  o << "\nhits " << kv.stats().hit_tokens << '/' << kv.stats().queried_tokens;
  // With verify on hit, a rollback that left a block's stored tokens or fingerprint wrong would show
  // as a collision when the block is hit again (and as a different trace).
  o << "\ncollisions " << kv.cache().collisions() << '/' << kv.host_cache()->collisions();
  out.text = o.str();
  return out;
}

struct workload {
  std::vector<std::vector<token_id>> prompts;
  std::vector<request> reqs;
  std::vector<int> outputs;
};

// Prompts built from two shared system prompts plus private tails, some salted, some counted by
// length only; a KV cache small enough to force preemptions.
workload make_workload(std::uint32_t seed, int n) {
  std::mt19937 rng(seed);
  workload w;
  w.prompts.resize(static_cast<std::size_t>(n));
  const std::vector<token_id> sys_a{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, sys_b{20, 21, 22, 23, 24, 25, 26, 27};
  for (int i = 0; i < n; ++i) {
    auto& p = w.prompts[static_cast<std::size_t>(i)];
    const int kind = static_cast<int>(rng() % 3);
    if (kind == 0) p = sys_a;
    if (kind == 1) p = sys_b;
    for (int k = 1 + static_cast<int>(rng() % 14); k > 0; --k) p.push_back(static_cast<token_id>(100 + rng() % 7));
    request r;
    r.id = request_id(static_cast<std::uint64_t>(i + 1));
    r.client = client_id(static_cast<std::uint32_t>(i % 3));
    r.prompt_tokens = static_cast<std::int64_t>(p.size());
    r.arrival_s = static_cast<double>(i);
    if (rng() % 5 != 0)
      r.prompt = p;  // one in five is counted by length only
    else
      r.counted_by_length = true;
    if (rng() % 6 == 0) r.cache_salt = 77;
    w.reqs.push_back(r);
    w.outputs.push_back(1 + static_cast<int>(rng() % 12));
  }
  return w;
}

struct run_result {
  std::string trace;
  state_print end;
  long injected = 0;
  scheduler_stats stats;
};

// Runs the workload through the scheduler make() returns; with `inject`, every public call is first
// made to fail at its 1st, 2nd, ... KV call (checking that each failure changed nothing) until it
// runs through. Forks and migrations where the scheduler has them. Returns the trace.
template <class Make>
run_result run(const workload& w, Make&& make, bool inject) {
  const auto owned = make();
  auto& s = *owned;
  auto ctl = s.kv().ctl;
  std::ostringstream trace;
  auto attempt = [&](auto&& call) {
    if (!inject) return call();
    for (long k = 1;; ++k) {
      const state_print before = fingerprint(s);
      ctl->countdown = k;
      try {
        auto result = call();
        ctl->countdown = 0;
        return result;
      } catch (const weft::error& e) {
        ctl->countdown = 0;
        REQUIRE(std::string(e.what()).find("injected failure") != std::string::npos);
        REQUIRE(fingerprint(s) == before);
      }
    }
  };
  std::map<request_id, int> left;
  std::map<request_id, int> emitted;
  std::size_t next = 0;
  std::uint64_t next_child = 1000;
  std::vector<request_id> finished;
  std::vector<decoded_token> decoded;
  for (int it = 0; it < 5000 && (next < w.reqs.size() || !s.idle()); ++it) {
    for (int a = 0; a < 2 && next < w.reqs.size(); ++a, ++next) {
      const request& r = w.reqs[next];
      left[r.id] = w.outputs[next];
      trace << "submit " << r.id << ' ' << attempt([&] { return s.submit(r, static_cast<double>(it)); }) << '\n';
    }
    const batch& b = attempt([&]() -> const batch& { return s.schedule(static_cast<double>(it)); });
    trace << it << ": " << describe(b) << '\n';
    finished.clear();
    decoded.clear();
    for (const auto& e : b.entries) {
      if (!e.emits_token) continue;
      decoded.push_back({e.id, weft_test::sampled_token(e.id, ++emitted[e.id])});
      if (--left[e.id] == 0) finished.push_back(e.id);
    }
    if (it % 2 == 1) std::reverse(decoded.begin(), decoded.end());  // matched by id, in any order
    for (auto id : b.aborted) trace << "aborted " << id << '\n';
    attempt([&] {
      s.complete(finished, decoded);
      return 0;
    });
    // Now and then a running request gets a parallel sample, or migrates away.
    if constexpr (requires(request_id id) { s.fork(id, id); })
      if (it % 7 == 3) {
        for (const auto& e : b.entries) {
          if (!e.emits_token || left[e.id] <= 1 || e.id.value() >= 1000) continue;
          const request_id child(next_child++);
          const bool with_ids = !w.reqs[e.id.value() - 1].prompt.empty();
          const bool ok = attempt([&] {
            return with_ids ? s.fork(e.id, child, static_cast<token_id>(child.value() % 97)) : s.fork(e.id, child);
          });
          trace << "fork " << e.id << " -> " << child << ' ' << ok << '\n';
          if (ok) left[child] = left[e.id];
          break;
        }
      }
    if constexpr (requires { s.migrate_out(); })
      if (it % 23 == 11) {
        const auto m = attempt([&] { return s.migrate_out(); });
        if (m) trace << "migrated " << m->req.id << ' ' << m->tokens.size() << '\n';
      }
    // A client goes away now and then: its request is wherever it is (waiting, prefilling, decoding,
    // swapped out, preempted, or gone already).
    if (it % 9 == 4 && next > 0) {
      const request_id victim(static_cast<std::uint64_t>(it * 5) % next + 1);
      const bool ok = attempt([&] { return s.cancel(victim); });
      trace << "cancel " << victim << ' ' << ok << '\n';
    }
  }
  trace << "idle " << s.idle() << '\n';
  return {trace.str(), fingerprint(s), ctl->injected, s.stats()};
}

std::vector<token_id> ids(std::initializer_list<token_id> t) { return t; }

request with_prompt(std::uint64_t id, const std::vector<token_id>& p) {
  request r;
  r.id = request_id(id);
  r.client = client_id(1);
  r.prompt_tokens = static_cast<std::int64_t>(p.size());
  r.prompt = p;
  return r;
}

}  // namespace

TEST_CASE("a request id is refused while the scheduler holds it", "[sched][contract]") {
  iteration_scheduler<> s(chunked_prefill(64, 4), fcfs_queue{}, weft_test::kv_of(64));
  const auto p = ids({1, 2, 3, 4, 5});
  REQUIRE(s.submit(with_prompt(1, p), 0.0));
  CHECK_THROWS_WITH(s.submit(with_prompt(1, p), 0.0),
                    Catch::Contains("request 1 is already in this scheduler") && Catch::Contains("unique"));
  CHECK(s.waiting() == 1);
  s.schedule(0.0);
  CHECK_THROWS_WITH(s.submit(with_prompt(1, p), 0.0), Catch::Contains("already in this scheduler"));
  const request_id one[] = {request_id(1)};
  s.complete(one);  // a request that ends needs no token
  REQUIRE(s.idle());
  CHECK(s.submit(with_prompt(1, p), 0.0));  // finished: the id may be used again
}

TEST_CASE("requests are validated at submit: token spans, media, sizes", "[sched][contract]") {
  iteration_scheduler<> s(chunked_prefill(64, 4), fcfs_queue{}, weft_test::kv_of(64));
  const auto p = ids({1, 2, 3, 4, 5});
  request r = with_prompt(1, p);
  r.prompt_tokens = 6;
  CHECK_THROWS_WITH(s.submit(r, 0.0), Catch::Contains("request 1") && Catch::Contains("5 token ids") &&
                                          Catch::Contains("prompt_tokens is 6"));
  r = with_prompt(1, p);
  const weft::kv::multimodal_item items[] = {{7, 3, 2}, {8, 1, 1}};
  r.media = items;
  CHECK_THROWS_WITH(s.submit(r, 0.0), Catch::Contains("request 1") && Catch::Contains("sorted by offset"));
  const weft::kv::multimodal_item outside[] = {{7, 4, 2}};
  r.media = outside;
  CHECK_THROWS_WITH(s.submit(r, 0.0), Catch::Contains("outside the prompt"));
  r = with_prompt(1, p);
  r.kv_ready_tokens = 2;
  CHECK_THROWS_WITH(s.submit(r, 0.0), Catch::Contains("kv_ready_tokens"));
  request huge;
  huge.id = request_id(2);
  huge.client = client_id(0);
  huge.prompt_tokens = INT64_MAX;  // a trace row can say anything: refused, nothing overflows
  huge.counted_by_length = true;
  CHECK_FALSE(s.submit(huge, 0.0));
  CHECK(s.stats().rejected == 1);
  CHECK(s.idle());
}

TEST_CASE("complete() checks its input, names the request and the rule, and changes nothing", "[sched][contract]") {
  iteration_scheduler<> s(chunked_prefill(8, 4), fcfs_queue{}, weft_test::kv_of(64));
  const auto a = ids({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});  // prefilled in two chunks of 8 and 4
  const auto b = ids({1, 2, 3});
  request counted;
  counted.id = request_id(3);
  counted.client = client_id(2);
  counted.prompt_tokens = 2;
  counted.counted_by_length = true;
  REQUIRE(s.submit(with_prompt(1, a), 0.0));
  REQUIRE(s.submit(with_prompt(2, b), 0.0));
  CHECK_THROWS_WITH(s.complete(std::vector<request_id>{request_id(1)}), Catch::Contains("no batch is in flight"));
  const batch& first = s.schedule(0.0);
  REQUIRE(first.entries.size() == 1);  // request 1's first chunk fills the budget
  CHECK_THROWS_WITH(s.schedule(0.0), Catch::Contains("call complete() before scheduling again"));
  // Request 1 emitted nothing yet (a partial prefill): it cannot finish, and needs no token.
  CHECK_THROWS_WITH(s.complete(std::vector<request_id>{request_id(1)}),
                    Catch::Contains("request 1") && Catch::Contains("emitted no token"));
  s.complete({});
  const batch& second = s.schedule(1.0);
  REQUIRE(second.entries.size() == 2);  // request 1's last 4 tokens, then request 2 (4 of the budget)
  using tokens = std::vector<decoded_token>;
  const request_id r1(1), r2(2);
  CHECK_THROWS_WITH(s.complete({}, tokens{{r2, 5}}),
                    Catch::Contains("request 1 carries token ids") && Catch::Contains("needs its decoded token"));
  CHECK_THROWS_WITH(s.complete({}),
                    Catch::Contains("request 1 carries token ids") && Catch::Contains("needs its decoded token"));
  CHECK_THROWS_WITH(s.complete(std::vector<request_id>{request_id(7)}, tokens{{r1, 5}, {r2, 6}}),
                    Catch::Contains("request 7") && Catch::Contains("not in the last batch"));
  CHECK_THROWS_WITH(s.complete(std::vector<request_id>{r2, r2}, tokens{{r1, 5}, {r2, 6}}),
                    Catch::Contains("request 2 is listed as finished twice"));
  // A token must name a request of the batch, once: another request's id is an error, not an input.
  CHECK_THROWS_WITH(s.complete({}, tokens{{r1, 5}, {r2, 6}, {request_id(9), 7}}),
                    Catch::Contains("request 9 is given a decoded token but is not in the last batch"));
  CHECK_THROWS_WITH(s.complete({}, tokens{{r2, 6}, {r1, 5}, {r2, 6}}),
                    Catch::Contains("request 2 is given two decoded tokens"));
  CHECK(s.kv().computed_tokens(request_id(1)) == 8);  // nothing moved
  // A request that finishes needs no token; the other one's is fed back.
  s.complete(std::vector<request_id>{r2}, tokens{{r1, 42}});
  CHECK(s.kv().num_tokens(request_id(1)) == 12);  // (computed is reported to the KV manager when a block fills)
  CHECK_FALSE(s.kv().contains(request_id(2)));
  REQUIRE(s.submit(counted, 2.0));
  const batch& third = s.schedule(2.0);
  REQUIRE(third.entries.size() == 2);  // request 1 decodes its sampled 42; request 3 (counted) prefills
  CHECK(third.entries[0].token == 42);
  CHECK(third.entries[1].token == -1);
  // A prefill entry that emitted no token takes none (request 1 below); a counted request needs none.
  CHECK_THROWS_WITH(s.complete({}, tokens{{r1, 43}, {request_id(3), 0}, {r1, 43}}),
                    Catch::Contains("request 1 is given two decoded tokens"));
  s.complete({}, tokens{{r1, 43}});
  CHECK(s.kv().tokens(request_id(3)).empty());
  // Finishing publishes request 1's decoded tokens too: its ids reach the KV manager with its last step.
  s.schedule(3.0);
  s.complete(std::vector<request_id>{r1, request_id(3)});
  CHECK(s.idle());
}

TEST_CASE("a KV failure at any call of any public method changes nothing", "[sched][contract][faults]") {
  for (const bool verify : {false, true}) {
    for (const auto mode : {preemption_mode::swap, preemption_mode::recompute}) {
      for (const std::uint32_t seed : {1u, 2u}) {
        CAPTURE(verify, seed, static_cast<int>(mode));
        const workload w = make_workload(seed, 40);
        const auto make = [&] {
          scheduler_options o = chunked_prefill(12, 4);
          o.preemption = mode;
          return std::make_unique<sched_t>(o, vtc_queue{}, make_kv(14, 10, verify));
        };
        const run_result clean = run(w, make, false);
        const run_result faulty = run(w, make, true);
        CAPTURE(faulty.injected);
        CHECK(faulty.injected > 500);        // every KV call of every public call failed once
        CHECK(faulty.trace == clean.trace);  // and the run went on exactly as if nothing had failed
        CHECK(faulty.end == clean.end);
        CHECK(clean.trace.find("idle 1") != std::string::npos);
        CHECK(clean.end.text.find("collisions 0/0") != std::string::npos);  // SHA-256 keys: none
        // The run exercised what can fail: preemptions, prefix hits and forks.
        CHECK(clean.stats.preempted_swap + clean.stats.preempted_recompute > 0);
        if (mode == preemption_mode::swap) CHECK(clean.stats.preempted_swap > 0);
        CHECK(clean.stats.cached_prompt_tokens > 0);
        CHECK(clean.stats.forked > 0);
        CHECK(clean.stats.cancelled > 0);
      }
    }
  }
}

TEST_CASE("every phase: a KV failure at any call of any public method changes nothing",
          "[sched][contract][faults][phase]") {
  // vLLM v0's and layered prefill's phases of the one scheduler, with recompute and swap preemption,
  // forks, migrations and cancellations: what the stall-free phase does above, the same way.
  for (const bool layered : {false, true}) {
    for (const auto mode : {preemption_mode::recompute, preemption_mode::swap}) {
      for (const bool verify : {false, true}) {
        for (const std::uint32_t seed : {1u, 2u}) {
          CAPTURE(layered, static_cast<int>(mode), verify, seed);
          const workload w = make_workload(seed, 40);
          const auto run_with = [&](auto make) {
            const run_result clean = run(w, make, false);
            const run_result faulty = run(w, make, true);
            CAPTURE(faulty.injected);
            CHECK(faulty.injected > 300);
            CHECK(faulty.trace == clean.trace);
            CHECK(faulty.end == clean.end);
            CHECK(clean.trace.find("idle 1") != std::string::npos);
            CHECK(clean.end.text.find("collisions 0/0") != std::string::npos);
            CHECK(clean.stats.preempted_recompute + clean.stats.preempted_swap > 0);
            if (mode == preemption_mode::swap) CHECK(clean.stats.preempted_swap > 0);
            CHECK(clean.stats.cached_prompt_tokens > 0);
            CHECK(clean.stats.forked > 0);
            CHECK(clean.stats.cancelled > 0);
            CHECK(clean.trace.find("migrated") != std::string::npos);
          };
          if (layered) {
            run_with([&] {
              layered_prefill_options o = layered_prefill(4, 2, 32, 4);
              o.preemption = mode;
              return std::make_unique<layered_faulty_t>(o, vtc_queue{}, make_kv(14, 10, verify));
            });
          } else {
            run_with([&] {
              prefill_first_options o = vllm_baseline(4, 32);
              o.watermark = 0.0;
              o.preemption = mode;
              return std::make_unique<baseline_t>(o, vtc_queue{}, make_kv(14, 10, verify));
            });
          }
        }
      }
    }
  }
}

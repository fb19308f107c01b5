// Archetypes: the weakest types satisfying each weft::coding concept, run through the algorithms
// that take them (encode, aggregate, sequential_coder, gc_scheme, SR-SGC, M-SGC, any_gradient_code,
// simulate_runtime, a user-written backup policy).
#include <weft/coding/aggregator.hpp>
#include <weft/coding/any_gradient_code.hpp>
#include <weft/coding/backup_workers.hpp>
#include <weft/coding/codec.hpp>
#include <weft/coding/concepts.hpp>
#include <weft/coding/gc_scheme.hpp>
#include <weft/coding/linear_code.hpp>
#include <weft/coding/m_sgc.hpp>
#include <weft/coding/sequential.hpp>
#include <weft/coding/sgc_search.hpp>
#include <weft/coding/sr_sgc.hpp>

#include <catch2/catch.hpp>

#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace {

// A two-worker repetition code written from scratch: both workers hold the one partition.
struct minimal_code_body {
  std::vector<std::size_t> held{0};
  std::size_t n_partitions() const { return 1; }
  std::size_t stragglers() const { return 1; }
  std::span<const std::size_t> assignment(std::size_t) const { return held; }
  double coefficient(std::size_t, std::size_t) const { return 1.0; }
  std::shared_ptr<const weft::coding::decoder> try_decoder(std::span<const std::size_t> f) const {
    if (f.empty()) return nullptr;
    auto d = std::make_shared<weft::coding::decoder>();
    d->survivors = {f[0]};
    d->weights = {1.0};
    return d;
  }
};
struct minimal_code : minimal_code_body {
  std::size_t num_workers() const { return 2; }
};
// A model written before num_workers(): still a gradient_code while n_workers() is deprecated.
struct legacy_code : minimal_code_body {
  std::size_t n_workers() const { return 2; }
};

// A channel that replays a fixed queue and records cancellations.
struct minimal_channel {
  std::deque<weft::coding::coded_message> queue;
  std::vector<std::size_t> cancelled;
  std::optional<weft::coding::coded_message> receive(std::chrono::steady_clock::time_point) {
    if (queue.empty()) return std::nullopt;
    auto m = queue.front();
    queue.pop_front();
    return m;
  }
  void cancel(std::size_t w, std::uint64_t) { cancelled.push_back(w); }
};

// The weakest sequential scheme: T = 0, leaves any straggler behind, every job decodes from worker
// 0 alone (a toy, not a code: it only shows what simulate_runtime needs).
struct minimal_scheme {
  std::vector<std::vector<weft::coding::mini_task>> plan{{}};
  std::uint64_t r = 0;
  std::size_t num_workers() const { return 1; }
  std::size_t delay() const { return 0; }
  double normalized_load() const { return 1.0; }
  bool tolerates(std::span<const std::size_t>) const { return true; }
  const std::vector<std::vector<weft::coding::mini_task>>& begin_round(bool start) {
    plan[0].clear();
    if (start) plan[0].push_back({r, 0});
    return plan;
  }
  weft::coding::sequential_round_report end_round(std::span<const std::size_t>) {
    weft::coding::sequential_round_report rep;
    rep.round = r;
    if (!plan[0].empty()) rep.decoded.push_back({r, r, {}});
    ++r;
    return rep;
  }
};

// A user-written backup policy: drop one worker once any latency exceeded a threshold.
struct threshold_backup {
  bool slow_seen = false;
  void observe(std::span<const double> l) {
    for (double x : l) slow_seen = slow_seen || x > 1.0;
  }
  std::size_t backups(std::size_t) const { return slow_seen ? 1 : 0; }
};

}  // namespace

static_assert(weft::coding::gradient_code<minimal_code>);
static_assert(weft::coding::coded_channel<minimal_channel>);
static_assert(weft::coding::backup_policy<threshold_backup>);
static_assert(weft::coding::sequential_scheme<minimal_scheme>);
static_assert(weft::coding::sequential_scheme<weft::coding::sr_sgc<minimal_code>>);
static_assert(weft::coding::sequential_scheme<weft::coding::m_sgc<minimal_code>>);
static_assert(weft::coding::gradient_code<weft::coding::any_gradient_code>);
static_assert(!weft::coding::gradient_code<int>);

TEST_CASE("archetypes run through encode, aggregate and sequential_coder", "[coding][archetype]") {
  minimal_code code;
  const std::vector<float> g{1.5f, -2};
  std::vector<float> msg(2);
  const std::array<std::span<const float>, 1> parts{g};
  weft::coding::encode(code, 1, parts, msg);
  CHECK(msg == g);

  minimal_channel ch;
  ch.queue.push_back({1, 7, {1.5f, -2}});
  std::vector<float> out(2);
  auto r = weft::coding::aggregate(code, ch, 7, out, std::chrono::steady_clock::now());
  REQUIRE(r.has_value());
  CHECK(out == g);
  CHECK(ch.cancelled == std::vector<std::size_t>{0});

  minimal_channel empty;
  auto t = weft::coding::aggregate(code, empty, 8, out, std::chrono::steady_clock::now());
  CHECK_FALSE(t.has_value());
  CHECK(t.error().code == weft::errc::timeout);

  weft::coding::sequential_coder<minimal_code> seq({code}, 0);
  seq.begin_round();
  const std::vector<std::size_t> fin{0};
  CHECK(seq.end_round(fin).decoded == std::vector<std::uint64_t>{0});

  threshold_backup p;
  const std::vector<double> lat{0.5, 2.0};
  p.observe(lat);
  CHECK(p.backups(2) == 1);
}

TEST_CASE("the minimal code runs through the sequential schemes and any_gradient_code", "[coding][archetype]") {
  minimal_code code;
  // Classical GC, SR-SGC (B = 1, W = 2, lambda = 2: s = 1) and M-SGC (lambda = 1) on the 2-worker code.
  weft::coding::gc_scheme<minimal_code> gc(code);
  gc.begin_round();
  const std::vector<std::size_t> one{1};
  const auto g = gc.end_round(one);
  REQUIRE(g.decoded.size() == 1);
  CHECK(g.decoded[0].terms.size() == 1);
  weft::coding::sr_sgc<minimal_code> sr({2, 1, 2, 2}, code);
  sr.begin_round();
  CHECK(sr.end_round(one).decoded.size() == 1);
  weft::coding::m_sgc<minimal_code> ms({2, 1, 2, 1}, code);
  ms.begin_round();
  CHECK(ms.end_round(one).decoded.empty());  // T = 1: D2 comes in the next round
  ms.begin_round(false);
  const auto r = ms.end_round({});
  REQUIRE(r.decoded.size() == 1);
  // Type-erased: the same answers through any_gradient_code, which copies share.
  const weft::coding::any_gradient_code any(code);
  const auto copy = any;
  CHECK(copy.num_workers() == 2);
  CHECK(copy.stragglers() == 1);
  CHECK(copy.coefficient(1, 0) == 1.0);
  CHECK(copy.name() == "custom");
  const std::vector<std::size_t> f{1};
  CHECK(copy.try_decoder(f)->survivors == std::vector<std::size_t>{1});
  std::vector<float> msg(2);
  const std::vector<float> part{3, 4};
  const std::array<std::span<const float>, 1> parts{part};
  weft::coding::encode(copy, 0, parts, msg);
  CHECK(msg == part);
  // The minimal scheme through the runtime simulator.
  minimal_scheme scheme;
  const weft::coding::delay_trace t(3, 1, {1.0, 2.0, 3.0});
  weft::coding::runtime_options o;
  o.compute_seconds = 0;
  const auto rep = weft::coding::simulate_runtime(scheme, t, 3, o);
  CHECK(rep.seconds == Approx(6.0));
  CHECK(rep.decoded == 3);
}

TEST_CASE("make_gradient_code builds every built-in code by name", "[coding][archetype]") {
  using weft::coding::make_gradient_code;
  for (const char* name : {"fractional", "cyclic", "cyclic-random", "hybrid", "approximate"}) {
    const auto c = make_gradient_code(name, 6, 1);
    INFO(name);
    CHECK(c.num_workers() == 6);
    const std::vector<std::size_t> f{0, 1, 2, 3, 4};
    CHECK(c.try_decoder(f) != nullptr);
  }
  CHECK(make_gradient_code("hybrid", 6, 1).name() == "hybrid_repetition(n=6,s=1)");
  // The kind passes through the type erasure, so aggregate treats a run-time approximate code as one.
  CHECK(make_gradient_code("hybrid", 6, 1).kind() == weft::coding::code_kind::exact);
  CHECK(make_gradient_code("approximate", 6, 1).kind() == weft::coding::code_kind::approximate);
  static_assert(weft::coding::reports_code_kind<weft::coding::any_gradient_code>);
  CHECK(make_gradient_code("uncoded", 4, 0).stragglers() == 0);
  CHECK_THROWS_WITH(make_gradient_code("uncoded", 4, 1), Catch::Matchers::Contains("tolerates no stragglers"));
  CHECK_THROWS_WITH(make_gradient_code("raptor", 4, 1),
                    Catch::Matchers::Contains("unknown code 'raptor'") && Catch::Matchers::Contains("hybrid"));
  CHECK_THROWS_WITH(make_gradient_code("fractional", 5, 1), Catch::Matchers::Contains("(s+1) | n"));
}

static_assert(weft::coding::gradient_code<legacy_code>);
static_assert(!weft::coding::counts_workers<minimal_code_body>);

TEST_CASE("a model with the deprecated n_workers() still runs, and the old name still answers", "[coding][archetype]") {
  const weft::coding::gc_scheme<legacy_code> scheme{legacy_code{}};
  CHECK(scheme.num_workers() == 2);
  const weft::coding::any_gradient_code any(legacy_code{});
  CHECK(any.num_workers() == 2);
  const auto code = weft::coding::make_gradient_code("cyclic", 5, 1);
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
  CHECK(code.n_workers() == code.num_workers());
  CHECK(scheme.n_workers() == 2);
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
}

// The optional hooks kind() and name(): detected by reports_code_kind / reports_code_name, with or
// without the opt-in; a misspelled hook without the opt-in is (as before) not detected and never
// called, and with the opt-in it is a compile error (compile_fail/misspelled_kind.cpp, ctest
// coding.misspelled_hook).
namespace {

// Each code counts the calls of its hook (shared, so the copies aggregate and any_gradient_code make
// still report).
struct kind_code : minimal_code {
  static constexpr bool provides_kind = true;
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  weft::coding::code_kind kind() const {
    ++*calls;
    return weft::coding::code_kind::exact;
  }
};
struct kind_code_without_opt_in : minimal_code {  // user codes written before the opt-in
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  weft::coding::code_kind kind() const {
    ++*calls;
    return weft::coding::code_kind::exact;
  }
};
struct misspelled_kind_code : minimal_code {  // "kidn": never called, as before the concept
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  weft::coding::code_kind kidn() const {
    ++*calls;
    return weft::coding::code_kind::exact;
  }
};
struct named_code : minimal_code {
  static constexpr bool provides_name = true;
  std::string name() const { return "two-way repetition"; }
};
struct named_code_without_opt_in : minimal_code {
  const char* name() const { return "legacy"; }
};
struct misspelled_name_code : minimal_code {  // "nmae": any_gradient_code says "custom"
  std::string nmae() const { return "misspelled"; }
};
struct opted_out_code : minimal_code {  // provides_* = false: no check, no hook
  static constexpr bool provides_kind = false;
  static constexpr bool provides_name = false;
};

}  // namespace

static_assert(weft::coding::reports_code_kind<kind_code>);
static_assert(weft::coding::reports_code_kind<kind_code_without_opt_in>);
static_assert(weft::coding::reports_code_kind<weft::coding::linear_code>);
static_assert(!weft::coding::reports_code_kind<misspelled_kind_code>);
static_assert(!weft::coding::reports_code_kind<opted_out_code>);
static_assert(!weft::coding::reports_code_kind<minimal_code>);
static_assert(weft::coding::reports_code_name<named_code>);
static_assert(weft::coding::reports_code_name<named_code_without_opt_in>);
static_assert(weft::coding::reports_code_name<weft::coding::linear_code>);
static_assert(weft::coding::reports_code_name<weft::coding::any_gradient_code>);
static_assert(!weft::coding::reports_code_name<misspelled_name_code>);
static_assert(!weft::coding::reports_code_name<opted_out_code>);
static_assert(weft::coding::gradient_code<misspelled_kind_code> && weft::coding::gradient_code<misspelled_name_code>);

namespace {
template <class Code>
int kind_calls_of_one_aggregate(const Code& code) {
  minimal_channel ch;
  ch.queue.push_back({1, 7, {1.5f, -2}});
  std::vector<float> out(2);
  const auto r = weft::coding::aggregate(code, ch, 7, out, std::chrono::steady_clock::now());
  REQUIRE(r.has_value());
  CHECK(out == std::vector<float>{1.5f, -2});
  return *code.calls;
}
}  // namespace

TEST_CASE("aggregate asks kind() of a code that has the hook, never a misspelled one", "[coding][archetype]") {
  CHECK(kind_calls_of_one_aggregate(kind_code{}) == 1);
  CHECK(kind_calls_of_one_aggregate(kind_code_without_opt_in{}) == 1);
  CHECK(kind_calls_of_one_aggregate(misspelled_kind_code{}) == 0);
}

TEST_CASE("any_gradient_code reports name() of a code that has the hook, never a misspelled one",
          "[coding][archetype]") {
  CHECK(weft::coding::any_gradient_code(named_code{}).name() == "two-way repetition");
  CHECK(weft::coding::any_gradient_code(named_code_without_opt_in{}).name() == "legacy");
  CHECK(weft::coding::any_gradient_code(misspelled_name_code{}).name() == "custom");
  CHECK(weft::coding::any_gradient_code(opted_out_code{}).name() == "custom");
}

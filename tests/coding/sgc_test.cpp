// Sequential gradient coding as Krishnan, Ebrahimi, Khisti (ICLR 2023) define it: the
// (B, W, lambda)-bursty straggler model, SR-SGC and M-SGC. Properties: every job decodes within its
// deadline for every conforming straggler pattern (exhaustively for small n, W, B, lambda; random
// patterns for larger n), the decoded gradient is the true one, and a pattern outside the model
// yields reported misses, never a wrong gradient.
#include <weft/coding/detail/random.hpp>
#include <weft/coding/gc_scheme.hpp>
#include <weft/coding/m_sgc.hpp>
#include <weft/coding/sr_sgc.hpp>
#include <weft/coding/straggler_model.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

using namespace weft::coding;
using Catch::Matchers::Contains;

namespace {

using pattern = std::vector<std::vector<std::size_t>>;

// Random partial gradients g[job][partition] (dim 2) and the results workers would send.
struct gradients {
  static constexpr std::size_t dim = 2;
  std::size_t parts;
  std::map<std::uint64_t, std::vector<double>> g;  // job -> parts * dim
  explicit gradients(std::size_t partitions) : parts(partitions) {}
  const std::vector<double>& of(std::uint64_t job) {
    auto it = g.find(job);
    if (it != g.end()) return it->second;
    weft::coding::detail::rng gen(job * 7919 + 1);
    std::vector<double> v(parts * dim);
    for (auto& x : v) x = gen.normal();
    return g.emplace(job, std::move(v)).first->second;
  }
};

// Decodes job d from its terms with the results computed from the scheme's piece definitions, and
// compares with the true sum over partitions.
template <class S>
void check_decoded(const S& s, gradients& grads, const decoded_job& d) {
  REQUIRE_FALSE(d.terms.empty());
  const auto& g = grads.of(d.job);
  double got[gradients::dim] = {0, 0}, want[gradients::dim] = {0, 0};
  for (std::size_t p = 0; p < s.n_partitions(); ++p)
    for (std::size_t e = 0; e < gradients::dim; ++e) want[e] += g[p * gradients::dim + e];
  for (const job_term& t : d.terms) {
    const auto parts = s.piece_partitions(t.worker, t.piece);
    const auto coef = s.piece_coefficients(t.worker, t.piece);
    for (std::size_t i = 0; i < parts.size(); ++i)
      for (std::size_t e = 0; e < gradients::dim; ++e) got[e] += t.weight * coef[i] * g[parts[i] * gradients::dim + e];
  }
  for (std::size_t e = 0; e < gradients::dim; ++e) CHECK(got[e] == Approx(want[e]).epsilon(1e-9).margin(1e-9));
}

// Runs one round and records outcomes; returns false when a job was missed.
template <class S>
struct runner {
  S scheme;
  gradients grads;
  std::uint64_t jobs;  // jobs started in rounds [0, jobs)
  std::set<std::uint64_t> decoded, missed;
  bool check_values;

  runner(S s, std::uint64_t j, bool values)
      : scheme(std::move(s)), grads(scheme.n_partitions()), jobs(j), check_values(values) {}

  void round(const std::vector<std::size_t>& stragglers) {
    const std::uint64_t r = scheme.round();
    const auto& plan = scheme.begin_round(r < jobs);
    // A mini-task names a pending job and a piece that exists.
    for (const auto& tasks : plan)
      for (const auto& t : tasks) {
        CHECK(t.job <= r);
        CHECK(t.piece < scheme.n_pieces());
      }
    const auto rep = scheme.end_round(stragglers);
    for (const auto& d : rep.decoded) {
      CHECK(d.job + scheme.delay() >= r);  // within its deadline
      CHECK(decoded.insert(d.job).second);
      CHECK(missed.count(d.job) == 0);
      if (check_values) check_decoded(scheme, grads, d);
    }
    for (auto m : rep.missed) {
      CHECK(m + scheme.delay() == r);  // reported at its deadline, not before
      CHECK(missed.insert(m).second);
      CHECK(decoded.count(m) == 0);
    }
  }
};

// Every straggler pattern over `rounds` rounds that conforms to the model (depth-first, the scheme
// copied at each branch), checking that no job is ever missed. Returns the number of patterns.
template <class S>
std::size_t exhaustive(const runner<S>& start, const bursty_straggler_model& model, std::size_t rounds) {
  std::size_t leaves = 0;
  struct frame {
    runner<S> run;
    straggler_history history;
  };
  std::vector<frame> stack{{start, straggler_history(model)}};
  const std::size_t n = model.n_workers;
  while (!stack.empty()) {
    frame f = std::move(stack.back());
    stack.pop_back();
    if (f.history.rounds() == rounds) {
      ++leaves;
      REQUIRE(f.run.missed.empty());
      REQUIRE(f.run.decoded.size() == f.run.jobs);
      continue;
    }
    for (std::uint64_t mask = 0; mask < (std::uint64_t{1} << n); ++mask) {
      std::vector<std::size_t> s;
      for (std::size_t w = 0; w < n; ++w)
        if (mask >> w & 1) s.push_back(w);
      if (!f.history.admits(s)) continue;
      frame next = f;
      next.history.push(s);
      next.run.round(s);
      if (!next.run.missed.empty()) {
        FAIL_CHECK("job missed under a conforming pattern");
        return leaves;
      }
      stack.push_back(std::move(next));
    }
  }
  return leaves;
}

// A random pattern that conforms: each round draws stragglers, then drops them one by one (in a
// random order) until the history admits the rest.
pattern conforming_pattern(const bursty_straggler_model& model, std::size_t rounds, double p, std::uint64_t seed) {
  weft::coding::detail::rng gen(seed);
  straggler_history h(model);
  pattern out;
  for (std::size_t r = 0; r < rounds; ++r) {
    std::vector<std::size_t> s;
    for (std::size_t w = 0; w < model.n_workers; ++w)
      if (gen.uniform() < p) s.push_back(w);
    while (!h.admits(s)) s.erase(s.begin() + static_cast<std::ptrdiff_t>(gen.below(s.size())));
    h.push(s);
    out.push_back(std::move(s));
  }
  return out;
}

pattern random_pattern(std::size_t n, std::size_t rounds, double p, std::uint64_t seed) {
  weft::coding::detail::rng gen(seed);
  pattern out(rounds);
  for (auto& s : out)
    for (std::size_t w = 0; w < n; ++w)
      if (gen.uniform() < p) s.push_back(w);
  return out;
}

}  // namespace

TEST_CASE("the bursty model: window, burst and lambda", "[coding][sgc][model]") {
  const bursty_straggler_model m{4, 2, 3, 2};              // n = 4, B = 2, W = 3, lambda = 2
  CHECK(conforms(m, pattern{{0}, {0}, {}, {}}));           // a burst of 2
  CHECK_FALSE(conforms(m, pattern{{0}, {0}, {0}, {}}));    // a burst of 3 > B
  CHECK_FALSE(conforms(m, pattern{{0}, {}, {0}, {}}));     // rounds 0 and 2 span 3 > B within W = 3
  CHECK(conforms(m, pattern{{0}, {}, {}, {0}}));           // 3 rounds apart: different windows
  CHECK(conforms(m, pattern{{0, 1}, {}, {}, {2, 3}}));     // 2 distinct per window
  CHECK_FALSE(conforms(m, pattern{{0, 1}, {}, {2}, {}}));  // 3 distinct in rounds 0..2
  CHECK(conforms(m, pattern{{0, 1}, {}, {}, {2}}));
  straggler_history h(m);
  const std::vector<std::size_t> two{0, 1};
  h.push(two);
  CHECK(h.distinct_in_window() == 2);
  const std::vector<std::size_t> three{2};
  CHECK_FALSE(h.admits(three));
  h.push(three);  // recorded as it is
  CHECK_FALSE(h.conforms());
}

TEST_CASE("parameters outside the paper's constraints are clear errors", "[coding][sgc][errors]") {
  CHECK_THROWS_WITH(validate({4, 3, 3, 1}, "t"), Contains("B = 3") && Contains("1 <= B < W = 3"));
  CHECK_THROWS_WITH(validate({4, 0, 3, 1}, "t"), Contains("B = 0"));
  CHECK_THROWS_WITH(validate({4, 1, 1, 1}, "t"), Contains("W = 1"));
  CHECK_THROWS_WITH(validate({4, 1, 2, 5}, "t"), Contains("lambda = 5 exceeds n = 4"));
  CHECK_THROWS_WITH(validate({0, 1, 2, 0}, "t"), Contains("n = 0"));
  CHECK_THROWS_WITH(make_m_sgc({4, 3, 2, 1}), Contains("weft::coding::make_m_sgc") && Contains("B = 3"));
  CHECK_THROWS_WITH(make_sr_sgc({6, 2, 4, 2}), Contains("B | (W - 1)") && Contains("B = 2") && Contains("W - 1 = 3"));
  CHECK_THROWS_WITH(make_sr_sgc({4, 1, 2, 9}), Contains("lambda = 9 exceeds n = 4"));
  sequential_options tight;
  tight.max_delay = 2;
  CHECK_THROWS_WITH(make_m_sgc({5, 2, 3, 1}, tight), Contains("T = 2 is too small") && Contains("W - 2 + B = 3"));
  CHECK_NOTHROW(make_m_sgc({5, 1, 3, 1}, tight));
  tight.max_delay = 1;
  CHECK_THROWS_WITH(make_sr_sgc({5, 2, 3, 1}, tight), Contains("T = 1 is too small") && Contains("B = 2"));
  // Codes that do not fit the model.
  CHECK_THROWS_WITH(m_sgc<>({5, 1, 2, 2}, hybrid_repetition(5, 1)),
                    Contains("tolerates s = 1") && Contains("lambda = 2"));
  CHECK_THROWS_WITH(m_sgc<>({5, 1, 2, 2}, std::nullopt), Contains("needs a D2 gradient code"));
  CHECK_THROWS_WITH(m_sgc<>({5, 1, 2, 2}, hybrid_repetition(6, 2)), Contains("n = 6") && Contains("model n = 5"));
  CHECK_THROWS_WITH(sr_sgc<>({6, 1, 3, 3}, hybrid_repetition(6, 0)),
                    Contains("needs s >= ceil(B lambda / (W - 1 + B)) = 1"));
  // Straggler sets of the wrong shape.
  auto m = make_m_sgc({4, 1, 2, 1});
  m.begin_round();
  const std::vector<std::size_t> out_of_range{4}, twice{1, 1};
  CHECK_THROWS_WITH(m.end_round(out_of_range), Contains("straggler 4 is out of range for n = 4"));
  CHECK_THROWS_WITH(m.end_round(twice), Contains("straggler 1 appears twice"));
  CHECK_THROWS_WITH(m.begin_round(), Contains("was begun and not ended"));
  CHECK_NOTHROW(m.end_round({}));  // the round stayed open after the bad calls
  CHECK_THROWS_WITH(m.end_round({}), Contains("no round is open"));
  CHECK_THROWS_WITH(m.tolerates(out_of_range), Contains("out of range"));
}

TEST_CASE("normalized loads are the paper's formulas", "[coding][sgc]") {
  for (std::size_t n : {4, 7, 12})
    for (std::size_t w = 2; w <= 5; ++w)
      for (std::size_t b = 1; b < w; ++b)
        for (std::size_t lambda = 0; lambda <= n; ++lambda) {
          const bursty_straggler_model model{n, b, w, lambda};
          const auto ms = make_m_sgc(model, {false, {}});
          const double nd = static_cast<double>(n), bd = static_cast<double>(b), w1 = static_cast<double>(w - 1),
                       l1 = static_cast<double>(lambda + 1);
          const double paper = lambda == n ? (w1 + bd) / (nd * w1) : l1 * (w1 + bd) / (nd * (bd + w1 * l1));
          CHECK(ms.normalized_load() == Approx(paper));
          CHECK(m_sgc_load(model) == Approx(paper));
          CHECK(ms.delay() == w - 2 + b);
          if ((w - 1) % b == 0 && lambda >= 1) {
            const std::size_t s = (b * lambda + w - 2 + b) / (w - 1 + b);  // ceil(B lambda / (W - 1 + B))
            CHECK(sr_sgc_stragglers(model) == s);
            if (s < n) CHECK(make_sr_sgc(model, {false, {}}).normalized_load() == Approx(double(s + 1) / nd));
          }
        }
}

TEST_CASE("M-SGC: a straggler redoes its D1 chunk before its D2 task", "[coding][sgc]") {
  // n = 3, B = 1, W = 2, lambda = 1: each job is one D1 chunk (slot 0) and one D2 task (slot 1), T = 1.
  auto ms = make_m_sgc({3, 1, 2, 1});
  CHECK(ms.n_pieces() == 2);
  const auto& p0 = ms.begin_round();
  CHECK(p0[0] == std::vector<mini_task>{{0, 0}});
  const std::vector<std::size_t> w1{1};
  CHECK(ms.end_round(w1).decoded.empty());
  const auto& p1 = ms.begin_round();
  CHECK(p1[1] == std::vector<mini_task>({{0, 0}, {1, 0}}));  // worker 1 redoes D1 of job 0
  CHECK(p1[0] == std::vector<mini_task>({{0, 1}, {1, 0}}));  // worker 0 runs D2 of job 0
  const auto r1 = ms.end_round({});
  REQUIRE(r1.decoded.size() == 1);  // D2 lost worker 1 (lambda = 1 tolerated)
  CHECK(r1.decoded[0].job == 0);
}

TEST_CASE("SR-SGC: v - s workers reattempt in round t + B", "[coding][sgc]") {
  // n = 4, B = 1, W = 2, lambda = 2: s = ceil(2 / 2) = 1, T = 1.
  auto sr = make_sr_sgc({4, 1, 2, 2});
  CHECK(sr.code().stragglers() == 1);
  sr.begin_round();
  const std::vector<std::size_t> two{1, 3};
  CHECK(sr.end_round(two).decoded.empty());  // 2 of 4 arrived; needs 3
  const auto& p = sr.begin_round();
  CHECK(p[1] == std::vector<mini_task>{{0, 0}});  // v - s = 1 reattempt: the lowest owing worker
  CHECK(p[3] == std::vector<mini_task>{{1, 0}});
  const auto r = sr.end_round({});
  REQUIRE(r.decoded.size() == 2);  // job 0 (3 of 4 now), and job 1, which lost only worker 1 (within s)
  CHECK(r.decoded[0].job == 0);
  CHECK(sr.pending() == 0);
}

TEST_CASE("every job decodes in time under every conforming pattern (exhaustive, small n)", "[coding][sgc][property]") {
  std::size_t patterns = 0;
  for (std::size_t n : {2, 3})
    for (std::size_t w = 2; w <= 4; ++w)
      for (std::size_t b = 1; b < w; ++b)
        for (std::size_t lambda = 0; lambda <= n; ++lambda) {
          const bursty_straggler_model model{n, b, w, lambda};
          INFO("n = " << n << ", B = " << b << ", W = " << w << ", lambda = " << lambda);
          const std::size_t t = w - 2 + b;
          const std::size_t jobs = n == 2 ? 3 : 2, rounds = jobs + t;
          if (n == 3 && lambda == 3 && w == 4) continue;  // covered by n = 2 and the random test
          patterns += exhaustive(runner<m_sgc<>>(make_m_sgc(model), jobs, true), model, rounds);
          if ((w - 1) % b == 0 && lambda >= 1 && sr_sgc_stragglers(model) < n)
            patterns += exhaustive(runner<sr_sgc<>>(make_sr_sgc(model), jobs + 1, true), model, jobs + 1 + b);
        }
  CHECK(patterns > 10000);
}

TEST_CASE("classical GC decodes every job when at most s straggle (exhaustive)", "[coding][sgc][property]") {
  for (std::size_t n : {3, 4})
    for (std::size_t s = 0; s < n; ++s) {
      runner<gc_scheme<linear_code>> run(gc_scheme<linear_code>(hybrid_repetition(n, s)), 3, true);
      for (std::uint64_t mask = 0; mask < (std::uint64_t{1} << n); ++mask) {
        std::vector<std::size_t> st;
        for (std::size_t w = 0; w < n; ++w)
          if (mask >> w & 1) st.push_back(w);
        auto copy = run;
        copy.jobs = copy.scheme.round() + 1;
        CHECK(copy.scheme.tolerates(st) == (st.size() <= s));
        copy.round(st);
        CHECK(copy.missed.size() == (st.size() <= s ? 0u : 1u));
      }
    }
}

TEST_CASE("random conforming patterns at larger n decode every job, exactly", "[coding][sgc][property]") {
  struct config {
    std::size_t n, b, w, lambda;
  };
  const std::vector<config> configs{{12, 1, 2, 4}, {12, 2, 3, 5}, {16, 1, 4, 6}, {20, 3, 4, 8}, {24, 2, 5, 12}};
  for (const auto& c : configs) {
    const bursty_straggler_model model{c.n, c.b, c.w, c.lambda};
    INFO("n = " << c.n << ", B = " << c.b << ", W = " << c.w << ", lambda = " << c.lambda);
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      const std::size_t jobs = 30;
      const auto pat = conforming_pattern(model, jobs + c.w + c.b, 0.25, seed);
      runner<m_sgc<>> ms(make_m_sgc(model), jobs, seed == 1);
      for (std::size_t r = 0; r < jobs + ms.scheme.delay(); ++r) ms.round(pat[r]);
      CHECK(ms.missed.empty());
      CHECK(ms.decoded.size() == jobs);
      if ((c.w - 1) % c.b == 0) {
        runner<sr_sgc<>> sr(make_sr_sgc(model), jobs, seed == 1);
        for (std::size_t r = 0; r < jobs + sr.scheme.delay(); ++r) sr.round(pat[r]);
        CHECK(sr.missed.empty());
        CHECK(sr.decoded.size() == jobs);
      }
    }
  }
}

TEST_CASE("patterns outside the model give reported misses, never a wrong gradient", "[coding][sgc][property]") {
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    const bursty_straggler_model model{8, 1 + seed % 2, 3 + seed % 2, 2 + seed % 3};
    const std::size_t jobs = 25;
    const auto pat = random_pattern(8, jobs + 6, 0.1 + 0.05 * static_cast<double>(seed % 5), seed);
    runner<m_sgc<>> ms(make_m_sgc(model), jobs, true);
    for (std::size_t r = 0; r < jobs + ms.scheme.delay(); ++r) ms.round(pat[r]);
    CHECK(ms.decoded.size() + ms.missed.size() == jobs);  // every job accounted for once
    CHECK(ms.scheme.pending() == 0);
    if ((model.window - 1) % model.burst == 0) {
      runner<sr_sgc<>> sr(make_sr_sgc(model), jobs, true);
      for (std::size_t r = 0; r < jobs + sr.scheme.delay(); ++r) sr.round(pat[r]);
      CHECK(sr.decoded.size() + sr.missed.size() == jobs);
    }
  }
}

TEST_CASE("a master that waits whenever tolerates() says no decodes every job", "[coding][sgc][property]") {
  // The protocol of the paper's experiments: leave the late workers behind only when the scheme
  // tolerates it, otherwise wait for everyone (no stragglers that round).
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    const bursty_straggler_model model{10, 1 + seed % 2, 3, 3};
    const std::size_t jobs = 40;
    const auto pat = random_pattern(10, jobs + 4, 0.2, seed);
    auto drive = [&](auto run) {
      std::size_t waits = 0;
      for (std::size_t r = 0; r < jobs + run.scheme.delay(); ++r) {
        run.scheme.begin_round(r < jobs);
        const bool ok = run.scheme.tolerates(pat[r]);
        waits += ok ? 0 : 1;
        const auto rep = run.scheme.end_round(ok ? pat[r] : std::vector<std::size_t>{});
        for (const auto& d : rep.decoded) {
          run.decoded.insert(d.job);
          check_decoded(run.scheme, run.grads, d);
        }
        CHECK(rep.missed.empty());
      }
      CHECK(run.decoded.size() == jobs);
      return waits;
    };
    drive(runner<m_sgc<>>(make_m_sgc(model), jobs, true));
    drive(runner<sr_sgc<>>(make_sr_sgc(model), jobs, true));
  }
}

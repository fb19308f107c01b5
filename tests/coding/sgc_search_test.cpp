// The runtime model of Krishnan, Ebrahimi, Khisti (ICLR 2023, Sec. 5): delay traces, the simulator
// that drives a real scheme, and the parameter search whose fast paths must give the same runtimes.
#include <weft/coding/delay_trace.hpp>
#include <weft/coding/gc_scheme.hpp>
#include <weft/coding/sgc_search.hpp>

#include <catch2/catch.hpp>

#include <sstream>
#include <string>

using namespace weft::coding;
using Catch::Matchers::Contains;

TEST_CASE("the fast search paths equal simulate_runtime on the schemes", "[coding][sgc][search]") {
  const std::size_t n = 10, jobs = 40;
  gilbert_elliott_params ge;
  ge.p_good_to_bad = 0.08;
  const std::vector<delay_trace> traces{gilbert_elliott_trace(n, jobs + 6, ge, 5),
                                        lambda_profile_trace(n, jobs + 6, {}, 9)};
  runtime_options o;
  o.compute_seconds = 3.0;
  sgc_search_options so;
  so.max_delay = 4;
  so.max_window = 5;
  for (const auto& trace : traces) {
    const auto all = search_parameters(trace, jobs, o, so);
    std::size_t checked = 0;
    for (const auto& c : all) {
      if (c.model.lambda % 3 != 1 && c.kind != sgc_kind::gc) continue;  // a spread of the candidates
      INFO(to_string(c.kind) << " B = " << c.model.burst << " W = " << c.model.window << " lambda = " << c.model.lambda
                             << " s = " << c.s);
      runtime_report real;
      if (c.kind == sgc_kind::gc) {
        gc_scheme<linear_code> g(hybrid_repetition(n, c.s), {false, {}});
        real = simulate_runtime(g, trace, jobs, o);
      } else if (c.kind == sgc_kind::sr_sgc) {
        auto sr = make_sr_sgc(c.model, {false, {}});
        CHECK(sr.normalized_load() == Approx(c.load));
        real = simulate_runtime(sr, trace, jobs, o);
      } else {
        auto ms = make_m_sgc(c.model, {false, {}});
        CHECK(ms.normalized_load() == Approx(c.load));
        real = simulate_runtime(ms, trace, jobs, o);
      }
      CHECK(real.seconds == Approx(c.runtime.seconds).epsilon(1e-12));
      CHECK(real.waits == c.runtime.waits);
      CHECK(real.rounds == c.runtime.rounds);
      CHECK(real.decoded == jobs);
      CHECK(real.missed == 0);
      CHECK(c.runtime.missed == 0);
      ++checked;
    }
    CHECK(checked > 50);
    // The best of each kind exists and no scheme beats its own best.
    for (auto k : {sgc_kind::gc, sgc_kind::sr_sgc, sgc_kind::m_sgc}) {
      const auto& best = best_candidate(all, k);
      for (const auto& c : all)
        if (c.kind == k) CHECK(c.runtime.seconds >= best.runtime.seconds);
    }
  }
}

TEST_CASE("a round's time: the master waits (1 + mu) x the fastest or for everyone", "[coding][sgc][search]") {
  // 3 workers, 2 rounds; worker 2 is slow in round 0.
  const delay_trace t(2, 3, {1.0, 1.0, 5.0, 1.0, 1.2, 1.1});
  runtime_options o;
  o.mu = 0.5;
  o.compute_seconds = 0;
  gc_scheme<linear_code> tolerant(hybrid_repetition(3, 1));
  const auto a = simulate_runtime(tolerant, t, 2, o);
  CHECK(a.seconds == Approx(1.5 + 1.2));  // round 0 cut at 1.5 s; round 1: everyone within 1.5 s
  CHECK(a.waits == 0);
  gc_scheme<linear_code> strict(hybrid_repetition(3, 0));
  const auto b = simulate_runtime(strict, t, 2, o);
  CHECK(b.seconds == Approx(5.0 + 1.2));  // s = 0 must wait for worker 2
  CHECK(b.waits == 1);
  o.compute_seconds = 3.0;  // load (s+1)/n = 2/3 adds 2 s to everyone: 3 x 1.5 = 4.5 s wait
  gc_scheme<linear_code> loaded(hybrid_repetition(3, 1));
  CHECK(simulate_runtime(loaded, t, 2, o).seconds == Approx(4.5 + 3.2));
}

TEST_CASE("bad traces and bad runs are clear errors", "[coding][sgc][search][errors]") {
  CHECK_THROWS_WITH(delay_trace(2, 2, {1.0, 1.0, 1.0}), Contains("2 * 2") && Contains("got 3"));
  CHECK_THROWS_WITH(delay_trace(1, 2, {1.0, -1.0}), Contains("round 0, worker 1 is -1"));
  CHECK_THROWS_WITH(delay_trace(0, 2, {}), Contains("0 x 2"));
  gilbert_elliott_params bad;
  bad.p_good_to_bad = 1.5;
  CHECK_THROWS_WITH(gilbert_elliott_trace(4, 4, bad, 1), Contains("1.5"));
  const auto t = lambda_profile_trace(6, 10, {}, 1);
  auto ms = make_m_sgc({6, 1, 3, 2});  // T = 2
  CHECK_THROWS_WITH(simulate_runtime(ms, t, 9), Contains("J + T = 11") && Contains("it has 10"));
  auto other = make_m_sgc({5, 1, 2, 2});
  CHECK_THROWS_WITH(simulate_runtime(other, t, 4), Contains("6 workers") && Contains("n = 5"));
  runtime_options neg;
  neg.mu = -1;
  CHECK_THROWS_WITH(simulate_runtime(ms, t, 4, neg), Contains("mu"));
  sgc_search_options far;
  far.max_delay = 8;
  CHECK_THROWS_WITH(search_parameters(t, 4, {}, far), Contains("J + T = 12"));
}

TEST_CASE("delay profiles read from CSV, with clear errors for the wrong shape", "[coding][sgc][search][errors]") {
  std::istringstream ok("round,worker,seconds\n0,0,1.0\n0,1,2.5\n1,1,1.5\n1,0,0.5\n");
  const auto t = read_delay_trace_csv(ok, "ok.csv");
  CHECK(t.rounds() == 2);
  CHECK(t.num_workers() == 2);
  CHECK(t.at(1, 0) == 0.5);
  std::istringstream missing("round,worker,seconds\n0,0,1.0\n0,1,2.5\n1,1,1.5\n");
  CHECK_THROWS_WITH(read_delay_trace_csv(missing, "m.csv"),
                    Contains("m.csv") && Contains("3 rows for 2 rounds x 2 workers"));
  std::istringstream twice("round,worker,seconds\n0,0,1.0\n0,0,2.5\n");
  CHECK_THROWS_WITH(read_delay_trace_csv(twice, "t.csv"), Contains("1 rounds x 1 workers"));
  std::istringstream dup("round,worker,seconds\n0,0,1.0\n0,0,2.5\n1,1,1\n1,0,1\n");
  CHECK_THROWS_WITH(read_delay_trace_csv(dup, "d.csv"), Contains("round 0, worker 0 appears twice"));
  std::istringstream negative("round,worker,seconds\n0,0,-1.0\n");
  CHECK_THROWS_WITH(read_delay_trace_csv(negative, "n.csv"), Contains("n.csv:2") && Contains("negative"));
  std::istringstream nan("round,worker,seconds\n0,0,nan\n");
  CHECK_THROWS_WITH(read_delay_trace_csv(nan, "x.csv"), Contains("not finite"));
  std::istringstream nocol("round,worker\n0,0\n");
  CHECK_THROWS_WITH(read_delay_trace_csv(nocol, "c.csv"), Contains("missing column 'seconds'"));
  std::istringstream huge("round,worker,seconds\n99999999999,0,1\n");
  CHECK_THROWS_WITH(read_delay_trace_csv(huge, "h.csv"), Contains("exceeds the limit"));
}

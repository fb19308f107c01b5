// Capacity search: the highest request rate a deployment sustains under latency SLOs, found by
// bisection over the rate as Sarathi-Serve's artifact does (Agrawal et al., OSDI 2024, §5: P99 TBT and
// median scheduling delay; its capacity_search.py), with DistServe's per-request TTFT + TPOT attainment
// (Zhong et al., OSDI 2024, §2) as a further bound. Deterministic for a given seed.
#pragma once

#include <weft/sched/sim/simulator.hpp>
#include <weft/sched/sim/workload.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace weft::sched::sim {

/// What a deployment must meet at a rate. A bound of 0 is not checked.
struct capacity_slo {
  double tbt_s = 0.0;                 ///< bound on the TBT quantile below (Sarathi-Serve: P99 <= 0.1 s strict)
  double tbt_quantile = 0.99;         ///< 0.5, 0.9 or 0.99
  double sched_delay_s = 0.0;         ///< bound on the scheduling-delay quantile (Sarathi-Serve: median <= 2 s)
  double sched_delay_quantile = 0.5;  ///< 0.5 or 0.99
  double ttft_s = 0.0;                ///< per-request TTFT SLO (DistServe)
  double tpot_s = 0.0;                ///< per-request TPOT SLO (DistServe)
  double attainment = 0.9;            ///< share of requests that must meet ttft_s and tpot_s (DistServe: 90%)
};

/// One evaluated rate.
struct capacity_step {
  int step = 0;
  double rate_per_s = 0.0;
  bool meets = false;
  std::string violated;  ///< which bounds failed ("" when it meets): "TBT p99", "scheduling delay p50", ...
  double tbt_s = 0.0, sched_delay_s = 0.0, attainment = 1.0;  ///< the measured values checked
  summary stats;
  double wall_s = 0.0;  ///< real time the step's simulation took
};

struct capacity_options {
  double start_rate_per_s = 1.0;  ///< first rate tried
  double min_rate_per_s = 1e-3;   ///< below this the deployment has no capacity (found = false)
  double max_rate_per_s = 1e6;    ///< above this the search stops growing (capacity >= it)
  double tolerance = 0.025;       ///< stop when (high - low) <= tolerance * low: Sarathi-Serve's 2.5% granularity
  int max_steps = 40;
  /// Called after every step (e.g. print_capacity_progress(std::cerr)); empty: silent.
  std::function<void(const capacity_step&)> on_step;
};

struct capacity_result {
  bool found = false;                     ///< some rate met every bound
  double max_rate_per_s = 0.0;            ///< the highest rate that met them (0 when none did)
  double first_failing_rate_per_s = 0.0;  ///< the lowest rate seen to fail (0: none failed)
  std::string binding;                    ///< what failed at that rate: the limit that binds this deployment
  summary at_max;                         ///< the run at max_rate_per_s
  std::vector<capacity_step> steps;
};

/// A progress line per step on `out`: step, rate, the measured bounds and the verdict.
inline std::function<void(const capacity_step&)> print_capacity_progress(std::ostream& out, std::string label = "") {
  return [&out, label = std::move(label)](const capacity_step& s) {
    char line[320];
    std::snprintf(line, sizeof line,
                  "  capacity%s%s step %2d: %8.3f req/s  TBT %.3f s  sched delay %.2f s  SLO attainment %.3f  "
                  "%s%s (%.2f s)\n",
                  label.empty() ? "" : " ", label.c_str(), s.step, s.rate_per_s, s.tbt_s, s.sched_delay_s, s.attainment,
                  s.meets ? "meets" : "fails: ", s.violated.c_str(), s.wall_s);
    out << line << std::flush;
  };
}

namespace detail {

inline void check_capacity(const capacity_slo& slo, const capacity_options& o, const char* where) {
  const auto bound = [](double b) { return b >= 0.0 && std::isfinite(b); };
  expects(bound(slo.tbt_s) && bound(slo.sched_delay_s) && bound(slo.ttft_s) && bound(slo.tpot_s),
          errc::invalid_argument, where, "SLO bounds must be finite and >= 0");
  expects(slo.tbt_quantile == 0.5 || slo.tbt_quantile == 0.9 || slo.tbt_quantile == 0.99, errc::invalid_argument, where,
          "tbt_quantile must be 0.5, 0.9 or 0.99, got ", slo.tbt_quantile);
  expects(slo.sched_delay_quantile == 0.5 || slo.sched_delay_quantile == 0.99, errc::invalid_argument, where,
          "sched_delay_quantile must be 0.5 or 0.99, got ", slo.sched_delay_quantile);
  expects(slo.attainment > 0.0 && slo.attainment <= 1.0, errc::invalid_argument, where,
          "attainment must be in (0, 1], got ", slo.attainment);
  expects(slo.tbt_s > 0.0 || slo.sched_delay_s > 0.0 || slo.ttft_s > 0.0 || slo.tpot_s > 0.0, errc::invalid_argument,
          where, "at least one SLO bound must be set");
  expects(o.min_rate_per_s > 0.0 && o.start_rate_per_s >= o.min_rate_per_s && o.max_rate_per_s >= o.start_rate_per_s &&
              std::isfinite(o.max_rate_per_s),
          errc::invalid_argument, where, "rates must satisfy 0 < min <= start <= max < inf; got ", o.min_rate_per_s,
          ", ", o.start_rate_per_s, ", ", o.max_rate_per_s);
  expects(o.tolerance > 0.0 && o.tolerance < 1.0 && o.max_steps >= 1 && o.max_steps <= 1000, errc::invalid_argument,
          where, "tolerance must be in (0, 1) and max_steps in [1, 1000]");
}

// Checks one run against the SLO; fills the step's measured values and verdict.
inline void judge(const capacity_slo& slo, const sim_result& r, capacity_step& s) {
  const summary& st = r.stats;
  s.stats = st;
  s.tbt_s = slo.tbt_quantile == 0.5 ? st.tbt_p50 : slo.tbt_quantile == 0.9 ? st.tbt_p90 : st.tbt_p99;
  s.sched_delay_s = slo.sched_delay_quantile == 0.5 ? st.sched_delay_p50 : st.sched_delay_p99;
  std::size_t good = 0, counted = 0;
  for (const auto& rec : r.records) {
    if (rec.rejected) continue;
    ++counted;
    good += rec.finished() && (slo.ttft_s == 0.0 || rec.ttft_s() <= slo.ttft_s) &&
            (slo.tpot_s == 0.0 || rec.tpot_s() <= slo.tpot_s);
  }
  s.attainment = counted == 0 ? 0.0 : static_cast<double>(good) / static_cast<double>(counted);
  const auto fail = [&](const std::string& what) { s.violated += (s.violated.empty() ? "" : ", ") + what; };
  const auto pct = [](double q) { return q == 0.5 ? std::string("p50") : q == 0.9 ? std::string("p90") : "p99"; };
  if (slo.tbt_s > 0.0 && s.tbt_s > slo.tbt_s) fail("TBT " + pct(slo.tbt_quantile));
  if (slo.sched_delay_s > 0.0 && s.sched_delay_s > slo.sched_delay_s)
    fail("scheduling delay " + pct(slo.sched_delay_quantile));
  if ((slo.ttft_s > 0.0 || slo.tpot_s > 0.0) && s.attainment < slo.attainment) fail("TTFT/TPOT attainment");
  if (st.never_scheduled > 0 && slo.sched_delay_s == 0.0) fail("requests never scheduled");
  s.meets = s.violated.empty();
}

}  // namespace detail

/// The highest rate at which simulate_at(rate) meets every bound of slo. From o.start_rate_per_s the
/// rate doubles while it meets them (halves while it does not) to bracket the capacity, then bisects
/// until the bracket is within o.tolerance of its low end. simulate_at must be deterministic (fixed
/// seeds: the generated workloads here use common random numbers across rates). The bounds need not be
/// monotone in the rate; bisection returns a rate that meets them with a failing one above it.
/// Throws weft::error(invalid_argument) for bad bounds or options. O(steps * one simulation).
inline capacity_result max_rate_under_slo(const std::function<sim_result(double)>& simulate_at, const capacity_slo& slo,
                                          const capacity_options& o = {}) {
  detail::check_capacity(slo, o, "weft::sched::sim::max_rate_under_slo");
  expects(static_cast<bool>(simulate_at), errc::invalid_argument, "weft::sched::sim::max_rate_under_slo",
          "simulate_at is empty");
  capacity_result out;
  const auto evaluate = [&](double rate) {
    capacity_step s;
    s.step = static_cast<int>(out.steps.size()) + 1;
    s.rate_per_s = rate;
    const auto t0 = std::chrono::steady_clock::now();
    const sim_result r = simulate_at(rate);
    s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    detail::judge(slo, r, s);
    if (s.meets && (!out.found || rate > out.max_rate_per_s)) {
      out.found = true;
      out.max_rate_per_s = rate;
      out.at_max = s.stats;
    }
    if (!s.meets && (out.first_failing_rate_per_s == 0.0 || rate < out.first_failing_rate_per_s)) {
      out.first_failing_rate_per_s = rate;
      out.binding = s.violated;
    }
    out.steps.push_back(s);
    if (o.on_step) o.on_step(s);
    return s.meets;
  };
  double lo = 0.0, hi = 0.0, rate = o.start_rate_per_s;
  if (evaluate(rate)) {
    lo = rate;
    while (static_cast<int>(out.steps.size()) < o.max_steps && lo < o.max_rate_per_s) {
      rate = std::min(lo * 2.0, o.max_rate_per_s);
      if (!evaluate(rate)) {
        hi = rate;
        break;
      }
      lo = rate;
    }
    if (hi == 0.0) return out;  // meets up to max_rate_per_s (or out of steps)
  } else {
    hi = rate;
    while (static_cast<int>(out.steps.size()) < o.max_steps) {
      rate = hi / 2.0;
      if (rate < o.min_rate_per_s) return out;  // no capacity above the minimum
      if (evaluate(rate)) {
        lo = rate;
        break;
      }
      hi = rate;
    }
    if (lo == 0.0) return out;
  }
  while (static_cast<int>(out.steps.size()) < o.max_steps && hi - lo > o.tolerance * lo) {
    rate = lo + (hi - lo) / 2.0;
    (evaluate(rate) ? lo : hi) = rate;
  }
  return out;
}

/// Capacity of a deployment whose scheduler make() builds (fresh per run) on a workload of the given
/// length pairs arriving as pairs_workload(pairs, arrivals) at each rate (arrivals.rate_per_s is
/// replaced; its seed fixes lengths and unit gaps, so rates differ only in time scale). so.ttft_slo_s and
/// so.tpot_slo_s are set from slo. Deterministic. See the function form for the search.
template <batch_scheduler S>
capacity_result max_rate_under_slo(const std::function<std::unique_ptr<S>()>& make, std::span<const length_pair> pairs,
                                   const pairs_options& arrivals, const cost_model& m, const capacity_slo& slo,
                                   const capacity_options& o = {}, sim_options so = {}) {
  so.ttft_slo_s = slo.ttft_s;
  so.tpot_slo_s = slo.tpot_s;
  return max_rate_under_slo(
      [&](double rate) {
        pairs_options a = arrivals;
        a.rate_per_s = rate;
        const workload w = pairs_workload(pairs, a);
        std::unique_ptr<S> s = make();
        expects(s != nullptr, errc::invalid_argument, "weft::sched::sim::max_rate_under_slo",
                "the factory returned no scheduler");
        return simulate(*s, w, m, so);
      },
      slo, o);
}

/// Capacity on a recorded trace: each rate replays `trace` with its arrival times scaled so that its
/// mean rate (requests / span) becomes that rate; lengths and order unchanged. Deterministic.
template <batch_scheduler S>
capacity_result max_rate_under_slo(const std::function<std::unique_ptr<S>()>& make, const workload& trace,
                                   const cost_model& m, const capacity_slo& slo, const capacity_options& o = {},
                                   sim_options so = {}) {
  const char* where = "weft::sched::sim::max_rate_under_slo";
  expects(trace.size() >= 2 && trace.back().req.arrival_s > trace.front().req.arrival_s, errc::invalid_argument, where,
          "a trace needs >= 2 requests over a positive span");
  const double span = trace.back().req.arrival_s - trace.front().req.arrival_s;
  const double base_rate = static_cast<double>(trace.size() - 1) / span;
  so.ttft_slo_s = slo.ttft_s;
  so.tpot_slo_s = slo.tpot_s;
  return max_rate_under_slo(
      [&](double rate) {
        workload w = trace;
        const double scale = base_rate / rate;
        for (auto& r : w) r.req.arrival_s = (r.req.arrival_s - trace.front().req.arrival_s) * scale;
        std::unique_ptr<S> s = make();
        expects(s != nullptr, errc::invalid_argument, where, "the factory returned no scheduler");
        return simulate(*s, w, m, so);
      },
      slo, o);
}

}  // namespace weft::sched::sim

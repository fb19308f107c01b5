// Discrete-event serving simulator: replays a workload through a real batch scheduler (the same
// object an engine would run), advancing a simulated clock by the cost model's time for each batch
// and its KV copies. Deterministic: the same workload, scheduler, model and seed give the same bits.
#pragma once

#include <weft/core/quantile_histogram.hpp>
#include <weft/sched/concepts.hpp>
#include <weft/sched/detail/random.hpp>
#include <weft/sched/sim/cost_model.hpp>
#include <weft/sched/sim/metrics.hpp>
#include <weft/sched/sim/workload.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <unordered_map>
#include <vector>

namespace weft::sched::sim {

struct sim_options {
  service_weights weights{};  ///< how service is counted for fairness metrics
  double ttft_slo_s = 0.0;    ///< goodput SLOs for requests that carry none (0: no constraint)
  double tpot_slo_s = 0.0;
  double window_s = 10.0;                                       ///< fairness window (s)
  double max_time_s = std::numeric_limits<double>::infinity();  ///< stop the clock here
  double time_noise_cv = 0.0;                                   ///< lognormal jitter on iteration times (0: none)
  std::uint64_t seed = 1;                                       ///< seeds the jitter
};

struct sim_result {
  summary stats;
  std::vector<request_record> records;  ///< in workload order
  std::vector<service_sample> service;  ///< cumulative service per client (dense index) per window
  std::vector<client_id> clients;       ///< dense index -> client id (ascending)
  std::uint64_t idle_with_work = 0;     ///< iterations where the scheduler ran nothing although it held work
};

namespace detail {

struct fairness_tracker {
  double window_s;
  std::vector<double> service, window_start;
  std::vector<std::int64_t> queued;  // requests submitted and not yet admitted (VTC's "backlogged")
  std::vector<char> through;         // backlogged since the window began
  double window_end;
  double max_gap = 0.0, jain_sum = 0.0;
  std::size_t jain_windows = 0;
  std::vector<service_sample> samples;

  fairness_tracker(std::size_t clients, double w)
      : window_s(w),
        service(clients, 0.0),
        window_start(clients, 0.0),
        queued(clients, 0),
        through(clients, 0),
        window_end(w) {}

  void arrive(std::size_t c) { ++queued[c]; }
  void admitted(std::size_t c) {
    if (--queued[c] == 0) through[c] = 0;
  }
  void close_until(double now) {
    std::vector<double> part;
    while (now >= window_end) {
      part.clear();
      for (std::size_t c = 0; c < service.size(); ++c)
        if (through[c]) part.push_back(service[c] - window_start[c]);
      if (part.size() >= 2) {
        const auto [lo, hi] = std::minmax_element(part.begin(), part.end());
        max_gap = std::max(max_gap, *hi - *lo);
        jain_sum += jain_index(part);
        ++jain_windows;
      }
      samples.push_back({window_end, service});
      window_start = service;
      for (std::size_t c = 0; c < service.size(); ++c) through[c] = queued[c] > 0;
      window_end += window_s;
    }
  }
};

inline double quantile_or_zero(const quantile_histogram& h, double q) { return h.count() == 0 ? 0.0 : h.quantile(q); }

// Fills res.stats and res.service from the per-request records (shared by the single-instance and
// the cluster simulators).
inline void finalize(sim_result& res, const workload& w, const sim_options& o, const quantile_histogram& tbt,
                     fairness_tracker& fair, double now, std::uint64_t iterations, std::uint64_t preemptions,
                     std::uint64_t swaps, double batch_tokens) {
  // Unfinished requests (max_time_s): no finish time.
  for (std::size_t i = 0; i < w.size(); ++i)
    if (!res.records[i].aborted && res.records[i].output_tokens < w[i].output_tokens) res.records[i].finish_s = -1.0;

  summary& st = res.stats;
  quantile_histogram ttft, tpot, e2e;
  double out_tokens = 0.0;
  std::size_t good = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const request_record& r = res.records[i];
    out_tokens += static_cast<double>(r.output_tokens);
    st.rejected += r.rejected;
    st.aborted += r.aborted;
    if (!r.finished()) continue;
    ++st.finished;
    ttft.record(r.ttft_s());
    tpot.record(r.tpot_s());
    e2e.record(r.e2e_s());
    const double ttft_slo = w[i].req.ttft_slo_s > 0 ? w[i].req.ttft_slo_s : o.ttft_slo_s;
    const double tpot_slo = w[i].req.tpot_slo_s > 0 ? w[i].req.tpot_slo_s : o.tpot_slo_s;
    if ((ttft_slo == 0.0 || r.ttft_s() <= ttft_slo) && (tpot_slo == 0.0 || r.tpot_s() <= tpot_slo)) ++good;
  }
  st.requests = w.size();
  st.makespan_s = now - (w.empty() ? 0.0 : w.front().req.arrival_s);
  const double span = st.makespan_s > 0 ? st.makespan_s : 1.0;
  st.ttft_p50 = detail::quantile_or_zero(ttft, 0.5);
  st.ttft_p90 = detail::quantile_or_zero(ttft, 0.9);
  st.ttft_p99 = detail::quantile_or_zero(ttft, 0.99);
  st.tpot_p50 = detail::quantile_or_zero(tpot, 0.5);
  st.tpot_p90 = detail::quantile_or_zero(tpot, 0.9);
  st.tpot_p99 = detail::quantile_or_zero(tpot, 0.99);
  st.tbt_p50 = detail::quantile_or_zero(tbt, 0.5);
  st.tbt_p90 = detail::quantile_or_zero(tbt, 0.9);
  st.tbt_p99 = detail::quantile_or_zero(tbt, 0.99);
  st.e2e_p50 = detail::quantile_or_zero(e2e, 0.5);
  st.e2e_p90 = detail::quantile_or_zero(e2e, 0.9);
  st.e2e_p99 = detail::quantile_or_zero(e2e, 0.99);
  st.throughput_tok_s = out_tokens / span;
  st.requests_per_s = static_cast<double>(st.finished) / span;
  st.goodput_req_s = static_cast<double>(good) / span;
  st.slo_attainment = w.empty() ? 1.0 : static_cast<double>(good) / static_cast<double>(w.size());
  fair.close_until(now + o.window_s);  // the last partial window
  st.max_service_gap = fair.max_gap;
  st.jain_index = fair.jain_windows == 0 ? 1.0 : fair.jain_sum / static_cast<double>(fair.jain_windows);
  st.preemptions = preemptions;
  st.swaps = swaps;
  st.iterations = iterations;
  st.mean_batch_tokens = iterations == 0 ? 0.0 : batch_tokens / static_cast<double>(iterations);
  res.service = std::move(fair.samples);
}

}  // namespace detail

/// Runs w through s. The scheduler must be fresh (idle). Throws weft::error(invalid_argument) for a
/// workload that is not sorted by arrival, has duplicate ids or an output length < 1, and
/// weft::error(precondition) if the scheduler holds work but will not run anything with no arrivals left.
/// Thread-safe as long as s is not shared. O(iterations * batch + requests log requests).
template <batch_scheduler S>
sim_result simulate(S& s, const workload& w, const cost_model& m, const sim_options& o = {}) {
  const char* where = "weft::sched::sim::simulate";
  validate(o.weights, where);
  expects(o.window_s > 0.0 && std::isfinite(o.window_s), errc::invalid_argument, where,
          "window_s must be finite and > 0, got ", o.window_s);
  expects(o.time_noise_cv >= 0.0 && o.ttft_slo_s >= 0.0 && o.tpot_slo_s >= 0.0, errc::invalid_argument, where,
          "time_noise_cv and SLOs must be >= 0");
  expects(s.idle(), errc::precondition, where, "the scheduler must start idle");
  std::unordered_map<request_id, std::size_t> index;
  std::map<client_id, std::size_t> dense;
  index.reserve(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    validate(w[i].req, where);
    expects(w[i].output_tokens >= 1, errc::invalid_argument, where, "request ", w[i].req.id,
            ": output_tokens must be >= 1, got ", w[i].output_tokens);
    expects(i == 0 || w[i - 1].req.arrival_s <= w[i].req.arrival_s, errc::invalid_argument, where,
            "workload must be sorted by arrival; request ", w[i].req.id, " at ", w[i].req.arrival_s, " follows one at ",
            i == 0 ? 0.0 : w[i - 1].req.arrival_s);
    expects(index.emplace(w[i].req.id, i).second, errc::invalid_argument, where, "duplicate request id ", w[i].req.id);
    dense.emplace(w[i].req.client, 0);
  }
  sim_result res;
  for (auto& [c, k] : dense) {
    k = res.clients.size();
    res.clients.push_back(c);
  }
  std::vector<std::size_t> client_of(w.size());
  res.records.resize(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    const request& r = w[i].req;
    client_of[i] = dense[r.client];
    res.records[i] = {r.id, r.client, r.prompt_tokens, 0, r.arrival_s};
  }
  std::vector<std::int64_t> prompt_credit(w.size(), 0);
  std::vector<char> admitted(w.size(), 0);
  detail::fairness_tracker fair(res.clients.size(), o.window_s);
  quantile_histogram tbt;
  sched::detail::rng noise(o.seed);
  std::vector<request_id> finished;
  std::uint64_t iterations = 0, preemptions = 0, swaps = 0;
  double batch_tokens = 0.0;
  double now = 0.0;
  std::size_t next = 0;

  for (;;) {
    while (next < w.size() && w[next].req.arrival_s <= now) {
      if (s.submit(w[next].req, now)) {
        fair.arrive(client_of[next]);
      } else {
        res.records[next].rejected = true;
      }
      ++next;
    }
    if (now >= o.max_time_s) break;
    if (s.idle()) {
      if (next == w.size()) break;
      now = std::max(now, w[next].req.arrival_s);
      fair.close_until(now);
      continue;
    }
    const batch& b = s.schedule(now);
    if (b.empty() && b.aborted.empty()) {
      ++res.idle_with_work;
      expects(next < w.size(), errc::precondition, where, "scheduler holds ", s.waiting(), " waiting and ", s.running(),
              " running requests but scheduled nothing");
      now = std::max(now, w[next].req.arrival_s);
      continue;
    }
    double dt = m.iteration_s(b);
    for (const auto& t : b.swapped_out) dt += m.transfer_s(t);
    for (const auto& t : b.swapped_in) dt += m.transfer_s(t);
    if (o.time_noise_cv > 0.0) dt *= noise.lognormal(1.0, o.time_noise_cv);
    now += dt;
    ++iterations;
    batch_tokens += static_cast<double>(b.tokens());
    preemptions += b.preempted_recompute.size() + b.swapped_out.size();
    swaps += b.swapped_out.size();
    for (request_id id : b.aborted) {
      const std::size_t i = index.at(id);
      res.records[i].aborted = true;
      res.records[i].finish_s = now;
      if (!admitted[i]) {
        admitted[i] = 1;
        fair.admitted(client_of[i]);
      }
    }
    finished.clear();
    for (const auto& e : b.entries) {
      const std::size_t i = index.at(e.id);
      request_record& rec = res.records[i];
      const std::size_t c = client_of[i];
      if (!admitted[i]) {
        admitted[i] = 1;
        fair.admitted(c);
      }
      const std::int64_t credit = std::min(e.prefill_tokens, w[i].req.prompt_tokens - prompt_credit[i]);
      if (credit > 0) {
        prompt_credit[i] += credit;
        fair.service[c] += o.weights.input * static_cast<double>(credit);
      }
      if (!e.emits_token) continue;
      fair.service[c] += o.weights.output;
      if (rec.output_tokens == 0) {
        rec.first_token_s = now;
      } else {
        const double gap = now - rec.finish_s;  // finish_s holds the last token time until the end
        tbt.record(gap);
        rec.max_tbt_s = std::max(rec.max_tbt_s, gap);
      }
      rec.finish_s = now;
      if (++rec.output_tokens == w[i].output_tokens) {
        finished.push_back(e.id);
      }
    }
    s.complete(finished);
    fair.close_until(now);
  }

  detail::finalize(res, w, o, tbt, fair, now, iterations, preemptions, swaps, batch_tokens);
  return res;
}

}  // namespace weft::sched::sim

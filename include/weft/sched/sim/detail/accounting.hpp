// The simulator's per-request and per-client accounting, written once for every deployment: input
// validation, what each batch entry did (first schedule, tokens, TBT gaps, service for fairness) and
// the final summary. Used by detail::event_loop (event_loop.hpp).
#pragma once

#include <weft/core/quantile_histogram.hpp>
#include <weft/sched/batch.hpp>
#include <weft/sched/sim/metrics.hpp>
#include <weft/sched/sim/sim_request.hpp>

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
  double tbt_slo_s = 0.0;                                       ///< > 0: summary::tbt_over_slo counts the gaps above it
  double window_s = 10.0;                                       ///< fairness window (s)
  double max_time_s = std::numeric_limits<double>::infinity();  ///< stop the clock here
  double time_noise_cv = 0.0;                                   ///< lognormal jitter on iteration times (0: none)
  std::uint64_t seed = 1;                                       ///< seeds the jitter and the synthetic token ids
  bool keep_tbt_gaps = false;  ///< keep every inter-token gap in sim_result::tbt_gaps (memory: one double per token)
  /// Requests that share a prefix (sim_request::session, or request::prefix_id) get synthetic token
  /// ids while they are in a scheduler — a conversation's turns one stream, a declared prefix's tokens
  /// shared, the rest fresh, all from weft::rng seeded by `seed` — and the simulated engine feeds back
  /// the conversation's next token as each decoded token, so the KV manager finds prefix hits by
  /// content (memory: 4 bytes per prompt token of the requests in flight). The others, and every
  /// request when false, are counted by length (no prefix caching). A request handed to another
  /// instance (disaggregation, migration) arrives there counted: its KV travels, not its ids.
  bool token_ids = true;
};

struct sim_result {
  summary stats;
  std::vector<request_record> records;  ///< in workload order
  std::vector<service_sample> service;  ///< cumulative service per client (dense index) per window
  std::vector<client_id> clients;       ///< dense index -> client id (ascending)
  std::uint64_t idle_with_work = 0;     ///< times an instance held work but scheduled nothing
  std::vector<double> tbt_gaps;         ///< every inter-token gap, when sim_options::keep_tbt_gaps
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

// Checks options and workload once for every entry point; `where` names the caller.
inline void validate_run(const workload& w, const sim_options& o, const char* where) {
  validate(o.weights, where);
  expects(o.window_s > 0.0 && std::isfinite(o.window_s), errc::invalid_argument, where,
          "window_s must be finite and > 0, got ", o.window_s);
  expects(o.time_noise_cv >= 0.0 && std::isfinite(o.time_noise_cv) && o.ttft_slo_s >= 0.0 && o.tpot_slo_s >= 0.0 &&
              o.tbt_slo_s >= 0.0 && std::isfinite(o.ttft_slo_s) && std::isfinite(o.tpot_slo_s) &&
              std::isfinite(o.tbt_slo_s) && !std::isnan(o.max_time_s),
          errc::invalid_argument, where, "time_noise_cv and SLOs must be finite and >= 0, max_time_s not NaN");
  validate(w, where);
}

// What happened to every request and client during one run. One per run; not thread-safe.
class accounting {
 public:
  accounting(const workload& w, const sim_options& o, const char* where) : w_(w), o_(o), fair_(0, o.window_s) {
    validate_run(w, o, where);
    index_.reserve(w.size());
    std::map<client_id, std::size_t> dense;
    for (std::size_t i = 0; i < w.size(); ++i) {
      expects(index_.emplace(w[i].req.id, i).second, errc::invalid_argument, where, "duplicate request id ",
              w[i].req.id);
      dense.emplace(w[i].req.client, 0);
    }
    // Workload ids are usually dense (finalize numbers them 1..n): then a vector finds a request's
    // index, once per token, where the hash map would hash and chase a bucket.
    if (!w.empty()) {
      std::uint64_t lo = w[0].req.id.value(), hi = lo;
      for (const sim_request& r : w) {
        lo = std::min(lo, r.req.id.value());
        hi = std::max(hi, r.req.id.value());
      }
      if (hi - lo < 4 * static_cast<std::uint64_t>(w.size())) {
        dense_base_ = lo;
        dense_index_.assign(static_cast<std::size_t>(hi - lo) + 1, no_index);
        for (std::size_t i = 0; i < w.size(); ++i) dense_index_[static_cast<std::size_t>(w[i].req.id.value() - lo)] = i;
      }
    }
    for (auto& [c, k] : dense) {
      k = res_.clients.size();
      res_.clients.push_back(c);
    }
    fair_ = fairness_tracker(res_.clients.size(), o.window_s);
    client_of_.resize(w.size());
    res_.records.resize(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
      const request& r = w[i].req;
      client_of_[i] = dense[r.client];
      res_.records[i] = {r.id, r.client, r.prompt_tokens, 0, r.arrival_s};
    }
    prompt_credit_.assign(w.size(), 0);
    admitted_.assign(w.size(), 0);
  }

  std::size_t index_of(request_id id) const {
    const std::uint64_t k = id.value() - dense_base_;  // wraps below the base: out of range
    if (k < dense_index_.size() && dense_index_[static_cast<std::size_t>(k)] != no_index)
      return dense_index_[static_cast<std::size_t>(k)];
    return hashed_index_of(id);
  }
  const request_record& record(std::size_t i) const { return res_.records[i]; }

  void submitted(std::size_t i, bool accepted) {
    if (accepted)
      fair_.arrive(client_of_[i]);
    else
      res_.records[i].rejected = true;
  }

  void aborted(request_id id, double now) {
    const std::size_t i = index_of(id);
    res_.records[i].aborted = true;
    res_.records[i].finish_s = now;
    admit(i);
  }

  // Books one entry of a batch that ran over [start, now]. Returns the prompt tokens it credited
  // (the router's load signal) and whether it emitted a token.
  struct entry_outcome {
    std::size_t index = 0;  // the request's workload index
    std::int64_t prompt_tokens = 0;
    bool emitted = false;
    bool last = false;  // the request produced its final token
  };
  // Inlined into the event loop's per-token loop: a call's prologue and epilogue cost a third of it.
  [[gnu::always_inline]] inline entry_outcome entry(const batch_entry& e, double start, double now) {
    const std::size_t i = index_of(e.id);
    request_record& rec = res_.records[i];
    const std::size_t c = client_of_[i];
    if (rec.first_scheduled_s < 0.0) rec.first_scheduled_s = start;
    admit(i);
    entry_outcome out;
    out.index = i;
    const std::int64_t credit = std::min(e.prefill_tokens, w_[i].req.prompt_tokens - prompt_credit_[i]);
    if (credit > 0) {
      prompt_credit_[i] += credit;
      fair_.service[c] += o_.weights.input * static_cast<double>(credit);
      out.prompt_tokens = credit;
    }
    if (!e.emits_token) return out;
    out.emitted = true;
    fair_.service[c] += o_.weights.output;
    if (rec.output_tokens == 0) {
      rec.first_token_s = now;
    } else {
      const double gap = now - rec.finish_s;  // finish_s holds the last token's time until the end
      tbt_.record(gap);
      if (o_.keep_tbt_gaps) res_.tbt_gaps.push_back(gap);
      if (o_.tbt_slo_s > 0.0 && gap > o_.tbt_slo_s) ++tbt_over_;
      rec.max_tbt_s = std::max(rec.max_tbt_s, gap);
    }
    rec.finish_s = now;
    out.last = ++rec.output_tokens == w_[i].output_tokens;
    return out;
  }

  void iteration(const batch& b, double expert_bytes = 0.0) {
    res_.stats.expert_bytes += expert_bytes;
    ++iterations_;
    batch_tokens_ += static_cast<double>(b.tokens());
    preemptions_ += b.preempted_recompute.size() + b.swapped_out.size();
    swaps_ += b.swapped_out.size();
  }
  void idle_with_work() { ++res_.idle_with_work; }
  void close_windows(double now) { fair_.close_until(now); }

  sim_result finish(double now) {
    for (std::size_t i = 0; i < w_.size(); ++i)  // unfinished (max_time_s): no finish time
      if (!res_.records[i].aborted && res_.records[i].output_tokens < w_[i].output_tokens)
        res_.records[i].finish_s = -1.0;
    summary& st = res_.stats;
    quantile_histogram ttft, tpot, e2e, delay;
    double out_tokens = 0.0;
    std::size_t good = 0;
    for (std::size_t i = 0; i < w_.size(); ++i) {
      const request_record& r = res_.records[i];
      out_tokens += static_cast<double>(r.output_tokens);
      st.rejected += r.rejected;
      st.aborted += r.aborted;
      if (!r.rejected) {  // never scheduled: waited until the end at least
        delay.record(std::max(0.0, r.first_scheduled_s >= 0.0 ? r.scheduling_delay_s() : now - r.arrival_s));
        st.never_scheduled += r.first_scheduled_s < 0.0;
      }
      if (!r.finished()) continue;
      ++st.finished;
      ttft.record(r.ttft_s());
      tpot.record(r.tpot_s());
      e2e.record(r.e2e_s());
      const double ttft_slo = w_[i].req.ttft_slo_s > 0 ? w_[i].req.ttft_slo_s : o_.ttft_slo_s;
      const double tpot_slo = w_[i].req.tpot_slo_s > 0 ? w_[i].req.tpot_slo_s : o_.tpot_slo_s;
      if ((ttft_slo == 0.0 || r.ttft_s() <= ttft_slo) && (tpot_slo == 0.0 || r.tpot_s() <= tpot_slo)) ++good;
    }
    st.requests = w_.size();
    st.makespan_s = now - (w_.empty() ? 0.0 : w_.front().req.arrival_s);
    const double span = st.makespan_s > 0 ? st.makespan_s : 1.0;
    const auto q3 = [](const quantile_histogram& h, double& p50, double& p90, double& p99) {
      p50 = quantile_or_zero(h, 0.5);
      p90 = quantile_or_zero(h, 0.9);
      p99 = quantile_or_zero(h, 0.99);
    };
    q3(ttft, st.ttft_p50, st.ttft_p90, st.ttft_p99);
    q3(tpot, st.tpot_p50, st.tpot_p90, st.tpot_p99);
    q3(tbt_, st.tbt_p50, st.tbt_p90, st.tbt_p99);
    q3(e2e, st.e2e_p50, st.e2e_p90, st.e2e_p99);
    st.sched_delay_p50 = quantile_or_zero(delay, 0.5);
    st.sched_delay_p99 = quantile_or_zero(delay, 0.99);
    st.tbt_over_slo = tbt_.count() == 0 ? 0.0 : static_cast<double>(tbt_over_) / static_cast<double>(tbt_.count());
    st.throughput_tok_s = out_tokens / span;
    st.requests_per_s = static_cast<double>(st.finished) / span;
    st.goodput_req_s = static_cast<double>(good) / span;
    st.slo_attainment = w_.empty() ? 1.0 : static_cast<double>(good) / static_cast<double>(w_.size());
    fair_.close_until(now + o_.window_s);  // the last partial window
    st.max_service_gap = fair_.max_gap;
    st.jain_index = fair_.jain_windows == 0 ? 1.0 : fair_.jain_sum / static_cast<double>(fair_.jain_windows);
    st.preemptions = preemptions_;
    st.swaps = swaps_;
    st.iterations = iterations_;
    st.mean_batch_tokens = iterations_ == 0 ? 0.0 : batch_tokens_ / static_cast<double>(iterations_);
    res_.service = std::move(fair_.samples);
    return std::move(res_);
  }

 private:
  // Sparse ids, or an id of no request (throws std::out_of_range, as before).
  [[gnu::noinline]] std::size_t hashed_index_of(request_id id) const { return index_.at(id); }

  void admit(std::size_t i) {
    if (admitted_[i]) return;
    admitted_[i] = 1;
    fair_.admitted(client_of_[i]);
  }

  const workload& w_;
  const sim_options& o_;
  sim_result res_;
  std::unordered_map<request_id, std::size_t> index_;
  static constexpr std::size_t no_index = static_cast<std::size_t>(-1);
  std::vector<std::size_t> dense_index_;  // id - dense_base_ -> workload index (empty: ids too sparse)
  std::uint64_t dense_base_ = 0;
  std::vector<std::size_t> client_of_;
  std::vector<std::int64_t> prompt_credit_;
  std::vector<char> admitted_;
  fairness_tracker fair_;
  quantile_histogram tbt_;
  std::uint64_t tbt_over_ = 0, iterations_ = 0, preemptions_ = 0, swaps_ = 0;
  double batch_tokens_ = 0.0;
};

}  // namespace detail
}  // namespace weft::sched::sim

// Serving metrics: per-request latencies (TTFT, TPOT, TBT, end to end), throughput, goodput under
// TTFT + TPOT SLOs (DistServe, OSDI 2024, §2), per-client service over time, the largest service gap
// between clients backlogged through a window (VTC, OSDI 2024, §5) and Jain's fairness index (Jain,
// Chiu, Hawe, DEC-TR-301, 1984).
#pragma once

#include <weft/core/quantile_histogram.hpp>
#include <weft/sched/request.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace weft::sched::sim {

/// What happened to one request.
struct request_record {
  request_id id{};
  client_id client{};
  std::int64_t prompt_tokens = 0;
  std::int64_t output_tokens = 0;  ///< tokens actually produced
  double arrival_s = 0.0;
  double first_token_s = -1.0;  ///< -1: never
  double finish_s = -1.0;       ///< -1: never finished
  double max_tbt_s = 0.0;
  bool rejected = false;            ///< the scheduler could never run it
  bool aborted = false;             ///< ended by the scheduler (KV too small)
  double first_scheduled_s = -1.0;  ///< start of the first iteration that ran it (-1: never)

  bool finished() const noexcept { return finish_s >= 0.0 && !aborted; }
  double ttft_s() const noexcept { return first_token_s - arrival_s; }
  double e2e_s() const noexcept { return finish_s - arrival_s; }
  /// Time from arrival to the start of its first iteration (Sarathi-Serve's scheduling delay).
  double scheduling_delay_s() const noexcept { return first_scheduled_s - arrival_s; }
  /// Mean time per output token after the first (0 for one-token answers).
  double tpot_s() const noexcept {
    return output_tokens > 1 ? (finish_s - first_token_s) / static_cast<double>(output_tokens - 1) : 0.0;
  }
};

/// One sample of cumulative weighted service per client (at a window boundary).
struct service_sample {
  double time_s = 0.0;
  std::vector<double> service;  ///< indexed by client id
};

/// The summary a policy comparison prints.
struct summary {
  std::size_t requests = 0, finished = 0, rejected = 0, aborted = 0;
  double makespan_s = 0.0;
  double ttft_p50 = 0, ttft_p90 = 0, ttft_p99 = 0;
  double tpot_p50 = 0, tpot_p90 = 0, tpot_p99 = 0;
  double tbt_p50 = 0, tbt_p90 = 0, tbt_p99 = 0;
  double e2e_p50 = 0, e2e_p90 = 0, e2e_p99 = 0;
  double throughput_tok_s = 0.0;  ///< output tokens per second of makespan
  double requests_per_s = 0.0;
  double goodput_req_s = 0.0;   ///< finished requests meeting both SLOs, per second
  double slo_attainment = 0.0;  ///< share of all requests meeting both SLOs
  double max_service_gap =
      0.0;  ///< largest window service difference between clients queued (waiting) throughout the window
  double jain_index = 1.0;  ///< mean over windows of Jain's index of backlogged clients' window service
  std::uint64_t preemptions = 0, swaps = 0, iterations = 0;
  double mean_batch_tokens = 0.0;
  /// Scheduling delay (arrival to first iteration) over every request not rejected; one never
  /// scheduled counts as waiting until the end of the run.
  double sched_delay_p50 = 0.0, sched_delay_p99 = 0.0;
  std::size_t never_scheduled = 0;  ///< requests still waiting for their first iteration at the end
  double tbt_over_slo = 0.0;        ///< share of inter-token gaps above sim_options::tbt_slo_s (when set)
  /// Prompt tokens admissions found in the instances' prefix caches (not computed), summed over the
  /// instances whose scheduler reports stats().cached_prompt_tokens; requests with token ids only
  /// (sim_options::token_ids).
  std::uint64_t cached_prompt_tokens = 0;
  /// Expert weight bytes the iterations read (cost_model::expert_bytes; MoE models only, else 0).
  double expert_bytes = 0.0;
};

/// Writes the summary as one CSV row (with header when header is true). Thread-safe on distinct streams.
inline void write_summary_csv(std::ostream& out, const std::string& label, const summary& s, bool header) {
  if (header)
    out << "policy,requests,finished,rejected,aborted,makespan_s,ttft_p50,ttft_p90,ttft_p99,tpot_p50,tpot_p90,"
           "tpot_p99,tbt_p50,tbt_p90,tbt_p99,e2e_p50,e2e_p90,e2e_p99,throughput_tok_s,requests_per_s,goodput_req_s,"
           "slo_attainment,max_service_gap,jain_index,preemptions,swaps,iterations,mean_batch_tokens,sched_delay_p50,"
           "sched_delay_p99,never_scheduled,tbt_over_slo,cached_prompt_tokens,expert_bytes\n";
  out << label << ',' << s.requests << ',' << s.finished << ',' << s.rejected << ',' << s.aborted << ',' << s.makespan_s
      << ',' << s.ttft_p50 << ',' << s.ttft_p90 << ',' << s.ttft_p99 << ',' << s.tpot_p50 << ',' << s.tpot_p90 << ','
      << s.tpot_p99 << ',' << s.tbt_p50 << ',' << s.tbt_p90 << ',' << s.tbt_p99 << ',' << s.e2e_p50 << ',' << s.e2e_p90
      << ',' << s.e2e_p99 << ',' << s.throughput_tok_s << ',' << s.requests_per_s << ',' << s.goodput_req_s << ','
      << s.slo_attainment << ',' << s.max_service_gap << ',' << s.jain_index << ',' << s.preemptions << ',' << s.swaps
      << ',' << s.iterations << ',' << s.mean_batch_tokens << ',' << s.sched_delay_p50 << ',' << s.sched_delay_p99
      << ',' << s.never_scheduled << ',' << s.tbt_over_slo << ',' << s.cached_prompt_tokens << ',' << s.expert_bytes
      << '\n';
}

/// Writes one row per request.
inline void write_records_csv(std::ostream& out, const std::vector<request_record>& records) {
  out << "id,client,prompt_tokens,output_tokens,arrival_s,first_token_s,finish_s,ttft_s,tpot_s,e2e_s,max_tbt_s,"
         "rejected,aborted,first_scheduled_s\n";
  for (const auto& r : records)
    out << r.id << ',' << r.client << ',' << r.prompt_tokens << ',' << r.output_tokens << ',' << r.arrival_s << ','
        << r.first_token_s << ',' << r.finish_s << ',' << (r.finished() ? r.ttft_s() : -1.0) << ','
        << (r.finished() ? r.tpot_s() : -1.0) << ',' << (r.finished() ? r.e2e_s() : -1.0) << ',' << r.max_tbt_s << ','
        << r.rejected << ',' << r.aborted << ',' << r.first_scheduled_s << '\n';
}

/// Writes the service timeline: time_s, then one column per client.
inline void write_service_csv(std::ostream& out, const std::vector<service_sample>& samples) {
  std::size_t clients = 0;
  for (const auto& s : samples) clients = std::max(clients, s.service.size());
  out << "time_s";
  for (std::size_t c = 0; c < clients; ++c) out << ",client" << c;
  out << '\n';
  for (const auto& s : samples) {
    out << s.time_s;
    for (std::size_t c = 0; c < clients; ++c) out << ',' << (c < s.service.size() ? s.service[c] : 0.0);
    out << '\n';
  }
}

/// Jain's index of x: (sum x)^2 / (n * sum x^2); 1 when all equal. O(n). Empty or all-zero: 1.
inline double jain_index(const std::vector<double>& x) {
  double s = 0, s2 = 0;
  for (double v : x) {
    s += v;
    s2 += v * v;
  }
  return s2 == 0.0 ? 1.0 : s * s / (static_cast<double>(x.size()) * s2);
}

}  // namespace weft::sched::sim

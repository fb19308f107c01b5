// Serving workloads for the simulator: seeded generators (Poisson, gamma-bursty arrivals, on/off
// tenants, multi-turn sessions whose turns share a growing prefix) and workloads built from
// (prompt, output) length pairs — a dataset's length file, as Sarathi-Serve's capacity runs use
// (Agrawal et al., OSDI 2024, §5) — with Poisson, gamma or trace arrivals. The trace readers are in
// trace_readers.hpp (included here).
#pragma once

#include <weft/core/random.hpp>
#include <weft/sched/request.hpp>
#include <weft/sched/sim/sim_request.hpp>
#include <weft/sched/sim/trace_readers.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace weft::sched::sim {

/// Output lengths of a generated request: lognormal with the given mean and coefficient of variation,
/// clamped to [min, max] (max <= max_request_tokens).
struct length_dist {
  double mean = 256.0;
  double cv = 1.0;
  std::int64_t min = 1;
  std::int64_t max = 4096;
};

namespace detail {

inline void check_length(const length_dist& d, const char* where) {
  expects(d.mean > 0.0 && std::isfinite(d.mean) && d.cv >= 0.0 && std::isfinite(d.cv) && d.min >= 1 && d.max >= d.min &&
              d.max <= max_request_tokens,
          errc::invalid_argument, where,
          "length distribution needs mean > 0, cv >= 0, 1 <= min <= max <= max_request_tokens; got mean ", d.mean,
          " cv ", d.cv, " min ", d.min, " max ", d.max);
}

inline std::int64_t draw_length(weft::rng& g, const length_dist& d) {
  const double x = d.cv == 0.0 ? d.mean : g.lognormal(d.mean, d.cv);
  if (!(x < static_cast<double>(d.max))) return d.max;  // also catches a NaN or Inf draw
  return std::clamp(static_cast<std::int64_t>(std::llround(x)), d.min, d.max);
}

}  // namespace detail

/// Options of the generators.
struct generator_options {
  std::uint64_t seed = 1;
  std::size_t requests = 1000;
  double rate_per_s = 10.0;   ///< mean arrival rate (all clients together)
  std::uint32_t clients = 4;  ///< Zipf(1) share between clients
  length_dist prompt{512.0, 1.0, 1, 8192};
  length_dist output{256.0, 1.0, 1, 2048};
  double ttft_slo_s = 0.0;
  double tpot_slo_s = 0.0;
};

namespace detail {
inline void check_generator(const generator_options& o, const char* where) {
  expects(o.rate_per_s > 0.0 && std::isfinite(o.rate_per_s), errc::invalid_argument, where,
          "rate_per_s must be finite and > 0, got ", o.rate_per_s);
  expects(o.clients >= 1, errc::invalid_argument, where, "clients must be >= 1, got ", o.clients);
  check_length(o.prompt, where);
  check_length(o.output, where);
}
inline sim_request draw_request(weft::rng& g, const generator_options& o, double t, std::uint32_t client) {
  sim_request s;
  s.req.client = client_id(client);
  s.req.arrival_s = t;
  s.req.prompt_tokens = draw_length(g, o.prompt);
  s.output_tokens = draw_length(g, o.output);
  s.req.ttft_slo_s = o.ttft_slo_s;
  s.req.tpot_slo_s = o.tpot_slo_s;
  return s;
}
}  // namespace detail

/// Poisson arrivals (exponential gaps). O(requests). Thread-safe.
inline workload poisson_workload(const generator_options& o) {
  detail::check_generator(o, "weft::sched::sim::poisson_workload");
  weft::rng g(o.seed);
  workload w;
  double t = 0.0;
  for (std::size_t i = 0; i < o.requests; ++i) {
    t += g.exponential(o.rate_per_s);
    w.push_back(detail::draw_request(g, o, t, detail::zipf_client(g, o.clients)));
  }
  detail::sort_and_number(w);
  return w;
}

/// Gamma-distributed gaps with the given coefficient of variation (cv > 1: bursty; cv = 1: Poisson),
/// the burstiness model of AlpaServe (Li et al., OSDI 2023, §6.1). O(requests). Thread-safe.
inline workload gamma_workload(const generator_options& o, double cv) {
  detail::check_generator(o, "weft::sched::sim::gamma_workload");
  expects(cv > 0.0 && std::isfinite(cv), errc::invalid_argument, "weft::sched::sim::gamma_workload",
          "cv must be finite and > 0, got ", cv);
  weft::rng g(o.seed);
  const double shape = 1.0 / (cv * cv);
  const double scale = 1.0 / (o.rate_per_s * shape);
  workload w;
  double t = 0.0;
  for (std::size_t i = 0; i < o.requests; ++i) {
    t += g.gamma(shape, scale);
    w.push_back(detail::draw_request(g, o, t, detail::zipf_client(g, o.clients)));
  }
  detail::sort_and_number(w);
  return w;
}

/// One tenant of an on/off workload: Poisson at rate_per_s while on; on and off periods exponential.
struct tenant_spec {
  double rate_per_s = 5.0;
  double mean_on_s = 10.0;
  double mean_off_s = 10.0;  ///< 0: always on
};

/// Tenants (client i = tenants[i]) alternate between on and off, each from its own stream; the flood
/// of one tenant against steady others is the overload case of fair queuing. o.requests caps the total
/// and o.rate_per_s is unused. O(requests log requests). Thread-safe.
inline workload on_off_workload(const generator_options& o, const std::vector<tenant_spec>& tenants,
                                double duration_s) {
  const char* where = "weft::sched::sim::on_off_workload";
  detail::check_length(o.prompt, where);
  detail::check_length(o.output, where);
  expects(!tenants.empty(), errc::invalid_argument, where, "need at least one tenant");
  expects(duration_s > 0.0 && std::isfinite(duration_s), errc::invalid_argument, where,
          "duration_s must be finite and > 0, got ", duration_s);
  workload w;
  for (std::size_t c = 0; c < tenants.size(); ++c) {
    const tenant_spec& t = tenants[c];
    expects(t.rate_per_s > 0.0 && t.mean_on_s > 0.0 && t.mean_off_s >= 0.0, errc::invalid_argument, where, "tenant ", c,
            ": rate and mean_on_s must be > 0 and mean_off_s >= 0");
    weft::rng g(o.seed * 1000003ull + c);
    double now = 0.0;
    while (now < duration_s) {
      const double on_end = now + g.exponential(1.0 / t.mean_on_s);
      for (double a = now + g.exponential(t.rate_per_s); a < on_end && a < duration_s; a += g.exponential(t.rate_per_s))
        w.push_back(detail::draw_request(g, o, a, static_cast<std::uint32_t>(c)));
      now = on_end + (t.mean_off_s > 0.0 ? g.exponential(1.0 / t.mean_off_s) : 0.0);
    }
  }
  detail::sort_and_number(w);
  if (o.requests != 0 && w.size() > o.requests) w.resize(o.requests);
  return w;
}

/// Multi-turn chat sessions: sessions start as a Poisson process; each has `turns` turns separated by
/// think time (exponential, mean think_s). Turn k's prompt is a shared system prompt, the previous
/// turns' prompts and answers (the shared prefix, prefix_id = session), and a new user message drawn
/// from o.prompt. Open loop: a turn's arrival does not wait for the previous answer. O(requests).
inline workload session_workload(const generator_options& o, std::size_t turns, double think_s,
                                 std::int64_t system_prompt_tokens = 256) {
  const char* where = "weft::sched::sim::session_workload";
  detail::check_generator(o, where);
  expects(turns >= 1 && think_s >= 0.0 && std::isfinite(think_s) && system_prompt_tokens >= 0 &&
              system_prompt_tokens < max_request_tokens,
          errc::invalid_argument, where,
          "turns must be >= 1, think_s finite and >= 0, system_prompt_tokens in [0, max_request_tokens); got ", turns,
          ", ", think_s, ", ", system_prompt_tokens);
  weft::rng g(o.seed);
  workload w;
  double start = 0.0;
  for (std::uint64_t session = 1; w.size() < o.requests; ++session) {
    start += g.exponential(o.rate_per_s / static_cast<double>(turns));
    const std::uint32_t client = detail::zipf_client(g, o.clients);
    std::int64_t history = system_prompt_tokens;
    double t = start;
    for (std::size_t k = 0; k < turns && w.size() < o.requests; ++k) {
      sim_request s = detail::draw_request(g, o, t, client);
      // A conversation whose history outgrows max_request_tokens keeps its newest turns' worth.
      history = std::min(history, max_request_tokens - s.req.prompt_tokens);
      s.req.prefix_id = session;
      s.req.prefix_tokens = history;
      s.req.prompt_tokens += history;
      history = std::min(max_request_tokens, s.req.prompt_tokens + s.output_tokens);
      w.push_back(s);
      t += think_s > 0.0 ? g.exponential(1.0 / think_s) : 0.0;
    }
  }
  detail::sort_and_number(w);
  return w;
}

/// A length-pair workload's arrivals, clients and order.
struct pairs_options {
  std::uint64_t seed = 1;
  std::size_t requests = 0;    ///< 0: every pair once; more than the pairs: further shuffled passes
  double rate_per_s = 1.0;     ///< mean arrival rate (generated arrivals only)
  double burstiness_cv = 1.0;  ///< coefficient of variation of the gaps: 1 Poisson, else gamma (AlpaServe)
  std::uint32_t clients = 1;   ///< Zipf(1) share between clients
  bool shuffle = true;         ///< seeded shuffle of the pairs first (Sarathi-Serve's trace generator does)
  /// > 0: a pair longer than this in total is cut to it, prompt and output in proportion (each >= 1),
  /// as Sarathi-Serve's `max_tokens` does; 0: no cut.
  std::int64_t max_total_tokens = 0;
  double ttft_slo_s = 0.0;
  double tpot_slo_s = 0.0;
};

namespace detail {

inline void check_pairs(std::span<const length_pair> pairs, const pairs_options& o, const char* where) {
  expects(!pairs.empty(), errc::invalid_argument, where, "need at least one length pair");
  expects(o.clients >= 1, errc::invalid_argument, where, "clients must be >= 1, got ", o.clients);
  expects(o.max_total_tokens == 0 || (o.max_total_tokens >= 2 && o.max_total_tokens <= 2 * max_request_tokens),
          errc::invalid_argument, where, "max_total_tokens must be 0 or in [2, 2 * max_request_tokens], got ",
          o.max_total_tokens);
  expects(o.ttft_slo_s >= 0.0 && o.tpot_slo_s >= 0.0 && std::isfinite(o.ttft_slo_s) && std::isfinite(o.tpot_slo_s),
          errc::invalid_argument, where, "SLOs must be finite and >= 0");
  for (std::size_t i = 0; i < pairs.size(); ++i)
    expects(pairs[i].prompt_tokens >= 1 && pairs[i].prompt_tokens <= max_request_tokens &&
                pairs[i].output_tokens >= 1 && pairs[i].output_tokens <= max_request_tokens,
            errc::invalid_argument, where, "pair ", i, ": lengths must be in [1, max_request_tokens], got (",
            pairs[i].prompt_tokens, ", ", pairs[i].output_tokens, ")");
}

// The pairs in the order requests take them: `n` entries, each pass through the pairs shuffled.
inline std::vector<length_pair> pair_sequence(std::span<const length_pair> pairs, const pairs_options& o, std::size_t n,
                                              weft::rng& g) {
  std::vector<length_pair> pass(pairs.begin(), pairs.end()), out;
  out.reserve(n);
  while (out.size() < n) {
    if (o.shuffle)
      for (std::size_t i = pass.size(); i > 1; --i) std::swap(pass[i - 1], pass[g.below(i)]);
    for (std::size_t i = 0; i < pass.size() && out.size() < n; ++i) out.push_back(pass[i]);
  }
  if (o.max_total_tokens > 0)
    for (auto& p : out) {
      const std::int64_t total = p.prompt_tokens + p.output_tokens, over = total - o.max_total_tokens;
      if (over <= 0) continue;
      const double scale = static_cast<double>(over) / static_cast<double>(total);
      p.prompt_tokens = std::max<std::int64_t>(
          1, p.prompt_tokens - static_cast<std::int64_t>(std::ceil(scale * static_cast<double>(p.prompt_tokens))));
      p.output_tokens = std::max<std::int64_t>(
          1, p.output_tokens - static_cast<std::int64_t>(std::ceil(scale * static_cast<double>(p.output_tokens))));
    }
  return out;
}

inline workload pairs_with_arrivals(const std::vector<length_pair>& seq, std::span<const double> arrivals,
                                    const pairs_options& o, weft::rng& g) {
  workload w(seq.size());
  for (std::size_t i = 0; i < seq.size(); ++i) {
    sim_request& s = w[i];
    s.req.prompt_tokens = seq[i].prompt_tokens;
    s.output_tokens = seq[i].output_tokens;
    s.req.arrival_s = arrivals[i];
    s.req.client = client_id(zipf_client(g, o.clients));
    s.req.ttft_slo_s = o.ttft_slo_s;
    s.req.tpot_slo_s = o.tpot_slo_s;
  }
  sort_and_number(w);
  return w;
}

}  // namespace detail

/// Requests with the given (prompt, output) lengths arriving as a Poisson process of o.rate_per_s
/// (gamma gaps when o.burstiness_cv != 1). The random stream: the shuffle, then for each request its
/// unit-rate gap and its client; gaps are divided by the rate, so two rates with one seed give the same
/// requests at proportionally scaled times (common random numbers: a capacity search compares like
/// with like). O(requests). Thread-safe.
inline workload pairs_workload(std::span<const length_pair> pairs, const pairs_options& o) {
  const char* where = "weft::sched::sim::pairs_workload";
  detail::check_pairs(pairs, o, where);
  expects(o.rate_per_s > 0.0 && std::isfinite(o.rate_per_s), errc::invalid_argument, where,
          "rate_per_s must be finite and > 0, got ", o.rate_per_s);
  expects(o.burstiness_cv > 0.0 && std::isfinite(o.burstiness_cv), errc::invalid_argument, where,
          "burstiness_cv must be finite and > 0, got ", o.burstiness_cv);
  weft::rng g(o.seed);
  const std::size_t n = o.requests == 0 ? pairs.size() : o.requests;
  const std::vector<length_pair> seq = detail::pair_sequence(pairs, o, n, g);
  weft::rng gaps = g.split();
  const double shape = 1.0 / (o.burstiness_cv * o.burstiness_cv);
  std::vector<double> arrivals(n);
  double t = 0.0;
  for (auto& a : arrivals) {
    const double unit = o.burstiness_cv == 1.0 ? gaps.exponential(1.0) : gaps.gamma(shape, 1.0 / shape);
    t += unit / o.rate_per_s;
    a = t;
  }
  expects(!(t > max_arrival_s), errc::invalid_argument, where, "the last arrival (", t,
          " s) is beyond max_arrival_s: raise the rate or ask for fewer requests");
  return detail::pairs_with_arrivals(seq, arrivals, o, g);
}

/// Requests with the given lengths arriving at the given times (a trace's arrivals, e.g.
/// arrivals_of(read_azure_csv(...)), sorted, finite, in [0, max_arrival_s]); o.requests and
/// o.rate_per_s are ignored: one request per arrival. O(n). Thread-safe.
inline workload pairs_workload(std::span<const length_pair> pairs, std::span<const double> arrivals,
                               const pairs_options& o) {
  const char* where = "weft::sched::sim::pairs_workload";
  detail::check_pairs(pairs, o, where);
  for (std::size_t i = 0; i < arrivals.size(); ++i)
    expects(std::isfinite(arrivals[i]) && arrivals[i] >= 0.0 && arrivals[i] <= max_arrival_s &&
                (i == 0 || arrivals[i - 1] <= arrivals[i]),
            errc::invalid_argument, where, "arrival ", i, " (", arrivals[i],
            ") must be finite, in [0, max_arrival_s] and not before the previous one");
  weft::rng g(o.seed);
  const std::vector<length_pair> seq = detail::pair_sequence(pairs, o, arrivals.size(), g);
  return detail::pairs_with_arrivals(seq, arrivals, o, g);
}

/// The arrival times of a workload (to replay one trace's arrivals with another's lengths). O(n).
inline std::vector<double> arrivals_of(const workload& w) {
  std::vector<double> out(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) out[i] = w[i].req.arrival_s;
  return out;
}

/// The (prompt, output) lengths of a workload, in order. O(n).
inline std::vector<length_pair> lengths_of(const workload& w) {
  std::vector<length_pair> out(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) out[i] = {w[i].req.prompt_tokens, w[i].output_tokens};
  return out;
}

}  // namespace weft::sched::sim

// Serving workloads for the simulator: readers for the Azure LLM inference trace (Patel et al.,
// "Splitwise", ISCA 2024) and BurstGPT (Wang et al., "BurstGPT", 2024), and seeded generators: Poisson,
// gamma-bursty arrivals, on/off tenants, and multi-turn sessions whose turns share a growing prefix.
#pragma once

#include <weft/sched/detail/random.hpp>
#include <weft/sched/request.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <istream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace weft::sched::sim {

/// A request plus what only the simulated engine knows: its true output length.
struct sim_request {
  request req;
  std::int64_t output_tokens = 1;  ///< >= 1
};

/// Requests sorted by arrival (ties: id). Generators and readers return this.
using workload = std::vector<sim_request>;

/// Output lengths of a generated request: lognormal with the given mean and coefficient of variation,
/// clamped to [min, max].
struct length_dist {
  double mean = 256.0;
  double cv = 1.0;
  std::int64_t min = 1;
  std::int64_t max = 4096;
};

/// Options shared by the trace readers.
struct trace_options {
  std::uint32_t clients = 4;  ///< traces have no tenant: requests are spread over this many (Zipf, s = 1)
  std::uint64_t seed = 1;
  double time_scale = 1.0;   ///< arrival times are multiplied by this (< 1 compresses, raising load)
  std::size_t max_rows = 0;  ///< 0: all rows
  double ttft_slo_s = 0.0;   ///< SLOs stamped on every request (0: none)
  double tpot_slo_s = 0.0;
};

namespace detail {

inline void check_length(const length_dist& d, const char* where) {
  expects(d.mean > 0.0 && std::isfinite(d.mean) && d.cv >= 0.0 && std::isfinite(d.cv) && d.min >= 1 && d.max >= d.min,
          errc::invalid_argument, where, "length distribution needs mean > 0, cv >= 0, 1 <= min <= max; got mean ",
          d.mean, " cv ", d.cv, " min ", d.min, " max ", d.max);
}

inline std::int64_t draw_length(sched::detail::rng& g, const length_dist& d) {
  const double x = d.cv == 0.0 ? d.mean : g.lognormal(d.mean, d.cv);
  return std::clamp(static_cast<std::int64_t>(std::llround(x)), d.min, d.max);
}

// Zipf(1) over n clients: client k has weight 1 / (k + 1).
inline std::uint32_t zipf_client(sched::detail::rng& g, std::uint32_t n) {
  double total = 0.0;
  for (std::uint32_t k = 0; k < n; ++k) total += 1.0 / (k + 1.0);
  double u = g.uniform() * total;
  for (std::uint32_t k = 0; k < n; ++k) {
    u -= 1.0 / (k + 1.0);
    if (u <= 0.0) return k;
  }
  return n - 1;
}

inline std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = line.find(',', start);
    out.push_back(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

[[noreturn]] inline void bad_row(const char* where, std::size_t line, std::string_view why, std::string_view text) {
  weft::detail::raise(errc::parse, where, "line ", line, ": ", why, " in row '", text, "'");
}

inline std::int64_t parse_int(std::string_view s, const char* where, std::size_t line, std::string_view field,
                              std::string_view text) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size())
    bad_row(where, line, std::string(field) + " is not an integer", text);
  if (v < 0) bad_row(where, line, std::string(field) + " is negative", text);
  return v;
}

inline double parse_double(std::string_view s, const char* where, std::size_t line, std::string_view field,
                           std::string_view text) {
  // from_chars for double is in g++ 12 but not in clang 14's libstdc++ use everywhere; strtod on a copy.
  const std::string copy(s);
  char* end = nullptr;
  const double v = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !std::isfinite(v))
    bad_row(where, line, std::string(field) + " is not a number", text);
  return v;
}

// Days since 1970-01-01 of a civil date (Hinnant's algorithm).
inline std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

// "YYYY-MM-DD HH:MM:SS[.fraction]" -> whole seconds since the epoch and the fraction apart, so that
// differences keep the trace's 100 ns precision (a double of epoch seconds keeps only ~0.2 us).
struct timestamp {
  std::int64_t whole = 0;
  double fraction = 0.0;
  double since(const timestamp& t0) const noexcept {
    return static_cast<double>(whole - t0.whole) + (fraction - t0.fraction);
  }
};

inline timestamp parse_timestamp(std::string_view s, const char* where, std::size_t line, std::string_view text) {
  auto num = [&](std::size_t pos, std::size_t len) -> std::int64_t {
    if (pos + len > s.size()) bad_row(where, line, "TIMESTAMP is not 'YYYY-MM-DD HH:MM:SS.fff'", text);
    std::int64_t v = 0;
    for (std::size_t i = pos; i < pos + len; ++i) {
      if (s[i] < '0' || s[i] > '9') bad_row(where, line, "TIMESTAMP is not 'YYYY-MM-DD HH:MM:SS.fff'", text);
      v = v * 10 + (s[i] - '0');
    }
    return v;
  };
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') || s[13] != ':' || s[16] != ':')
    bad_row(where, line, "TIMESTAMP is not 'YYYY-MM-DD HH:MM:SS.fff'", text);
  const std::int64_t y = num(0, 4), mo = num(5, 2), d = num(8, 2), h = num(11, 2), mi = num(14, 2), se = num(17, 2);
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60)
    bad_row(where, line, "TIMESTAMP has a field out of range", text);
  double frac = 0.0;
  if (s.size() > 19) {
    if (s[19] != '.' || s.size() == 20) bad_row(where, line, "TIMESTAMP has a bad fraction", text);
    double scale = 0.1;
    for (std::size_t i = 20; i < s.size(); ++i, scale /= 10) {
      if (s[i] < '0' || s[i] > '9') bad_row(where, line, "TIMESTAMP has a bad fraction", text);
      frac += scale * (s[i] - '0');
    }
  }
  const std::int64_t days = days_from_civil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d));
  return {days * 86400 + h * 3600 + mi * 60 + se, frac};
}

inline void check_trace_options(const trace_options& o, const char* where) {
  expects(o.clients >= 1, errc::invalid_argument, where, "clients must be >= 1, got ", o.clients);
  expects(o.time_scale > 0.0 && std::isfinite(o.time_scale), errc::invalid_argument, where,
          "time_scale must be finite and > 0, got ", o.time_scale);
  expects(o.ttft_slo_s >= 0.0 && o.tpot_slo_s >= 0.0, errc::invalid_argument, where, "SLOs must be >= 0");
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return s;
}

inline void sort_and_number(workload& w) {
  std::stable_sort(w.begin(), w.end(),
                   [](const sim_request& a, const sim_request& b) { return a.req.arrival_s < b.req.arrival_s; });
  for (std::size_t i = 0; i < w.size(); ++i) w[i].req.id = request_id(i + 1);
}

}  // namespace detail

/// Reads the Azure LLM inference trace (TIMESTAMP,ContextTokens,GeneratedTokens). Arrivals are made
/// relative to the first row. Rows with ContextTokens or GeneratedTokens of 0 cannot be served and are
/// rejected like malformed ones. Throws weft::error(parse) naming the line number and the row.
/// O(rows). Thread-safe (no shared state).
inline workload read_azure_csv(std::istream& in, const trace_options& o = {}) {
  const char* where = "weft::sched::sim::read_azure_csv";
  detail::check_trace_options(o, where);
  std::string line;
  std::size_t line_no = 1;
  if (!std::getline(in, line)) weft::detail::raise(errc::parse, where, "line 1: empty input, expected a header");
  const auto header = detail::split(detail::trim(line));
  if (header.size() != 3 || detail::trim(header[0]) != "TIMESTAMP" || detail::trim(header[1]) != "ContextTokens" ||
      detail::trim(header[2]) != "GeneratedTokens")
    detail::bad_row(where, 1, "header must be TIMESTAMP,ContextTokens,GeneratedTokens", line);
  sched::detail::rng g(o.seed);
  workload w;
  detail::timestamp first;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string_view text = detail::trim(line);
    if (text.empty()) continue;
    const auto f = detail::split(text);
    if (f.size() != 3) detail::bad_row(where, line_no, "expected 3 fields", text);
    const detail::timestamp t = detail::parse_timestamp(detail::trim(f[0]), where, line_no, text);
    sim_request s;
    s.req.prompt_tokens = detail::parse_int(detail::trim(f[1]), where, line_no, "ContextTokens", text);
    s.output_tokens = detail::parse_int(detail::trim(f[2]), where, line_no, "GeneratedTokens", text);
    if (s.req.prompt_tokens == 0) detail::bad_row(where, line_no, "ContextTokens is 0", text);
    if (s.output_tokens == 0) detail::bad_row(where, line_no, "GeneratedTokens is 0", text);
    if (w.empty()) first = t;
    if (t.since(first) < 0.0) detail::bad_row(where, line_no, "TIMESTAMP is earlier than the first row", text);
    s.req.arrival_s = t.since(first) * o.time_scale;
    s.req.client = client_id(detail::zipf_client(g, o.clients));
    s.req.ttft_slo_s = o.ttft_slo_s;
    s.req.tpot_slo_s = o.tpot_slo_s;
    w.push_back(s);
    if (o.max_rows != 0 && w.size() >= o.max_rows) break;
  }
  detail::sort_and_number(w);
  return w;
}

/// Reads a file; throws weft::error(io) when it cannot be opened.
inline workload read_azure_csv(const std::string& path, const trace_options& o = {}) {
  std::ifstream in(path);
  expects(in.good(), errc::io, "weft::sched::sim::read_azure_csv", "cannot open '", path, "'");
  return read_azure_csv(in, o);
}

/// Reads BurstGPT (Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type). Each Model
/// becomes a client (in order of first appearance), so ChatGPT and GPT-4 traffic are two tenants.
/// Rows with 0 response tokens are failed requests in BurstGPT and are skipped (counted in *skipped).
/// Throws weft::error(parse) with the line number for malformed rows. O(rows). Thread-safe.
inline workload read_burstgpt_csv(std::istream& in, const trace_options& o = {}, std::size_t* skipped = nullptr) {
  const char* where = "weft::sched::sim::read_burstgpt_csv";
  detail::check_trace_options(o, where);
  std::string line;
  if (!std::getline(in, line)) weft::detail::raise(errc::parse, where, "line 1: empty input, expected a header");
  const auto header = detail::split(detail::trim(line));
  std::map<std::string, std::size_t> col;
  for (std::size_t i = 0; i < header.size(); ++i) col[std::string(detail::trim(header[i]))] = i;
  for (const char* need : {"Timestamp", "Model", "Request tokens", "Response tokens"})
    if (!col.count(need)) detail::bad_row(where, 1, std::string("header lacks column '") + need + "'", line);
  std::map<std::string, std::uint32_t> model_client;
  workload w;
  std::size_t line_no = 1, skip = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string_view text = detail::trim(line);
    if (text.empty()) continue;
    const auto f = detail::split(text);
    if (f.size() != header.size()) detail::bad_row(where, line_no, "wrong number of fields", text);
    const double t = detail::parse_double(detail::trim(f[col["Timestamp"]]), where, line_no, "Timestamp", text);
    if (t < 0.0) detail::bad_row(where, line_no, "Timestamp is negative", text);
    sim_request s;
    s.req.prompt_tokens =
        detail::parse_int(detail::trim(f[col["Request tokens"]]), where, line_no, "Request tokens", text);
    s.output_tokens =
        detail::parse_int(detail::trim(f[col["Response tokens"]]), where, line_no, "Response tokens", text);
    if (s.output_tokens == 0 || s.req.prompt_tokens == 0) {
      ++skip;
      continue;
    }
    const std::string model(detail::trim(f[col["Model"]]));
    auto [it, fresh] = model_client.emplace(model, static_cast<std::uint32_t>(model_client.size()));
    s.req.client = client_id(it->second);
    s.req.arrival_s = t * o.time_scale;
    s.req.ttft_slo_s = o.ttft_slo_s;
    s.req.tpot_slo_s = o.tpot_slo_s;
    w.push_back(s);
    if (o.max_rows != 0 && w.size() >= o.max_rows) break;
  }
  if (skipped) *skipped = skip;
  detail::sort_and_number(w);
  if (!w.empty()) {
    const double first = w.front().req.arrival_s;
    for (auto& s : w) s.req.arrival_s -= first;
  }
  return w;
}

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
inline sim_request draw_request(sched::detail::rng& g, const generator_options& o, double t, std::uint32_t client) {
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
  sched::detail::rng g(o.seed);
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
  sched::detail::rng g(o.seed);
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
    sched::detail::rng g(o.seed * 1000003ull + c);
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
  expects(turns >= 1 && think_s >= 0.0 && system_prompt_tokens >= 0, errc::invalid_argument, where,
          "turns must be >= 1, think_s and system_prompt_tokens >= 0; got ", turns, ", ", think_s, ", ",
          system_prompt_tokens);
  sched::detail::rng g(o.seed);
  workload w;
  double start = 0.0;
  for (std::uint64_t session = 1; w.size() < o.requests; ++session) {
    start += g.exponential(o.rate_per_s / static_cast<double>(turns));
    const std::uint32_t client = detail::zipf_client(g, o.clients);
    std::int64_t history = system_prompt_tokens;
    double t = start;
    for (std::size_t k = 0; k < turns && w.size() < o.requests; ++k) {
      sim_request s = detail::draw_request(g, o, t, client);
      s.req.prefix_id = session;
      s.req.prefix_tokens = history;
      s.req.prompt_tokens += history;
      history = s.req.prompt_tokens + s.output_tokens;
      w.push_back(s);
      t += think_s > 0.0 ? g.exponential(1.0 / think_s) : 0.0;
    }
  }
  detail::sort_and_number(w);
  return w;
}

}  // namespace weft::sched::sim

// Readers of public LLM-serving traces, all through weft's one CSV reader (core/csv.hpp): the Azure
// LLM inference traces (Patel et al., "Splitwise", ISCA 2024; Stojkovic et al., "DynamoLLM", HPCA
// 2025), BurstGPT (Wang et al., KDD 2025) and (prompt, output) length files such as Sarathi-Serve's
// ShareGPT lengths (Agrawal et al., OSDI 2024, §5). Every bad row is an error naming file, line and column.
#pragma once

#include <weft/core/csv.hpp>
#include <weft/core/random.hpp>
#include <weft/sched/sim/sim_request.hpp>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <istream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace weft::sched::sim {

/// Options shared by the trace readers.
struct trace_options {
  std::uint32_t clients = 4;  ///< traces have no tenant: requests are spread over this many (Zipf, s = 1)
  std::uint64_t seed = 1;
  double time_scale = 1.0;   ///< arrival times are multiplied by this (< 1 compresses, raising load)
  std::size_t max_rows = 0;  ///< 0: all rows
  double ttft_slo_s = 0.0;   ///< SLOs stamped on every request (0: none)
  double tpot_slo_s = 0.0;
};

/// One (prompt, output) length pair of a length file or a dataset.
struct length_pair {
  std::int64_t prompt_tokens = 1;
  std::int64_t output_tokens = 1;
};

namespace detail {

// Zipf(1) over n clients: client k has weight 1 / (k + 1). One draw.
inline std::uint32_t zipf_client(weft::rng& g, std::uint32_t n) {
  double total = 0.0;
  for (std::uint32_t k = 0; k < n; ++k) total += 1.0 / (k + 1.0);
  double u = g.uniform() * total;
  for (std::uint32_t k = 0; k < n; ++k) {
    u -= 1.0 / (k + 1.0);
    if (u <= 0.0) return k;
  }
  return n - 1;
}

inline void check_trace_options(const trace_options& o, const char* where) {
  expects(o.clients >= 1, errc::invalid_argument, where, "clients must be >= 1, got ", o.clients);
  expects(o.time_scale > 0.0 && std::isfinite(o.time_scale), errc::invalid_argument, where,
          "time_scale must be finite and > 0, got ", o.time_scale);
  expects(o.ttft_slo_s >= 0.0 && o.tpot_slo_s >= 0.0 && std::isfinite(o.ttft_slo_s) && std::isfinite(o.tpot_slo_s),
          errc::invalid_argument, where, "SLOs must be finite and >= 0");
}

// A token count from column c: a whole number in [min, max_request_tokens], else a parse error
// naming file, line and column.
inline std::int64_t read_tokens(const csv_reader& csv, std::size_t c, std::int64_t min) {
  const auto v = csv.number<std::int64_t>(c);
  if (v < min) csv.fail_column(c, v, " is below ", min);
  if (v > max_request_tokens)
    csv.fail_column(c, v, " exceeds the maximum request length (max_request_tokens = ", max_request_tokens, ")");
  return v;
}

// An arrival in seconds from a trace time `t` (already relative to the trace start) scaled by
// `scale`: finite and within [0, max_arrival_s] after scaling, else a parse error at column c.
inline double scaled_arrival(const csv_reader& csv, std::size_t c, double t, double scale) {
  const double a = t * scale;
  if (!std::isfinite(a) || a < 0.0 || a > max_arrival_s)
    csv.fail_column(c, "arrival ", t, " s scaled by ", scale, " is ", a,
                    ", outside [0, max_arrival_s = ", max_arrival_s, "]");
  return a;
}

inline bool is_leap(std::int64_t y) noexcept { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

inline int days_in_month(std::int64_t y, std::int64_t m) noexcept {
  constexpr int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

// Days since 1970-01-01 of a civil date (Hinnant's algorithm).
inline std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) noexcept {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

// "YYYY-MM-DD HH:MM:SS[.fraction]" as whole seconds since the epoch and the fraction apart, so that
// differences keep the trace's 100 ns precision (a double of epoch seconds keeps only ~0.2 us).
struct timestamp {
  std::int64_t whole = 0;
  double fraction = 0.0;
  double since(const timestamp& t0) const noexcept {
    return static_cast<double>(whole - t0.whole) + (fraction - t0.fraction);
  }
};

// Parses column c as a timestamp: a real calendar date (2023-02-31 is refused; leap years known),
// hours 0-23, minutes 0-59, seconds 0-60 (a leap second), at most 9 fraction digits.
inline timestamp read_timestamp(const csv_reader& csv, std::size_t c) {
  const std::string_view s = csv.trimmed(c);
  const auto bad = [&](const char* why) { csv.fail_column(c, "'", csv_reader::clip(s), "' ", why); };
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') || s[13] != ':' || s[16] != ':')
    bad("is not a time 'YYYY-MM-DD HH:MM:SS[.fffffff]'");
  auto num = [&](std::size_t pos, std::size_t len) {
    std::int64_t v = 0;
    for (std::size_t i = pos; i < pos + len; ++i) {
      if (s[i] < '0' || s[i] > '9') bad("is not a time 'YYYY-MM-DD HH:MM:SS[.fffffff]'");
      v = v * 10 + (s[i] - '0');
    }
    return v;
  };
  const std::int64_t y = num(0, 4), mo = num(5, 2), d = num(8, 2), h = num(11, 2), mi = num(14, 2), se = num(17, 2);
  if (y < 1 || mo < 1 || mo > 12) bad("has no such month");
  if (d < 1 || d > days_in_month(y, mo)) bad("has no such day in that month");
  if (h > 23 || mi > 59 || se > 60) bad("has an hour, minute or second out of range");
  double frac = 0.0;
  if (s.size() > 19) {
    if (s[19] != '.' || s.size() == 20 || s.size() > 29) bad("has a bad fraction (1 to 9 digits after '.')");
    double scale = 0.1;
    for (std::size_t i = 20; i < s.size(); ++i, scale /= 10) {
      if (s[i] < '0' || s[i] > '9') bad("has a bad fraction (1 to 9 digits after '.')");
      frac += scale * (s[i] - '0');
    }
  }
  const std::int64_t days = days_from_civil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d));
  return {days * 86400 + h * 3600 + mi * 60 + se, frac};
}

inline workload read_azure(csv_reader& csv, const trace_options& o) {
  const std::size_t t_col = csv.column("TIMESTAMP"), in_col = csv.column("ContextTokens"),
                    out_col = csv.column("GeneratedTokens");
  weft::rng g(o.seed);
  workload w;
  timestamp first;
  while ((o.max_rows == 0 || w.size() < o.max_rows) && csv.next()) {
    const timestamp t = read_timestamp(csv, t_col);
    sim_request s;
    s.req.prompt_tokens = read_tokens(csv, in_col, 1);
    s.output_tokens = read_tokens(csv, out_col, 1);
    if (w.empty()) first = t;
    if (t.since(first) < 0.0) csv.fail_column(t_col, "earlier than the first row's time");
    s.req.arrival_s = scaled_arrival(csv, t_col, t.since(first), o.time_scale);
    s.req.client = client_id(zipf_client(g, o.clients));
    s.req.ttft_slo_s = o.ttft_slo_s;
    s.req.tpot_slo_s = o.tpot_slo_s;
    w.push_back(s);
  }
  sort_and_number(w);
  return w;
}

inline workload read_burstgpt(csv_reader& csv, const trace_options& o, std::size_t* skipped) {
  const std::size_t t_col = csv.column("Timestamp"), model_col = csv.column("Model"),
                    in_col = csv.column("Request tokens"), out_col = csv.column("Response tokens");
  std::map<std::string, std::uint32_t, std::less<>> model_client;
  workload w;
  std::size_t skip = 0;
  while ((o.max_rows == 0 || w.size() < o.max_rows) && csv.next()) {
    const double t = csv.number<double>(t_col);
    if (t < 0.0) csv.fail_column(t_col, t, " is negative");
    const double arrival = scaled_arrival(csv, t_col, t, o.time_scale);
    sim_request s;
    s.req.prompt_tokens = read_tokens(csv, in_col, 0);
    s.output_tokens = read_tokens(csv, out_col, 0);
    if (s.output_tokens == 0 || s.req.prompt_tokens == 0) {  // failed requests in BurstGPT
      ++skip;
      continue;
    }
    const std::string_view model = csv.trimmed(model_col);
    auto it = model_client.find(model);
    if (it == model_client.end()) {
      expects(model_client.size() < 65536, errc::capacity, "weft::sched::sim::read_burstgpt_csv",
              "more than 65,536 distinct models (clients)");
      it = model_client.emplace(std::string(model), static_cast<std::uint32_t>(model_client.size())).first;
    }
    s.req.client = client_id(it->second);
    s.req.arrival_s = arrival;
    s.req.ttft_slo_s = o.ttft_slo_s;
    s.req.tpot_slo_s = o.tpot_slo_s;
    w.push_back(s);
  }
  if (skipped) *skipped = skip;
  sort_and_number(w);
  if (!w.empty()) {
    const double first = w.front().req.arrival_s;
    for (auto& s : w) s.req.arrival_s -= first;
  }
  return w;
}

template <class Read>
auto read_file(const std::string& path, const char* where, Read&& read) {
  std::ifstream in(path, std::ios::binary);
  expects(in.good(), errc::io, where, "cannot open '", path, "'");
  csv_reader csv(in, path);
  return read(csv);
}

}  // namespace detail

/// Reads an Azure LLM inference trace (columns TIMESTAMP, ContextTokens, GeneratedTokens, found by
/// name; other columns ignored). Arrivals are relative to the first row and multiplied by
/// o.time_scale. Throws weft::error(parse) naming source, line and column for: a missing column, a
/// malformed or impossible time (2023-02-31), a row earlier than the first, a length that is not a whole
/// number in [1, max_request_tokens], or a scaled arrival beyond max_arrival_s. O(rows). Thread-safe.
inline workload read_azure_csv(std::istream& in, const trace_options& o = {}, const std::string& source = "<stream>") {
  detail::check_trace_options(o, "weft::sched::sim::read_azure_csv");
  csv_reader csv(in, source);
  return detail::read_azure(csv, o);
}

/// Reads a file; throws weft::error(io) when it cannot be opened.
inline workload read_azure_csv(const std::string& path, const trace_options& o = {}) {
  detail::check_trace_options(o, "weft::sched::sim::read_azure_csv");
  return detail::read_file(path, "weft::sched::sim::read_azure_csv",
                           [&](csv_reader& csv) { return detail::read_azure(csv, o); });
}

/// Reads BurstGPT (columns Timestamp, Model, Request tokens, Response tokens by name). Each Model
/// becomes a client (in order of first appearance), so ChatGPT and GPT-4 traffic are two tenants.
/// Rows with 0 request or response tokens are failed requests in BurstGPT and are skipped (counted in
/// *skipped). Timestamps must be finite and >= 0, and stay within max_arrival_s once scaled; lengths
/// within max_request_tokens. Errors name source, line and column. O(rows). Thread-safe.
inline workload read_burstgpt_csv(std::istream& in, const trace_options& o = {}, std::size_t* skipped = nullptr,
                                  const std::string& source = "<stream>") {
  detail::check_trace_options(o, "weft::sched::sim::read_burstgpt_csv");
  csv_reader csv(in, source);
  return detail::read_burstgpt(csv, o, skipped);
}

/// Reads a BurstGPT file; throws weft::error(io) when it cannot be opened.
inline workload read_burstgpt_csv(const std::string& path, const trace_options& o = {},
                                  std::size_t* skipped = nullptr) {
  detail::check_trace_options(o, "weft::sched::sim::read_burstgpt_csv");
  return detail::read_file(path, "weft::sched::sim::read_burstgpt_csv",
                           [&](csv_reader& csv) { return detail::read_burstgpt(csv, o, skipped); });
}

/// Reads (prompt, output) length pairs, by header name: prompt from `prompt_tokens`,
/// `num_prefill_tokens` (Sarathi-Serve's length files), `ContextTokens` (Azure) or `Request tokens`
/// (BurstGPT); output from `output_tokens`, `num_decode_tokens`, `GeneratedTokens` or `Response tokens`.
/// Each length must be a whole number in [1, max_request_tokens]. Errors name source, line and
/// column. O(rows). Thread-safe.
inline std::vector<length_pair> read_length_pairs_csv(std::istream& in, const std::string& source = "<stream>") {
  csv_reader csv(in, source);
  auto pick = [&](std::initializer_list<std::string_view> names) {
    for (auto n : names)
      if (const auto c = csv.find_column(n); c >= 0) return static_cast<std::size_t>(c);
    return csv.column(*names.begin());  // throws, naming the columns the file has
  };
  const std::size_t p = pick({"prompt_tokens", "num_prefill_tokens", "ContextTokens", "Request tokens"});
  const std::size_t d = pick({"output_tokens", "num_decode_tokens", "GeneratedTokens", "Response tokens"});
  std::vector<length_pair> out;
  while (csv.next()) out.push_back({detail::read_tokens(csv, p, 1), detail::read_tokens(csv, d, 1)});
  return out;
}

/// Reads a length-pair file; throws weft::error(io) when it cannot be opened.
inline std::vector<length_pair> read_length_pairs_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  expects(in.good(), errc::io, "weft::sched::sim::read_length_pairs_csv", "cannot open '", path, "'");
  return read_length_pairs_csv(in, path);
}

}  // namespace weft::sched::sim

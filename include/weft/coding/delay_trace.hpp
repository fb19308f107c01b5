// Per-round, per-worker delays for evaluating straggler schemes the way Krishnan, Ebrahimi, Khisti
// (ICLR 2023, Sec. 5) do: a delay profile measured (or generated) at a reference load, from which a
// simulator derives each round's stragglers and duration. Generators for a Gilbert-Elliott bursty
// model and for a profile shaped like the authors' published AWS Lambda measurements, and a CSV
// reader for measured profiles.
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/csv.hpp>
#include <weft/core/error.hpp>
#include <weft/core/random.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace weft::coding {

/// delay(r, w): seconds worker w takes in round r at the trace's reference load. A plain value
/// type (safe to share const). Access O(1).
class delay_trace {
 public:
  delay_trace() = default;
  /// seconds: rounds * n_workers values, round after round. Throws weft::error(invalid_argument)
  /// naming the sizes when seconds has another length or either count is 0, and naming the
  /// (round, worker) of a negative, NaN or infinite delay.
  delay_trace(std::size_t rounds, std::size_t n_workers, std::vector<double> seconds, double reference_load = 0.0)
      : rounds_(rounds), n_(n_workers), reference_load_(reference_load), seconds_(std::move(seconds)) {
    constexpr const char* where = "weft::coding::delay_trace";
    expects(rounds > 0 && n_workers > 0, errc::invalid_argument, where, "a trace needs rounds and workers, got ",
            rounds, " x ", n_workers);
    expects(seconds_.size() == checked_product<std::size_t>(where, rounds, n_workers), errc::invalid_argument, where,
            "expected rounds * workers = ", rounds, " * ", n_workers, " delays, got ", seconds_.size());
    expects(std::isfinite(reference_load) && reference_load >= 0, errc::invalid_argument, where,
            "reference load must be finite and >= 0, got ", reference_load);
    for (std::size_t i = 0; i < seconds_.size(); ++i)
      expects(std::isfinite(seconds_[i]) && seconds_[i] >= 0, errc::invalid_argument, where, "delay of round ",
              i / n_workers, ", worker ", i % n_workers, " is ", seconds_[i], "; delays must be finite and >= 0");
  }

  std::size_t rounds() const noexcept { return rounds_; }
  std::size_t num_workers() const noexcept { return n_; }
  [[deprecated("use num_workers()")]] std::size_t n_workers() const noexcept { return num_workers(); }
  /// The normalized load the delays were measured at.
  double reference_load() const noexcept { return reference_load_; }
  /// Unchecked (r < rounds(), w < num_workers()).
  double at(std::size_t round, std::size_t worker) const noexcept { return seconds_[round * n_ + worker]; }
  std::span<const double> round(std::size_t r) const noexcept { return {seconds_.data() + r * n_, n_}; }

 private:
  std::size_t rounds_ = 0;
  std::size_t n_ = 0;
  double reference_load_ = 0.0;
  std::vector<double> seconds_;  // invariant: rounds_ * n_ finite values >= 0
};

/// A Gilbert-Elliott straggler process per worker: a two-state Markov chain (good, bad); in the
/// good state a round takes base_seconds with multiplicative jitter, in the bad state bad_extra
/// seconds more. Bursts last 1 / p_bad_to_good rounds on average.
struct gilbert_elliott_params {
  double p_good_to_bad = 0.05;
  double p_bad_to_good = 0.5;
  double base_seconds = 1.0;
  double jitter_cv = 0.05;  ///< coefficient of variation of the good-state time
  double bad_extra = 1.5;   ///< seconds added in the bad state
};

/// n workers x rounds rounds of the process, every worker starting in its stationary distribution.
/// Deterministic in seed. Throws weft::error(invalid_argument) naming a probability outside [0, 1]
/// or a negative time. O(n rounds).
inline delay_trace gilbert_elliott_trace(std::size_t n, std::size_t rounds, const gilbert_elliott_params& p,
                                         std::uint64_t seed) {
  constexpr const char* where = "weft::coding::gilbert_elliott_trace";
  expects(p.p_good_to_bad >= 0 && p.p_good_to_bad <= 1 && p.p_bad_to_good > 0 && p.p_bad_to_good <= 1,
          errc::invalid_argument, where, "transition probabilities must be in [0, 1] (and P[bad->good] > 0), got ",
          p.p_good_to_bad, " and ", p.p_bad_to_good);
  expects(p.base_seconds > 0 && p.jitter_cv >= 0 && p.bad_extra >= 0, errc::invalid_argument, where,
          "times must be positive, got base ", p.base_seconds, ", jitter cv ", p.jitter_cv, ", bad extra ",
          p.bad_extra);
  rng gen(seed);
  std::vector<double> s(checked_product<std::size_t>(where, n, rounds));
  std::vector<char> bad(n);
  const double stationary_bad = p.p_good_to_bad / (p.p_good_to_bad + p.p_bad_to_good);
  for (auto& b : bad) b = gen.bernoulli(stationary_bad) ? 1 : 0;
  for (std::size_t r = 0; r < rounds; ++r)
    for (std::size_t w = 0; w < n; ++w) {
      if (r > 0) bad[w] = gen.bernoulli(bad[w] ? 1.0 - p.p_bad_to_good : p.p_good_to_bad) ? 1 : 0;
      const double t = p.jitter_cv > 0 ? gen.lognormal(p.base_seconds, p.jitter_cv) : p.base_seconds;
      s[r * n + w] = t + (bad[w] ? p.bad_extra : 0.0);
    }
  return delay_trace(rounds, n, std::move(s));
}

/// A delay profile shaped like the AWS Lambda profiles Krishnan, Ebrahimi and Khisti published
/// with their code (256 workers; from their w256-n20 Canada profile: fastest worker 0.55 s,
/// median 0.63 s, about 5 % of workers beyond twice the fastest in a round, varying from 2 % to
/// 12 % between rounds, and a slow worker slow again the next round with probability about 0.12).
/// A round's time is base_seconds times lognormal jitter, plus, for a straggler, a uniform extra
/// delay in [slow_min, slow_max] (rarely, with tail_probability, tail_seconds more). Each round
/// draws its own straggling probability uniformly in [p_min, p_max]; a worker that straggled
/// straggles again with probability p_again.
struct lambda_profile_params {
  double base_seconds = 0.62;
  double jitter_cv = 0.06;
  double p_min = 0.02;
  double p_max = 0.10;
  double p_again = 0.12;
  double slow_min = 0.35;
  double slow_max = 1.0;
  double tail_probability = 0.01;
  double tail_seconds = 3.0;
};

/// n workers x rounds rounds of the profile. Deterministic in seed. Throws
/// weft::error(invalid_argument) naming a probability outside [0, 1] or a negative time. O(n rounds).
inline delay_trace lambda_profile_trace(std::size_t n, std::size_t rounds, const lambda_profile_params& p,
                                        std::uint64_t seed) {
  constexpr const char* where = "weft::coding::lambda_profile_trace";
  expects(p.p_min >= 0 && p.p_min <= p.p_max && p.p_max <= 1 && p.p_again >= 0 && p.p_again <= 1 &&
              p.tail_probability >= 0 && p.tail_probability <= 1,
          errc::invalid_argument, where, "probabilities must satisfy 0 <= p_min <= p_max <= 1 and lie in [0, 1], got ",
          p.p_min, ", ", p.p_max, ", ", p.p_again, ", ", p.tail_probability);
  expects(p.base_seconds > 0 && p.jitter_cv >= 0 && p.slow_min >= 0 && p.slow_min <= p.slow_max && p.tail_seconds >= 0,
          errc::invalid_argument, where, "times must be >= 0 with slow_min <= slow_max, got base ", p.base_seconds,
          ", slow ", p.slow_min, "..", p.slow_max, ", tail ", p.tail_seconds);
  rng gen(seed);
  std::vector<double> s(checked_product<std::size_t>(where, n, rounds));
  std::vector<char> slow(n, 0);
  for (std::size_t r = 0; r < rounds; ++r) {
    const double p_round = gen.uniform(p.p_min, p.p_max);
    for (std::size_t w = 0; w < n; ++w) {
      slow[w] = gen.bernoulli(slow[w] ? p.p_again : p_round) ? 1 : 0;
      double t = p.jitter_cv > 0 ? gen.lognormal(p.base_seconds, p.jitter_cv) : p.base_seconds;
      if (slow[w]) {
        t += gen.uniform(p.slow_min, p.slow_max);
        if (gen.bernoulli(p.tail_probability)) t += p.tail_seconds;
      }
      s[r * n + w] = t;
    }
  }
  return delay_trace(rounds, n, std::move(s));
}

/// Reads a measured profile: CSV with columns round, worker, seconds (one row per round and
/// worker, any order; other columns ignored), rounds 0..R-1 and workers 0..n-1 all present exactly
/// once. Throws weft::error(parse) naming the source and line for a malformed row, a negative or
/// non-finite delay, an index above max_index, a repeated (round, worker), or a missing one.
inline delay_trace read_delay_trace_csv(std::istream& in, const std::string& source, double reference_load = 0.0,
                                        std::size_t max_index = std::size_t{1} << 20) {
  csv_reader csv(in, source);
  const std::size_t c_round = csv.column("round"), c_worker = csv.column("worker"), c_seconds = csv.column("seconds");
  struct row {
    std::size_t round, worker;
    double seconds;
  };
  std::vector<row> rows;
  std::size_t rounds = 0, n = 0;
  while (csv.next()) {
    const auto r = csv.number<std::size_t>(c_round);
    const auto w = csv.number<std::size_t>(c_worker);
    const auto sec = csv.number<double>(c_seconds);
    if (r > max_index || w > max_index) csv.fail("round ", r, " or worker ", w, " exceeds the limit ", max_index);
    if (sec < 0) csv.fail_column(c_seconds, "delay ", sec, " is negative");
    rounds = std::max(rounds, r + 1);
    n = std::max(n, w + 1);
    rows.push_back({r, w, sec});
  }
  expects(!rows.empty(), errc::parse, "weft::coding::read_delay_trace_csv", source, ": no data rows");
  const std::size_t cells = checked_product<std::size_t>("weft::coding::read_delay_trace_csv", rounds, n);
  expects(rows.size() == cells, errc::parse, "weft::coding::read_delay_trace_csv", source, ": ", rows.size(),
          " rows for ", rounds, " rounds x ", n, " workers (", cells, " needed): every (round, worker) exactly once");
  std::vector<double> s(cells, -1.0);
  for (const row& x : rows) {
    double& cell = s[x.round * n + x.worker];
    expects(cell < 0, errc::parse, "weft::coding::read_delay_trace_csv", source, ": round ", x.round, ", worker ",
            x.worker, " appears twice");
    cell = x.seconds;
  }
  return delay_trace(rounds, n, std::move(s), reference_load);
}

}  // namespace weft::coding

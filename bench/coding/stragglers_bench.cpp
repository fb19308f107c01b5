// Straggler simulation for weft::coding: expected step time of uncoded wait-for-all,
// ignore-stragglers, adaptive backup workers and each gradient code under shifted-exponential
// worker times (Lee et al., "Speeding up distributed machine learning using codes", 2018, Sec. 3),
// with the real decode cost (decoder solve on a cache miss, cached weighted sum) measured here.
// Writes coding_stragglers.csv under WEFT_BENCH_OUT; bench/coding/plot.py draws the PNG.
#include <weft/coding.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

using namespace weft::coding;
using clock_type = std::chrono::steady_clock;

namespace {

struct model {
  std::string name;
  double shift_ms;     // a: deterministic compute time per partition
  double rate_per_ms;  // mu: the random part of one partition's time is Exp(mu), mean 1/mu
  double slow_prob;    // chance a worker is a straggler this step
  double slow_factor;  // a straggler's compute takes this many times longer...
  double slow_add_ms;  // ...plus this fixed delay (preemption, a congested link), independent of load
};

// Time for a worker holding `load` partitions: load * a + Exp(mu / load); a straggler's is
// multiplied by slow_factor and delayed by slow_add_ms.
double worker_time(const model& m, std::size_t load, detail::rng& gen) {
  const double l = static_cast<double>(load);
  double t = l * m.shift_ms + gen.exponential(m.rate_per_ms / l);
  if (gen.uniform() < m.slow_prob) t = t * m.slow_factor + m.slow_add_ms;
  return t;
}

struct row {
  std::string model, config, scheme;
  std::size_t n = 0, s = 0, load = 0;
  double mean_ms = 0, p99_ms = 0, mean_residual = 0, solve_us = 0, decode_ms = 0, ratio = 0;
};

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

// Measured decode cost: mean decoder solve (cache misses on fresh codes) and the weighted sum of
// |F| vectors of dim floats with the cached decoder.
std::pair<double, double> decode_cost(const linear_code& code, std::size_t survivors, std::size_t dim) {
  std::vector<std::size_t> f(survivors);
  std::iota(f.begin(), f.end(), std::size_t{0});
  detail::rng gen(5);
  const int solves = 20;
  const auto t0 = clock_type::now();
  for (int i = 0; i < solves; ++i) {
    std::vector<std::size_t> all(code.num_workers());
    std::iota(all.begin(), all.end(), std::size_t{0});
    for (std::size_t j = all.size(); j > 1; --j) std::swap(all[j - 1], all[gen.below(j)]);
    all.resize(survivors);
    (void)code.try_decoder(all);
  }
  const double solve_us = std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() / solves;
  auto d = code.try_decoder(f);
  if (!d) return {solve_us, -1};
  std::vector<std::vector<float>> msgs(d->survivors.size(), std::vector<float>(dim, 1.0f));
  std::vector<std::span<const float>> spans(msgs.begin(), msgs.end());
  std::vector<float> out(dim);
  const int reps = 5;
  const auto t1 = clock_type::now();
  for (int r = 0; r < reps; ++r) decode(*d, spans, out);
  const double ms = std::chrono::duration<double, std::milli>(clock_type::now() - t1).count() / reps;
  return {solve_us, ms};
}

// Simulates steps: arrivals in time order; an exact code stops at the first decodable prefix,
// others at `wait_for` arrivals (wait_for_fn may change it per step, for adaptive backups).
template <class WaitFor, class Observe>
row simulate(const std::string& config, const std::string& scheme, const linear_code& code, const model& m,
             std::size_t steps, std::uint64_t seed, WaitFor wait_for_fn, Observe observe) {
  detail::rng gen(seed);
  const std::size_t n = code.num_workers();
  std::vector<double> step_ms;
  double residual_sum = 0;
  std::vector<double> t(n);
  std::vector<std::size_t> order(n);
  for (std::size_t step = 0; step < steps; ++step) {
    for (std::size_t w = 0; w < n; ++w) t[w] = worker_time(m, code.assignment(w).size(), gen);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return t[a] < t[b]; });
    const std::size_t wait_for = wait_for_fn();
    std::vector<std::size_t> have;
    std::shared_ptr<const decoder> d;
    std::vector<std::size_t> coverage(code.n_partitions(), 0);
    std::size_t covered = 0;
    for (std::size_t i = 0; i < n && !d; ++i) {
      have.push_back(order[i]);
      for (std::size_t j : code.assignment(order[i])) covered += coverage[j]++ == 0 ? 1 : 0;
      // As weft::coding::aggregate does: an exact code is tried once every partition is covered
      // (fractional repetition often decodes before n - s) and always at n - s.
      if (code.kind() == code_kind::exact ? covered == coverage.size() || have.size() + code.stragglers() >= n
                                          : have.size() >= wait_for)
        d = code.try_decoder(have);
    }
    step_ms.push_back(t[have.back()]);
    residual_sum += d ? d->residual : 1.0;
    observe(t);
  }
  row r;
  r.model = m.name;
  r.config = config;
  r.scheme = scheme;
  r.n = n;
  r.s = code.stragglers();
  r.load = code.load();
  r.mean_ms = std::accumulate(step_ms.begin(), step_ms.end(), 0.0) / static_cast<double>(steps);
  r.p99_ms = percentile(step_ms, 0.99);
  r.mean_residual = residual_sum / static_cast<double>(steps);
  return r;
}

}  // namespace

int main() {
  const std::size_t steps = 2000, dim = std::size_t{1} << 20;
  const std::vector<model> models{{"compute-bound", 10.0, 0.1, 0.1, 5.0, 0.0},
                                  {"delay-bound", 2.0, 0.5, 0.1, 1.0, 200.0}};
  std::printf("weft::coding straggler benchmark: shifted-exponential worker times, %zu steps per scheme\n", steps);
  std::printf("  worker with L partitions: L*a + Exp(mu/L); with probability p it straggles: time * f + D.\n");
  for (const auto& m : models)
    std::printf(
        "  model %-14s a = %4.1f ms, mu = %.2f /ms (mean tail %4.1f ms per partition), p = %.2f, f = %.1f, "
        "D = %.0f ms\n",
        m.name.c_str(), m.shift_ms, m.rate_per_ms, 1.0 / m.rate_per_ms, m.slow_prob, m.slow_factor, m.slow_add_ms);
  std::printf("  decode cost measured on a %zu-float gradient: decoder solve (cache miss) and the weighted sum.\n\n",
              dim);
  struct config {
    std::size_t n, s;
  };
  std::vector<row> rows;
  for (const auto& m : models)
    for (const config c : {config{12, 2}, config{20, 4}, config{40, 10}}) {
      const std::string name = m.name + " n=" + std::to_string(c.n) + ",s=" + std::to_string(c.s);
      const std::size_t n = c.n, s = c.s;
      auto no_observe = [](const std::vector<double>&) {};
      std::vector<row> cfg_rows;
      const auto all = [n] { return n; };
      const auto fast = [n, s] { return n - s; };
      cfg_rows.push_back(simulate(name, "uncoded (wait for all)", uncoded(n), m, steps, 11, all, no_observe));
      cfg_rows.push_back(
          simulate(name, "ignore stragglers (n-s)", ignore_stragglers(n), m, steps, 11, fast, no_observe));
      adaptive_backup policy(20);
      cfg_rows.push_back(simulate(
          name, "adaptive backup workers", ignore_stragglers(n), m, steps, 11, [&] { return n - policy.backups(n); },
          [&](const std::vector<double>& t) { policy.observe(t); }));
      std::vector<std::pair<std::string, linear_code>> codes;
      if (n % (s + 1) == 0) codes.emplace_back("fractional repetition", fractional_repetition(n, s));
      codes.emplace_back("cyclic MDS", cyclic_repetition(n, s, cyclic_construction::mds));
      codes.emplace_back("cyclic random (Tandon)", cyclic_repetition(n, s, cyclic_construction::random, 1));
      codes.emplace_back("hybrid repetition", hybrid_repetition(n, s));
      codes.emplace_back("approximate d=s+1 (n-s)", approximate_code(n, s + 1, 3));
      for (auto& [label, code] : codes) cfg_rows.push_back(simulate(name, label, code, m, steps, 11, fast, no_observe));
      // Decode cost, measured on fresh copies so the solves are cache misses.
      std::vector<std::pair<std::string, linear_code>> fresh;
      fresh.emplace_back("uncoded (wait for all)", uncoded(n));
      fresh.emplace_back("ignore stragglers (n-s)", ignore_stragglers(n));
      fresh.emplace_back("adaptive backup workers", ignore_stragglers(n));
      if (n % (s + 1) == 0) fresh.emplace_back("fractional repetition", fractional_repetition(n, s));
      fresh.emplace_back("cyclic MDS", cyclic_repetition(n, s, cyclic_construction::mds));
      fresh.emplace_back("cyclic random (Tandon)", cyclic_repetition(n, s, cyclic_construction::random, 1));
      fresh.emplace_back("hybrid repetition", hybrid_repetition(n, s));
      fresh.emplace_back("approximate d=s+1 (n-s)", approximate_code(n, s + 1, 3));
      for (std::size_t i = 0; i < cfg_rows.size(); ++i) {
        const auto& code = fresh[i].second;
        const std::size_t surv = i == 0 ? n : n - s;
        auto [solve_us, dec_ms] = decode_cost(code, surv, dim);
        cfg_rows[i].solve_us = solve_us;
        cfg_rows[i].decode_ms = dec_ms;
        cfg_rows[i].ratio = cfg_rows[i].mean_ms / cfg_rows[0].mean_ms;
      }
      std::printf("%s\n%-26s %5s %9s %9s %9s %12s %11s %9s\n", name.c_str(), "scheme", "load", "mean ms", "p99 ms",
                  "vs uncoded", "rms residual", "solve us", "sum ms");
      for (const auto& r : cfg_rows)
        std::printf("%-26s %5zu %9.1f %9.1f %9.3f %12.4f %11.1f %9.2f\n", r.scheme.c_str(), r.load, r.mean_ms, r.p99_ms,
                    r.ratio, r.mean_residual, r.solve_us, r.decode_ms);
      std::printf("\n");
      rows.insert(rows.end(), cfg_rows.begin(), cfg_rows.end());
    }
  const std::string path = std::string(WEFT_BENCH_OUT) + "/coding_stragglers.csv";
  std::ofstream csv(path);
  csv << "model,config,scheme,n,s,load,mean_step_ms,p99_step_ms,ratio_vs_uncoded,mean_rms_residual,decoder_solve_us,"
         "decode_sum_ms\n";
  for (const auto& r : rows)
    csv << r.model << ",\"" << r.config << "\"," << r.scheme << ',' << r.n << ',' << r.s << ',' << r.load << ','
        << r.mean_ms << ',' << r.p99_ms << ',' << r.ratio << ',' << r.mean_residual << ',' << r.solve_us << ','
        << r.decode_ms << '\n';
  std::printf("wrote %s\n", path.c_str());
  return 0;
}

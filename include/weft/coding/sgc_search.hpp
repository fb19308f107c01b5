// Total runtime of J jobs under a delay profile, and the search for each scheme's best parameters,
// as in Krishnan, Ebrahimi, Khisti (ICLR 2023, Sec. 5 and the authors' code): a worker's round time
// at normalized load L is its profiled delay plus (L - L0) * compute_seconds; the master waits until
// (1 + mu) times the fastest worker, and the workers still running are the round's stragglers. If
// the scheme tolerates them the round ends there, otherwise the master waits for everyone. The
// runtime is the sum of the round times over the J + T rounds.
#pragma once

#include <weft/coding/concepts.hpp>
#include <weft/coding/delay_trace.hpp>
#include <weft/coding/m_sgc.hpp>
#include <weft/coding/sr_sgc.hpp>
#include <weft/coding/straggler_model.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace weft::coding {

/// How round times follow from a delay profile.
struct runtime_options {
  double mu = 1.0;               ///< the master waits until (1 + mu) x the fastest worker's time
  double compute_seconds = 2.2;  ///< seconds one worker takes for a whole job's data (load 1)
};

/// What a simulated run did.
struct runtime_report {
  double seconds = 0;       ///< total runtime of the J + T rounds
  std::size_t rounds = 0;   ///< rounds that cost time (a tail round with no job pending costs none)
  std::size_t waits = 0;    ///< rounds in which the master waited for every worker
  std::size_t decoded = 0;  ///< jobs decoded
  std::size_t missed = 0;   ///< jobs missed (0 whenever the master waits as tolerates() asks)
};

namespace detail {

inline void check_trace(const delay_trace& trace, std::size_t n, std::size_t jobs, std::size_t delay,
                        const runtime_options& o, const char* where) {
  expects(trace.num_workers() == n, errc::invalid_argument, where, "the trace has ", trace.num_workers(),
          " workers, the scheme n = ", n);
  expects(jobs >= 1 && trace.rounds() >= jobs + delay, errc::invalid_argument, where, "J = ", jobs,
          " jobs with delay T = ", delay, " need J + T = ", jobs + delay, " rounds of trace (and J >= 1), it has ",
          trace.rounds());
  expects(std::isfinite(o.mu) && o.mu >= 0 && std::isfinite(o.compute_seconds) && o.compute_seconds >= 0,
          errc::invalid_argument, where, "mu and compute_seconds must be finite and >= 0, got ", o.mu, " and ",
          o.compute_seconds);
}

/// One round of the timing model: delays at `load`, the waiting time and the stragglers.
struct round_timing {
  double fastest = 0, slowest = 0, wait = 0;
  std::vector<std::size_t> stragglers;
};

inline void time_round(const delay_trace& trace, std::size_t r, double load, const runtime_options& o,
                       round_timing& t) {
  const double extra = (load - trace.reference_load()) * o.compute_seconds;
  const auto d = trace.round(r);
  t.fastest = std::numeric_limits<double>::infinity();
  t.slowest = 0;
  for (double x : d) {
    t.fastest = std::min(t.fastest, x + extra);
    t.slowest = std::max(t.slowest, x + extra);
  }
  t.wait = (1.0 + o.mu) * t.fastest;
  t.stragglers.clear();
  for (std::size_t w = 0; w < d.size(); ++w)
    if (d[w] + extra > t.wait) t.stragglers.push_back(w);
}

}  // namespace detail

/// Runs `jobs` jobs of `scheme` over the trace (rounds 0 .. J + T - 1; tail rounds start no job and
/// cost nothing once no job is pending), leaving stragglers behind when scheme.tolerates() them and
/// waiting for every worker otherwise. Throws weft::error(invalid_argument) when the trace has
/// another n or fewer than J + T rounds, or mu / compute_seconds are negative. O(rounds x (n + the
/// scheme's round cost)).
template <sequential_scheme Scheme>
runtime_report simulate_runtime(Scheme& scheme, const delay_trace& trace, std::size_t jobs,
                                const runtime_options& o = {}) {
  const std::size_t t = scheme.delay();
  detail::check_trace(trace, detail::num_workers_of(scheme), jobs, t, o, "weft::coding::simulate_runtime");
  runtime_report rep;
  detail::round_timing rt;
  const double load = scheme.normalized_load();
  std::size_t pending = 0;
  for (std::size_t r = 0; r < jobs + t; ++r) {
    if (r >= jobs && pending == 0) break;
    scheme.begin_round(r < jobs);
    if (r < jobs) ++pending;
    detail::time_round(trace, r, load, o, rt);
    const bool leave = scheme.tolerates(rt.stragglers);
    const auto out =
        scheme.end_round(leave ? std::span<const std::size_t>(rt.stragglers) : std::span<const std::size_t>{});
    rep.seconds += leave ? std::min(rt.wait, rt.slowest) : rt.slowest;
    rep.waits += leave ? 0 : 1;
    ++rep.rounds;
    rep.decoded += out.decoded.size();
    rep.missed += out.missed.size();
    pending -= out.decoded.size() + out.missed.size();
  }
  return rep;
}

/// Which scheme a candidate is.
enum class sgc_kind { gc, sr_sgc, m_sgc };

inline const char* to_string(sgc_kind k) noexcept {
  switch (k) {
    case sgc_kind::gc:
      return "GC";
    case sgc_kind::sr_sgc:
      return "SR-SGC";
    case sgc_kind::m_sgc:
      return "M-SGC";
  }
  return "?";
}

/// One parameter choice and its simulated runtime. For GC, `s` is the code's stragglers and model
/// only carries n; for SR-SGC `s` is ceil(B lambda / (W - 1 + B)).
struct sgc_candidate {
  sgc_kind kind = sgc_kind::gc;
  bursty_straggler_model model;
  std::size_t s = 0;
  std::size_t delay = 0;
  double load = 0;
  runtime_report runtime;
};

/// The search space: T <= max_delay and W <= max_window (the authors bound T by the profile's
/// spare rounds). lambda runs over 0..n (M-SGC) and 1..n (SR-SGC), s over 0..n-1 (GC).
struct sgc_search_options {
  std::size_t max_delay = 6;
  std::size_t max_window = 8;
};

namespace detail {

/// The trace's rounds with each round's workers sorted by delay, slowest first, so the stragglers
/// at any load are a prefix (adding the same (L - L0) c to every worker keeps the order).
struct sorted_trace {
  std::size_t n = 0;
  std::vector<std::size_t> order;  // [r * n + i]: the i-th slowest worker of round r
  std::vector<double> delay;       // its delay
  std::vector<double> fastest;     // per round
  explicit sorted_trace(const delay_trace& t, std::size_t rounds) : n(t.num_workers()) {
    order.resize(rounds * n);
    delay.resize(rounds * n);
    fastest.resize(rounds);
    for (std::size_t r = 0; r < rounds; ++r) {
      const auto d = t.round(r);
      std::size_t* o = order.data() + r * n;
      std::iota(o, o + n, std::size_t{0});
      std::stable_sort(o, o + n, [&](std::size_t a, std::size_t b) { return d[a] > d[b]; });
      for (std::size_t i = 0; i < n; ++i) delay[r * n + i] = d[o[i]];
      fastest[r] = delay[r * n + n - 1];
    }
  }
  // Stragglers of round r at `extra` seconds over the profile: a prefix of order. Also the round's
  // wait and slowest time.
  std::span<const std::size_t> stragglers(std::size_t r, double extra, double mu, double& wait, double& slowest) const {
    const double* d = delay.data() + r * n;
    wait = (1.0 + mu) * (fastest[r] + extra);
    slowest = d[0] + extra;
    std::size_t lo = 0, hi = n;  // first index with d + extra <= wait
    while (lo < hi) {
      const std::size_t mid = (lo + hi) / 2;
      if (d[mid] + extra > wait)
        lo = mid + 1;
      else
        hi = mid;
    }
    return {order.data() + r * n, lo};
  }
};

inline runtime_report fast_gc(const sorted_trace& st, std::size_t jobs, double load, double l0, std::size_t s,
                              const runtime_options& o) {
  runtime_report rep;
  const double extra = (load - l0) * o.compute_seconds;
  for (std::size_t r = 0; r < jobs; ++r) {
    double wait = 0, slowest = 0;
    const auto strag = st.stragglers(r, extra, o.mu, wait, slowest);
    const bool leave = strag.size() <= s;
    rep.seconds += leave ? std::min(wait, slowest) : slowest;
    rep.waits += leave ? 0 : 1;
  }
  rep.rounds = jobs;
  rep.decoded = jobs;
  return rep;
}

// M-SGC's tolerates() depends on the straggler history only, so the runtime needs no scheme state
// but when the last job is done: with D2 codes (lambda < n) at its last slot; with lambda = n once
// every worker has delivered its W - 1 chunks of it (earlier jobs are done by then: they started
// earlier under the same stragglers).
inline runtime_report fast_m_sgc(const sorted_trace& st, std::size_t jobs, double l0, const bursty_straggler_model& m,
                                 const runtime_options& o) {
  runtime_report rep;
  const double extra = (m_sgc_load(m) - l0) * o.compute_seconds;
  straggler_history h(m);
  const std::size_t rounds = jobs + m.window - 2 + m.burst;
  const bool no_d2 = m.lambda == m.n_workers;
  std::vector<std::size_t> delivered(no_d2 ? st.n : 0, 0);  // chunks of the last job per worker
  std::vector<char> late(st.n, 0);
  for (std::size_t r = 0; r < rounds; ++r) {
    double wait = 0, slowest = 0;
    const auto strag = st.stragglers(r, extra, o.mu, wait, slowest);
    const bool leave = h.admits(strag);
    h.push(leave ? strag : std::span<const std::size_t>{});
    rep.seconds += leave ? std::min(wait, slowest) : slowest;
    rep.waits += leave ? 0 : 1;
    ++rep.rounds;
    if (no_d2 && r + 1 >= jobs) {
      if (leave)
        for (std::size_t w : strag) late[w] = 1;
      std::size_t done = 0;
      for (std::size_t w = 0; w < st.n; ++w) {
        if (!late[w] && delivered[w] < m.window - 1) ++delivered[w];
        late[w] = 0;
        done += delivered[w] == m.window - 1 ? std::size_t{1} : std::size_t{0};
      }
      if (done == st.n) break;
    }
  }
  rep.decoded = jobs;
  return rep;
}

// SR-SGC with decodability by counts (any n - s results decode), exactly as sr_sgc plans it:
// the v - s lowest-numbered workers owing job r - B redo it in round r; an exempt round (no
// reattempts, at most s stragglers) does not count against the model.
inline runtime_report fast_sr_sgc(const sorted_trace& st, std::size_t jobs, double l0, const bursty_straggler_model& m,
                                  const runtime_options& o) {
  runtime_report rep;
  const std::size_t n = st.n, b = m.burst, s = sr_sgc_stragglers(m);
  const double extra = (static_cast<double>(s + 1) / static_cast<double>(n) - l0) * o.compute_seconds;
  const std::size_t words = (n + 63) / 64;
  straggler_history h(m);
  // Ring of the last B + 1 jobs: delivered bitmask and count; live while pending.
  std::vector<std::uint64_t> got((b + 1) * words);
  std::vector<std::size_t> count(b + 1);
  std::vector<char> live(b + 1, 0);
  std::vector<std::uint64_t> busy(words), strag_bits(words);
  std::size_t pending = 0;
  for (std::size_t r = 0; r < jobs + b; ++r) {
    if (r >= jobs && pending == 0) break;
    std::fill(busy.begin(), busy.end(), 0);
    std::size_t reattempts = 0;
    const std::size_t old_slot = r >= b ? (r - b) % (b + 1) : 0;
    const bool old_live = r >= b && live[old_slot];
    if (old_live) {
      std::size_t need = n - count[old_slot] > s ? n - count[old_slot] - s : 0;
      const std::uint64_t* g = got.data() + old_slot * words;
      for (std::size_t w = 0; w < n && need > 0; ++w)
        if (!(g[w / 64] >> (w % 64) & 1)) {
          busy[w / 64] |= std::uint64_t{1} << (w % 64);
          ++reattempts;
          --need;
        }
    }
    const std::size_t new_slot = r % (b + 1);
    const bool start = r < jobs;
    if (start) {
      std::fill(got.begin() + static_cast<std::ptrdiff_t>(new_slot * words),
                got.begin() + static_cast<std::ptrdiff_t>((new_slot + 1) * words), 0);
      count[new_slot] = 0;
      live[new_slot] = 1;
      ++pending;
    }
    double wait = 0, slowest = 0;
    const auto strag = st.stragglers(r, extra, o.mu, wait, slowest);
    const bool exempt = reattempts == 0 && strag.size() <= s;
    const bool leave = exempt || h.admits(strag);
    h.push(leave && !exempt ? strag : std::span<const std::size_t>{});
    rep.seconds += leave ? std::min(wait, slowest) : slowest;
    rep.waits += leave ? 0 : 1;
    ++rep.rounds;
    std::fill(strag_bits.begin(), strag_bits.end(), 0);
    if (leave)
      for (std::size_t w : strag) strag_bits[w / 64] |= std::uint64_t{1} << (w % 64);
    // Deliveries: reattempting workers to the old job, the others to the new one.
    for (std::size_t i = 0; i < words; ++i) {
      const std::uint64_t ok = ~strag_bits[i];
      if (old_live) {
        std::uint64_t& g = got[old_slot * words + i];
        const std::uint64_t add = busy[i] & ok & ~g;
        g |= add;
        count[old_slot] += static_cast<std::size_t>(std::popcount(add));
      }
      if (start) {
        std::uint64_t valid = ~std::uint64_t{0};
        if (i + 1 == words && n % 64 != 0) valid = (std::uint64_t{1} << (n % 64)) - 1;
        const std::uint64_t add = ~busy[i] & ok & valid;
        got[new_slot * words + i] |= add;
        count[new_slot] += static_cast<std::size_t>(std::popcount(add));
      }
    }
    // Settle: the new job decodes now or waits B rounds; the old job decodes or is missed.
    if (old_live) {
      live[old_slot] = 0;
      --pending;
      if (count[old_slot] + s >= n)
        ++rep.decoded;
      else
        ++rep.missed;
    }
    if (start && count[new_slot] + s >= n) {
      live[new_slot] = 0;
      --pending;
      ++rep.decoded;
    }
  }
  return rep;
}

}  // namespace detail

/// Simulates every parameter choice of classical GC (s = 0..n-1; s = 0 is waiting for everyone),
/// SR-SGC (B <= max_delay, W = xB + 1 <= max_window, lambda = 1..n with s < n) and M-SGC
/// (W <= max_window, B < W, T = W - 2 + B <= max_delay, lambda = 0..n) over the trace for `jobs`
/// jobs, with the paper's codes: (n, s) codes of load s + 1 over n partitions. Runtimes by counts
/// (no decoders), equal to simulate_runtime() on the schemes themselves (tested). Throws like
/// simulate_runtime when the trace is too short for jobs + the largest delay searched. O(candidates x
/// (J + T) x (log n + stragglers per round)); about 7,000 candidates at n = 256.
inline std::vector<sgc_candidate> search_parameters(const delay_trace& trace, std::size_t jobs,
                                                    const runtime_options& o = {}, const sgc_search_options& so = {}) {
  constexpr const char* where = "weft::coding::search_parameters";
  const std::size_t n = trace.num_workers();
  detail::check_trace(trace, n, jobs, so.max_delay, o, where);
  const detail::sorted_trace st(trace, jobs + so.max_delay);
  const double l0 = trace.reference_load();
  std::vector<sgc_candidate> out;
  for (std::size_t s = 0; s < n; ++s) {
    sgc_candidate c;
    c.kind = sgc_kind::gc;
    c.model.n_workers = n;
    c.s = s;
    c.load = static_cast<double>(s + 1) / static_cast<double>(n);
    c.runtime = detail::fast_gc(st, jobs, c.load, l0, s, o);
    out.push_back(c);
  }
  for (std::size_t b = 1; b <= so.max_delay; ++b)
    for (std::size_t w = b + 1; w <= so.max_window; w += b)
      for (std::size_t lambda = 1; lambda <= n; ++lambda) {
        const bursty_straggler_model m{n, b, w, lambda};
        const std::size_t s = sr_sgc_stragglers(m);
        if (s >= n) continue;
        sgc_candidate c{sgc_kind::sr_sgc, m, s, b, static_cast<double>(s + 1) / static_cast<double>(n), {}};
        c.runtime = detail::fast_sr_sgc(st, jobs, l0, m, o);
        out.push_back(c);
      }
  for (std::size_t w = 2; w <= so.max_window; ++w)
    for (std::size_t b = 1; b < w && w - 2 + b <= so.max_delay; ++b)
      for (std::size_t lambda = 0; lambda <= n; ++lambda) {
        const bursty_straggler_model m{n, b, w, lambda};
        sgc_candidate c{sgc_kind::m_sgc, m, lambda, w - 2 + b, m_sgc_load(m), {}};
        c.runtime = detail::fast_m_sgc(st, jobs, l0, m, o);
        out.push_back(c);
      }
  return out;
}

/// The fastest candidate of a kind (ties: the lower load). Throws weft::error(not_found) when there
/// is none of that kind.
inline const sgc_candidate& best_candidate(std::span<const sgc_candidate> all, sgc_kind kind) {
  const sgc_candidate* best = nullptr;
  for (const auto& c : all)
    if (c.kind == kind && (!best || c.runtime.seconds < best->runtime.seconds ||
                           (c.runtime.seconds == best->runtime.seconds && c.load < best->load)))
      best = &c;
  expects(best != nullptr, errc::not_found, "weft::coding::best_candidate", "no ", to_string(kind), " candidate");
  return *best;
}

}  // namespace weft::coding

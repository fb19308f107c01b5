// Measures a transport for the tuner: calibrate() fits the alpha-beta-gamma cost model (Hockney
// 1994) from ping-pongs between ranks 0 and 1 and a timed local reduction; autotune() times every
// candidate allreduce algorithm at every given size (the empirical approach of MPI libraries'
// tuned collectives, e.g. Open MPI's decision rules) into a tuning_table. Both give every rank the
// same answer, so every rank's tuner makes the same choice.
#pragma once

#include <weft/comm/allreduce.hpp>
#include <weft/comm/collectives.hpp>
#include <weft/comm/tuner.hpp>
#include <weft/core/reduce_ops.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

namespace weft::comm {

namespace detail {

/// The median of `v` (the upper one of an even count). O(size).
inline double median_of(std::vector<double> v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace detail

/// Runs on every rank (collective). `large_bytes` is the big ping-pong size, `reps` the number of
/// round trips per size (the median is used). Returns the same model on every rank; a single
/// rank returns the default model. Throws what the collectives throw; errc::invalid_argument for
/// large_bytes < 1024 or reps < 1. Cost: about 2·reps round trips plus one broadcast.
template <transport Tr>
cost_model calibrate(Tr& t, std::size_t large_bytes = std::size_t{4} << 20, int reps = 7, const options& opt = {}) {
  constexpr const char* where = "weft::comm::calibrate";
  const int p = static_cast<int>(t.size()), r = static_cast<int>(t.rank());
  detail::proposal call(where, opt);
  call.desc =
      detail::describe_call(collective::calibrate, dtype::u8, large_bytes, "", p, static_cast<std::uint64_t>(reps));
  call.require([&] {
    expects(large_bytes >= 1024, errc::invalid_argument, where, "large_bytes ", large_bytes, " must be >= 1024");
    expects(reps >= 1, errc::invalid_argument, where, "reps ", reps, " must be >= 1");
  });
  detail::agree(t, call);
  std::array<double, 3> model{cost_model{}.alpha, cost_model{}.beta, cost_model{}.gamma};
  if (p == 1) return {};
  const deadline until = call.until();
  const msg_tag tag{opt.channel, make_check(collective::calibrate, dtype::u8, algorithm::ring, large_bytes, "", 0)};
  detail::call_context c(t, where, tag, until);
  c.begin(call.desc);
  std::vector<std::byte> buf(large_bytes);
  auto round_trip = [&](std::size_t bytes) {
    std::vector<double> times;
    std::span<std::byte> b(buf.data(), bytes);
    for (int i = 0; i < reps + 1; ++i) {
      const auto t0 = clock_type::now();
      if (r == 0) {
        c.send(1, detail::as_const(b));
        c.recv(1, b);
      } else if (r == 1) {
        c.recv(0, b);
        c.send(0, detail::as_const(b));
      }
      if (i > 0) times.push_back(std::chrono::duration<double>(clock_type::now() - t0).count() / 2);
    }
    return detail::median_of(std::move(times));
  };
  if (r <= 1) {
    c.phase("ping-pong small");
    const double small = round_trip(8);
    c.phase("ping-pong large");
    const double large = round_trip(large_bytes);
    model[0] = std::max(small, 1e-7);
    model[1] = std::max((large - small) / static_cast<double>(large_bytes), 1e-12);
    std::vector<float> a(large_bytes / sizeof(float), 1.0f), b(a.size(), 2.0f);
    const auto t0 = clock_type::now();
    weft::reduce_into(a.data(), b.data(), a.size(), op::sum{});
    model[2] = std::max(
        std::chrono::duration<double>(clock_type::now() - t0).count() / static_cast<double>(large_bytes), 1e-12);
    if (a[a.size() / 2] != 3.0f) model[2] *= 2;  // keeps the reduction from being optimised away
  }
  options bopt = opt;
  broadcast(t, std::span<double>(model), 0, bopt);
  return {model[0], model[1], model[2]};
}

namespace detail {

/// autotune()'s decision over the candidates' batches.
struct tuner_verdict {
  std::size_t winner = 0;               ///< the fastest median (the first of equal ones)
  std::size_t pick = 0;                 ///< what the table records
  std::vector<std::size_t> contenders;  ///< when not empty: undecided, time these again and decide again
};

/// The median over their common rounds of `a[k] / b[k]`: how much slower a is than b, paired round
/// by round. O(rounds).
inline double paired_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  const std::size_t rounds = std::min(a.size(), b.size());
  std::vector<double> ratios(rounds);
  for (std::size_t k = 0; k < rounds; ++k) ratios[k] = a[k] / b[k];
  return median_of(std::move(ratios));
}

/// `batches[c][k]`: candidate c's seconds per call in round k, where round k of every candidate ran
/// back to back (a candidate timed in fewer rounds has fewer). The fastest median wins, except that
/// the cost model's choice (index `prior`; past the end when it was not measured) is kept while,
/// paired round by round with the winner, it is within 3 % (`paired_ratio` at most 1.03): between
/// such near-ties the model is the better guess for the next run and for sizes in between.
/// Pairing is what makes a few percent resolvable: a slow spell of a shared host stretches every
/// batch of a round, so it moves their ratios little and their medians a lot. Unless `last`, the
/// winner and every candidate within 15 % of it (paired) are contenders to be timed again when
/// there are two or more: a few rounds do not order candidates that close. (Measured at n = 2 tcp
/// 1 MiB, where recursive doubling is 10-20 % faster than ring: 5 rounds and then 15 more of the
/// contenders picked it in 14 of 14 processes, 5 rounds alone in 9 of 14; an earlier rule, which
/// kept the model's choice when its fastest batch beat the winner's median, in 4 of 10, and with 25
/// rounds in 0 of 10, since more batches make a fast one likelier.) O(candidates × rounds).
inline tuner_verdict tuner_rule(std::span<const std::vector<double>> batches, std::size_t prior, bool last) {
  std::vector<double> medians(batches.size());
  for (std::size_t c = 0; c < batches.size(); ++c) medians[c] = median_of(batches[c]);
  tuner_verdict v;
  v.winner = static_cast<std::size_t>(std::min_element(medians.begin(), medians.end()) - medians.begin());
  v.pick = v.winner;
  if (prior < batches.size() && prior != v.winner && paired_ratio(batches[prior], batches[v.winner]) <= 1.03)
    v.pick = prior;
  if (last) return v;
  for (std::size_t c = 0; c < batches.size(); ++c)
    if (c == v.winner || paired_ratio(batches[c], batches[v.winner]) <= 1.15) v.contenders.push_back(c);
  if (v.contenders.size() < 2) v.contenders.clear();
  return v;
}

}  // namespace detail

/// The algorithms autotune() compares by default.
inline constexpr std::array<algorithm, 5> autotune_candidates{
    algorithm::ring, algorithm::tree, algorithm::star, algorithm::halving_doubling, algorithm::recursive_doubling};

/// Runs on every rank (collective, same arguments everywhere). For each size in `sizes` (bytes of
/// float data, rounded down to whole floats): one warm-up allreduce per candidate, then `reps`
/// rounds that each time one batch of back-to-back allreduces (at least 3, about 8 MiB moved) of
/// every candidate in turn (so a slow spell of a shared host hits them all alike); each batch's
/// time is the largest over ranks. The candidates within 15 % of the fastest (compared round by
/// round) are timed 3 × reps more rounds; then the fastest median wins, except that the cost
/// model's choice is kept while it is within 3 % of it round by round (`detail::tuner_rule`).
/// Returns the same table on every rank (each candidate's median seconds per call, the pick); pass
/// it as options::table. Throws errc::invalid_argument for no sizes, a size under 4 bytes,
/// reps < 1, or a candidate that is automatic or hierarchical; what allreduce throws otherwise.
/// Cost: reps × candidates batches per size, plus 3 × reps batches per close contender.
template <transport Tr>
tuning_table autotune(Tr& t, std::span<const std::size_t> sizes, int reps = 5,
                      std::span<const algorithm> candidates = autotune_candidates, const options& opt = {}) {
  constexpr const char* where = "weft::comm::autotune";
  expects(!sizes.empty(), errc::invalid_argument, where, "no sizes to measure");
  expects(reps >= 1, errc::invalid_argument, where, "reps ", reps, " must be >= 1");
  expects(!candidates.empty(), errc::invalid_argument, where, "no candidate algorithms");
  for (algorithm a : candidates)
    expects(a != algorithm::automatic && a != algorithm::hierarchical, errc::invalid_argument, where, "candidate ",
            to_string(a), " cannot be timed on its own");
  std::vector<std::size_t> order(sizes.begin(), sizes.end());
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  expects(order.front() >= sizeof(float), errc::invalid_argument, where, "size ", order.front(),
          " is smaller than one float");
  tuning_table table;
  table.ranks = static_cast<int>(t.size());
  std::vector<float> buf(order.back() / sizeof(float), 0.0f);
  std::vector<std::size_t> every(candidates.size());  // the candidates' indices: every one is timed
  std::iota(every.begin(), every.end(), std::size_t{0});
  for (std::size_t bytes : order) {
    std::span<float> data(buf.data(), bytes / sizeof(float));
    const int calls = static_cast<int>(std::clamp<std::size_t>((std::size_t{8} << 20) / bytes, 3, 400));
    auto opts_for = [&](algorithm a) {
      options o = opt;
      o.algo = a;
      o.table = nullptr;
      return o;
    };
    for (algorithm a : candidates) allreduce(t, data, op::sum{}, opts_for(a));  // warm-up
    // Round-robin over the timed candidates, so a slow spell of a shared host hits them all alike.
    std::vector<std::vector<double>> batches(candidates.size());
    auto time_rounds = [&](int rounds, std::span<const std::size_t> which) {
      for (int rep = 0; rep < rounds; ++rep)
        for (std::size_t c : which) {
          const options o = opts_for(candidates[c]);
          barrier(t, o);
          const auto t0 = clock_type::now();
          for (int i = 0; i < calls; ++i) allreduce(t, data, op::sum{}, o);
          batches[c].push_back(std::chrono::duration<double>(clock_type::now() - t0).count() / calls);
        }
    };
    // Every rank's batches, the largest over ranks in each round (the slowest rank is the
    // collective's time), so every rank holds identical numbers and takes identical decisions.
    std::vector<std::vector<double>> agreed;
    auto agree = [&] {
      std::vector<double> flat;
      for (const auto& b : batches) flat.insert(flat.end(), b.begin(), b.end());
      options m = opt;
      m.algo = algorithm::ring;
      m.table = nullptr;
      allreduce(t, std::span<double>(flat), op::max{}, m);
      agreed = batches;
      auto next = flat.begin();
      for (auto& b : agreed)
        for (double& x : b) x = *next++;
    };
    time_rounds(reps, every);
    agree();
    const algorithm prior =
        choose_allreduce(bytes, table.ranks, opt.segment_bytes, opt.model ? *opt.model : cost_model{});
    const std::size_t p =
        static_cast<std::size_t>(std::find(candidates.begin(), candidates.end(), prior) - candidates.begin());
    detail::tuner_verdict v = detail::tuner_rule(agreed, p, false);
    if (!v.contenders.empty()) {
      time_rounds(3 * reps, v.contenders);
      agree();
      v = detail::tuner_rule(agreed, p, true);
    }
    tuning_table::entry e;
    e.bytes = bytes;
    for (std::size_t i = 0; i < candidates.size(); ++i)
      e.seconds.emplace_back(candidates[i], detail::median_of(agreed[i]));
    e.best = candidates[v.pick];
    table.entries.push_back(std::move(e));
  }
  return table;
}

}  // namespace weft::comm

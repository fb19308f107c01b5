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
#include <vector>

namespace weft::comm {

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
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
    return times[times.size() / 2];
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

/// autotune()'s decision over the candidates' medians and fastest batches (seconds per call).
struct tuner_verdict {
  std::size_t winner = 0;  ///< the fastest median (the first of equal ones)
  std::size_t pick = 0;    ///< what the table records
  bool retime = false;     ///< undecided: time the prior and the winner again, then decide again
};

/// The fastest median wins, except that the cost model's choice (index `prior`; past the end when
/// it was not measured) is kept when the difference is within the noise: its median within 3% of
/// the winner's, or its fastest batch at most the winner's median. A gap inside the noise says
/// nothing about the next run, while the model is the same every run and the better guess for
/// sizes in between (on a shared 2-core host, 5 batches of a few ms often differ by 30% between
/// runs). When only the overlap of the batches keeps the prior (the case behind the bench's
/// largest regrets, near the sizes where two algorithms cross), the verdict asks for more
/// batches of the two. O(candidates).
inline tuner_verdict tuner_rule(std::span<const double> medians, std::span<const double> fastest_batch,
                                std::size_t prior) noexcept {
  tuner_verdict v;
  v.winner = static_cast<std::size_t>(std::min_element(medians.begin(), medians.end()) - medians.begin());
  v.pick = v.winner;
  if (prior >= medians.size() || prior == v.winner) return v;
  const bool close = medians[prior] <= medians[v.winner] * 1.03;
  const bool overlap = fastest_batch[prior] <= medians[v.winner];
  if (close || overlap) v.pick = prior;
  v.retime = !close && overlap;
  return v;
}

}  // namespace detail

/// The algorithms autotune() compares by default.
inline constexpr std::array<algorithm, 5> autotune_candidates{
    algorithm::ring, algorithm::tree, algorithm::star, algorithm::halving_doubling, algorithm::recursive_doubling};

/// Runs on every rank (collective, same arguments everywhere). For each size in `sizes` (bytes of
/// float data, rounded down to whole floats): one warm-up allreduce per candidate, then `reps`
/// rounds that each time one batch of back-to-back allreduces (at least 3, about 8 MiB moved) of
/// every candidate in turn (so a slow spell of a shared host hits them all alike); each rank's
/// median and fastest batch per call, the largest over ranks. The fastest median wins, except
/// that the cost model's choice wins when the difference is within the noise: its median within
/// 3% of the fastest, or its fastest batch at most the fastest candidate's median (the ranges
/// overlap, so another run may well order them the other way). When only the overlap keeps the
/// model's choice, those two are timed 2 × reps more rounds first and the rule applied again to
/// all their batches. Returns the same table on every rank; pass it as options::table. Throws
/// errc::invalid_argument for no sizes, a size under 4 bytes, reps < 1, or a candidate that is
/// automatic or hierarchical; what allreduce throws otherwise. Cost: about reps × candidates ×
/// sizes batches, plus 4 × reps batches at each undecided size.
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
    // Per candidate: the median batch, then the fastest (both the largest over ranks, so every
    // rank holds identical numbers and takes identical decisions below).
    std::vector<double> stats(2 * candidates.size());
    auto summarize = [&] {
      for (std::size_t c = 0; c < candidates.size(); ++c) {
        auto& b = batches[c];
        std::nth_element(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(b.size() / 2), b.end());
        stats[c] = b[b.size() / 2];
        stats[candidates.size() + c] = *std::min_element(b.begin(), b.end());
      }
      options m = opt;
      m.algo = algorithm::ring;
      m.table = nullptr;
      allreduce(t, std::span<double>(stats), op::max{}, m);
    };
    time_rounds(reps, every);
    summarize();
    const std::span<const double> medians(stats.data(), candidates.size());
    const std::span<const double> fastest_batch(stats.data() + candidates.size(), candidates.size());
    const algorithm prior =
        choose_allreduce(bytes, table.ranks, opt.segment_bytes, opt.model ? *opt.model : cost_model{});
    const std::size_t p =
        static_cast<std::size_t>(std::find(candidates.begin(), candidates.end(), prior) - candidates.begin());
    detail::tuner_verdict v = detail::tuner_rule(medians, fastest_batch, p);
    if (v.retime) {
      const std::array<std::size_t, 2> pair{p, v.winner};
      time_rounds(2 * reps, pair);
      summarize();
      v = detail::tuner_rule(medians, fastest_batch, p);
    }
    tuning_table::entry e;
    e.bytes = bytes;
    for (std::size_t i = 0; i < candidates.size(); ++i) e.seconds.emplace_back(candidates[i], medians[i]);
    e.best = candidates[v.pick];
    table.entries.push_back(std::move(e));
  }
  return table;
}

}  // namespace weft::comm

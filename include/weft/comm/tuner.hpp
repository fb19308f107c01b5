// Chooses an allreduce algorithm: from the alpha-beta(-gamma) cost model of Hockney (1994) as used
// by Thakur, Rabenseifner & Gropp, "Optimization of collective communication operations in MPICH"
// (IJHPCA 2005, §4) — a message of m bytes costs alpha + m*beta, reducing m bytes m*gamma — or from
// a table of measured times (autotune(), calibrate.hpp), as MPI libraries' tuned decision rules do.
#pragma once

#include <weft/comm/options.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace weft::comm {

/// Per-message latency alpha (seconds), per-byte transfer time beta (s/B) and per-byte reduction
/// time gamma (s/B) of one transport on one machine. calibrate() (calibrate.hpp) measures them.
/// A plain value; thread-safe to copy.
struct cost_model {
  double alpha = 20e-6;   ///< seconds per message
  double beta = 0.5e-9;   ///< seconds per byte sent (2 GB/s)
  double gamma = 0.1e-9;  ///< seconds per byte reduced (10 GB/s)
};

/// Predicted seconds of allreduce algorithm `a` for `bytes` bytes on `p` ranks with pipelining
/// segments of `segment_bytes`. The formulas are documented in docs/comm.md. O(1).
/// Throws errc::invalid_argument for p < 1, segment_bytes == 0 or an algorithm it cannot model.
inline double predict_allreduce(algorithm a, std::size_t bytes, int p, std::size_t segment_bytes,
                                const cost_model& m = {}) {
  expects(p >= 1, errc::invalid_argument, "weft::comm::predict_allreduce", "rank count ", p, " must be >= 1");
  expects(segment_bytes > 0, errc::invalid_argument, "weft::comm::predict_allreduce", "segment_bytes must be > 0");
  if (p == 1) return 0.0;
  const double n = static_cast<double>(bytes), P = static_cast<double>(p), seg = static_cast<double>(segment_bytes);
  const double lg = std::ceil(std::log2(P));
  switch (a) {
    case algorithm::ring: {
      // Each of the p-1 reduce-scatter steps moves a chunk of n/p in `segs` segments and reduces
      // segment j while segment j+1 streams in, so only one segment's reduction per step is
      // exposed (or, when reducing is the slower side, one segment's transfer); the p-1 allgather
      // steps only move. Halving-doubling reduces each half only once it has arrived whole, so for
      // chunks of several segments the pipelined ring wins, as measured.
      const double chunk = n / P;
      const double segs = std::max(1.0, std::ceil(chunk / seg));
      const double piece = chunk / segs;
      const double move = segs * (m.alpha + piece * m.beta), reduce = segs * piece * m.gamma;
      const double step = std::max(move + piece * m.gamma, reduce + m.alpha + piece * m.beta);
      return (P - 1) * step + (P - 1) * move;
    }
    case algorithm::tree: {
      // Two trees each carry n/2; a pipelined tree costs (depth + segments) message times per
      // direction; an inner node receives two children and sends to two children per segment.
      const double segs = std::max(1.0, std::ceil(n / 2 / seg));
      const double per_seg = std::min(n / 2, seg);
      return 2 * (lg + segs) * (m.alpha + 2 * per_seg * m.beta) + n * m.gamma;
    }
    case algorithm::star: {
      const double segs = std::max(1.0, std::ceil(n / seg));
      return 2 * (P - 1) * segs * m.alpha + 2 * (P - 1) * n * m.beta + (P - 1) * n * m.gamma;
    }
    case algorithm::halving_doubling: {
      const double pp = std::exp2(std::floor(std::log2(P)));
      const double extra = pp == P ? 0.0 : 2 * (m.alpha + n * m.beta) + n * m.gamma;
      return 2 * std::log2(pp) * m.alpha + 2 * (pp - 1) / pp * n * m.beta + (pp - 1) / pp * n * m.gamma + extra;
    }
    case algorithm::recursive_doubling: {
      const double pp = std::exp2(std::floor(std::log2(P)));
      const double extra = pp == P ? 0.0 : 2 * (m.alpha + n * m.beta) + n * m.gamma;
      return std::log2(pp) * (m.alpha + n * m.beta + n * m.gamma) + extra;
    }
    default:
      break;
  }
  weft::detail::raise(errc::invalid_argument, "weft::comm::predict_allreduce", "algorithm ", to_string(a),
                      " has no single-level cost model (hierarchical is chosen by the caller)");
}

/// The algorithm with the least predicted time among ring, tree, star and halving_doubling;
/// ties go to the earlier in that list, so every rank with the same model picks the same one.
/// O(1). Thread-safe.
inline algorithm choose_allreduce(std::size_t bytes, int p, std::size_t segment_bytes, const cost_model& m = {}) {
  constexpr std::array candidates{algorithm::ring, algorithm::tree, algorithm::star, algorithm::halving_doubling,
                                  algorithm::recursive_doubling};
  algorithm best = algorithm::ring;
  double best_time = predict_allreduce(best, bytes, p, segment_bytes, m);
  for (algorithm a : candidates) {
    const double t = predict_allreduce(a, bytes, p, segment_bytes, m);
    if (t < best_time) {
      best = a;
      best_time = t;
    }
  }
  return best;
}

/// What autotune() measured for one transport and rank count: per message size, the median time
/// of each candidate algorithm (the same on every rank: each rank's median, then the largest over
/// ranks) and the fastest. A plain value; thread-safe to read.
struct tuning_table {
  struct entry {
    std::size_t bytes = 0;
    algorithm best = algorithm::ring;
    std::vector<std::pair<algorithm, double>> seconds;  ///< candidate, median seconds
  };
  int ranks = 0;               ///< the rank count it was measured for
  std::vector<entry> entries;  ///< ascending bytes

  /// The fastest algorithm at the measured size nearest to `bytes` on a log scale (ties to the
  /// smaller size). Throws errc::precondition when the table is empty. O(log entries).
  algorithm choose(std::size_t bytes) const {
    expects(!entries.empty(), errc::precondition, "weft::comm::tuning_table::choose", "the table is empty");
    const auto it = std::lower_bound(entries.begin(), entries.end(), bytes,
                                     [](const entry& e, std::size_t b) { return e.bytes < b; });
    if (it == entries.begin()) return it->best;
    if (it == entries.end()) return entries.back().best;
    const double up =
        std::log2(static_cast<double>(it->bytes)) - std::log2(static_cast<double>(std::max<std::size_t>(bytes, 1)));
    const double down = std::log2(static_cast<double>(std::max<std::size_t>(bytes, 1))) -
                        std::log2(static_cast<double>(std::prev(it)->bytes));
    return up < down ? it->best : std::prev(it)->best;
  }
};

/// The algorithm `automatic` resolves to for `bytes` on `p` ranks with these options: the table's
/// when one is given for p ranks, else the model's (the built-in default when none). The same on
/// every rank that passes the same options. O(1) or O(log table).
inline algorithm resolve_automatic(std::size_t bytes, int p, const options& opt) {
  if (opt.table && opt.table->ranks == p && !opt.table->entries.empty()) return opt.table->choose(bytes);
  return choose_allreduce(bytes, p, opt.segment_bytes, opt.model ? *opt.model : cost_model{});
}

}  // namespace weft::comm

// Ring order from measured peer-to-peer bandwidth: a TSP-style heuristic over the complete graph
// whose edge weights are seconds per byte (Boost.Graph's metric_tsp_approx_tour, the MST-doubling
// 2-approximation of Rosenkrantz, Stearns & Lewis 1977, then 2-opt, Croes 1958), and a routine
// that measures the bandwidth matrix over any transport by pairwise ping-pong.
#pragma once

#include <weft/comm/collectives.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/core/error.hpp>

#include <boost/graph/adjacency_matrix.hpp>
#include <boost/graph/metric_tsp_approx.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <iterator>
#include <limits>
#include <span>
#include <vector>

namespace weft::comm::elastic {

/// Bandwidth between members in bytes per second, row-major n×n; entry (i, j) for i != j must be
/// positive (the diagonal is ignored). Asymmetric entries are averaged.
using bandwidth_matrix = std::vector<std::vector<double>>;

/// Sum over the ring's links of 1/bandwidth (seconds per byte around the ring). O(n).
inline double ring_cost(const bandwidth_matrix& bw, const std::vector<int>& order) {
  double c = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto a = static_cast<std::size_t>(order[i]), b = static_cast<std::size_t>(order[(i + 1) % order.size()]);
    if (a != b) c += 2.0 / (bw[a][b] + bw[b][a]);
  }
  return c;
}

/// Slowest link of the ring (bytes per second): what bounds a ring allreduce's busbw. O(n).
inline double ring_bottleneck(const bandwidth_matrix& bw, const std::vector<int>& order) {
  double m = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto a = static_cast<std::size_t>(order[i]), b = static_cast<std::size_t>(order[(i + 1) % order.size()]);
    if (a != b) m = std::min(m, (bw[a][b] + bw[b][a]) / 2);
  }
  return m;
}

/// A ring order (a permutation of [0, n) starting at 0) with low total seconds-per-byte. Throws
/// errc::invalid_argument for a non-square matrix or a non-positive off-diagonal entry.
/// O(n² log n) for the tour plus O(n²) per 2-opt sweep (at most n sweeps). Thread-safe.
inline std::vector<int> plan_ring(const bandwidth_matrix& bw) {
  constexpr const char* where = "weft::comm::elastic::plan_ring";
  const std::size_t n = bw.size();
  for (std::size_t i = 0; i < n; ++i) {
    expects(bw[i].size() == n, errc::invalid_argument, where, "row ", i, " has ", bw[i].size(), " entries, need ", n);
    for (std::size_t j = 0; j < n; ++j)
      expects(i == j || bw[i][j] > 0, errc::invalid_argument, where, "bandwidth(", i, ", ", j, ") = ", bw[i][j],
              " must be positive");
  }
  if (n <= 3) {
    std::vector<int> trivial(n);
    for (std::size_t i = 0; i < n; ++i) trivial[i] = static_cast<int>(i);
    return trivial;
  }
  using graph =
      boost::adjacency_matrix<boost::undirectedS, boost::no_property, boost::property<boost::edge_weight_t, double>>;
  graph g(n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) boost::add_edge(i, j, 2.0 / (bw[i][j] + bw[j][i]), g);
  std::vector<graph::vertex_descriptor> tour;
  boost::metric_tsp_approx_tour(g, std::back_inserter(tour));
  std::vector<int> order;
  for (auto v : tour)
    if (std::find(order.begin(), order.end(), static_cast<int>(v)) == order.end()) order.push_back(static_cast<int>(v));
  // 2-opt: reverse a segment while that shortens the ring.
  for (std::size_t sweep = 0; sweep < n; ++sweep) {
    bool improved = false;
    for (std::size_t i = 1; i + 1 < n; ++i)
      for (std::size_t j = i + 1; j < n; ++j) {
        auto candidate = order;
        std::reverse(candidate.begin() + static_cast<std::ptrdiff_t>(i),
                     candidate.begin() + static_cast<std::ptrdiff_t>(j) + 1);
        if (ring_cost(bw, candidate) < ring_cost(bw, order) * (1 - 1e-12)) {
          order = std::move(candidate);
          improved = true;
        }
      }
    if (!improved) break;
  }
  std::rotate(order.begin(), std::find(order.begin(), order.end(), 0), order.end());
  return order;
}

/// Measures the bandwidth matrix of a group: every pair (i < j), in a fixed order, ping-pongs one
/// message of `bytes` each way and i times it; the rows are then allgathered, so every rank
/// returns the same matrix. Collective (every rank calls it); O(n²) sequential exchanges.
template <transport Tr>
bandwidth_matrix measure_bandwidth(Tr& t, std::size_t bytes = std::size_t{1} << 20, options opt = {}) {
  expects(bytes > 0, errc::invalid_argument, "weft::comm::elastic::measure_bandwidth", "bytes must be positive");
  const int n = static_cast<int>(t.size()), r = static_cast<int>(t.rank());
  std::vector<std::byte> buf(bytes);
  std::vector<double> row(static_cast<std::size_t>(n), 0.0);
  const msg_tag tag{opt.channel, 0x62770000u};
  const auto until = clock_type::now() + opt.timeout;
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      if (r == i) {
        const auto t0 = clock_type::now();
        t.send(j, tag, std::span<const std::byte>(buf), until);
        t.recv(j, tag, std::span<std::byte>(buf), until);
        const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
        row[static_cast<std::size_t>(j)] = 2.0 * static_cast<double>(bytes) / std::max(s, 1e-9);
      } else if (r == j) {
        t.recv(i, tag, std::span<std::byte>(buf), until);
        t.send(i, tag, std::span<const std::byte>(buf), until);
      }
    }
  std::vector<double> all(static_cast<std::size_t>(n) * static_cast<std::size_t>(n));
  allgather(t, std::span<const double>(row), std::span<double>(all), opt);
  bandwidth_matrix bw(static_cast<std::size_t>(n), std::vector<double>(static_cast<std::size_t>(n)));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const auto ij = all[static_cast<std::size_t>(i * n + j)], ji = all[static_cast<std::size_t>(j * n + i)];
      bw[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] = i == j ? 0 : std::max(ij, ji);
    }
  return bw;
}

}  // namespace weft::comm::elastic

// Shared by the benchmarks that time two transports side by side in one run (elastic_mesh_bench:
// tcp_transport vs the elastic mesh; elastic_tls_bench: plaintext vs TLS mesh): the two workloads
// (ring allreduce, shift) and the printed line of both medians, their ranges and the ratio B / A.
#pragma once

#include "common.hpp"

#include <weft/comm.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <span>
#include <vector>

namespace bench {

/// Seconds per ring allreduce (sum) of `data`, the mean of `iters` back-to-back calls.
template <class Transport>
double ring_allreduce_seconds(Transport& t, std::span<float> data, int iters) {
  namespace wc = weft::comm;
  wc::options opt;
  opt.algo = wc::algorithm::ring;
  opt.timeout = std::chrono::minutes(2);
  wc::barrier(t);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) wc::allreduce(t, data, weft::op::sum{}, opt);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

/// Seconds per shift: this rank sends `out` to the next rank and receives `in` from the previous.
template <class Transport>
double shift_seconds(Transport& t, std::span<const std::byte> out, std::span<std::byte> in, int iters) {
  namespace wc = weft::comm;
  const int n = t.size(), r = t.rank();
  const auto until = wc::clock_type::now() + std::chrono::minutes(2);
  wc::barrier(t);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) t.sendrecv((r + 1) % n, out, (r + n - 1) % n, in, wc::msg_tag{0x5417u, 0}, until);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

/// "bytes workload  A median [min-max]  B median [min-max]  B/A" for rates (GB/s) of A and B.
inline void print_ab_line(std::size_t bytes, const char* what, const std::vector<double>& a,
                          const std::vector<double>& b) {
  const auto [amin, amax] = std::minmax_element(a.begin(), a.end());
  const auto [bmin, bmax] = std::minmax_element(b.begin(), b.end());
  const double amed = median(a), bmed = median(b);
  std::printf("%10zu  %-9s  %7.3f [%7.3f-%7.3f]     %7.3f [%7.3f-%7.3f]     %.3f\n", bytes, what, amed, *amin, *amax,
              bmed, *bmin, *bmax, bmed / amed);
  std::fflush(stdout);
}

}  // namespace bench

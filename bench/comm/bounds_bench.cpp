// Upper bounds on allreduce bus bandwidth on this host, from the memory copy rate. In an allreduce
// each rank receives 2(p-1)/p·n bytes, so busbw = 2(p-1)/p·n / t, and every received byte is
// copied at least once (shared memory, single copy) or twice (loopback TCP: into the kernel's
// socket buffer and out of it). With k = min(p, cores) cores copying at an aggregate peak rate A,
// t >= copies · 2(p-1)·n / A, so
//   busbw <= A / p          (shm)
//   busbw <= A / (2p)       (tcp on loopback)
// A is the best aggregate rate of k concurrent memcpy threads over buffer sizes from 16 KiB to
// 64 MiB (in-cache copies are the fastest a copy can be), so the bound holds at every message size.
// It ignores the reduction's own work, so it is loose, but no implementation can exceed it.
// Usage: bench_comm_bounds --ranks N [--min B] [--max B] [--factor F] [--round K] [--out file.csv]
#include "common.hpp"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace {

// Aggregate bytes/s of k threads each copying `bytes` between its own two buffers, repeatedly for
// about 20 ms, all at once.
double aggregate_copy_rate(int k, std::size_t bytes) {
  std::vector<std::vector<char>> src(static_cast<std::size_t>(k)), dst(static_cast<std::size_t>(k));
  for (int i = 0; i < k; ++i) {
    src[static_cast<std::size_t>(i)].assign(bytes, static_cast<char>(i + 1));
    dst[static_cast<std::size_t>(i)].assign(bytes, 0);
  }
  const int copies = static_cast<int>(std::clamp<std::size_t>((std::size_t{64} << 20) / bytes, 2, 20000));
  std::vector<double> seconds(static_cast<std::size_t>(k));
  std::barrier start(k);
  std::vector<std::thread> threads;
  for (int i = 0; i < k; ++i)
    threads.emplace_back([&, i] {
      auto& s = src[static_cast<std::size_t>(i)];
      auto& d = dst[static_cast<std::size_t>(i)];
      std::memcpy(d.data(), s.data(), bytes);  // warm
      start.arrive_and_wait();
      const auto t0 = std::chrono::steady_clock::now();
      for (int c = 0; c < copies; ++c) {
        std::memcpy(d.data(), s.data(), bytes);
        std::atomic_signal_fence(std::memory_order_seq_cst);  // keep every copy
      }
      seconds[static_cast<std::size_t>(i)] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  for (auto& t : threads) t.join();
  const double slowest = *std::max_element(seconds.begin(), seconds.end());
  return static_cast<double>(k) * static_cast<double>(copies) * static_cast<double>(bytes) / slowest;
}

}  // namespace

int main(int argc, char** argv) {
  auto f = bench::parse(argc, argv);
  const int k = std::min(f.ranks, bench::allowed_cores());
  double peak = 0;
  for (std::size_t b = std::size_t{16} << 10; b <= (std::size_t{64} << 20); b *= 4)
    for (int rep = 0; rep < 3; ++rep) peak = std::max(peak, aggregate_copy_rate(k, b));
  std::printf("# copy bound: %d of %d cores, peak aggregate memcpy %.1f GB/s\n", k, bench::allowed_cores(), peak / 1e9);
  // Rows carry the bound as busbw: time = 2(p-1)/p·n / bound, so busbw comes out as the bound.
  const double p = f.ranks;
  for (std::size_t bytes : bench::sizes(f)) {
    const double alg = 2.0 * (p - 1) / p * static_cast<double>(bytes);
    bench::row(f, "bound", "shm", "copy_once", bytes, alg / (peak / p));
    bench::row(f, "bound", "tcp", "copy_twice", bytes, alg / (peak / (2 * p)));
  }
  return 0;
}

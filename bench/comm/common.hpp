// Shared by the comm benchmarks: command-line flags, the size sweep, the number of back-to-back
// calls per timed batch, nccl-tests' bandwidth definitions (algbw = bytes / time, busbw = algbw *
// 2(n-1)/n for allreduce) and CSV rows. One invocation is one round: run.sh interleaves rounds of
// every implementation, and plot.py takes the median and min-max over rounds.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>

namespace bench {

/// The cores this process may run on (its affinity mask, as nproc counts them).
inline int allowed_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

/// The --iters default: with more ranks than cores a call's time depends on how the OS time-slices
/// the ranks (a batch of 4 calls at 1 MiB spans about one slice: single rounds of one algorithm
/// ranged 680-4,771 us at n = 4 on 2 cores, and ordered two algorithms 10 % apart at random), so
/// batches are then at least 32 calls, many slices each; otherwise 3.
inline int default_iters(int ranks) { return ranks > allowed_cores() ? 32 : 3; }

struct flags {
  std::string transport = "tcp";  // tcp | shm (weft), label for mpi
  int ranks = 2;
  std::size_t min_bytes = 4096;
  std::size_t max_bytes = std::size_t{64} << 20;
  int iters = 0;         // at least this many calls per timed batch (more for small sizes); 0: default_iters
  int reps = 1;          // batches per invocation; the median batch is reported
  int round = 0;         // label of this round in the CSV
  int factor = 4;        // size step
  std::string out = "";  // CSV file (appended)
  std::string algos = "ring,tree,halving_doubling,star,recursive_doubling";
  std::string wait = "automatic";  // weft's wait mode: automatic | spin | yield | block
  std::size_t segment = 0;         // weft's options::segment_bytes (0: the default)
  int conns = 0;                   // weft tcp: connections per peer (0: the default)
  int sockbuf = 0;                 // weft tcp: SO_SNDBUF and SO_RCVBUF (0: the default)
  std::string tune_out = "";       // weft: autotune and write the table here (then measure "automatic")
  std::string tune_in = "";        // weft: read the table from here (and measure "automatic")
  int tune_reps = 5;               // weft: batches per candidate when tuning
  bool tune_only = false;          // weft: with --tune-out, write the table and measure nothing
  bool reference = false;          // weft: also measure the transport's streaming reference
  std::size_t ring = 0;            // weft shm: shm_options::ring_bytes (0: the default)
  bool bind = false;               // weft: bind rank r to the r-th allowed core when the ranks fit (as mpirun)
  bool label_wait = false;         // weft: name rows "weft-<wait mode>=<mode in force>" (wait_modes.sh)
};

inline flags parse(int argc, char** argv) {
  flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--transport")
      f.transport = v;
    else if (k == "--ranks")
      f.ranks = std::atoi(v.c_str());
    else if (k == "--min")
      f.min_bytes = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--max")
      f.max_bytes = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--iters")
      f.iters = std::atoi(v.c_str());
    else if (k == "--reps")
      f.reps = std::atoi(v.c_str());
    else if (k == "--round")
      f.round = std::atoi(v.c_str());
    else if (k == "--factor")
      f.factor = std::atoi(v.c_str());
    else if (k == "--out")
      f.out = v;
    else if (k == "--algos")
      f.algos = v;
    else if (k == "--wait")
      f.wait = v;
    else if (k == "--segment")
      f.segment = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--conns")
      f.conns = std::atoi(v.c_str());
    else if (k == "--sockbuf")
      f.sockbuf = std::atoi(v.c_str());
    else if (k == "--tune-out")
      f.tune_out = v;
    else if (k == "--tune-in")
      f.tune_in = v;
    else if (k == "--tune-reps")
      f.tune_reps = std::atoi(v.c_str());
    else if (k == "--tune-only")
      f.tune_only = v == "1";
    else if (k == "--reference")
      f.reference = v == "1";
    else if (k == "--ring")
      f.ring = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--bind")
      f.bind = v == "1";
    else if (k == "--label-wait")
      f.label_wait = v == "1";
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (f.iters == 0) f.iters = default_iters(f.ranks);
  if (f.ranks < 1 || f.min_bytes < 4 || f.max_bytes < f.min_bytes || f.iters < 1 || f.reps < 1 || f.factor < 2 ||
      f.tune_reps < 1) {
    std::fprintf(stderr, "bad flags\n");
    std::exit(2);
  }
  return f;
}

inline std::vector<std::size_t> sizes(const flags& f) {
  std::vector<std::size_t> s;
  for (std::size_t b = f.min_bytes; b <= f.max_bytes; b *= static_cast<std::size_t>(f.factor)) s.push_back(b / 4 * 4);
  return s;
}

/// Calls per timed batch: enough that a batch moves about 4 MiB (small sizes would otherwise be
/// dominated by the timer and the barrier), at least --iters, at most 4000.
inline int calls_for(const flags& f, std::size_t bytes) {
  const std::size_t by_volume = (std::size_t{4} << 20) / std::max<std::size_t>(bytes, 1);
  return static_cast<int>(std::clamp<std::size_t>(by_volume, static_cast<std::size_t>(f.iters), 4000));
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// One CSV row: impl,transport,ranks,algorithm,bytes,round,time_us,algbw_GBps,busbw_GBps
inline void row(const flags& f, const std::string& impl, const std::string& transport, const std::string& algo,
                std::size_t bytes, double seconds, bool allreduce = true) {
  const double algbw = static_cast<double>(bytes) / seconds / 1e9;
  const double busbw = allreduce ? algbw * 2.0 * (f.ranks - 1) / f.ranks : algbw;
  std::printf("%-8s %-4s n=%d %-22s %10zu B %12.2f us  algbw %7.3f  busbw %7.3f GB/s\n", impl.c_str(),
              transport.c_str(), f.ranks, algo.c_str(), bytes, seconds * 1e6, algbw, busbw);
  std::fflush(stdout);
  if (!f.out.empty()) {
    if (FILE* out = std::fopen(f.out.c_str(), "a")) {
      std::fprintf(out, "%s,%s,%d,%s,%zu,%d,%.3f,%.4f,%.4f\n", impl.c_str(), transport.c_str(), f.ranks, algo.c_str(),
                   bytes, f.round, seconds * 1e6, algbw, busbw);
      std::fclose(out);
    }
  }
}

}  // namespace bench

// Shared by the comm benchmarks: command-line flags, the size sweep, nccl-tests' bandwidth
// definitions (algbw = bytes / time, busbw = algbw * 2(n-1)/n for allreduce) and CSV rows.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace bench {

struct flags {
  std::string mode = "weft";      // weft | gloo | mpi
  std::string transport = "tcp";  // tcp | shm (weft), label for mpi
  int ranks = 2;
  std::size_t min_bytes = 4096;
  std::size_t max_bytes = std::size_t{64} << 20;
  int iters = 5;         // allreduces per timed batch
  int reps = 3;          // batches; the median batch is reported
  int factor = 4;        // size step
  std::string out = "";  // CSV file (appended)
  std::string algos = "ring,tree,halving_doubling,star,recursive_doubling";
};

inline flags parse(int argc, char** argv) {
  flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--mode")
      f.mode = v;
    else if (k == "--transport")
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
    else if (k == "--factor")
      f.factor = std::atoi(v.c_str());
    else if (k == "--out")
      f.out = v;
    else if (k == "--algos")
      f.algos = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (f.ranks < 1 || f.min_bytes < 4 || f.max_bytes < f.min_bytes || f.iters < 1 || f.reps < 1 || f.factor < 2) {
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

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// One CSV row: impl,transport,ranks,algorithm,bytes,time_us,algbw_GBps,busbw_GBps
inline void row(const flags& f, const std::string& impl, const std::string& transport, const std::string& algo,
                std::size_t bytes, double seconds, bool allreduce = true) {
  const double algbw = static_cast<double>(bytes) / seconds / 1e9;
  const double busbw = allreduce ? algbw * 2.0 * (f.ranks - 1) / f.ranks : algbw;
  std::printf("%-8s %-4s n=%d %-18s %10zu B %12.1f us  algbw %7.3f  busbw %7.3f GB/s\n", impl.c_str(),
              transport.c_str(), f.ranks, algo.c_str(), bytes, seconds * 1e6, algbw, busbw);
  std::fflush(stdout);
  if (!f.out.empty()) {
    if (FILE* out = std::fopen(f.out.c_str(), "a")) {
      std::fprintf(out, "%s,%s,%d,%s,%zu,%.3f,%.4f,%.4f\n", impl.c_str(), transport.c_str(), f.ranks, algo.c_str(),
                   bytes, seconds * 1e6, algbw, busbw);
      std::fclose(out);
    }
  }
}

}  // namespace bench

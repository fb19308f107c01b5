// Coded allreduce (<weft/coding/coded_allreduce.hpp>) against the plain allreduce a data-parallel
// engine would run instead: n = 4 forked processes over weft::comm's TCP transport on loopback, a
// 16 MiB float32 gradient. (a) nobody straggles: coded vs plain allreduce of the same size; (b) one
// worker starts 2x a plain step late: coded (the survivors decode without it) vs plain (everyone
// waits for the slowest). Times are the slowest participating rank's, from a common barrier to the
// end of the call, median and min-max over the repetitions. Writes coding_coded_allreduce.csv.
#include <weft/coding/codec.hpp>
#include <weft/coding/coded_allreduce.hpp>
#include <weft/coding/cyclic_repetition.hpp>
#include <weft/comm/collectives.hpp>
#include <weft/comm/launcher.hpp>
#include <weft/comm/tcp_transport.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace wc = weft::comm;
using namespace weft::coding;
using namespace std::chrono;

namespace {

constexpr int n = 4;
constexpr std::size_t dim = (std::size_t{16} << 20) / sizeof(float);

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Seconds from a barrier to the end of fn on this rank; the group's maximum over `who` (ranks for
// which only[r] is true) is returned on every rank.
template <class Fn>
double timed(wc::tcp_transport& t, const std::vector<char>& who, Fn&& fn) {
  wc::barrier(t);
  const auto t0 = steady_clock::now();
  fn();
  double mine = duration<double>(steady_clock::now() - t0).count();
  if (!who[static_cast<std::size_t>(t.rank())]) mine = 0;
  std::vector<double> all(n);
  wc::allgather(t, std::span<const double>(&mine, 1), std::span<double>(all));
  return *std::max_element(all.begin(), all.end());
}

// t: the plain allreduce and the timing collectives; coded_t: the coded group's own transport (it
// needs one to itself), the same kind of connections over the same ranks.
void body(wc::tcp_transport& t, wc::tcp_transport& coded_t, int reps, std::FILE* out) {
  const auto code = hybrid_repetition(n, 1);  // groups {0,1}, {2,3}: any 3 decode
  coded_allreduce_options opt;
  opt.patience = milliseconds(5);
  coded_allreduce<wc::tcp_transport, linear_code> group(coded_t, code, dim, opt);
  std::vector<float> msg(dim, 1.0f + static_cast<float>(t.rank())), buf(dim), out_buf(dim);
  const std::vector<char> everyone(n, 1), survivors{1, 1, 1, 0};
  const int late = n - 1;
  std::vector<double> plain, coded, plain_late, coded_late;
  // Warm-up: connections, page faults, the decoders of both survivor sets.
  for (int w = 0; w < 2; ++w) {
    std::copy(msg.begin(), msg.end(), buf.begin());
    wc::allreduce(t, std::span<float>(buf));
    group.reduce(msg, out_buf);
  }
  for (int r = 0; r < reps; ++r) {
    plain.push_back(timed(t, everyone, [&] {
      std::copy(msg.begin(), msg.end(), buf.begin());
      wc::allreduce(t, std::span<float>(buf));
    }));
    coded.push_back(timed(t, everyone, [&] { group.reduce(msg, out_buf); }));
  }
  const auto delay = duration<double>(2.0 * median(plain));
  for (int r = 0; r < reps; ++r) {
    plain_late.push_back(timed(t, survivors, [&] {
      if (t.rank() == late) std::this_thread::sleep_for(delay);
      std::copy(msg.begin(), msg.end(), buf.begin());
      wc::allreduce(t, std::span<float>(buf));
    }));
    coded_late.push_back(timed(t, survivors, [&] {
      if (t.rank() == late) std::this_thread::sleep_for(delay);
      group.reduce(msg, out_buf);
    }));
  }
  if (t.rank() != 0) return;
  auto row = [&](const char* name, const std::vector<double>& v, const std::vector<double>& peer,
                 const char* peer_name) {
    std::printf("%-34s median %7.1f ms (min %7.1f, max %7.1f) | %-30s median %7.1f ms | ratio %.2f\n", name,
                1e3 * median(v), 1e3 * *std::min_element(v.begin(), v.end()),
                1e3 * *std::max_element(v.begin(), v.end()), peer_name, 1e3 * median(peer), median(v) / median(peer));
    for (std::size_t i = 0; i < v.size(); ++i)
      std::fprintf(out, "%s,%zu,%.6f,%s,%.6f\n", name, i, v[i], peer_name, peer[i]);
  };
  std::printf("n = %d ranks over tcp (loopback), %zu MiB float32, %d repetitions, patience %lld ms\n", n,
              dim * sizeof(float) >> 20, reps,
              static_cast<long long>(duration_cast<milliseconds>(opt.patience).count()));
  row("coded allreduce, nobody late", coded, plain, "plain allreduce");
  row("plain allreduce (peer)", plain, plain, "plain allreduce");
  std::printf("one rank %.0f ms late (2x the plain median):\n", 1e3 * delay.count());
  row("coded allreduce, survivors", coded_late, plain_late, "plain, waiting for the slowest");
  row("plain allreduce, waiting (peer)", plain_late, plain_late, "plain, waiting for the slowest");
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(5, std::atoi(argv[1])) : 7;
  const auto store =
      std::filesystem::temp_directory_path() / ("weft-coded-allreduce-bench-" + std::to_string(::getpid()));
  std::filesystem::remove_all(store);
  const std::string csv = std::string(WEFT_BENCH_OUT) + "/coding_coded_allreduce.csv";
  const auto result = wc::fork_ranks(
      n,
      [&](int rank) {
        wc::tcp_options o;
        o.bind = "127.0.0.1";
        wc::tcp_transport t(rank, n, wc::tcp_rendezvous::file_store((store / "plain").string()), o);
        wc::tcp_transport coded_t(rank, n, wc::tcp_rendezvous::file_store((store / "coded").string()), o);
        std::FILE* out = rank == 0 ? std::fopen(csv.c_str(), "w") : nullptr;
        if (out) std::fprintf(out, "config,rep,seconds,peer,peer_seconds\n");
        body(t, coded_t, reps, out);
        if (out) std::fclose(out);
      },
      minutes(5));
  std::filesystem::remove_all(store);
  if (!result.ok()) {
    std::printf("a rank failed\n");
    return 1;
  }
  std::printf("wrote %s\n", csv.c_str());
  return 0;
}

// C4-style slow-rank detection (Dong et al., arXiv 2406.04594): 4 ranks (threads over the inproc
// transport) each "compute" 10 ms per step, then allreduce 1 MiB; one rank computes `delay` ms longer.
// Prints, per delay, the step at which every rank's collective_monitor names the slow rank and the
// wall time until then, beside the collective timeout (60 s by default) that a rank which is slow
// but alive never trips; and the false alarms over 200 steps with no slow rank.
// Writes comm_slow_rank.csv under WEFT_BENCH_OUT (or argv[1]).
#include <weft/comm/allreduce.hpp>
#include <weft/comm/fault/slow_rank_detector.hpp>
#include <weft/comm/inproc_transport.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono;
namespace fault = weft::comm::fault;

namespace {
struct outcome {
  int detected_step = -1;  // first step after which every rank names the slow rank
  int wrong = 0;           // verdicts naming another rank
  double seconds = 0;      // wall time until detection
};

outcome run(int p, int slow, double delay_ms, int steps) {
  weft::comm::inproc_world world(p);
  std::mutex m;
  std::vector<int> first_named(static_cast<std::size_t>(p), -1);
  int wrong = 0;
  const auto start = steady_clock::now();
  std::vector<double> at(static_cast<std::size_t>(p), 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      auto t = world.transport(r);
      fault::collective_monitor monitor(t, 4, fault::slow_rank_options{.window = 8, .min_fraction = 0.75});
      std::vector<float> grad(1 << 18, 1.0f);
      for (int s = 0; s < steps; ++s) {
        std::this_thread::sleep_for(duration<double, std::milli>(10.0 + (r == slow ? delay_ms : 0.0)));
        const auto v = monitor.run([&] { weft::comm::allreduce(t, std::span<float>(grad)); });
        if (!v) continue;
        std::lock_guard lock(m);
        if (v->rank != slow) {
          ++wrong;
        } else if (first_named[static_cast<std::size_t>(r)] < 0) {
          first_named[static_cast<std::size_t>(r)] = s + 1;
          at[static_cast<std::size_t>(r)] = duration<double>(steady_clock::now() - start).count();
        }
      }
    });
  for (auto& th : threads) th.join();
  outcome o;
  o.wrong = wrong;
  for (int r = 0; r < p; ++r) {
    if (first_named[static_cast<std::size_t>(r)] < 0) return o;
    o.detected_step = std::max(o.detected_step, first_named[static_cast<std::size_t>(r)]);
    o.seconds = std::max(o.seconds, at[static_cast<std::size_t>(r)]);
  }
  return o;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string out_dir = argc > 1 ? argv[1] : WEFT_BENCH_OUT;
  std::ofstream csv(out_dir + "/comm_slow_rank.csv");
  csv << "delay_ms,detected_step,seconds,wrong_verdicts\n";
  std::printf(
      "slow-rank detection (C4D-style), 4 ranks, 10 ms compute + 1 MiB allreduce per step, exchange every 4\n"
      "steps, window 8, late in >= 75%% of the window; the 60 s collective timeout never fires for a slow rank\n");
  std::printf("%9s %14s %10s %8s\n", "delay ms", "detected step", "seconds", "wrong");
  for (const double delay : {2.0, 5.0, 10.0, 20.0}) {
    const outcome o = run(4, 2, delay, 64);
    std::printf("%9.0f %14s %10.2f %8d\n", delay,
                o.detected_step < 0 ? "not in 64" : std::to_string(o.detected_step).c_str(), o.seconds, o.wrong);
    csv << delay << ',' << o.detected_step << ',' << o.seconds << ',' << o.wrong << '\n';
  }
  const outcome clean = run(4, -1, 0.0, 200);
  std::printf("no slow rank, 200 steps: %d false verdicts\n", clean.wrong);
  csv << 0 << ',' << clean.detected_step << ',' << clean.seconds << ',' << clean.wrong << '\n';
  std::printf(
      "C4 (paper, production fleet): error-induced downtime cut by about 30%% by finding faulty nodes from\n"
      "collective timings; here: the slow rank is named within the steps above, while a timeout-based\n"
      "watchdog would wait for a failure that never comes.\n");
  return 0;
}

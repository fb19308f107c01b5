// core_quickstart: the vocabulary every weft module speaks, in one short program.
//  - a simulated request stream timed with weft::manual_clock (runs the same every time),
//  - latency quantiles from weft::quantile_histogram (bounded memory, 1% relative error),
//  - half/bfloat16 conversion and a reduce operator, as a collective would apply it,
//  - a bad argument caught as weft::error, naming the value and the rule.
#include <weft/core.hpp>

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  using namespace std::chrono_literals;

  // 1. Latencies of 100k simulated requests: mostly fast, a heavy tail.
  weft::manual_clock clock;
  weft::quantile_histogram latency_ms;  // 1% relative accuracy, <= 16 KiB
  weft::counter slow_requests;
  std::mt19937 rng(2026);
  std::lognormal_distribution<double> service_ms(std::log(20.0), 0.6);
  for (int i = 0; i < 100000; ++i) {
    const auto start = clock.now();
    clock.advance(std::chrono::microseconds(static_cast<long>(service_ms(rng) * 1000)));
    const double ms = std::chrono::duration<double, std::milli>(clock.now() - start).count();
    latency_ms.record(ms);
    if (ms > 100) ++slow_requests;
  }
  std::printf("latency over %llu requests: p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  max %.2f ms\n",
              static_cast<unsigned long long>(latency_ms.count()), latency_ms.p50(), latency_ms.p90(), latency_ms.p99(),
              latency_ms.max());
  std::printf("requests over 100 ms: %llu; histogram memory: %zu bytes\n",
              static_cast<unsigned long long>(slow_requests.value()), latency_ms.memory_bytes());

  // 2. Gradients in half precision, summed the way weft's collectives do: in float, then rounded.
  std::vector<weft::half> mine{weft::half(0.1f), weft::half(1000.5f), weft::half(-3.0f)};
  const std::vector<weft::half> peer{weft::half(0.2f), weft::half(0.25f), weft::half(3.0f)};
  weft::reduce_into(mine.data(), peer.data(), mine.size(), weft::op::sum{});
  std::printf("half sum: %.4f %.4f %.4f (bits 0x%04x 0x%04x 0x%04x)\n", static_cast<float>(mine[0]),
              static_cast<float>(mine[1]), static_cast<float>(mine[2]), mine[0].bits, mine[1].bits, mine[2].bits);
  std::printf("bfloat16(3.14159) = %.5f, half(3.14159) = %.5f\n", static_cast<float>(weft::bfloat16(3.14159f)),
              static_cast<float>(weft::half(3.14159f)));

  // 3. Operators chosen at run time, e.g. from a config file.
  for (auto kind : {weft::reduce_kind::sum, weft::reduce_kind::max, weft::reduce_kind::avg}) {
    const double total = weft::visit<double>(kind, [](auto op) {
      double acc = decltype(op)::template identity<double>();
      for (double v : {4.0, 8.0, 6.0}) acc = op(acc, v);
      return weft::finalize(op, acc, 3);
    });
    std::printf("%-4s of {4, 8, 6} = %g\n", weft::to_string(kind).data(), total);
  }

  // 4. Bad input is a clear error; the object is unchanged.
  try {
    latency_ms.record(-5.0);
  } catch (const weft::error& e) {
    std::printf("caught weft::error (%s): %s\n", e.code().message().c_str(), e.what());
  }
  std::printf("still %llu samples recorded\n", static_cast<unsigned long long>(latency_ms.count()));
  return 0;
}

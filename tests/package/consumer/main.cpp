// Consumer smoke test: uses weft the way a user's engine would and checks the results.
#include <weft/core.hpp>

#include <cstdio>

#if defined(WEFT_CONSUMER_HAS_KV)
#include <weft/kv.hpp>
#endif
#if defined(WEFT_CONSUMER_HAS_SCHED)
#include <weft/sched.hpp>
#endif

int main() {
  weft::quantile_histogram h;
  for (int i = 1; i <= 1000; ++i) h.record(i);
  const weft::half x(1.5f);
  const bool ok = h.quantile(0.5) > 490 && h.quantile(0.5) < 510 && static_cast<float>(x) == 1.5f;
  std::printf("weft %s consumer: p50 = %.1f, half(1.5) = %.1f -> %s\n", WEFT_VERSION_STRING, h.p50(),
              static_cast<float>(x), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

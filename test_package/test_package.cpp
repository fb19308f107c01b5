#include <weft/core.hpp>

#include <cstdio>

int main() {
  weft::quantile_histogram h;
  for (int i = 1; i <= 100; ++i) h.record(i);
  std::printf("weft %s from Conan: p90 = %.1f\n", WEFT_VERSION_STRING, h.p90());
  return h.p90() > 85 && h.p90() < 95 ? 0 : 1;
}

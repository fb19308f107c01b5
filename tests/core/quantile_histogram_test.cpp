#include <weft/core/quantile_histogram.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace {
double exact_quantile(std::vector<double> sorted, double q) {
  const auto rank = static_cast<std::size_t>(std::floor(q * static_cast<double>(sorted.size() - 1)));
  return sorted[rank];
}

void check_bound(const std::vector<double>& data, double accuracy) {
  weft::quantile_histogram h(accuracy, 1 << 15);
  for (double v : data) h.record(v);
  std::vector<double> sorted = data;
  std::sort(sorted.begin(), sorted.end());
  REQUIRE_FALSE(h.collapsed());
  for (double q : {0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0}) {
    const double exact = exact_quantile(sorted, q);
    const double estimate = h.quantile(q);
    INFO("q = " << q << " exact = " << exact << " estimate = " << estimate);
    REQUIRE(std::fabs(estimate - exact) <= accuracy * exact * (1 + 1e-9));
  }
  CHECK(h.min() == sorted.front());
  CHECK(h.max() == sorted.back());
  CHECK(h.count() == data.size());
}
}  // namespace

TEST_CASE("quantile histogram meets its relative error bound on random data", "[core][metrics]") {
  std::mt19937_64 rng(7);
  for (double accuracy : {0.01, 0.002, 0.05}) {
    std::lognormal_distribution<double> latency(std::log(2e-3), 1.2);  // seconds, heavy tail
    std::exponential_distribution<double> expo(1e-3);
    std::uniform_real_distribution<double> uniform(0.0, 1e6);
    std::vector<double> a(20000), b(20000), c(5000);
    for (auto& v : a) v = latency(rng);
    for (auto& v : b) v = expo(rng);
    for (auto& v : c) v = uniform(rng);
    check_bound(a, accuracy);
    check_bound(b, accuracy);
    check_bound(c, accuracy);
  }
}

TEST_CASE("quantile histogram: zeros, merge, memory bound, bad input", "[core][metrics]") {
  weft::quantile_histogram h;
  for (int i = 0; i < 10; ++i) h.record(0.0);
  h.record(100.0, 10);
  CHECK(h.quantile(0.3) == 0.0);
  CHECK(h.quantile(0.9) == Approx(100.0).epsilon(0.01));
  CHECK(h.mean() == Approx(50.0));

  weft::quantile_histogram other;
  other.record(1000.0, 20);
  h.merge(other);
  CHECK(h.count() == 40);
  CHECK(h.p90() == Approx(1000.0).epsilon(0.01));
  CHECK(h.max() == 1000.0);
  CHECK_THROWS_AS(h.merge(weft::quantile_histogram(0.05)), weft::error);

  weft::quantile_histogram small(0.01, 64);
  for (int e = -30; e <= 30; ++e) small.record(std::pow(10.0, e));
  small.record(1e30, 200);
  CHECK(small.collapsed());
  CHECK(small.memory_bytes() <= 2 * 64 * sizeof(std::uint64_t));
  CHECK(small.p90() == Approx(1e30).epsilon(0.01));  // the high tail keeps its bound
  CHECK(small.min() == 1e-30);

  CHECK_THROWS_AS(h.record(-1.0), weft::error);
  CHECK_THROWS_AS(h.record(std::nan("")), weft::error);
  CHECK(h.count() == 40);  // rejected values changed nothing
  CHECK_THROWS_AS(h.quantile(1.5), weft::error);
  CHECK_THROWS_AS(weft::quantile_histogram().p50(), weft::error);
  CHECK_THROWS_AS(weft::quantile_histogram(0.0), weft::error);
  CHECK_THROWS_AS(weft::quantile_histogram(0.01, 2), weft::error);
}

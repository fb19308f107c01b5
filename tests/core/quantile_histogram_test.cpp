#include <weft/core/quantile_histogram.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
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

namespace {
// The histogram without its key cache: every value keyed by the log (the DDSketch mapping), counted in
// a map, quantiles read as quantile_histogram reads them. The fast path must agree bit for bit.
struct slow_histogram {
  double gamma, log_gamma;
  std::map<std::int64_t, std::uint64_t> buckets;
  std::uint64_t zeros = 0, count = 0;
  double sum = 0.0;  // added in record order, as the histogram must
  double min = std::numeric_limits<double>::infinity(), max = -std::numeric_limits<double>::infinity();
  explicit slow_histogram(double a) : gamma((1.0 + a) / (1.0 - a)), log_gamma(std::log(gamma)) {}
  void record(double v) {
    if (v < 1e-300)
      ++zeros;
    else
      ++buckets[static_cast<std::int64_t>(std::ceil(std::log(v) / log_gamma))];
    ++count;
    sum += v;
    min = std::min(min, v);
    max = std::max(max, v);
  }
  double quantile(double q) const {
    if (q == 0.0) return min;
    if (q == 1.0) return max;
    const auto rank = static_cast<std::uint64_t>(std::floor(q * static_cast<double>(count - 1)));
    if (rank < zeros) return min;
    std::uint64_t seen = zeros;
    for (const auto& [key, n] : buckets) {
      seen += n;
      if (seen > rank) return std::clamp(2.0 * std::pow(gamma, static_cast<double>(key)) / (gamma + 1.0), min, max);
    }
    return max;
  }
};
}  // namespace

TEST_CASE("quantile histogram: the repeated-value fast path keys every value as the log does", "[core][metrics]") {
  for (double accuracy : {0.01, 0.002}) {
    weft::quantile_histogram fast(accuracy, 1 << 19);  // 1e-300 to 2 at 0.2 %: ~175,000 keys
    slow_histogram slow(accuracy);
    const auto both = [&](double v) {
      fast.record(v);
      slow.record(v);
    };
    // Edge cases: zero, denormals, the zero threshold and its neighbours, the extremes of double.
    const double tiny = std::numeric_limits<double>::denorm_min();
    for (double v : {0.0, tiny, 1e-310, std::nextafter(1e-300, 0.0), 1e-300, std::nextafter(1e-300, 1.0),
                     std::numeric_limits<double>::min(), 1.0,
                     // The largest double at 1 % only (keys from 1e-300 span ~70,000 there, 350,000 at 0.2 %).
                     accuracy == 0.01 ? std::numeric_limits<double>::max() : 2.0}) {
      both(v);
      both(v);  // a repeat takes the cached key
    }
    // Bucket boundaries gamma^k and the doubles on either side, each twice, then interleaved (no repeats).
    const double gamma = (1.0 + accuracy) / (1.0 - accuracy);
    for (int k = -2000; k <= 2000; k += 7) {
      const double b = std::pow(gamma, k);
      for (double v : {std::nextafter(b, 0.0), b, std::nextafter(b, 2 * b)}) {
        both(v);
        both(v);
      }
    }
    // Latency-like streams: runs of one gap (a simulated iteration's decodes), alternations, fresh values.
    std::mt19937_64 rng(11);
    std::lognormal_distribution<double> gap(std::log(0.02), 1.0);
    std::uniform_int_distribution<int> run(1, 40);
    double previous = gap(rng);
    for (int i = 0; i < 5000; ++i) {
      const double v = gap(rng);
      for (int r = run(rng); r > 0; --r) both(v);
      both(previous);  // back to the previous value: the cache holds one value only
      both(v);
      previous = v;
    }
    // Rejected input (as before: weft::error, nothing recorded) leaves the cache valid.
    CHECK_THROWS_AS(fast.record(std::numeric_limits<double>::infinity()), weft::error);
    CHECK_THROWS_AS(fast.record(std::nan("")), weft::error);
    CHECK_THROWS_AS(fast.record(-0.5), weft::error);
    both(previous);
    REQUIRE(fast.count() == slow.count);
    CHECK(fast.sum() == slow.sum);  // exact: the same additions in the same order
    REQUIRE_FALSE(fast.collapsed());
    CHECK(fast.min() == slow.min);
    CHECK(fast.max() == slow.max);
    for (int i = 0; i <= 100; ++i) {
      const double q = i / 100.0;
      INFO("accuracy " << accuracy << " q " << q);
      REQUIRE(fast.quantile(q) == slow.quantile(q));
    }
    // reset() empties the histogram; the cached key stays right for the same accuracy.
    fast.reset();
    slow_histogram again(accuracy);
    for (double v : {previous, previous, 3.0, previous}) {
      fast.record(v);
      again.record(v);
    }
    for (double q : {0.0, 0.25, 0.5, 0.75, 1.0}) CHECK(fast.quantile(q) == again.quantile(q));
  }
}

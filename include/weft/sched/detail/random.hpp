// A small portable random source for the simulator and workload generators: SplitMix64 (Steele,
// Lea, Flood, "Fast Splittable Pseudorandom Number Generators", OOPSLA 2014) and distributions built
// only from it, so a seed gives the same bits with every standard library (std:: distributions do not).
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace weft::sched::detail {

/// Not thread-safe; each generator owns one. All operations O(1) (gamma: expected O(1)).
class rng {
 public:
  explicit rng(std::uint64_t seed) noexcept : state_(seed) {}

  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in (0, 1): never 0, so logarithms are finite.
  double uniform() noexcept { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  std::uint64_t below(std::uint64_t n) noexcept { return n == 0 ? 0 : next() % n; }
  double exponential(double rate) noexcept { return -std::log(uniform()) / rate; }
  double normal() noexcept {
    // Box-Muller; one value per call keeps the stream simple to reason about.
    return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * std::numbers::pi * uniform());
  }
  /// Gamma(shape, scale) by Marsaglia & Tsang (ACM TOMS 2000), boosted for shape < 1.
  double gamma(double shape, double scale) noexcept {
    if (shape < 1.0) return gamma(shape + 1.0, scale) * std::pow(uniform(), 1.0 / shape);
    const double d = shape - 1.0 / 3.0;
    const double c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x = normal();
      double v = 1.0 + c * x;
      if (v <= 0.0) continue;
      v = v * v * v;
      const double u = uniform();
      if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v * scale;
    }
  }
  /// Lognormal with the given mean and coefficient of variation.
  double lognormal(double mean, double cv) noexcept {
    const double sigma2 = std::log(1.0 + cv * cv);
    const double mu = std::log(mean) - 0.5 * sigma2;
    return std::exp(mu + std::sqrt(sigma2) * normal());
  }

 private:
  std::uint64_t state_;
};

}  // namespace weft::sched::detail

// weft::rng: the one seeded random source of weft. SplitMix64 (Steele, Lea, Flood, "Fast Splittable
// Pseudorandom Number Generators", OOPSLA 2014) plus distributions built only from it, so a seed
// gives the same bits with every standard library and compiler (std:: distributions do not).
#pragma once

#include <weft/core/config.hpp>

#include <cmath>
#include <cstdint>
#include <numbers>

namespace weft {

/// The stream: state += 0x9E3779B97F4A7C15 per draw, output mixed by SplitMix64's finaliser; every
/// distribution below consumes a documented number of draws, so streams are stable across releases.
/// Satisfies std::uniform_random_bit_generator. Not thread-safe; each user owns one (split() makes
/// an independent child). All operations O(1) (gamma: expected O(1)).
class rng {
 public:
  using result_type = std::uint64_t;

  WEFT_HOST_DEVICE constexpr explicit rng(std::uint64_t seed = 0) noexcept : state_(seed) {}

  static constexpr result_type min() noexcept { return 0; }
  static constexpr result_type max() noexcept { return ~result_type{0}; }
  WEFT_HOST_DEVICE constexpr result_type operator()() noexcept { return next(); }

  /// One draw: 64 uniformly distributed bits.
  WEFT_HOST_DEVICE constexpr std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// An independent generator seeded from one draw of this one (per-worker or per-layer streams).
  constexpr rng split() noexcept { return rng(next() ^ 0xD1B54A32D192ED03ull); }

  /// Uniform in (0, 1), never 0 or 1, so logarithms are finite. One draw.
  constexpr double uniform() noexcept { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  /// Uniform in [lo, hi). One draw.
  constexpr double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }
  /// Uniform integer in [0, n) by modulo reduction (bias below n / 2^64); 0 for n == 0. One draw.
  constexpr std::uint64_t below(std::uint64_t n) noexcept { return n == 0 ? 0 : next() % n; }
  /// True with probability p. One draw.
  constexpr bool bernoulli(double p) noexcept { return uniform() < p; }
  /// Exponential with the given rate (mean 1/rate). One draw.
  double exponential(double rate) noexcept { return -std::log(uniform()) / rate; }
  /// Standard normal by Box-Muller, one value per call (two draws), so the stream is easy to follow.
  double normal() noexcept {
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    return r * std::cos(2.0 * std::numbers::pi * uniform());
  }
  /// Normal with the given mean and standard deviation. Two draws.
  double normal(double mean, double stddev) noexcept { return mean + stddev * normal(); }
  /// Gamma(shape, scale) by Marsaglia & Tsang (ACM TOMS 2000), boosted for shape < 1.
  double gamma(double shape, double scale) noexcept {
    if (shape < 1.0) return gamma(shape + 1.0, scale) * std::pow(uniform(), 1.0 / shape);
    const double d = shape - 1.0 / 3.0;
    const double c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      const double x = normal();
      double v = 1.0 + c * x;
      if (v <= 0.0) continue;
      v = v * v * v;
      const double u = uniform();
      if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v * scale;
    }
  }
  /// Lognormal with the given mean and coefficient of variation. Two draws.
  double lognormal(double mean, double cv) noexcept {
    const double sigma2 = std::log(1.0 + cv * cv);
    const double mu = std::log(mean) - 0.5 * sigma2;
    return std::exp(mu + std::sqrt(sigma2) * normal());
  }

 private:
  std::uint64_t state_;
};

}  // namespace weft

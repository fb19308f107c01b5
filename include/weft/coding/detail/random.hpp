// A small seeded generator with a fixed algorithm (std::mt19937_64 plus our own bounded and normal
// draws), so constructions and simulations reproduce exactly across standard libraries.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>

namespace weft::coding::detail {

class rng {
 public:
  explicit rng(std::uint64_t seed) : engine_(seed) {}
  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  /// Uniform integer in [0, bound); bound > 0.
  std::uint64_t below(std::uint64_t bound) { return engine_() % bound; }
  /// Standard normal (Box-Muller).
  double normal() {
    const double u1 = 1.0 - uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  /// Exponential with the given rate.
  double exponential(double rate) { return -std::log(1.0 - uniform()) / rate; }

 private:
  std::mt19937_64 engine_;
};

}  // namespace weft::coding::detail

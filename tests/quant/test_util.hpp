// Shared helpers of the quant tests: seeded random matrices and small-integer inputs whose
// products are exact in fp32, so every path must agree bit for bit.
#pragma once

#include <weft/quant/format.hpp>

#include <cstdint>
#include <random>
#include <cstring>
#include <vector>

namespace quant_test {

/// Bit-for-bit equality of two float vectors (exact kernels must match the reference exactly).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline std::vector<float> random_floats(std::size_t count, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(count);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<std::int32_t> random_ints(std::size_t count, std::uint64_t seed, int lo, int hi) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<std::int32_t> v(count);
  for (auto& x : v) x = d(rng);
  return v;
}

/// An int4/int8 matrix with random codes, power-of-two scales and random zeros: dequantized
/// values are small multiples of powers of two, so products with small integers are exact.
template <class Scale>
weft::quant::quantized_matrix<Scale> exact_matrix(std::int64_t n, std::int64_t k, weft::quant::quant_scheme s,
                                                  std::uint64_t seed) {
  using namespace weft::quant;
  const std::int64_t gs = s.group_size == 0 ? round_up(k, int4_block) : s.group_size;
  const std::int64_t groups = ceil_div(k, gs);
  auto codes = random_ints(static_cast<std::size_t>(n * k), seed, code_min(s.bits), code_max(s.bits));
  auto exps = random_ints(static_cast<std::size_t>(n * groups), seed + 1, -3, 2);
  std::vector<Scale> scales;
  for (int e : exps) scales.push_back(Scale(static_cast<float>(e >= 0 ? (1 << e) : 1.0 / (1 << -e))));
  std::vector<std::int16_t> zeros;
  if (!s.symmetric)
    for (int z : random_ints(static_cast<std::size_t>(n * groups), seed + 2, code_min(s.bits), code_max(s.bits)))
      zeros.push_back(static_cast<std::int16_t>(z));
  return quantized_matrix<Scale>::from_codes(n, k, s, codes, scales, zeros);
}

}  // namespace quant_test

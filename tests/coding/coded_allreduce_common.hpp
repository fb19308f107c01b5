// Shared by the coded allreduce tests: seeded partial gradients (the same in every thread and
// process), the true gradient, a rank's coded message and the relative error.
#pragma once

#include <weft/coding/codec.hpp>
#include <weft/coding/detail/random.hpp>
#include <weft/coding/linear_code.hpp>

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace weft_test {

using weft::coding::linear_code;
inline constexpr std::size_t dim = 257;

// Partition j's partial gradient at step t, the same in every thread and process.
inline std::vector<float> partial(std::uint64_t step, std::size_t j) {
  weft::coding::detail::rng gen(step * 1000 + j + 1);
  std::vector<float> g(dim);
  for (auto& v : g) v = static_cast<float>(gen.normal());
  return g;
}

inline std::vector<double> truth(std::uint64_t step, std::size_t k) {
  std::vector<double> sum(dim, 0.0);
  for (std::size_t j = 0; j < k; ++j) {
    const auto g = partial(step, j);
    for (std::size_t e = 0; e < dim; ++e) sum[e] += g[e];
  }
  return sum;
}

inline std::vector<float> message(const linear_code& code, std::size_t rank, std::uint64_t step) {
  std::vector<std::vector<float>> parts;
  for (std::size_t j : code.assignment(rank)) parts.push_back(partial(step, j));
  std::vector<std::span<const float>> in(parts.begin(), parts.end());
  std::vector<float> out(dim);
  encode(code, rank, in, out);
  return out;
}

inline double rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t e = 0; e < dim; ++e) {
    num += (got[e] - want[e]) * (got[e] - want[e]);
    den += want[e] * want[e];
  }
  return std::sqrt(num / den);
}

}  // namespace weft_test

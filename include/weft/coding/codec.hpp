// Encoding and decoding of gradient-coded messages: a worker's message is sum_j B_ij g_j over the
// partitions it holds, and the decoded gradient is sum_i a_i m_i over the survivors (Tandon et al.,
// ICML 2017, Sec. 2). Data is float32; coefficients are double and every sum runs in double, so
// the only float32 rounding is one per stored element.
#pragma once

#include <weft/coding/concepts.hpp>
#include <weft/coding/decoder.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <vector>

namespace weft::coding {

namespace detail {
inline constexpr std::size_t block_elems = 512;  // double accumulator block: fits in L1

inline void weighted_sum(std::span<const double> weights, std::span<const std::span<const float>> inputs,
                         std::span<float> out) {
  std::array<double, block_elems> acc{};
  for (std::size_t base = 0; base < out.size(); base += block_elems) {
    const std::size_t len = std::min(block_elems, out.size() - base);
    std::fill_n(acc.begin(), len, 0.0);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const double w = weights[i];
      if (w == 0.0) continue;
      const float* in = inputs[i].data() + base;
      for (std::size_t e = 0; e < len; ++e) acc[e] += w * static_cast<double>(in[e]);
    }
    for (std::size_t e = 0; e < len; ++e) out[base + e] = static_cast<float>(acc[e]);
  }
}
}  // namespace detail

/// Worker `worker`'s coded message: out = sum over its assigned partitions j of B(worker, j) *
/// partials[p], where partials[p] is the partial gradient of assignment(worker)[p]. Throws
/// weft::error(invalid_argument) naming the sizes when partials does not match the assignment or
/// a vector's length differs from out's. Thread-safe (reads the code only). O(load * d).
template <gradient_code Code>
void encode(const Code& code, std::size_t worker, std::span<const std::span<const float>> partials,
            std::span<float> out) {
  constexpr const char* ctx = "weft::coding::encode";
  const auto held = code.assignment(worker);
  expects(partials.size() == held.size(), errc::invalid_argument, ctx, "worker ", worker, " holds ", held.size(),
          " partitions but ", partials.size(), " partial gradients were given");
  std::vector<double> w(held.size());
  for (std::size_t p = 0; p < held.size(); ++p) {
    expects(partials[p].size() == out.size(), errc::invalid_argument, ctx, "partial gradient ", p, " has ",
            partials[p].size(), " elements, output has ", out.size());
    w[p] = static_cast<double>(code.coefficient(worker, held[p]));
  }
  detail::weighted_sum(w, partials, out);
}

/// The decoded gradient: out = sum_i d.weights[i] * messages[i], where messages[i] is the message
/// of worker d.survivors[i]. Throws weft::error(invalid_argument) naming the sizes on a mismatch.
/// Thread-safe. O(|F| * d).
inline void decode(const decoder& d, std::span<const std::span<const float>> messages, std::span<float> out) {
  constexpr const char* ctx = "weft::coding::decode";
  expects(messages.size() == d.weights.size(), errc::invalid_argument, ctx, "decoder has ", d.weights.size(),
          " survivors but ", messages.size(), " messages were given");
  for (std::size_t i = 0; i < messages.size(); ++i)
    expects(messages[i].size() == out.size(), errc::invalid_argument, ctx, "message ", i, " (worker ", d.survivors[i],
            ") has ", messages[i].size(), " elements, output has ", out.size());
  detail::weighted_sum(d.weights, messages, out);
}

}  // namespace weft::coding

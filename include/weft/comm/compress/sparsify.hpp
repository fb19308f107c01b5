// Sparsifying compressors: top-k keeps the k largest-magnitude coordinates (Aji & Heafield,
// EMNLP 2017; Stich et al., NeurIPS 2018), random-k keeps k coordinates drawn with a seeded
// generator (Stich et al. 2018 §2; Wangni et al., NeurIPS 2018). Use them with error feedback.
#pragma once

#include <weft/comm/compress/concepts.hpp>
#include <weft/core/error.hpp>
#include <weft/core/random.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft::comm::compress {
namespace detail {

/// k of n kept for a density in (0, 1]: ceil(density·n), at least 1 when n > 0. O(1).
inline std::size_t kept(std::size_t n, double density) noexcept {
  if (n == 0) return 0;
  const auto k = static_cast<std::size_t>(std::ceil(density * static_cast<double>(n)));
  return std::clamp<std::size_t>(k, 1, n);
}

/// Writes (uint32 index, float value) pairs for the sorted indices `idx`.
inline void put_pairs(std::span<const float> in, const std::vector<std::uint32_t>& idx, std::span<std::byte> out) {
  for (std::size_t j = 0; j < idx.size(); ++j) {
    std::memcpy(out.data() + 8 * j, &idx[j], 4);
    std::memcpy(out.data() + 8 * j + 4, &in[idx[j]], 4);
  }
}

/// Zero-fills out and scatters the pairs; an index outside out is errc::mismatch (corrupt bytes).
inline void get_pairs(std::span<const std::byte> bytes, std::span<float> out, const char* where) {
  std::fill(out.begin(), out.end(), 0.0f);
  for (std::size_t j = 0; j < bytes.size() / 8; ++j) {
    std::uint32_t i = 0;
    float v = 0;
    std::memcpy(&i, bytes.data() + 8 * j, 4);
    std::memcpy(&v, bytes.data() + 8 * j + 4, 4);
    expects(i < out.size(), errc::mismatch, where, "encoded index ", i, " is outside the ", out.size(),
            " decoded elements (the bytes are not this compressor's encoding)");
    out[i] = v;
  }
}

inline double checked_density(double density, const char* where) {
  expects(density > 0.0 && density <= 1.0, errc::invalid_argument, where, "density ", density, " must be in (0, 1]");
  return density;
}

}  // namespace detail

/// Keeps the ceil(density·n) coordinates of largest magnitude (ties: the lower index), as
/// (index, value) pairs sorted by index: 8 bytes per kept element. Stateless: thread-safe.
/// encode O(n + k log k) (nth_element), decode O(n), encoded_bytes O(1). Needs n < 2^32.
class top_k {
 public:
  static constexpr bool is_sparse = true;
  /// Throws errc::invalid_argument unless 0 < density <= 1.
  explicit top_k(double density = 0.01)
      : density_(detail::checked_density(density, "weft::comm::compress::top_k")),
        name_("top-k/" + std::to_string(density)) {}

  double density() const noexcept { return density_; }
  std::string_view name() const noexcept { return name_; }
  std::size_t encoded_bytes(std::size_t n) const noexcept { return 8 * detail::kept(n, density_); }

  void encode(std::span<const float> in, std::span<std::byte> out) const {
    expects(out.size() == encoded_bytes(in.size()), errc::invalid_argument, "weft::comm::compress::top_k::encode",
            "output has ", out.size(), " bytes, need ", encoded_bytes(in.size()));
    const std::size_t k = detail::kept(in.size(), density_);
    std::vector<std::uint32_t> idx(in.size());
    std::iota(idx.begin(), idx.end(), 0u);
    auto larger = [&](std::uint32_t a, std::uint32_t b) {
      const float fa = std::fabs(in[a]), fb = std::fabs(in[b]);
      return fa > fb || (fa == fb && a < b);
    };
    if (k < idx.size()) std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), larger);
    idx.resize(k);
    std::sort(idx.begin(), idx.end());
    detail::put_pairs(in, idx, out);
  }
  void decode(std::span<const std::byte> bytes, std::span<float> out) const {
    expects(bytes.size() == encoded_bytes(out.size()), errc::invalid_argument, "weft::comm::compress::top_k::decode",
            "input has ", bytes.size(), " bytes, need ", encoded_bytes(out.size()));
    detail::get_pairs(bytes, out, "weft::comm::compress::top_k::decode");
  }

 private:
  double density_;
  std::string name_;
};

/// Keeps ceil(density·n) coordinates chosen uniformly without replacement by weft::rng (SplitMix64) seeded with `seed`;
/// each encode advances it, so a run is reproducible from the seed. Values are sent unscaled (pair it with error
/// feedback; scale by n/k yourself for an unbiased estimate). Not thread-safe (encode advances the generator). encode
/// O(n), decode O(n).
class random_k {
 public:
  static constexpr bool is_sparse = true;
  /// Throws errc::invalid_argument unless 0 < density <= 1.
  explicit random_k(double density = 0.01, std::uint64_t seed = 1)
      : density_(detail::checked_density(density, "weft::comm::compress::random_k")),
        state_(seed),
        name_("random-k/" + std::to_string(density)) {}

  double density() const noexcept { return density_; }
  std::string_view name() const noexcept { return name_; }
  std::size_t encoded_bytes(std::size_t n) const noexcept { return 8 * detail::kept(n, density_); }

  void encode(std::span<const float> in, std::span<std::byte> out) {
    expects(out.size() == encoded_bytes(in.size()), errc::invalid_argument, "weft::comm::compress::random_k::encode",
            "output has ", out.size(), " bytes, need ", encoded_bytes(in.size()));
    const std::size_t n = in.size(), k = detail::kept(n, density_);
    std::vector<std::uint32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0u);
    for (std::size_t j = 0; j < k; ++j) {  // partial Fisher-Yates: the first k are a uniform sample
      const std::size_t pick = j + static_cast<std::size_t>(next() % (n - j));
      std::swap(idx[j], idx[pick]);
    }
    idx.resize(k);
    std::sort(idx.begin(), idx.end());
    detail::put_pairs(in, idx, out);
  }
  void decode(std::span<const std::byte> bytes, std::span<float> out) const {
    expects(bytes.size() == encoded_bytes(out.size()), errc::invalid_argument, "weft::comm::compress::random_k::decode",
            "input has ", bytes.size(), " bytes, need ", encoded_bytes(out.size()));
    detail::get_pairs(bytes, out, "weft::comm::compress::random_k::decode");
  }

 private:
  std::uint64_t next() noexcept { return state_.next(); }
  double density_;
  weft::rng state_;  // SplitMix64: the same stream as the raw generator this replaced
  std::string name_;
};

static_assert(sparse_compressor<top_k> && sparse_compressor<random_k>);

}  // namespace weft::comm::compress

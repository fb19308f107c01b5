// weft's one fast non-cryptographic hash: a 64x64->128-bit multiply-mix in the style of wyhash and
// rapidhash (Wang Yi; Nicolas De Carli). Good avalanche and cheap, but NOT collision-resistant
// against an adversary who knows the seed: where strangers choose the input and a collision has a
// cost (prefix-cache keys shared between tenants), use the SHA-256 of core/crypto.hpp instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace weft {

namespace detail {
__extension__ typedef unsigned __int128 uint128_t;  // NOLINT: 64x64->128 multiply for mixing
}  // namespace detail

/// Folds the 128-bit product of a and b into 64 bits. Thread-safe. O(1).
constexpr std::uint64_t hash_mix(std::uint64_t a, std::uint64_t b) noexcept {
  const detail::uint128_t r = static_cast<detail::uint128_t>(a) * b;
  return static_cast<std::uint64_t>(r) ^ static_cast<std::uint64_t>(r >> 64);
}

/// The constants every weft hash mixes with (wyhash's, which are odd and have balanced bits).
inline constexpr std::uint64_t hash_k0 = 0xa0761d6478bd642fULL;
inline constexpr std::uint64_t hash_k1 = 0xe7037ed1a0b428dbULL;
inline constexpr std::uint64_t hash_k2 = 0x8ebc6af09c88c6e3ULL;
inline constexpr std::uint64_t hash_k3 = 0x589965cc75374cc3ULL;

/// Combines a running hash with one more 64-bit value (order matters). Thread-safe. O(1).
constexpr std::uint64_t hash_combine(std::uint64_t h, std::uint64_t value) noexcept {
  return hash_mix(h ^ value ^ hash_k0, value ^ hash_k1);
}

/// Hash of a byte string under a seed; the length is mixed in, so "a" and "a\0" differ. Reads
/// 16 bytes per round. Thread-safe. O(bytes).
inline std::uint64_t hash_bytes(std::span<const std::byte> bytes, std::uint64_t seed = 0) noexcept {
  std::uint64_t h = hash_mix(seed ^ hash_k0, bytes.size() ^ hash_k1);
  const std::byte* p = bytes.data();
  std::size_t n = bytes.size();
  auto load = [](const std::byte* q, std::size_t k) {
    std::uint64_t v = 0;
    std::memcpy(&v, q, k);
    return v;
  };
  for (; n >= 16; n -= 16, p += 16) h = hash_mix(load(p, 8) ^ h ^ hash_k2, load(p + 8, 8) ^ hash_k3);
  if (n > 8) {
    h = hash_mix(load(p, 8) ^ h ^ hash_k2, load(p + 8, n - 8) ^ hash_k3);
  } else if (n > 0) {
    h = hash_mix(load(p, n) ^ h ^ hash_k2, hash_k3);
  }
  return hash_mix(h ^ hash_k0, hash_k1 ^ bytes.size());
}

/// hash_bytes of a string's characters. Thread-safe. O(size).
inline std::uint64_t hash_bytes(std::string_view text, std::uint64_t seed = 0) noexcept {
  return hash_bytes(std::as_bytes(std::span<const char>(text.data(), text.size())), seed);
}

}  // namespace weft

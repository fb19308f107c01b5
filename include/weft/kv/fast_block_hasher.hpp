// weft::kv::fast_block_hasher: the opt-in 64-bit block hasher for single-tenant deployments, a
// seeded multiply-mix chain on weft/core/hash.hpp (wyhash style). About ten times cheaper than the
// SHA-256 default, but not collision-resistant against anyone who learns or recovers its seed.
#pragma once

#include <weft/core/crypto.hpp>
#include <weft/core/hash.hpp>
#include <weft/core/random.hpp>
#include <weft/kv/concepts.hpp>
#include <weft/kv/types.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace weft::kv {

/// Chained 64-bit block keys: h = mix(parent), then two 64-bit lanes of packed token pairs per
/// round, then each extra field's tag and words, every step multiplied with words derived from the
/// seed. The key is returned in block_key::lo (hi is 0).
///
/// What it protects against: accidental collisions (~2^-64 per pair of blocks), and blind
/// collision attempts by a tenant who does not know the seed, which is drawn from the CSPRNG by
/// default. What it does not: a tenant who learns the seed (a leaked config, a core dump) can
/// build colliding blocks offline, and multiply-mix hashes admit seed-recovery attacks in
/// principle; a tenant can also learn whether a prompt is cached from time to first token. Use it
/// only where every request comes from one trust domain; the default is sha256_block_hasher.
///
/// Thread-safety: const members are thread-safe; each thread uses its own state. begin/absorb/
/// finish are O(tokens) / O(words) / O(1).
class fast_block_hasher {
 public:
  /// Working memory of one key computation: the running 64-bit hash.
  struct state {
    std::uint64_t h = 0;
  };

  /// A hasher seeded from OpenSSL's CSPRNG: keys differ from process to process.
  fast_block_hasher() : fast_block_hasher(crypto::random_u64()) {}
  /// A hasher with a fixed seed, for reproducible keys across processes (tests, replicas that
  /// export comparable keys). Keep the seed as secret as you would a password.
  explicit fast_block_hasher(std::uint64_t seed) noexcept {
    weft::rng draw(seed ^ 0x6b766b6579733634ULL);  // "kvkeys64": this hasher's stream of the seed
    for (std::uint64_t& w : secret_) w = draw.next();
  }

  /// Starts a key: the parent's key, then the tokens two per 64-bit word. O(tokens).
  void begin(state& s, block_key parent, std::span<const token_id> tokens) const noexcept {
    std::uint64_t h = hash_mix(parent.lo ^ secret_[0], parent.hi ^ secret_[1]);
    h = hash_mix(h ^ secret_[2], static_cast<std::uint64_t>(tokens.size()) ^ secret_[3]);
    // Whole groups of four, then the rest (a bound computed once keeps the loops simple for the
    // optimiser).
    const std::size_t groups = tokens.size() / 4 * 4;
    std::size_t i = 0;
    for (; i < groups; i += 4)
      h = hash_mix(pack(tokens[i], tokens[i + 1]) ^ h ^ secret_[4], pack(tokens[i + 2], tokens[i + 3]) ^ secret_[5]);
    for (; i < tokens.size(); ++i) h = hash_mix(static_cast<std::uint32_t>(tokens[i]) ^ h ^ secret_[4], secret_[6]);
    s.h = h;
  }

  /// Absorbs one extra field: its tag and word count, then each word. O(words).
  void absorb(state& s, key_field field, std::span<const std::uint64_t> words) const noexcept {
    const std::uint64_t tag = (static_cast<std::uint64_t>(field) << 56) ^ static_cast<std::uint64_t>(words.size());
    std::uint64_t h = hash_mix(s.h ^ tag ^ secret_[6], secret_[7]);
    for (const std::uint64_t w : words) h = hash_mix(h ^ w ^ secret_[2], w ^ secret_[5]);
    s.h = h;
  }

  /// The key of everything absorbed since begin(). O(1).
  block_key finish(state& s) const noexcept { return block_key{0, hash_mix(s.h ^ secret_[7], secret_[0])}; }

 private:
  static std::uint64_t pack(token_id a, token_id b) noexcept {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) |
           (static_cast<std::uint64_t>(static_cast<std::uint32_t>(b)) << 32);
  }

  std::array<std::uint64_t, 8> secret_{};  // derived from the seed; the seed itself is not kept
};
static_assert(block_hasher<fast_block_hasher>);

}  // namespace weft::kv

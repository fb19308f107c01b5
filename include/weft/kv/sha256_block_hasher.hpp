// weft::kv::sha256_block_hasher: the default block hasher, chained block keys from SHA-256 (FIPS
// 180-4, through OpenSSL's EVP and the CPU's SHA extensions) keyed with a per-deployment secret,
// so one tenant can neither engineer a key equal to another's nor predict keys offline. The same
// choice vLLM made after GHSA-rm76-4mrf-v9r8 (SHA-256 default since v0.10.2), here 128-bit keys.
#pragma once

#include <weft/core/crypto.hpp>
#include <weft/core/error.hpp>
#include <weft/kv/concepts.hpp>
#include <weft/kv/types.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>

namespace weft::kv {

/// key = first 128 bits of SHA-256(K || message), where K is one 64-byte block derived from the
/// secret (absorbed once at construction; every key starts from a copy of that state) and the
/// message encodes the parent key, the tokens and the extra fields without ambiguity:
///
///   parent.hi, parent.lo (8 bytes each, little-endian) | form (1 byte) | token count (LEB128) |
///   tokens | for each field: tag (1 byte), word count (LEB128), words (8 bytes each, LE)
///
/// form 1 packs tokens that are all in [0, 2^18) (every vocabulary up to 262,144 ids) into 18 bits
/// each, so a 16-token block with no extra field is 54 bytes and costs one SHA-256 compression;
/// form 2 stores any int32 token in 4 bytes. The encoding is injective, so distinct inputs collide
/// only if SHA-256 truncated to 128 bits does. Truncation also keeps the length-extension
/// property of plain secret-prefix MACs out of reach (half of the state is never revealed).
///
/// What it protects against: collisions engineered by one tenant against another's blocks (a
/// second preimage of 128-bit truncated SHA-256) and keys predicted offline from a guessed prompt
/// (the secret is drawn from the CSPRNG by default; set it explicitly only to make several
/// instances agree). What it does not: whether a prompt is cached still shows in the time to
/// first token (Zheng et al., InputSnatch, arXiv 2411.18191, recover other users' prompts this
/// way); isolate the cache per tenant (kv_config) or salt requests where that matters.
///
/// Thread-safety: const members are thread-safe (copies share the immutable keyed state); each
/// thread uses its own state. begin O(tokens), absorb O(words), finish O(1); no allocation by
/// weft or OpenSSL per block (the state is a plain SHA256_CTX copied from the keyed one; see crypto::sha256).
class sha256_block_hasher {
 public:
  /// Shortest secret accepted: 16 bytes (128 bits). Use 32 random bytes.
  static constexpr std::size_t min_secret_bytes = 16;

  /// Working memory of one key computation: an OpenSSL digest context and a small buffer, so a
  /// block with few fields reaches OpenSSL in one update. Reuse one per thread. Copyable.
  class state {
   public:
    state() = default;

   private:
    friend class sha256_block_hasher;
    crypto::sha256 ctx_;
    std::array<std::uint8_t, 256> buf_{};
    std::size_t used_ = 0;
    bool started_ = false;  // ctx_ holds a copy of the keyed state
  };

  /// A hasher keyed with 32 fresh bytes from OpenSSL's CSPRNG: keys are private to this process
  /// (and to the hasher's copies). Throws weft::error(unsupported) when the CSPRNG cannot be seeded.
  sha256_block_hasher() {
    std::array<std::byte, 32> secret{};
    crypto::random_bytes(secret);
    init(secret);
  }
  /// A hasher keyed with `secret` (at least 16 bytes; 32 random bytes recommended), for several
  /// engine instances that must compute the same keys. Throws weft::error(invalid_argument) for
  /// a shorter secret. The secret itself is not kept, only the SHA-256 state derived from it.
  explicit sha256_block_hasher(std::span<const std::byte> secret) { init(secret); }
  /// As above with the secret's characters as bytes (e.g. the 64 hex digits of `openssl rand -hex 32`).
  explicit sha256_block_hasher(std::string_view secret)
      : sha256_block_hasher(std::as_bytes(std::span<const char>(secret.data(), secret.size()))) {}

  /// A public identifier of the secret (64 bits of a hash of the derived key): equal on instances
  /// configured with the same secret, and reveals nothing usable about it. O(1).
  std::uint64_t secret_id() const noexcept { return secret_id_; }

  /// Starts a key: the parent's key and the block's tokens. O(tokens).
  void begin(state& s, block_key parent, std::span<const token_id> tokens) const {
    s.used_ = 0;
    s.started_ = false;
    std::uint8_t* p = s.buf_.data();
    put_le64(p, parent.hi);
    put_le64(p + 8, parent.lo);
    std::uint32_t any = 0;
    for (const token_id t : tokens) any |= static_cast<std::uint32_t>(t);
    const bool packed = any < (1u << 18);
    p[16] = packed ? 1 : 2;
    s.used_ = 17 + put_leb128(p + 17, tokens.size());
    if (packed)
      put_packed(s, tokens);
    else
      put_raw(s, tokens);
  }

  /// Absorbs one extra field: tag, word count, words. O(words).
  void absorb(state& s, key_field field, std::span<const std::uint64_t> words) const {
    reserve(s, 11);
    s.buf_[s.used_++] = static_cast<std::uint8_t>(field);
    s.used_ += put_leb128(s.buf_.data() + s.used_, words.size());
    for (const std::uint64_t w : words) {
      reserve(s, 8);
      put_le64(s.buf_.data() + s.used_, w);
      s.used_ += 8;
    }
  }

  /// The key of everything absorbed since begin(). O(1).
  block_key finish(state& s) const {
    flush(s);
    const crypto::sha256_digest d = s.ctx_.finish();
    s.started_ = false;
    return block_key{get_le64(d.data()), get_le64(d.data() + 8)};
  }

 private:
  static constexpr std::string_view secret_label = "weft/kv/sha256_block_hasher/v1/secret";
  static constexpr std::string_view key_label = "weft/kv/block_key/sha256/v1";  // <= 32 bytes
  static constexpr std::string_view id_label = "weft/kv/sha256_block_hasher/v1/id";

  void init(std::span<const std::byte> secret) {
    expects(secret.size() >= min_secret_bytes, errc::invalid_argument, "weft::kv::sha256_block_hasher",
            "the secret has ", secret.size(), " bytes; at least ", min_secret_bytes,
            " (128 bits) are required, 32 random bytes recommended");
    crypto::sha256 h;
    h.update(secret_label);
    h.update(secret);
    const crypto::sha256_digest k = h.finish();
    // One whole 64-byte block, so the saved state has nothing buffered: label, zero padding, k.
    std::array<std::byte, 64> block{};
    std::memcpy(block.data(), key_label.data(), key_label.size());
    std::memcpy(block.data() + 32, k.data(), k.size());
    auto keyed = std::make_shared<crypto::sha256>();
    keyed->update(block);
    keyed_ = std::move(keyed);
    h.reset();
    h.update(id_label);
    h.update(crypto::bytes_of(k));
    secret_id_ = get_le64(h.finish().data());
  }

  static void put_le64(std::uint8_t* p, std::uint64_t v) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(p, &v, 8);
    } else {
      for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
    }
  }
  static std::uint64_t get_le64(const std::uint8_t* p) noexcept {
    std::uint64_t v = 0;
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(&v, p, 8);
    } else {
      for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    }
    return v;
  }
  static std::size_t put_leb128(std::uint8_t* p, std::uint64_t v) noexcept {
    std::size_t n = 0;
    for (; v >= 0x80; v >>= 7) p[n++] = static_cast<std::uint8_t>(v | 0x80);
    p[n++] = static_cast<std::uint8_t>(v);
    return n;
  }

  // Hands the buffered bytes to OpenSSL, starting from the keyed state on the first flush.
  void flush(state& s) const {
    if (!s.started_) {
      s.ctx_.copy_from(*keyed_);
      s.started_ = true;
    }
    if (s.used_ > 0) s.ctx_.update(std::as_bytes(std::span<const std::uint8_t>(s.buf_.data(), s.used_)));
    s.used_ = 0;
  }
  void reserve(state& s, std::size_t n) const {
    if (s.buf_.size() - s.used_ < n) flush(s);
  }

  // 18 bits per token, least significant first: four tokens in nine bytes.
  void put_packed(state& s, std::span<const token_id> tokens) const {
    auto u = [&](std::size_t i) { return static_cast<std::uint64_t>(static_cast<std::uint32_t>(tokens[i])); };
    const std::size_t groups = tokens.size() / 4 * 4;
    std::size_t i = 0;
    while (i < groups) {
      reserve(s, 9);
      // As many whole groups as the buffer holds, without a check per group (a 16-token block is
      // one run).
      const std::size_t end = std::min(groups, i + (s.buf_.size() - s.used_) / 9 * 4);
      std::uint8_t* p = s.buf_.data() + s.used_;
      for (; i < end; i += 4, p += 9) {
        put_le64(p, u(i) | (u(i + 1) << 18) | (u(i + 2) << 36) | (u(i + 3) << 54));
        p[8] = static_cast<std::uint8_t>(u(i + 3) >> 10);
      }
      s.used_ = static_cast<std::size_t>(p - s.buf_.data());
    }
    if (i == tokens.size()) return;
    std::uint64_t acc = 0;
    std::size_t bits = 0;
    for (; i < tokens.size(); ++i, bits += 18) acc |= u(i) << bits;
    reserve(s, 8);
    for (std::size_t b = 0; b < bits; b += 8) s.buf_[s.used_++] = static_cast<std::uint8_t>(acc >> b);
  }
  void put_raw(state& s, std::span<const token_id> tokens) const {
    for (const token_id t : tokens) {
      reserve(s, 4);
      const auto v = static_cast<std::uint32_t>(t);
      for (int b = 0; b < 4; ++b) s.buf_[s.used_++] = static_cast<std::uint8_t>(v >> (8 * b));
    }
  }

  std::shared_ptr<const crypto::sha256> keyed_;  // SHA-256 state after K; copied into each state
  std::uint64_t secret_id_ = 0;
};
static_assert(block_hasher<sha256_block_hasher>);

}  // namespace weft::kv

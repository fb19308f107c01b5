// Cryptographic primitives weft needs, all from OpenSSL's libcrypto (never home-made): SHA-256
// (OpenSSL's SHA256_CTX functions, which use the CPU's SHA extensions), HMAC-SHA256 for challenge-response
// authentication of connections, a CSPRNG for nonces and secrets, and constant-time comparison. The one core header
// with a third-party dependency: modules that include it (kv, comm) link OpenSSL::Crypto.
#pragma once

#include <weft/core/error.hpp>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>
#include <utility>

// The low-level SHA256_* calls are deprecated in OpenSSL 3 (see sha256 below): silenced where used.
#if defined(__GNUC__) || defined(__clang__)
#define WEFT_CRYPTO_LOW_LEVEL_BEGIN \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wdeprecated-declarations\"")
#define WEFT_CRYPTO_LOW_LEVEL_END _Pragma("GCC diagnostic pop")
#else
#define WEFT_CRYPTO_LOW_LEVEL_BEGIN
#define WEFT_CRYPTO_LOW_LEVEL_END
#endif

namespace weft::crypto {

/// A SHA-256 digest.
using sha256_digest = std::array<std::uint8_t, 32>;

namespace detail {
// The SHA-256 implementation, fetched once per process (EVP_MD_fetch is not free). Thread-safe.
inline const EVP_MD* sha256_md() {
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  expects(md != nullptr, errc::unsupported, "weft::crypto::sha256", "OpenSSL has no SHA256 implementation");
  return md;
}
}  // namespace detail

/// Incremental SHA-256 (FIPS 180-4). update() any number of times, then finish(). A state can be
/// copied (copy_from, or plain copies) to hash many messages that share a prefix, e.g. a secret key,
/// without re-absorbing it. Not thread-safe (one object per thread). O(bytes).
///
/// Built on OpenSSL's SHA256_CTX functions (the same assembly, SHA extensions included, that EVP
/// runs): the state is a plain 112-byte value, so a copy is a memcpy and nothing allocates. Through
/// EVP each copy re-creates a provider context (EVP_MD_CTX_copy_ex), which cost 2.5x the hash of a
/// 16-token block key on our machines. OpenSSL 3 marks these functions deprecated but ships them; a
/// build without them (OPENSSL_NO_DEPRECATED_3_0) falls back to EVP, with the same digests.
#if !defined(OPENSSL_NO_DEPRECATED_3_0)
class sha256 {
 public:
  sha256() { reset(); }

  /// Starts a new message.
  void reset() noexcept {
    WEFT_CRYPTO_LOW_LEVEL_BEGIN
    SHA256_Init(&ctx_);
    WEFT_CRYPTO_LOW_LEVEL_END
  }
  /// Makes this state equal to other's (the same bytes absorbed so far).
  void copy_from(const sha256& other) noexcept { ctx_ = other.ctx_; }
  void update(std::span<const std::byte> bytes) noexcept {
    WEFT_CRYPTO_LOW_LEVEL_BEGIN
    SHA256_Update(&ctx_, bytes.data(), bytes.size());
    WEFT_CRYPTO_LOW_LEVEL_END
  }
  void update(std::string_view text) noexcept {
    update(std::as_bytes(std::span<const char>(text.data(), text.size())));
  }
  /// The digest of everything absorbed since reset(); the state must be reset() before reuse.
  sha256_digest finish() noexcept {
    sha256_digest out{};
    WEFT_CRYPTO_LOW_LEVEL_BEGIN
    SHA256_Final(out.data(), &ctx_);
    WEFT_CRYPTO_LOW_LEVEL_END
    return out;
  }

  /// One-shot digest. Thread-safe.
  static sha256_digest of(std::span<const std::byte> bytes) {
    sha256 h;
    h.update(bytes);
    return h.finish();
  }

 private:
  SHA256_CTX ctx_{};
};
#else
class sha256 {
 public:
  sha256() : ctx_(EVP_MD_CTX_new()) {
    expects(ctx_ != nullptr, errc::unsupported, "weft::crypto::sha256", "EVP_MD_CTX_new failed");
    reset();
  }
  sha256(const sha256& other) : sha256() { copy_from(other); }
  sha256& operator=(const sha256& other) {
    if (this != &other) copy_from(other);
    return *this;
  }
  sha256(sha256&& other) noexcept : ctx_(std::exchange(other.ctx_, nullptr)) {}
  sha256& operator=(sha256&& other) noexcept {
    std::swap(ctx_, other.ctx_);
    return *this;
  }
  ~sha256() { EVP_MD_CTX_free(ctx_); }

  void reset() { check(EVP_DigestInit_ex2(ctx_, detail::sha256_md(), nullptr), "EVP_DigestInit_ex2"); }
  void copy_from(const sha256& other) { check(EVP_MD_CTX_copy_ex(ctx_, other.ctx_), "EVP_MD_CTX_copy_ex"); }
  void update(std::span<const std::byte> bytes) {
    check(EVP_DigestUpdate(ctx_, bytes.data(), bytes.size()), "EVP_DigestUpdate");
  }
  void update(std::string_view text) { update(std::as_bytes(std::span<const char>(text.data(), text.size()))); }
  sha256_digest finish() {
    sha256_digest out{};
    unsigned int n = 0;
    check(EVP_DigestFinal_ex(ctx_, out.data(), &n), "EVP_DigestFinal_ex");
    return out;
  }
  static sha256_digest of(std::span<const std::byte> bytes) {
    sha256 h;
    h.update(bytes);
    return h.finish();
  }

 private:
  static void check(int ok, const char* what) {
    expects(ok == 1, errc::unsupported, "weft::crypto::sha256", what, " failed inside OpenSSL");
  }
  EVP_MD_CTX* ctx_;
};
#endif

/// HMAC-SHA256(key, parts[0] || parts[1] || ...) (RFC 2104) through OpenSSL's EVP_MAC. The parts
/// are absorbed in order with nothing between them: callers that authenticate several fields put
/// their lengths in the message too. Thread-safe. O(bytes).
inline sha256_digest hmac_sha256(std::span<const std::byte> key,
                                 std::initializer_list<std::span<const std::byte>> parts) {
  constexpr const char* where = "weft::crypto::hmac_sha256";
  expects(!key.empty(), errc::invalid_argument, where, "the key is empty");
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  expects(mac != nullptr, errc::unsupported, where, "OpenSSL has no HMAC implementation");
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  EVP_MAC_free(mac);
  expects(ctx != nullptr, errc::unsupported, where, "EVP_MAC_CTX_new failed");
  char digest_name[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0),
                               OSSL_PARAM_construct_end()};
  bool ok = EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(key.data()), key.size(), params) == 1;
  for (const auto& p : parts)
    ok = ok && EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(p.data()), p.size()) == 1;
  sha256_digest out{};
  std::size_t n = 0;
  ok = ok && EVP_MAC_final(ctx, out.data(), &n, out.size()) == 1 && n == out.size();
  EVP_MAC_CTX_free(ctx);
  expects(ok, errc::unsupported, where, "HMAC-SHA256 failed inside OpenSSL");
  return out;
}

/// Fills out with bytes from OpenSSL's CSPRNG (nonces, per-deployment secrets). Throws
/// weft::error(unsupported) when the generator cannot be seeded. Thread-safe. O(bytes).
inline void random_bytes(std::span<std::byte> out) {
  expects(RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size())) == 1,
          errc::unsupported, "weft::crypto::random_bytes", "OpenSSL's RAND_bytes failed (no entropy source?)");
}

/// A uniformly random 64-bit value from the CSPRNG (seeds for keyed non-cryptographic hashes).
inline std::uint64_t random_u64() {
  std::uint64_t v = 0;
  random_bytes(std::as_writable_bytes(std::span<std::uint64_t>(&v, 1)));
  return v;
}

/// a == b in time that depends only on the sizes (CRYPTO_memcmp), for comparing MACs. Thread-safe.
inline bool equal_constant_time(std::span<const std::byte> a, std::span<const std::byte> b) noexcept {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

/// The bytes of a digest, for passing to the functions above.
inline std::span<const std::byte> bytes_of(const sha256_digest& d) noexcept { return std::as_bytes(std::span(d)); }
/// The bytes of a string, for passing to the functions above.
inline std::span<const std::byte> bytes_of(std::string_view s) noexcept {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

}  // namespace weft::crypto

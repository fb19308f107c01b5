// TLS 1.3 (RFC 8446) for weft's tcp connections, over OpenSSL's libssl: keyed by the job secret as
// an external pre-shared key (RFC 8446 §2.2 and §4.2.11, OpenSSL 3's psk_use_session and
// psk_find_session callbacks) or by certificates that both ends verify against a CA. The only weft
// header that needs libssl: include it and link OpenSSL::SSL to use it.
#pragma once

#include <weft/comm/stream_security.hpp>
#include <weft/core/crypto.hpp>
#include <weft/core/error.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <poll.h>
#include <sys/socket.h>

namespace weft::comm {

/// The files of a member's certificate identity (PEM): the CA that signs every member's
/// certificate, this member's certificate (chain) and its private key. A plain aggregate.
struct tls_certificates {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

namespace detail {

/// The text of this thread's OpenSSL error queue (emptied), for error messages.
inline std::string tls_errors() {
  std::string out;
  char buf[256];
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    ERR_error_string_n(e, buf, sizeof buf);
    out += out.empty() ? "" : "; ";
    out += buf;
  }
  return out.empty() ? std::string("no detail from OpenSSL") : out;
}

// A BIO over a borrowed non-blocking socket that writes with MSG_NOSIGNAL: OpenSSL's own socket
// BIO uses write(2), which raises SIGPIPE (killing the process) when the peer is gone.
inline int tls_bio_fd(BIO* b) noexcept { return static_cast<int>(reinterpret_cast<std::intptr_t>(BIO_get_data(b))); }
inline int tls_bio_write(BIO* b, const char* data, int len) {
  BIO_clear_retry_flags(b);
  const ssize_t w = ::send(tls_bio_fd(b), data, static_cast<std::size_t>(len), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(b);
  return static_cast<int>(w);
}
inline int tls_bio_read(BIO* b, char* data, int len) {
  BIO_clear_retry_flags(b);
  const ssize_t r = ::recv(tls_bio_fd(b), data, static_cast<std::size_t>(len), MSG_DONTWAIT);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(b);
  return static_cast<int>(r);
}
inline long tls_bio_ctrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }
inline const BIO_METHOD* tls_bio_method() {
  // Made once per process and kept (OpenSSL has no static BIO_METHOD for a custom BIO).
  static BIO_METHOD* m = [] {
    BIO_METHOD* b = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "weft socket");
    if (b != nullptr) {
      BIO_meth_set_write(b, tls_bio_write);
      BIO_meth_set_read(b, tls_bio_read);
      BIO_meth_set_ctrl(b, tls_bio_ctrl);
    }
    return b;
  }();
  expects(m != nullptr, errc::io, "weft::comm::tls", "cannot make a BIO method: ", tls_errors());
  return m;
}

// The one ciphersuite: AES-128-GCM with SHA-256, mandatory in every TLS 1.3 implementation.
inline constexpr unsigned char tls_aes128gcm_sha256[2] = {0x13, 0x01};
// The PSK identity both sides name; the key itself never travels.
inline constexpr std::string_view tls_psk_identity = "weft-job-secret";

}  // namespace detail

/// One TLS 1.3 session over a borrowed non-blocking socket (made by tls_security::open). Writes
/// at most one 16 KiB record per call; a write that would block keeps its encrypted record and
/// sends it first on the next call, which must offer the same bytes again (else errc::
/// peer_failure: the stream would be corrupt). Not thread-safe (one caller at a time).
class tls_stream final : public secure_stream {
 public:
  static constexpr std::size_t record_bytes = 16384;  // TLS's largest plaintext record

  tls_stream(SSL_CTX* ctx, int fd, bool client, std::string peer) : peer_(std::move(peer)) {
    constexpr const char* where = "weft::comm::tls";
    ERR_clear_error();
    ssl_ = SSL_new(ctx);
    expects(ssl_ != nullptr, errc::io, where, "SSL_new failed: ", detail::tls_errors());
    BIO* bio = BIO_new(const_cast<BIO_METHOD*>(detail::tls_bio_method()));
    if (bio == nullptr) {
      SSL_free(ssl_);
      weft::detail::raise(errc::io, where, "BIO_new failed: ", detail::tls_errors());
    }
    BIO_set_data(bio, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)));
    BIO_set_init(bio, 1);
    SSL_set_bio(ssl_, bio, bio);  // the session owns the BIO (one reference for each direction)
    if (client)
      SSL_set_connect_state(ssl_);
    else
      SSL_set_accept_state(ssl_);
  }
  tls_stream(const tls_stream&) = delete;
  tls_stream& operator=(const tls_stream&) = delete;
  ~tls_stream() override { SSL_free(ssl_); }  // no close_notify: the socket's close ends the stream

  // In TLS 1.3 the client finishes its handshake before the server has checked the client's
  // certificate, so a refused client would learn it only from its first read. The server
  // therefore sends one byte once it accepted, and the client's handshake ends when it arrives:
  // both sides of a refused connection fail here, by name, before any data moves.
  bool handshake(short& events) override {
    ERR_clear_error();
    if (!shaken_) {
      const int rc = SSL_do_handshake(ssl_);
      if (rc != 1) return handshake_wants(rc, events);
      shaken_ = true;
    }
    std::size_t n = 0;
    if (SSL_is_server(ssl_) == 1) {
      static const unsigned char accepted = 1;
      const int rc = SSL_write_ex(ssl_, &accepted, 1, &n);
      return rc == 1 || handshake_wants(rc, events);
    }
    unsigned char verdict = 0;
    const int rc = SSL_read_ex(ssl_, &verdict, 1, &n);
    if (rc != 1) return handshake_wants(rc, events);
    if (verdict != 1)
      weft::detail::raise(errc::parse, "weft::comm::tls", "the TLS handshake with ", peer_,
                          " failed: the peer sent byte ", static_cast<int>(verdict),
                          " where it confirms the handshake");
    return true;
  }

  std::size_t write_some(const std::span<const std::byte>* parts, int count) override {
    if (pending_ == 0) {  // take the next record's bytes
      for (int i = 0; i < count && pending_ < record_bytes; ++i) {
        const std::size_t n = std::min(parts[i].size(), record_bytes - pending_);
        if (n > 0) std::memcpy(record_.data() + pending_, parts[i].data(), n);
        pending_ += n;
      }
      if (pending_ == 0) return 0;
    } else if (!same_prefix(parts, count)) {
      weft::detail::raise(errc::peer_failure, "weft::comm::tls", "a write to ", peer_,
                          " was abandoned in the middle of a TLS record: the stream cannot carry more");
    }
    ERR_clear_error();
    std::size_t written = 0;
    const int rc = SSL_write_ex(ssl_, record_.data(), pending_, &written);
    if (rc == 1) {
      pending_ = 0;
      return written;
    }
    return fail_or_zero(rc, "write to");
  }

  std::size_t read_some(std::byte* dst, std::size_t n) override {
    if (failed_) std::rethrow_exception(failed_);
    std::size_t total = 0;
    while (total < n) {
      ERR_clear_error();
      std::size_t got = 0;
      const int rc = SSL_read_ex(ssl_, dst + total, n - total, &got);
      if (rc != 1) {
        try {
          if (fail_or_zero(rc, "read from") == 0) break;
        } catch (...) {
          // The peer's last bytes came before its end: hand them over, report the end next call.
          if (total == 0) throw;
          failed_ = std::current_exception();
          break;
        }
      }
      total += got;
    }
    return total;
  }
  bool has_pending() const noexcept override { return SSL_has_pending(ssl_) == 1; }
  bool ended() const noexcept override { return ended_; }

 private:
  // false with `events` when the handshake would block; else throws why it failed.
  bool handshake_wants(int rc, short& events) {
    const int e = SSL_get_error(ssl_, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      events = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
      return false;
    }
    const int sys = errno;
    std::string why = e == SSL_ERROR_SYSCALL || e == SSL_ERROR_ZERO_RETURN
                          ? std::string(sys == 0 || e == SSL_ERROR_ZERO_RETURN ? "the peer closed the connection"
                                                                               : std::strerror(sys))
                          : detail::tls_errors();
    if (const long v = SSL_get_verify_result(ssl_); v != X509_V_OK)
      why += weft::detail::concat(" (certificate: ", X509_verify_cert_error_string(v), ")");
    weft::detail::raise(e == SSL_ERROR_SSL ? errc::mismatch : errc::peer_failure, "weft::comm::tls",
                        "the TLS handshake with ", peer_, " failed: ", why,
                        " (a different job secret or an untrusted certificate on one side, or TLS on one side only?)");
  }
  bool same_prefix(const std::span<const std::byte>* parts, int count) const noexcept {
    std::size_t off = 0;
    for (int i = 0; i < count && off < pending_; ++i) {
      const std::size_t n = std::min(parts[i].size(), pending_ - off);
      if (n > 0 && std::memcmp(record_.data() + off, parts[i].data(), n) != 0) return false;
      off += n;
    }
    return off == pending_;
  }
  // 0 when the call would block; else marks the stream ended and throws.
  std::size_t fail_or_zero(int rc, const char* op) {
    const int e = SSL_get_error(ssl_, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
    const int sys = errno;
    ended_ = true;
    if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && sys == 0))
      weft::detail::raise(errc::peer_failure, "weft::comm::tls", peer_, " closed the connection (it exited or failed)");
    if (e == SSL_ERROR_SYSCALL)
      weft::detail::raise(errc::peer_failure, "weft::comm::tls", op, " ", peer_, " failed: ", std::strerror(sys));
    weft::detail::raise(errc::peer_failure, "weft::comm::tls", op, " ", peer_,
                        " failed: TLS error (corrupted or forged data?): ", detail::tls_errors());
  }

  SSL* ssl_ = nullptr;
  std::string peer_;
  std::array<std::byte, record_bytes> record_{};
  std::size_t pending_ = 0;    // bytes of record_ handed to SSL_write that it has not finished
  std::exception_ptr failed_;  // the stream's end, seen after bytes that read_some returned first
  bool shaken_ = false;        // SSL_do_handshake succeeded (the confirmation byte may still be due)
  bool ended_ = false;
};

/// What makes TLS 1.3 sessions for weft's connections: one SSL_CTX (TLS 1.3 only, the
/// TLS_AES_128_GCM_SHA256 ciphersuite, no session tickets), keyed either by a job secret as an
/// external PSK (both sides must hold the same secret; the key is HMAC-SHA256(secret, "weft tls
/// psk"), never the secret itself) or by certificates (each side presents its certificate and
/// verifies the peer's against the CA; any certificate the CA signed is accepted, host names are
/// not checked since members are addressed by IP). Give it to elastic::group_options::tls or
/// elastic::mesh_options::security. Immutable and thread-safe once made; construction O(1) plus
/// reading the files.
class tls_security final : public stream_security {
 public:
  /// TLS keyed by `secret` (16 to 1024 bytes, errc::invalid_argument otherwise: the same rule as
  /// the job secret's).
  static std::shared_ptr<const tls_security> with_psk(std::string_view secret) {
    constexpr const char* where = "weft::comm::tls_security::with_psk";
    expects(secret.size() >= 16 && secret.size() <= 1024, errc::invalid_argument, where, "the secret has ",
            secret.size(), " bytes; it must have between 16 and 1024");
    std::shared_ptr<tls_security> s(new tls_security(where));
    s->psk_ = crypto::hmac_sha256(crypto::bytes_of(secret), {crypto::bytes_of(std::string_view("weft tls psk"))});
    s->use_psk_ = true;
    SSL_CTX_set_psk_use_session_callback(s->ctx_, use_session);
    SSL_CTX_set_psk_find_session_callback(s->ctx_, find_session);
    // The PSK alone authenticates: a side that has no certificate must not be asked for one.
    SSL_CTX_set_verify(s->ctx_, SSL_VERIFY_NONE, nullptr);
    return s;
  }
  /// TLS with certificates: errc::invalid_argument when a path is empty or a file cannot be read
  /// or parsed, or the key does not match the certificate (the message names the file).
  static std::shared_ptr<const tls_security> with_certificates(const tls_certificates& files) {
    constexpr const char* where = "weft::comm::tls_security::with_certificates";
    expects(!files.ca_file.empty() && !files.cert_file.empty() && !files.key_file.empty(), errc::invalid_argument,
            where, "ca_file, cert_file and key_file must all be given");
    std::shared_ptr<tls_security> s(new tls_security(where));
    // Each call's OpenSSL errors are read after it (expects' arguments have no evaluation order).
    auto load = [&](bool ok, const char* what, const std::string& file) {
      if (!ok)
        weft::detail::raise(errc::invalid_argument, where, "cannot load the ", what, " '", file,
                            "': ", detail::tls_errors());
    };
    ERR_clear_error();
    load(SSL_CTX_load_verify_locations(s->ctx_, files.ca_file.c_str(), nullptr) == 1, "CA file", files.ca_file);
    load(SSL_CTX_use_certificate_chain_file(s->ctx_, files.cert_file.c_str()) == 1, "certificate file",
         files.cert_file);
    load(SSL_CTX_use_PrivateKey_file(s->ctx_, files.key_file.c_str(), SSL_FILETYPE_PEM) == 1,
         "key file (or it is not the key of the certificate)", files.key_file);
    expects(SSL_CTX_check_private_key(s->ctx_) == 1, errc::invalid_argument, where, "the key in '", files.key_file,
            "' does not match the certificate in '", files.cert_file, "'");
    SSL_CTX_set_verify(s->ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    return s;
  }
  tls_security(const tls_security&) = delete;
  tls_security& operator=(const tls_security&) = delete;
  ~tls_security() override {
    SSL_CTX_free(ctx_);
    OPENSSL_cleanse(psk_.data(), psk_.size());  // the key outlives nothing that needs it
  }

  std::unique_ptr<secure_stream> open(int fd, bool client, const std::string& peer) const override {
    return std::make_unique<tls_stream>(ctx_, fd, client, peer);
  }
  std::string describe() const override {
    return use_psk_ ? "TLS 1.3 (TLS_AES_128_GCM_SHA256), job secret as PSK"
                    : "TLS 1.3 (TLS_AES_128_GCM_SHA256), certificates";
  }

 private:
  explicit tls_security(const char* where) {
    ERR_clear_error();
    ctx_ = SSL_CTX_new(TLS_method());
    expects(ctx_ != nullptr, errc::io, where, "SSL_CTX_new failed: ", detail::tls_errors());
    SSL_CTX_set_app_data(ctx_, this);
    const bool ok = SSL_CTX_set_min_proto_version(ctx_, TLS1_3_VERSION) == 1 &&
                    SSL_CTX_set_ciphersuites(ctx_, "TLS_AES_128_GCM_SHA256") == 1;
    if (!ok) {
      SSL_CTX_free(ctx_);
      weft::detail::raise(errc::unsupported, where,
                          "this OpenSSL cannot do TLS 1.3 with TLS_AES_128_GCM_SHA256: ", detail::tls_errors());
    }
    SSL_CTX_set_num_tickets(ctx_, 0);  // no resumption: every connection is new
    // write_some hands SSL_write one record from its own buffer, and may offer it again from there.
    SSL_CTX_set_mode(ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  }

  static const tls_security* of(SSL* ssl) {
    return static_cast<const tls_security*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
  }
  // A session that carries the PSK (the caller, OpenSSL, takes ownership). nullptr on failure.
  static SSL_SESSION* psk_session(SSL* ssl) {
    const tls_security* self = of(ssl);
    const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, detail::tls_aes128gcm_sha256);
    if (self == nullptr || cipher == nullptr) return nullptr;
    SSL_SESSION* s = SSL_SESSION_new();
    if (s == nullptr) return nullptr;
    const auto* key = reinterpret_cast<const unsigned char*>(self->psk_.data());
    if (SSL_SESSION_set1_master_key(s, key, self->psk_.size()) != 1 || SSL_SESSION_set_cipher(s, cipher) != 1 ||
        SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION) != 1) {
      SSL_SESSION_free(s);
      return nullptr;
    }
    return s;
  }
  static int use_session(SSL* ssl, const EVP_MD* md, const unsigned char** id, std::size_t* id_len,
                         SSL_SESSION** sess) {
    const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, detail::tls_aes128gcm_sha256);
    if (cipher == nullptr || (md != nullptr && md != SSL_CIPHER_get_handshake_digest(cipher))) {
      *sess = nullptr;  // after a HelloRetryRequest for another hash: no PSK fits
      return 1;
    }
    *sess = psk_session(ssl);
    if (*sess == nullptr) return 0;
    *id = reinterpret_cast<const unsigned char*>(detail::tls_psk_identity.data());
    *id_len = detail::tls_psk_identity.size();
    return 1;
  }
  static int find_session(SSL* ssl, const unsigned char* id, std::size_t id_len, SSL_SESSION** sess) {
    const std::string_view want = detail::tls_psk_identity;
    if (id_len != want.size() || std::memcmp(id, want.data(), id_len) != 0) {
      *sess = nullptr;  // not our identity: the handshake then fails for want of a key
      return 1;
    }
    *sess = psk_session(ssl);
    return *sess != nullptr ? 1 : 0;
  }

  SSL_CTX* ctx_ = nullptr;
  crypto::sha256_digest psk_{};
  bool use_psk_ = false;
};

}  // namespace weft::comm

// Internal: the handshake every weft::comm connection runs first — a bounded hello each way and,
// with a job secret, mutual HMAC-SHA256 challenge-response (RFC 2104; ISO/IEC 9798-4 three-pass).
// Sans-I/O, so sockets, Asio and the fuzzer drive the same code; specified in docs/comm.md.
#pragma once

#include <weft/comm/detail/env.hpp>
#include <weft/comm/detail/wire.hpp>
#include <weft/core/crypto.hpp>
#include <weft/core/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft::comm::detail {

/// What a connection is for. A server accepts exactly one kind on a port, so a hello meant for
/// another component (or a proof computed for another kind) is refused.
enum class conn_kind : std::uint16_t {
  rendezvous = 1,    ///< a rank registering with rank 0 (tcp_transport)
  tcp_mesh = 2,      ///< one of the K data connections between two ranks (tcp_transport)
  coordinator = 3,   ///< a member's control connection to an elastic coordinator
  elastic_mesh = 4,  ///< a data connection between two members of an elastic epoch
};

constexpr const char* to_string(conn_kind k) noexcept {
  switch (k) {
    case conn_kind::rendezvous:
      return "rendezvous";
    case conn_kind::tcp_mesh:
      return "tcp mesh";
    case conn_kind::coordinator:
      return "elastic coordinator";
    case conn_kind::elastic_mesh:
      return "elastic mesh";
  }
  return "unknown";
}

/// Who one side of a connection says it is. Each kind uses the fields it needs and leaves the
/// others at their defaults; the receiving component checks them (a hello only guarantees that
/// the strings are bounded, printable ASCII without spaces). A plain value.
struct peer_identity {
  std::int32_t rank = -1;      ///< rank, or index of a member in its epoch
  std::int32_t size = 0;       ///< ranks (members) in the group
  std::int32_t index = 0;      ///< which of `count` connections between the same pair
  std::int32_t count = 0;      ///< connections per pair of ranks
  std::uint64_t epoch = 0;     ///< elastic membership epoch
  std::uint64_t instance = 0;  ///< random per transport object: tells a process from a stale address
  std::uint16_t port = 0;      ///< a listening port the side announces (rendezvous)
  std::string name;            ///< a member name (elastic)
  std::string host;            ///< an address the side announces (rendezvous), may be empty
  /// The side secures the connection with TLS once the handshake is done (a hello flag): both
  /// sides must agree, so TLS on one side only is refused by name, not met by a garbled stream.
  bool tls = false;
};

/// A job's shared secret: every process of a job holds the same one, and a connection is accepted
/// only from a side that proves it holds it too. Empty means "no authentication". 16 to 1024
/// bytes (high-entropy, e.g. `openssl rand -hex 32`). The bytes are never printed. A plain value;
/// safe to read from several threads.
class job_secret {
 public:
  static constexpr std::size_t min_bytes = 16;
  static constexpr std::size_t max_bytes = 1024;

  job_secret() = default;
  /// weft::error(invalid_argument) unless 16 <= key.size() <= 1024.
  explicit job_secret(std::string_view key, const char* where = "weft::comm job secret") : key_(key) {
    expects(key.size() >= min_bytes && key.size() <= max_bytes, errc::invalid_argument, where, "the job secret has ",
            key.size(), " bytes; it must have between ", min_bytes, " and ", max_bytes);
  }
  /// `option` when it is not empty, else WEFT_JOB_SECRET when it is set, else no secret. Throws
  /// weft::error when the one chosen has the wrong length.
  static job_secret resolve(std::string_view option, const char* where) {
    if (!option.empty()) return job_secret(option, where);
    if (auto env = env_string("WEFT_JOB_SECRET", min_bytes, max_bytes, where)) return job_secret(*env, where);
    return {};
  }

  bool empty() const noexcept { return key_.empty(); }
  std::span<const std::byte> key() const noexcept { return crypto::bytes_of(key_); }

 private:
  std::string key_;
};

/// A fresh job secret: 32 bytes from OpenSSL's CSPRNG as 64 lowercase hex characters (what the
/// launchers give the ranks they start). Thread-safe. O(1).
inline std::string make_job_secret() {
  std::array<std::byte, 32> raw{};
  crypto::random_bytes(raw);
  std::string hex(64, '0');
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const auto b = static_cast<unsigned>(raw[i]);
    hex[2 * i] = "0123456789abcdef"[b >> 4];
    hex[2 * i + 1] = "0123456789abcdef"[b & 0xfu];
  }
  return hex;
}

/// Whether the user opted in to a job that forms without a job secret: the component's option, or
/// WEFT_ALLOW_UNAUTHENTICATED=1 (read strictly: 0 or 1; anything else is errc::parse).
inline bool unauthenticated_allowed(bool option, const char* where) {
  if (option) return true;
  const auto env = env_integer("WEFT_ALLOW_UNAUTHENTICATED", 0, 1, where);
  return env.has_value() && *env == 1;
}

/// Secure by default: a job with no secret forms only when the user opted in explicitly (`allowed`),
/// and then it says once per process, on stderr, what that exposes. Otherwise it throws
/// errc::invalid_argument naming the fixes, before anything listens. `who` names the component,
/// `exposed` what a stranger could reach, `option` the component's opt-in field.
inline void require_secret_or_opt_in(const job_secret& secret, bool allowed, const char* who,
                                     const std::string& exposed, const char* option) {
  if (!secret.empty()) return;
  expects(allowed, errc::invalid_argument, who, "no job secret: without one, any process that can connect to ", exposed,
          " could join this job and read or change its data. Set WEFT_JOB_SECRET (16 to 1024 bytes, the same in "
          "every process; fork_ranks and spawn_ranks generate one for the ranks they start) or the secret option, "
          "or opt in to an unauthenticated job with ",
          option, " = true or WEFT_ALLOW_UNAUTHENTICATED=1");
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr,
                 "%s: no job secret, and the unauthenticated job was allowed explicitly: any process that can connect "
                 "to %s while the job forms can join it and read or change its data\n",
                 who, exposed.c_str());
  });
}

/// Bytes of a hello before its two strings; of a proof; most bytes of a refusal's reason.
inline constexpr std::size_t hello_fixed_bytes = 80;
inline constexpr std::size_t proof_bytes = 32;
inline constexpr std::size_t verdict_fixed_bytes = 3;
inline constexpr std::size_t max_reason_bytes = 255;
inline constexpr std::uint16_t hello_flag_authenticated = 1;
inline constexpr std::uint16_t hello_flag_tls = 2;
inline constexpr std::uint16_t hello_known_flags = hello_flag_authenticated | hello_flag_tls;

// Little-endian codec: the wire is little-endian whatever the host is.
inline void put_le(std::vector<std::byte>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}
inline std::uint64_t get_le(const std::byte* p, int bytes) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

/// True when every byte of s is printable ASCII other than space (names, hosts, reasons' words).
inline bool is_token(std::string_view s) noexcept {
  for (char c : s)
    if (c < 0x21 || c > 0x7e) return false;
  return true;
}

/// The hello's fixed part, as read from the wire (before the identity's strings arrive).
struct hello_header {
  std::uint32_t magic = 0;
  std::uint16_t version = 0, kind = 0, flags = 0, name_len = 0, host_len = 0;
  peer_identity id;
  std::array<std::byte, 32> nonce{};
};

/// Encodes a hello: the 80-byte fixed part, then the name and host bytes.
inline std::vector<std::byte> encode_hello(conn_kind kind, bool authenticated, const peer_identity& id,
                                           const std::array<std::byte, 32>& nonce) {
  std::vector<std::byte> out;
  out.reserve(hello_fixed_bytes + id.name.size() + id.host.size());
  put_le(out, wire_magic, 4);
  put_le(out, wire_version, 2);
  put_le(out, static_cast<std::uint16_t>(kind), 2);
  put_le(out, (authenticated ? hello_flag_authenticated : 0) | (id.tls ? hello_flag_tls : 0), 2);
  put_le(out, id.name.size(), 2);
  put_le(out, id.host.size(), 2);
  put_le(out, id.port, 2);
  put_le(out, static_cast<std::uint32_t>(id.rank), 4);
  put_le(out, static_cast<std::uint32_t>(id.size), 4);
  put_le(out, static_cast<std::uint32_t>(id.index), 4);
  put_le(out, static_cast<std::uint32_t>(id.count), 4);
  put_le(out, id.epoch, 8);
  put_le(out, id.instance, 8);
  out.insert(out.end(), nonce.begin(), nonce.end());
  for (char c : id.name) out.push_back(static_cast<std::byte>(c));
  for (char c : id.host) out.push_back(static_cast<std::byte>(c));
  return out;
}

/// Decodes the fixed part (exactly hello_fixed_bytes). Never fails: the caller checks the fields.
inline hello_header decode_hello_fixed(std::span<const std::byte, hello_fixed_bytes> b) noexcept {
  hello_header h;
  const std::byte* p = b.data();
  h.magic = static_cast<std::uint32_t>(get_le(p, 4));
  h.version = static_cast<std::uint16_t>(get_le(p + 4, 2));
  h.kind = static_cast<std::uint16_t>(get_le(p + 6, 2));
  h.flags = static_cast<std::uint16_t>(get_le(p + 8, 2));
  h.name_len = static_cast<std::uint16_t>(get_le(p + 10, 2));
  h.host_len = static_cast<std::uint16_t>(get_le(p + 12, 2));
  h.id.port = static_cast<std::uint16_t>(get_le(p + 14, 2));
  h.id.rank = static_cast<std::int32_t>(static_cast<std::uint32_t>(get_le(p + 16, 4)));
  h.id.size = static_cast<std::int32_t>(static_cast<std::uint32_t>(get_le(p + 20, 4)));
  h.id.index = static_cast<std::int32_t>(static_cast<std::uint32_t>(get_le(p + 24, 4)));
  h.id.count = static_cast<std::int32_t>(static_cast<std::uint32_t>(get_le(p + 28, 4)));
  h.id.epoch = get_le(p + 32, 8);
  h.id.instance = get_le(p + 40, 8);
  std::memcpy(h.nonce.data(), p + 48, 32);
  return h;
}

/// One side of one connection's handshake, as a state machine over bytes.
///
///   client -> server   hello(client)
///   server -> client   hello(server) [+ proof_S = HMAC(secret, "S" || T)]      (T: see below)
///   client -> server   [proof_C = HMAC(secret, "C" || T)]
///   server -> client   verdict: u8 0 accepted / 1 refused, u16 length, reason
///
/// T = "weft-handshake" || hello(client) || hello(server), the exact bytes sent, so a proof binds
/// both nonces, both identities, the kind and the version; the "S"/"C" labels stop a proof from
/// being reflected back as the other role's. `check` decides on the peer's identity: on a client
/// it verifies the server is who the client meant to reach; on a server it is the admission rule
/// (run only after the client's proof verified). It returns "" to accept or the reason to refuse.
///
/// Drive it with want()/consume() for input and output()/sent() for output until finished().
/// want() never asks for more than the next field, so a driver that reads exactly want() bytes
/// never consumes bytes that follow the handshake on the stream. Failures are states, not
/// exceptions: failure() says why (already suitable for a log line). Not thread-safe. Each call
/// O(bytes); the whole handshake O(1) messages and two HMACs.
class handshake {
 public:
  enum class role : std::uint8_t { client, server };
  enum class status : std::uint8_t { running, done, failed };
  using check_fn = std::function<std::string(const peer_identity&)>;

  handshake(role r, conn_kind kind, peer_identity mine, const job_secret& secret, check_fn check,
            const wire_limits& limits = {})
      : role_(r), kind_(kind), secret_(secret), check_(std::move(check)), limits_(limits), tls_(mine.tls) {
    std::array<std::byte, 32> nonce{};
    crypto::random_bytes(nonce);
    expects(mine.name.size() <= limits_.max_name_bytes && mine.host.size() <= limits_.max_host_bytes &&
                is_token(mine.name) && is_token(mine.host),
            errc::invalid_argument, "weft::comm handshake", "name '", mine.name.substr(0, 64), "' or host '",
            mine.host.substr(0, 64), "' is too long or not printable ASCII without spaces");
    mine_ = encode_hello(kind, !secret_.empty(), mine, nonce);
    if (role_ == role::client) out_ = mine_;
    phase_ = phase::hello_fixed;
  }

  /// Bytes the machine needs next; 0 when it needs none now (it has output to flush, or finished).
  std::size_t want() const noexcept { return status_ == status::running ? need_ - in_.size() : 0; }

  /// Takes bytes from the peer, field by field, and returns how many it used: it stops where the
  /// handshake ends (or fails), so bytes that follow the handshake are left to the caller.
  std::size_t consume(std::span<const std::byte> in) {
    std::size_t used = 0;
    while (used < in.size() && want() > 0) {
      const std::size_t n = std::min(in.size() - used, want());
      in_.insert(in_.end(), in.begin() + static_cast<std::ptrdiff_t>(used),
                 in.begin() + static_cast<std::ptrdiff_t>(used + n));
      used += n;
      if (in_.size() == need_) advance();
    }
    return used;
  }

  /// Bytes to send now (may be empty), and how many of them went out.
  std::span<const std::byte> output() const noexcept {
    return std::span<const std::byte>(out_).subspan(std::min(out_sent_, out_.size()));
  }
  void sent(std::size_t n) noexcept { out_sent_ = std::min(out_.size(), out_sent_ + n); }

  status state() const noexcept { return status_; }
  /// Done or failed, with nothing left to send.
  bool finished() const noexcept { return status_ != status::running && output().empty(); }
  /// Why it failed ("" while running or done) and the matching code.
  const std::string& failure() const noexcept { return failure_; }
  errc failure_code() const noexcept { return failure_code_; }
  /// True when the peer's failure is the peer's own refusal (a verdict), not a local check.
  bool refused_by_peer() const noexcept { return refused_by_peer_; }
  /// True on a server whose check refused an authenticated peer: a peer that holds the job's
  /// secret yet disagrees (size, connections, a taken rank) is a misconfigured job, not a stranger.
  bool refused_authenticated_peer() const noexcept { return refused_by_check_ && authenticated(); }
  /// The peer's identity (valid once its hello was parsed).
  const peer_identity& peer() const noexcept { return peer_; }
  bool authenticated() const noexcept { return !secret_.empty(); }
  role which() const noexcept { return role_; }

  /// Fails a running handshake from outside (a deadline, a closed connection).
  void abandon(errc code, std::string why) {
    if (status_ == status::running) fail(code, std::move(why));
  }

 private:
  enum class phase : std::uint8_t { hello_fixed, hello_strings, proof, verdict_fixed, verdict_reason, over };

  void expect_bytes(phase p, std::size_t n) {
    phase_ = p;
    need_ = n;
    in_.clear();
    if (n == 0) advance();
  }
  void fail(errc code, std::string why) {
    status_ = status::failed;
    failure_code_ = code;
    failure_ = std::move(why);
    phase_ = phase::over;
    need_ = 0;
    in_.clear();
  }
  void finish() {
    status_ = status::done;
    phase_ = phase::over;
    need_ = 0;
    in_.clear();
  }
  void send(std::span<const std::byte> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void send_verdict(bool accepted, std::string_view reason) {
    reason = reason.substr(0, max_reason_bytes);
    std::vector<std::byte> v;
    put_le(v, accepted ? 0 : 1, 1);
    put_le(v, reason.size(), 2);
    for (char c : reason) v.push_back(static_cast<std::byte>(c));
    send(v);
  }
  crypto::sha256_digest proof(char label) const {
    const std::string_view context = "weft-handshake";
    const char l[1] = {label};
    const auto& client = role_ == role::client ? mine_ : theirs_;
    const auto& server = role_ == role::client ? theirs_ : mine_;
    return crypto::hmac_sha256(secret_.key(), {crypto::bytes_of(std::string_view(l, 1)), crypto::bytes_of(context),
                                               std::span<const std::byte>(client), std::span<const std::byte>(server)});
  }

  void advance() {
    switch (phase_) {
      case phase::hello_fixed:
        return on_hello_fixed();
      case phase::hello_strings:
        return on_hello_strings();
      case phase::proof:
        return on_proof();
      case phase::verdict_fixed:
        return on_verdict_fixed();
      case phase::verdict_reason:
        return on_verdict_reason();
      case phase::over:
        return;
    }
  }

  void on_hello_fixed() {
    header_ = decode_hello_fixed(std::span<const std::byte, hello_fixed_bytes>(in_.data(), hello_fixed_bytes));
    if (header_.magic != wire_magic) return fail(errc::parse, "not a weft connection (wrong magic number)");
    if (header_.name_len > limits_.max_name_bytes || header_.host_len > limits_.max_host_bytes)
      return fail(errc::parse, weft::detail::concat("a hello announces a ", header_.name_len, "-byte name and a ",
                                                    header_.host_len, "-byte host; the limits are ",
                                                    limits_.max_name_bytes, " and ", limits_.max_host_bytes));
    theirs_.assign(in_.begin(), in_.end());
    expect_bytes(phase::hello_strings, std::size_t{header_.name_len} + header_.host_len);
  }

  void on_hello_strings() {
    theirs_.insert(theirs_.end(), in_.begin(), in_.end());
    peer_ = header_.id;
    peer_.name.assign(reinterpret_cast<const char*>(in_.data()), header_.name_len);
    peer_.host.assign(reinterpret_cast<const char*>(in_.data()) + header_.name_len, header_.host_len);
    const bool peer_auth = (header_.flags & hello_flag_authenticated) != 0;
    peer_.tls = (header_.flags & hello_flag_tls) != 0;
    if (role_ == role::server) {
      // Answer every well-formed hello, so a peer of another version or configuration learns why.
      send(mine_);
      if (header_.version != wire_version) return refuse_version();
      if (header_.kind != static_cast<std::uint16_t>(kind_))
        return refuse(errc::mismatch, weft::detail::concat("this port serves ", to_string(kind_),
                                                           " connections, not kind ", header_.kind));
      if ((header_.flags & ~hello_known_flags) != 0) return refuse(errc::parse, "unknown hello flags");
      if (!is_token(peer_.name) || !is_token(peer_.host))
        return refuse(errc::parse, "name or host is not printable ASCII without spaces");
      if (peer_auth != authenticated())
        return refuse(errc::mismatch, authenticated() ? "this job requires a job secret (WEFT_JOB_SECRET)"
                                                      : "this job has no job secret but the peer expects one");
      if (peer_.tls != tls_)
        return refuse(errc::mismatch, tls_ ? "this side requires TLS on the connection but the peer does not use it"
                                           : "the peer requires TLS but this side does not use it");
      if (authenticated()) {
        const auto p = proof('S');
        send(std::as_bytes(std::span(p)));
        return expect_bytes(phase::proof, proof_bytes);
      }
      return admit();
    }
    // Client.
    if (header_.version != wire_version)
      return fail(errc::mismatch, weft::detail::concat("the peer speaks weft wire version ", header_.version,
                                                       ", this process ", wire_version));
    if (header_.kind != static_cast<std::uint16_t>(kind_))
      return fail(errc::mismatch, weft::detail::concat("the peer serves kind ", header_.kind, ", not ",
                                                       to_string(kind_), " connections"));
    if ((header_.flags & ~hello_known_flags) != 0 || !is_token(peer_.name) || !is_token(peer_.host))
      return fail(errc::parse, "malformed hello from the peer");
    if (peer_auth != authenticated())
      return fail(errc::mismatch, authenticated() ? "the peer has no job secret; refusing an unauthenticated peer"
                                                  : "the peer requires a job secret (set WEFT_JOB_SECRET or the "
                                                    "secret option)");
    if (peer_.tls != tls_)
      return fail(errc::mismatch, tls_ ? "the peer does not use TLS; this side requires it"
                                       : "the peer requires TLS; this side does not use it");
    if (authenticated()) return expect_bytes(phase::proof, proof_bytes);
    return client_check();
  }

  void on_proof() {
    const auto expected = proof(role_ == role::client ? 'S' : 'C');
    if (!crypto::equal_constant_time(std::span<const std::byte>(in_), crypto::bytes_of(expected))) {
      if (role_ == role::server) return refuse(errc::mismatch, "authentication failed (a different job secret?)");
      return fail(errc::mismatch, "the peer failed to prove it holds the job secret (a different secret?)");
    }
    if (role_ == role::server) return admit();
    return client_check();
  }

  void client_check() {
    if (std::string why = check_ ? check_(peer_) : std::string(); !why.empty()) return fail(errc::mismatch, why);
    if (authenticated()) {
      const auto p = proof('C');
      send(std::as_bytes(std::span(p)));
    }
    expect_bytes(phase::verdict_fixed, verdict_fixed_bytes);
  }

  void admit() {
    if (std::string why = check_ ? check_(peer_) : std::string(); !why.empty()) {
      refused_by_check_ = true;
      return refuse(errc::mismatch, std::move(why));
    }
    send_verdict(true, {});
    finish();
  }
  void refuse(errc code, std::string why) {
    send_verdict(false, why);
    fail(code, std::move(why));
  }
  void refuse_version() {
    fail(errc::mismatch,
         weft::detail::concat("the peer speaks weft wire version ", header_.version, ", this process ", wire_version));
  }

  void on_verdict_fixed() {
    const auto code = static_cast<std::uint8_t>(in_[0]);
    const auto len = static_cast<std::size_t>(get_le(in_.data() + 1, 2));
    if (code > 1 || len > max_reason_bytes) return fail(errc::parse, "malformed verdict from the peer");
    verdict_refused_ = code == 1;
    expect_bytes(phase::verdict_reason, len);
  }
  void on_verdict_reason() {
    std::string reason(reinterpret_cast<const char*>(in_.data()), in_.size());
    for (char& c : reason)
      if (c < 0x20 || c > 0x7e) c = '?';  // the reason goes into error messages and logs
    if (!verdict_refused_) return finish();
    refused_by_peer_ = true;
    fail(errc::mismatch, "the peer refused the connection: " + reason);
  }

  role role_;
  conn_kind kind_;
  job_secret secret_;
  check_fn check_;
  wire_limits limits_;
  std::vector<std::byte> mine_, theirs_;  // the hellos as sent, for the proofs
  std::vector<std::byte> out_;
  std::size_t out_sent_ = 0;
  std::vector<std::byte> in_;  // the field being read
  std::size_t need_ = hello_fixed_bytes;
  phase phase_ = phase::hello_fixed;
  status status_ = status::running;
  std::string failure_;
  errc failure_code_ = errc::io;
  bool verdict_refused_ = false, refused_by_peer_ = false, refused_by_check_ = false;
  hello_header header_;
  peer_identity peer_;
  bool tls_ = false;  // this side's hello flag (mine.tls)
};

}  // namespace weft::comm::detail

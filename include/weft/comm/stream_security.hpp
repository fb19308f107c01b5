// What secures a connection after weft's handshake: a per-connection byte filter (TLS, in
// weft/comm/tls.hpp) that the tcp link runs every data byte through, so the stream engine above it
// neither knows nor cares. Standard library only: the OpenSSL code lives in the implementation.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

namespace weft::comm {

/// One secured connection over a connected, non-blocking socket that it borrows (never closes).
/// First handshake() until it returns true, then write_some/read_some as a non-blocking stream.
/// Not thread-safe: the link calls one stream from one thread at a time (it holds a lock per
/// connection, since a TLS session's reads and writes share state).
class secure_stream {
 public:
  virtual ~secure_stream() = default;
  /// Advances the handshake without blocking: true once it is done; false with `events` set to
  /// what to poll(2) the socket for (POLLIN, POLLOUT) before calling again. Throws weft::error
  /// (errc::mismatch: the peer's key or certificate is refused, or it refused ours; errc::
  /// peer_failure: the connection closed) when it failed.
  virtual bool handshake(short& events) = 0;
  /// Writes a prefix of the parts' bytes (0: would block). A call that returned 0 must be repeated
  /// with the same bytes first (what was encrypted is sent before anything else). Throws
  /// weft::error when the stream failed.
  virtual std::size_t write_some(const std::span<const std::byte>* parts, int count) = 0;
  /// Reads up to n bytes (0: none yet). Throws weft::error when the stream failed or ended.
  virtual std::size_t read_some(std::byte* dst, std::size_t n) = 0;
  /// True when decrypted bytes wait inside the filter: poll(2) would not report them.
  virtual bool has_pending() const noexcept = 0;
  /// True when read_some saw the stream's end (the socket then stays readable for ever).
  virtual bool ended() const noexcept = 0;
};

/// What secures the connections of a transport (make one with weft/comm/tls.hpp, or write your
/// own). Shared by every connection of every mesh that uses it; thread-safe.
class stream_security {
 public:
  virtual ~stream_security() = default;
  /// A filter for socket `fd` (connected, non-blocking, borrowed) on the side that connected
  /// (`client`) or accepted; `peer` names the other side in errors. Does not block.
  virtual std::unique_ptr<secure_stream> open(int fd, bool client, const std::string& peer) const = 0;
  /// A short description for logs and errors ("TLS 1.3, job secret as PSK").
  virtual std::string describe() const = 0;
};

}  // namespace weft::comm

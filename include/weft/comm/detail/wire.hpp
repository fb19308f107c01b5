// Internal: the one place weft::comm's wire protocols are versioned and bounded. Every byte that
// arrives from a socket or a shared segment is checked against these limits before it decides an
// allocation, a pointer or a rank. Two layers share the version:
//   - the connection handshake (handshake.hpp): magic, version, kind, identity, nonces and, with a
//     job secret, HMAC-SHA256 challenge-response, run before a connection carries any data;
//   - the data frames of the stream engine (stream_engine.hpp): a fixed header per piece, bounded
//     lengths, and a collective descriptor on the first message of every collective.
// docs/comm.md ("Wire format") documents both for people who write a peer in another language.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace weft::comm::detail {

/// "weft" in ASCII, first on every connection and every frame header of weft::comm.
inline constexpr std::uint32_t wire_magic = 0x77656674u;
/// Bumped whenever a handshake or frame layout changes; peers of different versions refuse each
/// other with a clear error instead of misreading bytes.
inline constexpr std::uint16_t wire_version = 2;

/// Bounds on what a peer may make this process do. A violation closes that connection (or fails
/// that operation) with weft::error and leaves every other connection and all state intact.
struct wire_limits {
  /// Largest message one collective may move between two ranks (both sides agree on sizes from the
  /// descriptor; this caps what an unexpected frame can claim before any receive is posted).
  std::uint64_t max_message_bytes = std::uint64_t{1} << 40;
  /// Bytes of frames that arrived before their receive was posted, per peer.
  std::uint64_t max_unexpected_bytes = std::uint64_t{1} << 30;
  /// A handshake (hello, proof) must complete within this, or the connection is dropped.
  std::chrono::milliseconds handshake_timeout{2'000};
  /// Host names or addresses exchanged during rendezvous.
  std::size_t max_host_bytes = 255;
  /// A member name (elastic groups) in a hello.
  std::size_t max_name_bytes = 255;
  /// Connections accepted but not yet through their handshake, per listening socket; beyond it the
  /// oldest is dropped (real peers finish in a round trip, idle strangers wait for their deadline).
  std::size_t max_pending_handshakes = 256;
  /// One line of the elastic coordinator's text protocol.
  std::size_t max_line_bytes = 64 * 1024;
};

}  // namespace weft::comm::detail

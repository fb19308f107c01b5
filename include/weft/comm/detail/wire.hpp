// Internal: the one place weft::comm's wire protocols are versioned and bounded. Every byte that
// arrives from a socket or a shared segment is checked against these limits before it decides an
// allocation, a pointer or a rank. Two layers share the version:
//   - the connection handshake (handshake.hpp): magic, version, kind, identity, nonces and, with a
//     job secret, HMAC-SHA256 challenge-response, run before a connection carries any data;
//   - the data frames of the stream engine (stream_engine.hpp), on every shm ring, tcp connection
//     and elastic mesh connection: a fixed header per piece, bounded lengths, and a collective
//     descriptor on the first message of every collective.
// docs/comm.md ("Wire format") documents both for people who write a peer in another language.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace weft::comm::detail {

/// "weft" in ASCII, first on every connection and every frame header of weft::comm.
inline constexpr std::uint32_t wire_magic = 0x77656674u;
/// Bumped whenever a handshake or frame layout changes; peers of different versions refuse each
/// other with a clear error instead of misreading bytes. 6: the elastic mesh carries the stream
/// engine's frames (5 had frames of its own there).
inline constexpr std::uint16_t wire_version = 6;

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
  /// Frames that arrived before their receive was posted, per peer connection (zero-byte frames
  /// cost memory too).
  std::uint64_t max_unexpected_frames = std::uint64_t{1} << 16;
  /// Payload of an abort frame (the reason and the failure's fields).
  std::uint64_t max_abort_bytes = 8 * 1024;
  /// Descriptors of collectives a peer has begun and this rank has not yet, per peer.
  std::size_t max_pending_descriptors = 1024;
};

// ---- The data-frame layer (stream_engine.hpp; docs/comm.md, "Wire format") ----------------------
// Every message travels as one frame per piece (one piece per connection when striped). All
// integers are little-endian. A frame is a 32-byte header, then the extensions its flags name (in
// this order: a 56-byte collective descriptor, an 8-byte single-copy address), then `piece`
// payload bytes (none when the payload is read by the receiver from the sender's memory).
//   off size field
//   0   2    marker   frame_marker ("wf"), checked on every frame: a desynchronised stream fails
//   2   1    kind     frame_kind
//   3   1    flags    frame_flag bits; unknown bits are a protocol error
//   4   4    channel  the message's channel
//   8   4    sequence which collective on (sender, receiver, channel), from 1; 0 outside collectives
//   12  4    check    the check word (options.hpp make_check)
//   16  8    total    bytes of the whole message (all pieces), <= max_message_bytes
//   24  8    piece    bytes of this piece's payload, <= total
// On a link that aligns frames (shm: frame_align 64), a data frame's header, extensions and
// in-stream payload are followed by zero to 63 pad bytes up to the next multiple of 64, so every
// frame starts on a cache line of the ring; the pad follows from the header, so it is not sent as
// a length. An eager frame (flag inline) is one piece of at most the receiver's eager limit whose
// header, payload and pad the sender published in one store, so the receiver takes it whole.

/// First two bytes of every frame ('w', 'f').
inline constexpr std::uint16_t frame_marker = 0x6677u;
inline constexpr std::size_t frame_header_bytes = 32;
inline constexpr std::size_t frame_remote_bytes = 8;

enum class frame_kind : std::uint8_t {
  data = 1,   ///< a piece of a message
  abort = 2,  ///< the sender gave up on the group; the payload says why (abort body below)
};

/// Bits of the flags byte.
inline constexpr std::uint8_t frame_flag_descriptor = 1;  ///< a 56-byte collective descriptor follows
inline constexpr std::uint8_t frame_flag_remote = 2;      ///< an 8-byte sender address follows (shm)
inline constexpr std::uint8_t frame_flag_inline = 4;      ///< eager: the whole message, published at once (shm)
inline constexpr std::uint8_t frame_flags_known = frame_flag_descriptor | frame_flag_remote | frame_flag_inline;
/// Largest eager limit a link may set: an eager frame is copied whole, so it stays a few pages.
inline constexpr std::size_t max_eager_bytes = std::size_t{64} << 10;
/// Bytes of padding after a data frame whose header, extensions and in-stream payload take
/// `bytes`, on a link that aligns frames to `align` (a power of two; 1: none).
constexpr std::size_t frame_pad(std::size_t bytes, std::size_t align) noexcept {
  return (align - bytes % align) % align;
}

// The abort body (payload of an abort frame; sequence 0, piece == total <= max_abort_bytes):
//   off size field
//   0   4    origin      the rank that sends it
//   4   4    blamed      i32, the rank it holds responsible, -1 unknown
//   8   4    waiting_on  i32, the peer the origin was blocked on when it gave up, -1 none
//   12  4    code        weft::errc
//   16  4    channel     of the operation that failed
//   20  4    first       the rank that detected the failure first (origin, unless it relays another's)
//   24  ...  four strings, each a u16 length then that many bytes: the reason, and for a
//            disagreement the field, the origin's value and the blamed rank's value
inline constexpr std::size_t abort_fixed_bytes = 24;
inline constexpr std::size_t abort_max_string_bytes = 2048;

}  // namespace weft::comm::detail

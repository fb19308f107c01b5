// Internal: the frame codec of the stream engine — the data-frame layer of weft::comm's wire
// protocol (layout and limits in wire.hpp; docs/comm.md "Wire format: data frames"). Pure
// functions over bytes: the 32-byte frame header (write, read, check against the limits before it
// decides an allocation or a pointer) and the abort body (the failure's fields and the sender's
// "waiting on" report). The engine (stream_engine.hpp) owns streams and state; this header only
// says what bytes mean, so it is tested on its own (tests/comm/frame_codec_test.cpp).
#pragma once

#include <weft/comm/descriptor.hpp>
#include <weft/comm/detail/wire.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace weft::comm::detail {

/// A frame header as fields (wire.hpp has the byte layout). A plain value.
struct frame_header {
  frame_kind kind = frame_kind::data;
  std::uint8_t flags = 0;
  std::uint32_t channel = 0, seq = 0, check = 0;
  std::uint64_t total = 0, piece = 0;
};

/// Writes a frame header's 32 bytes at p. O(1).
inline void encode_frame_header(std::byte* p, frame_kind kind, std::uint8_t flags, std::uint32_t channel,
                                std::uint32_t seq, std::uint32_t check, std::uint64_t total,
                                std::uint64_t piece) noexcept {
  put_le<std::uint16_t>(p, frame_marker);
  p[2] = static_cast<std::byte>(kind);
  p[3] = static_cast<std::byte>(flags);
  put_le<std::uint32_t>(p + 4, channel);
  put_le<std::uint32_t>(p + 8, seq);
  put_le<std::uint32_t>(p + 12, check);
  put_le<std::uint64_t>(p + 16, total);
  put_le<std::uint64_t>(p + 24, piece);
}

/// Reads the fields of the 32 header bytes at p (the marker is checked by check_frame_header). Any
/// bytes decode; nothing is trusted yet. O(1).
inline frame_header decode_frame_header(const std::byte* p) noexcept {
  frame_header h;
  h.kind = static_cast<frame_kind>(p[2]);
  h.flags = static_cast<std::uint8_t>(p[3]);
  h.channel = get_le<std::uint32_t>(p + 4);
  h.seq = get_le<std::uint32_t>(p + 8);
  h.check = get_le<std::uint32_t>(p + 12);
  h.total = get_le<std::uint64_t>(p + 16);
  h.piece = get_le<std::uint64_t>(p + 24);
  return h;
}

/// What a receiving link accepts, beside the wire limits.
struct frame_rules {
  std::uint64_t max_message_bytes = 0;
  std::uint64_t max_abort_bytes = 0;
  bool remote = false;        ///< the link reads single-copy pieces from the sender's memory (shm)
  std::size_t eager_max = 0;  ///< largest eager frame the link takes (0: none)
};

/// Why a header is refused: the code and the rule, in words (the engine adds the peer).
struct frame_violation {
  errc code = errc::parse;
  std::string what;
};

/// Checks the 32 header bytes at p against the rules: the marker, a known kind and flags, a piece
/// within its message, an abort frame of one bounded piece, a data message within
/// max_message_bytes, single-copy and eager frames only on links that have them and eager frames
/// whole and small. Returns the header, or why it is refused. O(1).
inline std::optional<frame_violation> check_frame_header(const std::byte* p, const frame_rules& rules,
                                                         frame_header& out) {
  using weft::detail::concat;
  const auto marker = get_le<std::uint16_t>(p);
  if (marker != frame_marker)
    return frame_violation{errc::parse, concat("frame marker 0x", std::hex, marker, " is not 0x", frame_marker,
                                               " (the stream is out of step, or the peer speaks another protocol)")};
  const frame_header h = decode_frame_header(p);
  if (h.kind != frame_kind::data && h.kind != frame_kind::abort)
    return frame_violation{errc::parse, concat("unknown frame kind ", static_cast<unsigned>(p[2]))};
  if ((h.flags & ~frame_flags_known) != 0)
    return frame_violation{errc::parse, concat("unknown frame flags 0x", std::hex, unsigned{h.flags})};
  if (h.piece > h.total)
    return frame_violation{errc::parse, concat("piece of ", h.piece, " bytes in a message of ", h.total)};
  if (h.kind == frame_kind::abort) {
    if (h.flags != 0 || h.piece != h.total || h.total < abort_fixed_bytes || h.total > rules.max_abort_bytes)
      return frame_violation{errc::parse, concat("abort frame of ", h.total, " bytes (piece ", h.piece, ", flags ",
                                                 unsigned{h.flags}, "); it must be one piece of ", abort_fixed_bytes,
                                                 " to ", rules.max_abort_bytes, " bytes")};
  } else {
    if (h.total > rules.max_message_bytes)
      return frame_violation{
          errc::capacity, concat("message of ", h.total, " bytes exceeds max_message_bytes ", rules.max_message_bytes)};
    if ((h.flags & frame_flag_remote) && !rules.remote)
      return frame_violation{errc::parse, "a single-copy piece on a link that has none"};
    if (h.flags & frame_flag_inline) {
      if (rules.eager_max == 0) return frame_violation{errc::parse, "an eager frame on a link that has none"};
      if (h.piece != h.total || h.piece > rules.eager_max || (h.flags & frame_flag_remote))
        return frame_violation{errc::parse,
                               concat("eager frame claims ", h.piece, " inline bytes of a ", h.total, "-byte message",
                                      (h.flags & frame_flag_remote) ? " read by single copy" : "",
                                      "; an eager frame carries a whole message of at most eager_max ", rules.eager_max,
                                      " bytes in the stream")};
    }
  }
  out = h;
  return std::nullopt;
}

/// Bytes of a header plus the extensions its flags name (descriptor, single-copy address). O(1).
constexpr std::size_t frame_prefix_bytes(std::uint8_t flags) noexcept {
  return frame_header_bytes + ((flags & frame_flag_descriptor) ? descriptor_wire_bytes : 0) +
         ((flags & frame_flag_remote) ? frame_remote_bytes : 0);
}

/// The abort body as fields (wire.hpp has the layout): who sends it, whom it blames, whom it was
/// waiting on, the failure's code and channel, the rank that found it first, and four strings.
struct abort_body {
  int origin = -1;
  int blamed = -1;
  int waiting_on = -1;
  errc code = errc::aborted;
  std::uint32_t channel = 0;
  int first = -1;
  std::string reason, field, here, there;
};

/// The body's bytes; each string is cut to abort_max_string_bytes. O(bytes).
inline std::vector<std::byte> encode_abort_body(const abort_body& a) {
  std::vector<std::byte> body(abort_fixed_bytes);
  put_le<std::uint32_t>(body.data(), static_cast<std::uint32_t>(a.origin));
  put_le<std::int32_t>(body.data() + 4, a.blamed);
  put_le<std::int32_t>(body.data() + 8, a.waiting_on);
  put_le<std::uint32_t>(body.data() + 12, static_cast<std::uint32_t>(a.code));
  put_le<std::uint32_t>(body.data() + 16, a.channel);
  put_le<std::uint32_t>(body.data() + 20, static_cast<std::uint32_t>(a.first));
  for (const std::string* s : {&a.reason, &a.field, &a.here, &a.there}) {
    const std::size_t len = std::min(s->size(), abort_max_string_bytes);
    const std::size_t at = body.size();
    body.resize(at + 2 + len);
    put_le<std::uint16_t>(body.data() + at, static_cast<std::uint16_t>(len));
    std::memcpy(body.data() + at + 2, s->data(), len);
  }
  return body;
}

/// Reads an abort body that `sender` sent in a group of `size` ranks: the origin must be the
/// sender, every rank in range, the code a weft::errc, the strings within the body (control
/// characters other than newline become '?'). Returns why it is refused, or nothing. O(bytes).
inline std::optional<frame_violation> decode_abort_body(std::span<const std::byte> b, int sender, int size,
                                                        abort_body& out) {
  using weft::detail::concat;
  if (b.size() < abort_fixed_bytes)
    return frame_violation{errc::parse, concat("abort body of ", b.size(), " bytes is shorter than its fixed part")};
  const std::byte* p = b.data();
  const auto origin = get_le<std::uint32_t>(p);
  const auto blamed = get_le<std::int32_t>(p + 4);
  const auto waiting_on = get_le<std::int32_t>(p + 8);
  const auto code = get_le<std::uint32_t>(p + 12);
  const auto channel = get_le<std::uint32_t>(p + 16);
  const auto first = get_le<std::uint32_t>(p + 20);
  if (origin != static_cast<std::uint32_t>(sender) || blamed < -1 || blamed >= size || waiting_on < -1 ||
      waiting_on >= size || code < 1 || code > static_cast<std::uint32_t>(errc::aborted) ||
      first >= static_cast<std::uint32_t>(size))
    return frame_violation{errc::parse, concat("abort frame with origin ", origin, ", blamed ", blamed, ", waiting_on ",
                                               waiting_on, ", code ", code)};
  std::array<std::string, 4> s;
  std::size_t at = abort_fixed_bytes;
  for (auto& str : s) {
    if (at + 2 > b.size()) return frame_violation{errc::parse, "abort frame ends inside a string length"};
    const std::size_t len = get_le<std::uint16_t>(p + at);
    at += 2;
    if (len > abort_max_string_bytes || at + len > b.size())
      return frame_violation{errc::parse, concat("abort frame string of ", len, " bytes runs past its end")};
    str.assign(reinterpret_cast<const char*>(p + at), len);
    for (char& c : str)
      if (static_cast<unsigned char>(c) < 0x20 && c != '\n') c = '?';
    at += len;
  }
  out.origin = static_cast<int>(origin);
  out.blamed = blamed;
  out.waiting_on = waiting_on;
  out.code = static_cast<errc>(code);
  out.channel = channel;
  out.first = static_cast<int>(first);
  out.reason = std::move(s[0]);
  out.field = std::move(s[1]);
  out.here = std::move(s[2]);
  out.there = std::move(s[3]);
  return std::nullopt;
}

}  // namespace weft::comm::detail

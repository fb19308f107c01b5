// Test helper: a stream_engine link whose incoming bytes are scripted (from peer 1; other peers
// stay silent) and whose outgoing bytes are recorded, so the data-frame layer can be driven with
// exact, hostile or fuzzed input in one process. Also builds wire frames (docs/comm.md, "Wire format").
#pragma once

#include <weft/comm/descriptor.hpp>
#include <weft/comm/detail/stream_engine.hpp>
#include <weft/comm/detail/wire.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace weft_test {

namespace wd = weft::comm::detail;

/// Stage: the link's staging-buffer size (0 like shm, non-zero like tcp).
template <std::size_t Stage>
struct fake_link {
  static constexpr std::size_t stage_bytes = Stage;
  std::vector<std::byte> in;        // what peer 1 sends, in order
  std::size_t at = 0;               // how much of it was read
  std::size_t max_read = SIZE_MAX;  // bytes per read_some at most (exercises partial reads)
  bool closed_at_end = false;       // after `in`, the stream reports the peer gone
  std::vector<std::byte> out;       // what this rank wrote (to any peer)
  int aborts = 0;

  std::size_t write_some(int, int, const wd::io_part* parts, int count) {
    std::size_t n = 0;
    for (int i = 0; i < count; ++i) {
      out.insert(out.end(), parts[i].data, parts[i].data + parts[i].len);
      n += parts[i].len;
    }
    return n;
  }
  std::size_t read_some(int peer, int, std::byte* dst, std::size_t n) {
    if (peer != 1) return 0;
    if (at == in.size()) {
      if (closed_at_end) throw weft::error(weft::errc::peer_failure, "fake_link", "peer 1 closed the connection");
      return 0;
    }
    const std::size_t k = std::min({n, in.size() - at, max_read});
    std::memcpy(dst, in.data() + at, k);
    at += k;
    return k;
  }
  void commit_reads(int, int) {}
  std::uint64_t prepare_wait() const { return 0; }
  void wait(std::uint64_t, weft::comm::deadline, int) {}
  void poke() {}
  void check_alive(int) {}
  std::size_t remote_min() const { return SIZE_MAX; }
  void remote_read(int, std::uint64_t, std::byte*, std::size_t) {
    throw weft::error(weft::errc::unsupported, "fake_link", "no single copy");
  }
  void remote_ack(int) {}
  std::uint64_t remote_post(int) { return 0; }
  std::uint64_t remote_acked(int) const { return 0; }
  void on_abort(const std::string&) { ++aborts; }
};

struct frame_spec {
  std::uint16_t marker = wd::frame_marker;
  std::uint8_t kind = static_cast<std::uint8_t>(wd::frame_kind::data);
  std::uint8_t flags = 0;
  std::uint32_t channel = 0, seq = 0, check = 0;
  std::uint64_t total = 0, piece = 0;
};

inline void append_header(std::vector<std::byte>& out, const frame_spec& f) {
  std::byte h[wd::frame_header_bytes];
  wd::put_le<std::uint16_t>(h, f.marker);
  h[2] = static_cast<std::byte>(f.kind);
  h[3] = static_cast<std::byte>(f.flags);
  wd::put_le<std::uint32_t>(h + 4, f.channel);
  wd::put_le<std::uint32_t>(h + 8, f.seq);
  wd::put_le<std::uint32_t>(h + 12, f.check);
  wd::put_le<std::uint64_t>(h + 16, f.total);
  wd::put_le<std::uint64_t>(h + 24, f.piece);
  out.insert(out.end(), h, h + sizeof h);
}

/// A whole data frame (header, optional descriptor, payload bytes of value `fill`).
inline void append_data(std::vector<std::byte>& out, std::uint32_t channel, std::uint32_t check, std::size_t bytes,
                        std::uint32_t seq = 0, const weft::comm::collective_descriptor* d = nullptr,
                        std::byte fill = std::byte{7}) {
  frame_spec f;
  f.channel = channel;
  f.check = check;
  f.seq = seq;
  f.total = f.piece = bytes;
  f.flags = d ? wd::frame_flag_descriptor : 0;
  append_header(out, f);
  if (d) {
    std::byte buf[weft::comm::descriptor_wire_bytes];
    weft::comm::encode(*d, std::span<std::byte, weft::comm::descriptor_wire_bytes>(buf, sizeof buf));
    out.insert(out.end(), buf, buf + sizeof buf);
  }
  out.insert(out.end(), bytes, fill);
}

/// An abort frame from `origin` with the given fields.
inline void append_abort(std::vector<std::byte>& out, std::uint32_t origin, std::int32_t blamed,
                         std::int32_t waiting_on, weft::errc code, const std::string& reason,
                         const std::string& field = {}, const std::string& here = {}, const std::string& there = {}) {
  std::vector<std::byte> body(wd::abort_fixed_bytes);
  wd::put_le<std::uint32_t>(body.data(), origin);
  wd::put_le<std::int32_t>(body.data() + 4, blamed);
  wd::put_le<std::int32_t>(body.data() + 8, waiting_on);
  wd::put_le<std::uint32_t>(body.data() + 12, static_cast<std::uint32_t>(code));
  wd::put_le<std::uint32_t>(body.data() + 20, origin);
  for (const std::string* s : {&reason, &field, &here, &there}) {
    const std::size_t at = body.size();
    body.resize(at + 2 + s->size());
    wd::put_le<std::uint16_t>(body.data() + at, static_cast<std::uint16_t>(s->size()));
    std::memcpy(body.data() + at + 2, s->data(), s->size());
  }
  frame_spec f;
  f.kind = static_cast<std::uint8_t>(wd::frame_kind::abort);
  f.total = f.piece = body.size();
  append_header(out, f);
  out.insert(out.end(), body.begin(), body.end());
}

}  // namespace weft_test

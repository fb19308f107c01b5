// libFuzzer harness: the stream engine's frame parser (data-frame layer, docs/comm.md "Wire
// format") fed arbitrary bytes as the stream from peer 1 through a fake link. Input: byte 0 picks
// the link (staged or not), the read chunk size, whether a collective is begun first and whether
// frames are cache-line aligned with an eager path (as shm's); bytes 1-6
// describe up to two receives (channel, size); the rest is the stream. A weft::error is the
// expected outcome for malformed input; a crash, a sanitizer report or any other exception is a
// finding.
#include "../fake_link.hpp"

#include <weft/comm/comm_error.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace {

template <class Link>
void run(const std::uint8_t* data, std::size_t size) {
  namespace wc = weft::comm;
  namespace wd = weft::comm::detail;
  Link link;
  const std::uint8_t mode = data[0];
  link.max_read = 1 + ((mode >> 1) & 7) * 13;
  link.closed_at_end = (mode & 0x40) != 0;
  link.in.assign(reinterpret_cast<const std::byte*>(data + 7), reinterpret_cast<const std::byte*>(data + size));
  wd::engine_config cfg;
  cfg.blame_window = std::chrono::milliseconds(0);
  cfg.drain_window = std::chrono::milliseconds(0);
  cfg.limits.max_message_bytes = 1 << 20;
  cfg.limits.max_unexpected_bytes = 1 << 18;
  cfg.limits.max_unexpected_frames = 256;
  cfg.limits.max_pending_descriptors = 8;
  if (mode & 0x20) {  // shm's framing: 64-byte pads, eager frames of up to 256 bytes
    cfg.frame_align = 64;
    cfg.eager_max = 256;
  }
  wd::stream_engine<Link> engine(link, 0, 3, 1, SIZE_MAX, "fuzz", cfg);
  try {
    if (mode & 0x10) {
      const auto d =
          wd::describe_call(wc::collective::allreduce, weft::dtype::f32, 16, "sum", 3, 4096, -1, wc::algorithm::ring);
      engine.begin_collective(data[1] & 3, d, {});
    }
    for (int i = 0; i < 2; ++i) {
      const std::uint32_t channel = data[1 + 3 * i] & 3;
      const std::size_t bytes =
          static_cast<std::size_t>(data[2 + 3 * i]) | (static_cast<std::size_t>(data[3 + 3 * i] & 0x3f) << 8);
      std::vector<std::byte> buf(bytes);
      try {
        engine.recv(1, wc::msg_tag{channel, 0}, std::span<std::byte>(buf), wc::clock_type::now());
      } catch (const weft::error&) {
      }
    }
    const std::vector<std::byte> out(24, std::byte{1});
    engine.send(1, wc::msg_tag{0, 0}, std::span<const std::byte>(out), wc::clock_type::now());
  } catch (const weft::error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 7) return 0;
  if (data[0] & 1)
    run<weft_test::fake_link<64>>(data, size);
  else
    run<weft_test::fake_link<0>>(data, size);
  return 0;
}

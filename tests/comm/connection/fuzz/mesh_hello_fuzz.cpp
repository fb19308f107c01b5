// libFuzzer harness: a connection into an elastic mesh — the handshake with the mesh's admission
// rule (epoch, index, name, instance), then whatever follows as the stream engine's data frames
// delivered to a member over two socket pairs, its two striped connections (lengths bounded before
// allocation, pieces checked against their receives, no phantom frame, capped unexpected bytes,
// abort bodies checked). A weft::error is the expected outcome for malformed input; anything else
// is a finding.
#include <weft/comm/elastic/mesh_transport.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

namespace we = weft::comm::elastic;
namespace wd = weft::comm::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto in = std::as_bytes(std::span<const std::uint8_t>(data, size));
  const std::vector<we::peer_address> members = {{"a", "127.0.0.1", 4000, 11}, {"b", "127.0.0.1", 4001, 12}};
  wd::wire_limits limits;
  limits.max_message_bytes = 1 << 20;
  limits.max_unexpected_bytes = 1 << 20;
  try {
    wd::peer_identity a;
    a.rank = 0;
    a.size = 2;
    a.epoch = 3;
    a.instance = 11;
    a.name = "a";
    wd::handshake hs(
        wd::handshake::role::server, wd::conn_kind::elastic_mesh, a, wd::job_secret{},
        [&](const wd::peer_identity& p) { return we::mesh_admission(p, p.rank, members, 3, 2); }, limits);
    in = in.subspan(hs.consume(in));
  } catch (const weft::error&) {
  }
  // The rest as frames from member b to member a on its two connections: byte 0 says how many of
  // the following bytes go to connection 0, the others go to connection 1.
  if (in.empty()) return 0;
  const std::size_t split = std::min(in.size() - 1, static_cast<std::size_t>(in[0]) * 8);
  const auto on0 = in.subspan(1, split), on1 = in.subspan(1 + split);
  int a0[2], a1[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, a0) != 0) return 0;
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, a1) != 0) {
    ::close(a0[0]);
    ::close(a0[1]);
    return 0;
  }
  auto put = [](int fd, std::span<const std::byte> b) {
    std::size_t off = 0;
    while (off < b.size()) {
      const ssize_t w = ::send(fd, b.data() + off, b.size() - off, MSG_NOSIGNAL);
      if (w <= 0) break;
      off += static_cast<std::size_t>(w);
    }
    ::close(fd);
  };
  put(a0[1], on0);
  put(a1[1], on1);
  try {
    we::mesh_transport mesh(members, 0, 3, {-1, -1, a0[0], a1[0]}, limits, we::mesh_options{2, 64});
    std::vector<std::byte> small(16), large(100);
    for (std::uint32_t ch = 1; ch <= 4; ++ch) {
      try {
        mesh.recv(1, weft::comm::msg_tag{ch, 0}, ch % 2 ? std::span<std::byte>(small) : std::span<std::byte>(large),
                  weft::comm::clock_type::now() + std::chrono::milliseconds(100));
      } catch (const weft::error&) {
      }
    }
  } catch (const weft::error&) {
  }
  return 0;
}

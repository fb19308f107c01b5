// libFuzzer harness: a connection into an elastic mesh — the handshake with the mesh's admission
// rule (epoch, index, name, instance), then whatever follows as data frames delivered to a member
// over a socket pair (lengths bounded before allocation, no phantom frame, capped unexpected
// bytes). A weft::error is the expected outcome for malformed input; anything else is a finding.
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
        [&](const wd::peer_identity& p) { return we::mesh_admission(p, p.rank, members, 3); }, limits);
    in = in.subspan(hs.consume(in));
  } catch (const weft::error&) {
  }
  // The rest as frames from member b to member a.
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 0;
  std::size_t off = 0;
  while (off < in.size()) {
    const ssize_t w = ::send(sv[1], in.data() + off, in.size() - off, MSG_NOSIGNAL);
    if (w <= 0) break;
    off += static_cast<std::size_t>(w);
  }
  ::close(sv[1]);
  try {
    we::mesh_transport mesh(members, 0, 3, {-1, sv[0]}, limits);
    std::vector<std::byte> buf(16);
    for (std::uint32_t ch = 1; ch <= 4; ++ch) {
      try {
        mesh.recv(1, weft::comm::msg_tag{ch, 0}, buf, weft::comm::clock_type::now() + std::chrono::milliseconds(100));
      } catch (const weft::error&) {
      }
    }
  } catch (const weft::error&) {
  }
  return 0;
}

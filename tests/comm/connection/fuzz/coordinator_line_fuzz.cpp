// libFuzzer harness: the elastic coordinator's line protocol — every line a peer may send the
// coordinator (HELLO, READY, HB, LEAVE) and every line the coordinator sends a member (EPOCH),
// parsed strictly, plus the coordinator's side of the handshake that precedes them. A weft::error
// is the expected outcome for malformed input; anything else is a finding.
#include <weft/comm/detail/handshake.hpp>
#include <weft/comm/elastic/line_protocol.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace we = weft::comm::elastic;
namespace wd = weft::comm::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  wd::wire_limits limits;
  limits.max_line_bytes = 4096;
  std::size_t at = 0;
  while (at <= text.size()) {
    const auto nl = text.find('\n', at);
    const auto line = text.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at);
    try {
      const auto m = we::parse_member_line(line, limits);
      if (const auto* h = std::get_if<we::hello_line>(&m)) (void)we::to_line(*h);
    } catch (const weft::error&) {
    }
    try {
      const auto e = we::parse_epoch_line(line, limits);
      if (we::parse_epoch_line(we::to_line(e), limits).members.size() != e.members.size()) __builtin_trap();
    } catch (const weft::error&) {
    }
    if (nl == std::string_view::npos) break;
    at = nl + 1;
  }
  try {  // the handshake a connection runs before its first line
    wd::peer_identity id;
    id.name = "coordinator";
    wd::handshake hs(wd::handshake::role::server, wd::conn_kind::coordinator, id, wd::job_secret{}, nullptr, limits);
    (void)hs.consume(std::as_bytes(std::span<const std::uint8_t>(data, size)));
  } catch (const weft::error&) {
  }
  return 0;
}

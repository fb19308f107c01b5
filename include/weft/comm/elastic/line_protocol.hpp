// The text lines an elastic group's members and coordinator exchange after their handshake, as
// values with strict parsers and printers: every token is bounded, every number decimal and in
// range, every address numeric. The coordinator and the members use only these, and the fuzzer
// runs them on arbitrary bytes. docs/comm-elastic.md, "Protocol", is the specification.
#pragma once

#include <weft/comm/detail/env.hpp>
#include <weft/comm/detail/handshake.hpp>
#include <weft/comm/detail/sockets.hpp>
#include <weft/comm/detail/wire.hpp>
#include <weft/comm/elastic/mesh_transport.hpp>
#include <weft/core/error.hpp>

#include <charconv>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace weft::comm::elastic {

/// Longest line the coordinator sends (an EPOCH line lists every member): 1 MiB.
inline constexpr std::size_t max_coordinator_line_bytes = std::size_t{1} << 20;

/// HELLO name host port spec instance: a peer asks to join.
struct hello_line {
  std::string name, host;
  int port = 0;
  std::string spec;
  std::uint64_t instance = 0;
};
/// READY revision hash accept rebuild: a member reached a step boundary.
struct ready_line {
  std::uint64_t revision = 0, hash = 0;
  bool accept = true, rebuild = false;
};
struct heartbeat_line {};  ///< HB
struct leave_line {};      ///< LEAVE
using member_line = std::variant<hello_line, ready_line, heartbeat_line, leave_line>;

/// One member of an EPOCH line.
struct epoch_member {
  peer_address address;
  std::uint64_t hash = 0;
};
/// EPOCH e index n revision hash source {name host port hash instance}*: a round's decision, as
/// sent to the member at `index`.
struct epoch_line {
  std::uint64_t epoch = 0;
  int index = 0;
  std::uint64_t revision = 0, hash = 0;
  int source = 0;
  std::vector<epoch_member> members;
};

namespace detail {

/// Splits on single spaces; nullopt when there are more than max_tokens, or an empty token (two
/// spaces, a leading or trailing one).
inline std::optional<std::vector<std::string_view>> split_tokens(std::string_view line, std::size_t max_tokens) {
  std::vector<std::string_view> out;
  while (true) {
    const auto sp = line.find(' ');
    const auto tok = line.substr(0, sp);
    if (tok.empty() || out.size() == max_tokens) return std::nullopt;
    out.push_back(tok);
    if (sp == std::string_view::npos) return out;
    line.remove_prefix(sp + 1);
  }
}

template <class T>
bool parse_number(std::string_view s, T& out, T lo, T hi) {
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || v < lo || v > hi) return false;
  out = v;
  return true;
}

inline bool printable_line(std::string_view s) {
  for (char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

}  // namespace detail

/// Parses a line a peer sent the coordinator (without its '\n'). weft::error(parse) naming what
/// is wrong (never echoing more than 64 bytes of it) for anything that is not exactly one of the
/// four forms with valid fields. O(line).
inline member_line parse_member_line(std::string_view line, const comm::detail::wire_limits& limits = {}) {
  constexpr const char* where = "weft::comm::elastic::coordinator";
  expects(line.size() <= limits.max_line_bytes && detail::printable_line(line), errc::parse, where, "a line of ",
          line.size(), " bytes that is too long or not printable ASCII");
  const auto tok = detail::split_tokens(line, 7);
  expects(tok.has_value(), errc::parse, where, "a malformed line '", line.substr(0, 64), "'");
  const auto& t = *tok;
  if (t[0] == "HB" && t.size() == 1) return heartbeat_line{};
  if (t[0] == "LEAVE" && t.size() == 1) return leave_line{};
  if (t[0] == "READY" && t.size() == 5) {
    ready_line r;
    int accept = 0, rebuild = 0;
    const bool ok = detail::parse_number(t[1], r.revision, std::uint64_t{0}, UINT64_MAX) &&
                    detail::parse_number(t[2], r.hash, std::uint64_t{0}, UINT64_MAX) &&
                    detail::parse_number(t[3], accept, 0, 1) && detail::parse_number(t[4], rebuild, 0, 1);
    expects(ok, errc::parse, where, "a malformed READY line '", line.substr(0, 64), "'");
    r.accept = accept == 1;
    r.rebuild = rebuild == 1;
    return r;
  }
  if (t[0] == "HELLO" && t.size() == 6) {
    hello_line h;
    h.name = std::string(t[1]);
    h.host = std::string(t[2]);
    h.spec = std::string(t[4]);
    const bool ok = detail::parse_number(t[3], h.port, 1, 65535) &&
                    detail::parse_number(t[5], h.instance, std::uint64_t{1}, UINT64_MAX);
    expects(ok, errc::parse, where, "a malformed HELLO line (port or instance)");
    const std::string bad = check_member_address({h.name, h.host, h.port, h.instance}, limits);
    expects(bad.empty(), errc::parse, where, "an invalid HELLO: ", bad);
    return h;
  }
  weft::detail::raise(errc::parse, where, "an unknown line '", line.substr(0, 64), "'");
}

inline std::string to_line(const hello_line& h) {
  return weft::detail::concat("HELLO ", h.name, ' ', h.host, ' ', h.port, ' ', h.spec, ' ', h.instance);
}
inline std::string to_line(const ready_line& r) {
  return weft::detail::concat("READY ", r.revision, ' ', r.hash, ' ', r.accept ? 1 : 0, ' ', r.rebuild ? 1 : 0);
}
inline std::string to_line(const epoch_line& e) {
  std::string out = weft::detail::concat("EPOCH ", e.epoch, ' ', e.index, ' ', e.members.size(), ' ', e.revision, ' ',
                                         e.hash, ' ', e.source);
  for (const auto& m : e.members)
    out += weft::detail::concat(' ', m.address.name, ' ', m.address.host, ' ', m.address.port, ' ', m.hash, ' ',
                                m.address.instance);
  return out;
}

/// Parses an EPOCH line (without its '\n'), strictly: n in [1, max_members], index and source in
/// [0, n), every member a valid address, names unique. weft::error(parse) otherwise. O(line).
inline epoch_line parse_epoch_line(std::string_view line, const comm::detail::wire_limits& limits = {}) {
  constexpr const char* where = "weft::comm::elastic::elastic_group";
  expects(line.size() <= max_coordinator_line_bytes && detail::printable_line(line), errc::parse, where, "a line of ",
          line.size(), " bytes from the coordinator that is too long or not printable ASCII");
  const auto tok = detail::split_tokens(line, 7 + 5 * static_cast<std::size_t>(max_members));
  expects(tok.has_value() && tok->size() >= 7 && (*tok)[0] == "EPOCH", errc::parse, where,
          "an unexpected line from the coordinator: '", line.substr(0, 64), "'");
  const auto& t = *tok;
  epoch_line e;
  int n = 0;
  bool ok = detail::parse_number(t[1], e.epoch, std::uint64_t{1}, UINT64_MAX) &&
            detail::parse_number(t[3], n, 1, max_members) && detail::parse_number(t[2], e.index, 0, n - 1) &&
            detail::parse_number(t[4], e.revision, std::uint64_t{0}, UINT64_MAX) &&
            detail::parse_number(t[5], e.hash, std::uint64_t{0}, UINT64_MAX) &&
            detail::parse_number(t[6], e.source, 0, n - 1) && t.size() == 7 + 5 * static_cast<std::size_t>(n);
  expects(ok, errc::parse, where, "a malformed EPOCH line '", line.substr(0, 64), "'");
  std::set<std::string_view> names;
  e.members.resize(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < e.members.size(); ++i) {
    auto& m = e.members[i];
    const auto* f = &t[7 + 5 * i];
    m.address.name = std::string(f[0]);
    m.address.host = std::string(f[1]);
    ok = detail::parse_number(f[2], m.address.port, 1, 65535) &&
         detail::parse_number(f[3], m.hash, std::uint64_t{0}, UINT64_MAX) &&
         detail::parse_number(f[4], m.address.instance, std::uint64_t{0}, UINT64_MAX) && names.insert(f[0]).second;
    expects(ok, errc::parse, where, "a malformed or duplicate member ", i, " in an EPOCH line");
    const std::string bad = check_member_address(m.address, limits);
    expects(bad.empty(), errc::parse, where, "member ", i, " of an EPOCH line: ", bad);
  }
  return e;
}

}  // namespace weft::comm::elastic

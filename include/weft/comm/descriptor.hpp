// The descriptor of one collective call (which collective, element count, dtype, operator, root,
// algorithm and whether the tuner chose it, segment size, group size, host map). Every collective
// first agrees on it with every rank (detail/agreement.hpp: a digest of it is allgathered), so ranks
// that disagree fail together before any data moves, naming the field and both values; a transport
// that checks descriptors (descriptor_checking_transport: shm and tcp carry it in the first frame
// to each peer) also compares it with every peer's as a second line of defence.
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/comm/options.hpp>
#include <weft/core/dtype.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace weft::comm {

/// What one collective call is, as every rank must agree on it. A plain value; thread-safe to copy.
struct collective_descriptor {
  collective kind = collective::allreduce;
  dtype type = dtype::u8;
  algorithm algo = algorithm::ring;  ///< the algorithm this rank runs (never automatic)
  bool automatic = false;            ///< the tuner chose algo (options::algo was automatic)
  std::int32_t root = -1;            ///< broadcast/reduce root, -1 for rootless collectives
  std::uint64_t count = 0;           ///< elements (per rank's block where the collective has blocks)
  std::uint64_t segment_bytes = 0;   ///< pipelining granularity, 0 where the collective has none
  std::uint32_t group_size = 0;      ///< ranks taking part
  std::array<char, 16> op{};         ///< the reduction operator's name, NUL-padded ("" for none)
  std::uint64_t hosts = 0;           ///< hash of the host map (hierarchical), 0 where none is used

  void set_op(std::string_view name) noexcept {
    op.fill('\0');
    std::memcpy(op.data(), name.data(), std::min(name.size(), op.size()));
  }
  std::string op_name() const {
    const auto* end = std::find(op.begin(), op.end(), '\0');
    std::string s(op.begin(), end);
    for (char& c : s)
      if (c < 0x20 || c > 0x7e) c = '?';  // from the wire: keep messages printable
    return s;
  }
  friend bool operator==(const collective_descriptor&, const collective_descriptor&) = default;
};

/// One field in which two descriptors differ, in words: field "count", here "1000000", there "999999".
struct descriptor_difference {
  std::string field;
  std::string here;
  std::string there;
};

namespace detail {
template <class E>
std::string enum_name(E value) {
  const std::string_view s = to_string(value);
  if (s != "?") return std::string(s);
  return "unknown(" + std::to_string(static_cast<unsigned>(value)) + ")";
}
inline std::string algo_name(algorithm a, bool automatic) {
  return enum_name(a) + (automatic ? " (chosen by the tuner)" : "");
}
}  // namespace detail

/// The first field in which `mine` and `theirs` differ, or nothing when they agree. Fields are
/// compared in the order a user fixes them: collective, group size, count, dtype, operator, root,
/// algorithm, segment size, host map — so a count difference is reported as one even when it also
/// made the tuner pick different algorithms. O(1).
inline std::optional<descriptor_difference> first_difference(const collective_descriptor& mine,
                                                             const collective_descriptor& theirs) {
  using detail::enum_name;
  if (mine.kind != theirs.kind)
    return descriptor_difference{"collective", enum_name(mine.kind), enum_name(theirs.kind)};
  if (mine.group_size != theirs.group_size)
    return descriptor_difference{"group size", std::to_string(mine.group_size), std::to_string(theirs.group_size)};
  if (mine.count != theirs.count)
    return descriptor_difference{"count", std::to_string(mine.count), std::to_string(theirs.count)};
  if (mine.type != theirs.type) return descriptor_difference{"dtype", enum_name(mine.type), enum_name(theirs.type)};
  if (mine.op != theirs.op) return descriptor_difference{"op", mine.op_name(), theirs.op_name()};
  if (mine.root != theirs.root)
    return descriptor_difference{"root", std::to_string(mine.root), std::to_string(theirs.root)};
  if (mine.algo != theirs.algo || mine.automatic != theirs.automatic) {
    descriptor_difference d{"algorithm", detail::algo_name(mine.algo, mine.automatic),
                            detail::algo_name(theirs.algo, theirs.automatic)};
    return d;
  }
  if (mine.segment_bytes != theirs.segment_bytes)
    return descriptor_difference{"segment_bytes", std::to_string(mine.segment_bytes),
                                 std::to_string(theirs.segment_bytes)};
  if (mine.hosts != theirs.hosts) {
    auto hex = [](std::uint64_t h) {
      std::string s(16, '0');
      for (int i = 15; i >= 0; --i, h >>= 4) s[static_cast<std::size_t>(i)] = "0123456789abcdef"[h & 0xfu];
      return "hash " + s;
    };
    return descriptor_difference{"host map", hex(mine.hosts), hex(theirs.hosts)};
  }
  return std::nullopt;
}

/// "count 1000000 here, 999999 at rank 1" (plus a hint where the field alone does not say why).
inline std::string explain(const descriptor_difference& d, int peer) {
  std::string s = d.field + " " + d.here + " here, " + d.there + " at rank " + std::to_string(peer);
  if (d.field == "algorithm" && d.here.find("tuner") != std::string::npos && d.there.find("tuner") != std::string::npos)
    s += " (the ranks' cost models differ: pass the same options::model, e.g. from calibrate(), on every rank)";
  return s;
}

/// Size of a descriptor on the wire (docs/comm.md, "Wire format").
inline constexpr std::size_t descriptor_wire_bytes = 56;

namespace detail {
/// Little-endian stores and loads of wire integers (one move on little-endian hosts).
template <class T>
void put_le(std::byte* p, T v) noexcept {
  static_assert(std::is_integral_v<T>);
  auto u = static_cast<std::make_unsigned_t<T>>(v);
  if constexpr (std::endian::native == std::endian::big) {
    for (std::size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<std::byte>((u >> (8 * i)) & 0xffu);
  } else {
    std::memcpy(p, &u, sizeof(T));
  }
}
template <class T>
T get_le(const std::byte* p) noexcept {
  static_assert(std::is_integral_v<T>);
  std::make_unsigned_t<T> u = 0;
  if constexpr (std::endian::native == std::endian::big) {
    for (std::size_t i = 0; i < sizeof(T); ++i)
      u = static_cast<std::make_unsigned_t<T>>(u | (static_cast<std::make_unsigned_t<T>>(p[i]) << (8 * i)));
  } else {
    std::memcpy(&u, p, sizeof(T));
  }
  return static_cast<T>(u);
}
}  // namespace detail

/// Writes d as 56 little-endian bytes: u8 collective, u8 dtype, u8 algorithm, u8 flags (bit 0:
/// chosen by the tuner), i32 root, u64 count, u64 segment_bytes, u32 group_size, u32 reserved (0),
/// char[16] op, u64 host-map hash. O(1).
inline void encode(const collective_descriptor& d, std::span<std::byte, descriptor_wire_bytes> out) noexcept {
  std::byte* p = out.data();
  std::memset(p, 0, descriptor_wire_bytes);
  p[0] = static_cast<std::byte>(d.kind);
  p[1] = static_cast<std::byte>(d.type);
  p[2] = static_cast<std::byte>(d.algo);
  p[3] = static_cast<std::byte>(d.automatic ? 1 : 0);
  detail::put_le<std::int32_t>(p + 4, d.root);
  detail::put_le<std::uint64_t>(p + 8, d.count);
  detail::put_le<std::uint64_t>(p + 16, d.segment_bytes);
  detail::put_le<std::uint32_t>(p + 24, d.group_size);
  std::memcpy(p + 32, d.op.data(), d.op.size());
  detail::put_le<std::uint64_t>(p + 48, d.hosts);
}

/// Reads what encode wrote. Any bytes decode to some descriptor (unknown enum values are kept and
/// rendered as "unknown(N)"), so a peer's descriptor can always be compared and reported. O(1).
inline collective_descriptor decode(std::span<const std::byte, descriptor_wire_bytes> in) noexcept {
  const std::byte* p = in.data();
  collective_descriptor d;
  d.kind = static_cast<collective>(p[0]);
  d.type = static_cast<dtype>(p[1]);
  d.algo = static_cast<algorithm>(p[2]);
  d.automatic = (static_cast<unsigned>(p[3]) & 1u) != 0;
  d.root = detail::get_le<std::int32_t>(p + 4);
  d.count = detail::get_le<std::uint64_t>(p + 8);
  d.segment_bytes = detail::get_le<std::uint64_t>(p + 16);
  d.group_size = detail::get_le<std::uint32_t>(p + 24);
  std::memcpy(d.op.data(), p + 32, d.op.size());
  d.hosts = detail::get_le<std::uint64_t>(p + 48);
  return d;
}

/// A transport that compares every collective's descriptor across ranks. begin_collective(channel,
/// d, members) is called by each collective before its first message (members: the ranks of this
/// transport that take part, empty for all); it throws errc::mismatch (a comm_error naming the
/// field and both values) when a peer's descriptor for the same call has already arrived and
/// differs, and otherwise arranges for d to travel with the first message to each member, whose
/// receiver compares it on arrival, whether or not a receive is posted for it.
template <class T>
concept descriptor_checking_transport = transport<T> &&
    requires(T& t, std::uint32_t channel, const collective_descriptor& d, std::span<const int> members) {
  t.begin_collective(channel, d, members);
};

}  // namespace weft::comm

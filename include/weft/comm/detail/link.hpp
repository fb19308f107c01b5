// Internal: stream_link, what detail::stream_engine needs from the byte streams under it (shm_link,
// tcp_link; tests use fake links). The concept is the checked form of the list above stream_engine;
// its archetype is tests/comm/archetype_test.cpp.
#pragma once

#include <weft/comm/concepts.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace weft::comm::detail {

struct io_part;  // one part of a gathered write (stream_engine.hpp)

/// L moves bytes between this rank and each peer over `conns` streams per peer, never blocking:
///  - L::stage_bytes, a constant: 0 to read straight into the destination, else the size of a
///    per-stream staging buffer;
///  - write_some(peer, conn, parts, count) writes a prefix of the parts' bytes, returning how many
///    (0: would block); read_some(peer, conn, dst, n) reads up to n (0: none yet); both throw
///    weft::error when the stream failed; commit_reads(peer, conn) hands the read room back;
///  - prepare_wait() returns a token that wait(token, until, write_peer) takes: arm, retry, sleep
///    until a peer may have made progress, until, or poke(); check_alive(peer) throws for a gone peer;
///  - the single-copy hooks remote_min() (SIZE_MAX: never), remote_read(peer, addr, dst, n),
///    remote_ack(peer), remote_post(peer) and remote_acked(peer) (counts of pieces);
///  - on_abort(why): the group failed; shut the streams.
template <class L>
concept stream_link = requires(L& link, int peer, int conn, const io_part* parts, int count, std::byte* dst,
                               std::size_t n, std::uint64_t addr, deadline until, const std::string& why) {
  typename std::integral_constant<std::size_t, L::stage_bytes>;  // a compile-time constant
  { link.write_some(peer, conn, parts, count) } -> std::convertible_to<std::size_t>;
  { link.read_some(peer, conn, dst, n) } -> std::convertible_to<std::size_t>;
  link.commit_reads(peer, conn);
  link.wait(link.prepare_wait(), until, peer);
  link.poke();
  link.check_alive(peer);
  { link.remote_min() } -> std::convertible_to<std::size_t>;
  link.remote_read(peer, addr, dst, n);
  link.remote_ack(peer);
  { link.remote_post(peer) } -> std::convertible_to<std::uint64_t>;
  { link.remote_acked(peer) } -> std::convertible_to<std::uint64_t>;
  link.on_abort(why);
};

/// Optional hook of a stream_link: write_whole(peer, conn, parts, count) writes all of the parts'
/// bytes or none (returning how many: their sum or 0, would block), so an eager frame is published
/// whole and the receiver never finds half of one (shm_link has it). stream_engine writes an eager
/// frame's first bytes through it when the link has it, else through write_some. Links are internal
/// (no user type models stream_link), so there is no opt-in: the archetype test shows a misspelled
/// hook is not detected.
template <class L>
concept writes_whole = stream_link<L> && requires(L& link, int peer, int conn, const io_part* parts, int count) {
  { link.write_whole(peer, conn, parts, count) } -> std::convertible_to<std::size_t>;
};

}  // namespace weft::comm::detail

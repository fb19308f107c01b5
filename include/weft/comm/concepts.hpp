// The policy concepts of weft::comm: what a transport must provide for the collectives to run
// over it. A transport moves byte messages between ranks with matching by (peer, channel), in
// order, with a deadline on every blocking call (the MPI point-to-point model, MPI-4 §3.5).
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace weft::comm {

/// Every blocking call in weft::comm ends by this time point or throws weft::error(errc::timeout).
using clock_type = std::chrono::steady_clock;
using deadline = clock_type::time_point;

/// How a message is matched. `channel` separates independent streams of messages (one per
/// collective in flight); messages on one channel between one pair of ranks arrive in the order
/// they were sent. `check` is a word both sides compute from what they believe the operation is
/// (collective, dtype, count, algorithm); a transport that carries it compares it on receipt and
/// reports a difference as errc::mismatch, which is how disagreeing ranks fail fast instead of
/// hanging. A plain value; thread-safe to copy.
struct msg_tag {
  std::uint32_t channel = 0;
  std::uint32_t check = 0;
  friend constexpr bool operator==(msg_tag, msg_tag) noexcept = default;
};

/// A transport connects `size()` ranks; this object is rank `rank()`.
///  - send(peer, tag, bytes, until): delivers bytes to peer; may return once the bytes are
///    buffered, or block until the peer receives them.
///  - recv(peer, tag, bytes, until): receives exactly bytes.size() bytes from peer on
///    tag.channel; a message of another length (or another check word) is errc::mismatch.
///  - sendrecv(dst, out, src, in, tag, until): both at once, so a ring can send to its successor
///    while receiving from its predecessor without deadlock whatever the message sizes.
/// Errors are weft::error naming the rank, peer and operation: errc::timeout when `until` passes,
/// errc::peer_failure when a peer is gone, errc::aborted after abort(). A peer equal to rank() or
/// outside [0, size()) is errc::invalid_argument. Zero-byte messages are messages.
template <class T>
concept transport = requires(T& t, const T& ct, int peer, msg_tag tag, std::span<const std::byte> out,
                             std::span<std::byte> in, deadline until) {
  { ct.rank() } -> std::convertible_to<int>;
  { ct.size() } -> std::convertible_to<int>;
  t.send(peer, tag, out, until);
  t.recv(peer, tag, in, until);
  t.sendrecv(peer, out, peer, in, tag, until);
};

/// A transport that can tell every peer that this rank gave up (the collectives call it when one
/// of them fails, so that the other ranks fail at once with the reason instead of at their
/// deadline). After abort() every operation on every rank of the group throws errc::aborted.
template <class T>
concept abortable_transport = transport<T> && requires(T& t, std::string_view why) {
  t.abort(why);
};

/// A transport several threads may use at once, as long as each uses its own channel. The
/// non-blocking collectives (nonblocking.hpp) need this; transports declare it with
/// `static constexpr bool thread_safe_channels = true;`.
template <class T>
concept concurrent_transport = transport<T> && T::thread_safe_channels;

namespace detail {
template <class Op>
concept has_op_name = requires {
  std::string_view(Op::name);
};

// The opt-in of the optional hook (as sched's provides_prefix_probe): an operator that says it has a
// name gets a compile error naming the fix when Op::name is missing or not a string, instead of the
// name being silently replaced by "user-op". Operators without the opt-in are detected by signature.
template <class Op>
struct op_name_hook_check {
  static constexpr bool declared = [] {
    if constexpr (requires { Op::provides_name; })
      return static_cast<bool>(Op::provides_name);
    else
      return false;
  }();
  static_assert(!declared || has_op_name<Op>,
                "weft::comm: this reduce operator declares provides_name = true but has no static member "
                "name convertible to std::string_view; check the name's spelling and declare it as "
                "`static constexpr std::string_view name = \"...\";`, or remove provides_name");
  static constexpr bool value = true;
};
}  // namespace detail

/// Optional hook of a reduce operator (weft::reduce_op): Op::name, a static constant the collectives
/// hash into the check word, so ranks that reduce with different operators fail with errc::mismatch
/// instead of mixing results (weft::op::* have one; an operator without it is "user-op"). An operator
/// that provides it should say so with `static constexpr bool provides_name = true;`: then a
/// misspelled name is a compile error with the fix in its message, not a name silently ignored.
template <class Op>
concept names_reduce_op = detail::op_name_hook_check<Op>::value && detail::has_op_name<Op>;

}  // namespace weft::comm

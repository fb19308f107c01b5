// Per-call options of weft::comm's collectives (algorithm, channel, deadline, segment size, host
// map) and the check word that lets a receiving rank notice that its peer called a different
// collective, dtype, count or algorithm.
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/core/dtype.hpp>
#include <weft/core/error.hpp>
#include <weft/core/hash.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace weft::comm {

/// Allreduce algorithms. `automatic` lets the tuner choose from the cost model (tuner.hpp).
/// (The values travel in collective descriptors: new ones are appended.)
enum class algorithm : std::uint8_t { automatic, ring, tree, star, halving_doubling, hierarchical, recursive_doubling };

constexpr std::string_view to_string(algorithm a) noexcept {
  switch (a) {
    case algorithm::automatic:
      return "automatic";
    case algorithm::ring:
      return "ring";
    case algorithm::tree:
      return "tree";
    case algorithm::star:
      return "star";
    case algorithm::halving_doubling:
      return "halving_doubling";
    case algorithm::hierarchical:
      return "hierarchical";
    case algorithm::recursive_doubling:
      return "recursive_doubling";
  }
  return "?";
}

struct cost_model;
struct tuning_table;

/// How a rank blocked in a shm or tcp transport waits for its peers. Polling catches a peer that
/// answers within microseconds without a system call or a wake-up, but a poller takes the core a
/// peer may need: on a host with more ranks than cores, yielding or sleeping is faster.
enum class wait_mode : std::uint8_t {
  automatic,  ///< spin when this host's ranks fit the cores this process may run on, else yield
  spin,       ///< busy-poll for wait_options::spin after the last progress, then sleep
  yield,      ///< poll with sched_yield(2) between polls for wait_options::yield, then sleep
  block,      ///< sleep at once (futex(2) for shm, poll(2) for tcp)
};

constexpr std::string_view to_string(wait_mode m) noexcept {
  switch (m) {
    case wait_mode::automatic:
      return "automatic";
    case wait_mode::spin:
      return "spin";
    case wait_mode::yield:
      return "yield";
    case wait_mode::block:
      return "block";
  }
  return "?";
}

/// Waiting policy of a shm or tcp transport. A plain value; thread-safe to copy.
struct wait_options {
  wait_mode mode = wait_mode::automatic;
  std::chrono::microseconds spin{250};   ///< spin mode: how long to poll before sleeping
  std::chrono::microseconds yield{250};  ///< yield mode: how long to poll-and-yield before sleeping
};

/// Options of one collective call; every rank must pass equal values (the check word catches most
/// differences). A plain aggregate; thread-safe to copy. `hosts` and `model` are borrowed: they must
/// outlive the call (for a non-blocking call, until wait()).
struct options {
  algorithm algo = algorithm::automatic;             ///< allreduce only; automatic asks the tuner
  std::uint32_t channel = 0;                         ///< collectives in flight at once need distinct channels
  std::chrono::milliseconds timeout{60'000};         ///< the whole call must finish within this
  std::size_t segment_bytes = std::size_t{1} << 19;  ///< pipelining granularity of ring/tree/star/broadcast
  std::span<const int> hosts{};                      ///< host id of every rank (hierarchical)
  const cost_model* model = nullptr;                 ///< tuner's model; nullptr means the built-in default
  /// Measured choices (autotune() in calibrate.hpp); when set and made for this rank count, it
  /// decides automatic instead of the model.
  const tuning_table* table = nullptr;
};

/// Which collective a message belongs to (part of the check word).
enum class collective : std::uint8_t {
  allreduce = 1,
  reduce_scatter,
  allgather,
  broadcast,
  reduce,
  barrier,
  alltoall,
  alltoallv,
  calibrate,
};

constexpr std::string_view to_string(collective c) noexcept {
  switch (c) {
    case collective::allreduce:
      return "allreduce";
    case collective::reduce_scatter:
      return "reduce_scatter";
    case collective::allgather:
      return "allgather";
    case collective::broadcast:
      return "broadcast";
    case collective::reduce:
      return "reduce";
    case collective::barrier:
      return "barrier";
    case collective::alltoall:
      return "alltoall";
    case collective::alltoallv:
      return "alltoallv";
    case collective::calibrate:
      return "calibrate";
  }
  return "?";
}

namespace detail {

/// The checks every collective makes of its options (one place, one message). O(1).
inline void check_call_options(const char* where, const options& opt) {
  expects(opt.timeout.count() > 0, errc::invalid_argument, where, "timeout must be positive, got ", opt.timeout.count(),
          " ms");
  expects(opt.segment_bytes > 0, errc::invalid_argument, where, "segment_bytes must be positive");
}

/// True for the values the algorithm enumeration names (a value cast from an integer may not be).
constexpr bool is_known(algorithm a) noexcept { return to_string(a) != "?"; }

/// Refuses an algorithm value outside the enumeration (e.g. read from a config file as a number). O(1).
inline void check_algorithm(const char* where, algorithm a) {
  expects(is_known(a), errc::invalid_argument, where, "algorithm ", static_cast<unsigned>(a),
          " is not one of automatic, ring, tree, star, halving_doubling, hierarchical, recursive_doubling");
}

/// The operator's name in weft's hash (weft/core/hash.hpp), one character per hash_combine step:
/// hash_bytes is not constexpr, and a name is a few characters. The length goes first, so a name
/// and the same name with trailing NULs differ. O(length).
constexpr std::uint64_t hash_op_name(std::string_view name) noexcept {
  std::uint64_t h = hash_combine(0, name.size());
  for (char c : name) h = hash_combine(h, static_cast<std::uint8_t>(c));
  return h;
}
}  // namespace detail

/// The operator's name for the check word: Op::name when it has one (names_reduce_op; weft::op::*
/// do), otherwise a fixed placeholder, so user-written operators need nothing beyond weft::reduce_op.
template <class Op>
constexpr std::string_view op_name() noexcept {
  if constexpr (names_reduce_op<Op>)
    return std::string_view(Op::name);
  else
    return "user-op";
}

/// The check word: bits 0-3 collective, 4-7 dtype, 8-11 algorithm, 12-31 a hash of the element
/// count, the operator's name and the segment size. O(length of op name), constant-folded for a
/// compile-time name.
constexpr std::uint32_t make_check(collective c, dtype t, algorithm a, std::uint64_t count, std::string_view op_name,
                                   std::uint64_t segment_bytes) noexcept {
  // The operator's name first (a compile-time constant in every collective, so it folds away), then
  // two multiply-mix steps for the run-time numbers.
  const std::uint64_t mixed = hash_combine(hash_combine(detail::hash_op_name(op_name), count), segment_bytes);
  const auto h = static_cast<std::uint32_t>(mixed >> 44);
  return (static_cast<std::uint32_t>(c) & 0xfu) | ((static_cast<std::uint32_t>(t) & 0xfu) << 4) |
         ((static_cast<std::uint32_t>(a) & 0xfu) << 8) | (h << 12);
}

/// Says in words how two check words differ ("dtype f32 here, i32 at the peer"). O(1).
inline std::string explain_check_difference(std::uint32_t mine, std::uint32_t theirs) {
  auto field = [](std::uint32_t w, int shift) { return (w >> shift) & 0xfu; };
  if (field(mine, 0) != field(theirs, 0))
    return std::string("collective ") + std::string(to_string(static_cast<collective>(field(mine, 0)))) + " here, " +
           std::string(to_string(static_cast<collective>(field(theirs, 0)))) + " at the peer";
  if (field(mine, 4) != field(theirs, 4))
    return std::string("dtype ") + std::string(to_string(static_cast<dtype>(field(mine, 4)))) + " here, " +
           std::string(to_string(static_cast<dtype>(field(theirs, 4)))) + " at the peer";
  if (field(mine, 8) != field(theirs, 8))
    return std::string("algorithm ") + std::string(to_string(static_cast<algorithm>(field(mine, 8)))) + " here, " +
           std::string(to_string(static_cast<algorithm>(field(theirs, 8)))) + " at the peer";
  return "element count, reduce operator or segment size differ";
}

}  // namespace weft::comm

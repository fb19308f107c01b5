// A deterministic schedule of faults for tests: delay messages, drop the connection between two
// ranks, or kill a rank, each triggered after a rank has sent a given number of messages (so a
// test reproduces exactly, whatever the thread timing). Used by fault::fault_transport.
#pragma once

#include <weft/core/error.hpp>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace weft::comm::fault {

/// What a killed rank's peers observe: `reset` is a process killed on tcp (the kernel resets the
/// connection: peers fail at once with errc::peer_failure), `silent` a stopped process or a cut
/// cable (peers hear nothing and fail at their deadline with errc::timeout).
enum class kill_mode : std::uint8_t { reset, silent };

/// The fault schedule shared by all ranks' fault_transports (one plan per in-process world, or
/// one per process). Thread-safe (one mutex). Rule lookups are O(rules) per message.
class fault_plan {
 public:
  /// Every message `rank` sends to `peer` (-1: any peer) after its `after`-th send waits `by`.
  /// Throws errc::invalid_argument for a negative rank or duration.
  fault_plan& delay(int rank, int peer, std::chrono::milliseconds by, std::uint64_t after = 0) {
    std::lock_guard lock(m_);
    expects(rank >= 0 && by.count() >= 0, errc::invalid_argument, "weft::comm::fault::fault_plan::delay", "rank ", rank,
            " and delay ", by.count(), " ms must be non-negative");
    delays_.push_back({rank, peer, by, after});
    return *this;
  }
  /// The connection between rank and peer breaks when `rank` has sent `after` messages: both
  /// ends' operations on it then fail with errc::peer_failure. Throws for rank == peer or negatives.
  fault_plan& drop(int rank, int peer, std::uint64_t after = 0) {
    std::lock_guard lock(m_);
    expects(rank >= 0 && peer >= 0 && rank != peer, errc::invalid_argument, "weft::comm::fault::fault_plan::drop",
            "ranks ", rank, " and ", peer, " must be distinct and non-negative");
    drops_.push_back({rank, peer, after, false});
    return *this;
  }
  /// `rank` dies when it has sent `after` messages: its own calls then throw errc::aborted, and
  /// its peers see `mode`. Throws errc::invalid_argument for a negative rank.
  fault_plan& kill(int rank, std::uint64_t after = 0, kill_mode mode = kill_mode::reset) {
    std::lock_guard lock(m_);
    expects(rank >= 0, errc::invalid_argument, "weft::comm::fault::fault_plan::kill", "rank ", rank,
            " must be non-negative");
    kills_.push_back({rank, after, mode, false});
    return *this;
  }

  /// Messages `rank` has sent so far (through a fault_transport).
  std::uint64_t sent(int rank) const {
    std::lock_guard lock(m_);
    return rank >= 0 && static_cast<std::size_t>(rank) < sent_.size() ? sent_[static_cast<std::size_t>(rank)] : 0;
  }
  /// The ranks killed so far, in rank order.
  std::vector<int> killed() const {
    std::lock_guard lock(m_);
    std::vector<int> out;
    for (const auto& k : kills_)
      if (k.fired) out.push_back(k.rank);
    return out;
  }

  // --- used by fault_transport ---------------------------------------------------------------

  /// What happens to a send from rank to peer now; counts the send.
  struct verdict {
    std::chrono::milliseconds wait{0};
    std::optional<std::string> fail;  ///< set: the call fails with this message
    bool self_killed = false;         ///< the failure is this rank's own death (errc::aborted)
  };
  verdict on_send(int rank, int peer) {
    std::lock_guard lock(m_);
    if (sent_.size() <= static_cast<std::size_t>(rank)) sent_.resize(static_cast<std::size_t>(rank) + 1, 0);
    const std::uint64_t n = sent_[static_cast<std::size_t>(rank)]++;
    fire(rank, n);
    verdict v = check_locked(rank, peer);
    if (!v.fail)
      for (const auto& d : delays_)
        if (d.rank == rank && (d.peer < 0 || d.peer == peer) && n >= d.after) v.wait += d.by;
    return v;
  }
  /// Whether rank may still talk to peer (no send is counted).
  verdict on_recv(int rank, int peer) {
    std::lock_guard lock(m_);
    return check_locked(rank, peer);
  }

 private:
  struct delay_rule {
    int rank, peer;
    std::chrono::milliseconds by;
    std::uint64_t after;
  };
  struct drop_rule {
    int rank, peer;
    std::uint64_t after;
    bool fired;
  };
  struct kill_rule {
    int rank;
    std::uint64_t after;
    kill_mode mode;
    bool fired;
  };

  void fire(int rank, std::uint64_t n) {
    for (auto& d : drops_)
      if (d.rank == rank && n >= d.after) d.fired = true;
    for (auto& k : kills_)
      if (k.rank == rank && n >= k.after) k.fired = true;
  }
  verdict check_locked(int rank, int peer) const {
    verdict v;
    for (const auto& k : kills_) {
      if (!k.fired) continue;
      if (k.rank == rank) {
        v.fail = weft::detail::concat("rank ", rank, " was killed by the fault plan");
        v.self_killed = true;
        return v;
      }
      if (k.rank == peer && k.mode == kill_mode::reset) {
        v.fail = weft::detail::concat("connection reset by peer ", peer, " (the peer died)");
        return v;
      }
    }
    for (const auto& d : drops_)
      if (d.fired && ((d.rank == rank && d.peer == peer) || (d.rank == peer && d.peer == rank))) {
        v.fail = weft::detail::concat("connection between ranks ", d.rank, " and ", d.peer, " was dropped");
        return v;
      }
    return v;
  }
  bool silent_dead(int peer) const {
    for (const auto& k : kills_)
      if (k.fired && k.rank == peer && k.mode == kill_mode::silent) return true;
    return false;
  }

 public:
  /// True when messages to peer vanish (peer killed in silent mode).
  bool swallows(int peer) const {
    std::lock_guard lock(m_);
    return silent_dead(peer);
  }

 private:
  mutable std::mutex m_;
  std::vector<delay_rule> delays_;
  std::vector<drop_rule> drops_;
  std::vector<kill_rule> kills_;
  std::vector<std::uint64_t> sent_;
};

}  // namespace weft::comm::fault

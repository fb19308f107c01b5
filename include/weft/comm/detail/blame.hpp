// Internal: the failure/blame protocol of the stream engine. A failure is recorded as a `fault`
// (the first one a rank finds is the group's cause; later ones are consequences). When a group
// fails, every rank sends an abort frame saying whom it was waiting on (frame_codec.hpp); a rank
// that must name a culprit without one in the failure itself (a timeout) follows those reports, a
// wait-for graph as in distributed deadlock detection (Chandy, Misra & Haas, ACM TOCS 1983), to
// the rank that was not waiting on anyone, never answered, or was named by another. Plain values
// and pure functions over the reports, so they are tested on their own
// (tests/comm/blame_protocol_test.cpp).
#pragma once

#include <weft/core/error.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace weft::comm::detail {

/// A failure as the engine knows it before it becomes a comm_error (comm_error.hpp has the same
/// facts as failure_info). A plain value.
struct fault {
  errc code = errc::io;
  int blamed = -1;  ///< the rank held responsible, -1 unknown
  int origin = -1;  ///< the rank that found it first; -1: this rank
  std::uint32_t channel = 0, sequence = 0;
  std::string detail, field, here, there;  ///< in words; for a disagreement the field and both values
};

/// A fault of `peer` breaking the protocol (a frame that is malformed, above the limits, or out of
/// place): it is blamed, and the words say so.
inline fault protocol_fault(int peer, errc code, const std::string& what) {
  fault f;
  f.code = code;
  f.blamed = peer;
  f.detail = weft::detail::concat("protocol violation by peer ", peer, ": ", what);
  return f;
}

/// What one rank said when the group failed (its abort frame), or that it has not said anything.
struct rank_report {
  bool reported = false;
  int waiting_on = -1;  ///< the peer it was blocked on, -1 none
  int blamed = -1;      ///< the rank it held responsible, -1 none
  errc code = errc::aborted;
};

/// Whom rank `self`, blocked on `waiting_on`, blames: follows "waiting on" through the reports
/// until it reaches a rank that did not report (stalled, or outside the engine), one that named a
/// culprit, or one not blocked on anyone (it was late). -1 when `self` waited on nobody or the
/// waits form a cycle of live ranks (their schedules disagree). Returns nothing while the answer
/// may still change: a silent rank is only final once every other rank has reported, or when
/// `final` (the blame window is over). Every rank number in `reports` must be in [0, size) or -1
/// (decode_abort_body checks those from the wire). O(size).
inline std::optional<int> follow_waits(std::span<const rank_report> reports, int self, int waiting_on, bool final) {
  if (waiting_on < 0) return -1;
  const std::size_t size = reports.size();
  std::vector<bool> seen(size, false);
  seen[static_cast<std::size_t>(self)] = true;
  int cur = waiting_on;
  for (;;) {
    if (seen[static_cast<std::size_t>(cur)]) return -1;  // a cycle of live ranks: the schedules disagree
    seen[static_cast<std::size_t>(cur)] = true;
    const rank_report& st = reports[static_cast<std::size_t>(cur)];
    if (!st.reported) {
      if (final) return cur;
      // Final as soon as every other rank has reported: cur is the only one silent.
      for (std::size_t q = 0; q < size; ++q)
        if (static_cast<int>(q) != cur && !reports[q].reported) return std::nullopt;
      return cur;
    }
    if (st.blamed >= 0) return st.blamed;
    if (st.waiting_on < 0) return cur;  // it was not waiting on anyone: it was late
    cur = st.waiting_on;
  }
}

}  // namespace weft::comm::detail

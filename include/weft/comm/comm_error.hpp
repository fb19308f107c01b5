// The failure type of weft::comm: a weft::error whose facts (reporting rank, peer, blamed rank,
// collective, channel, phase and, for a disagreement between ranks, the field and both values)
// are fields, so code that reacts to a failure never parses what() back.
#pragma once

#include <weft/core/error.hpp>

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace weft::comm {

/// What a failed transport call or collective is about, as data. A plain value; thread-safe to
/// copy. Fields that do not apply keep their defaults (-1, 0 or empty).
struct failure_info {
  int rank = -1;                ///< the rank reporting (this process's rank in the transport)
  int size = 0;                 ///< ranks in the group
  int peer = -1;                ///< the peer of the operation that failed, -1 when none
  int blamed = -1;              ///< the rank held responsible (dead, stalled, disagreeing); -1 unknown
  int origin = -1;              ///< the rank that detected the failure first (rank, unless aborted by another)
  std::string collective;       ///< e.g. "weft::comm::allreduce[ring]"; empty for a bare transport call
  std::uint32_t channel = 0;    ///< the tag's channel
  std::uint32_t check = 0;      ///< the tag's check word
  std::uint32_t sequence = 0;   ///< which collective on (peer, channel) it was, counted from 1; 0 unknown
  std::string operation;        ///< the transport operation: "send", "recv", "sendrecv", "begin"
  std::string phase;            ///< e.g. "ring reduce-scatter"
  int step = -1;                ///< the step within the phase, -1 when none
  std::string field;            ///< mismatch: what differs ("count", "dtype", "op", "algorithm", ...)
  std::string here;             ///< mismatch: this rank's value (of the origin's, for an abort)
  std::string there;            ///< mismatch: the value at `blamed`
  std::vector<int> waiting_on;  ///< per rank: the peer it was blocked on when the group failed (-1: not
                                ///< blocked or unknown); empty when no rank reported
  std::string detail;           ///< the failure in words, without the context above
};

namespace detail {
inline std::string render(const failure_info& f) {
  std::ostringstream out;
  if (f.rank >= 0) out << "rank " << f.rank;
  if (f.size > 0) out << " of " << f.size;
  if (!f.phase.empty()) {
    out << ", phase '" << f.phase << "'";
    if (f.step >= 0) out << " step " << f.step;
  }
  if (!f.operation.empty()) out << ", " << f.operation;
  if (f.peer >= 0) out << " peer " << f.peer;
  out << " channel " << f.channel;
  out << ": " << f.detail;
  if (f.blamed >= 0 && f.detail.find("rank " + std::to_string(f.blamed)) == std::string::npos &&
      f.detail.find("held responsible") == std::string::npos)
    out << " [rank " << f.blamed << " is held responsible]";
  return out.str();
}
}  // namespace detail

/// The exception every weft::comm transport and collective throws for a communication failure:
/// a weft::error (same code, context = the collective or transport, what() = the facts in words)
/// plus info() with the facts as fields. Immutable; thread-safe to read.
class comm_error : public error {
 public:
  comm_error(errc code, const std::string& context, failure_info info)
      : error(code, context, detail::render(info)), info_(std::move(info)) {}

  const failure_info& info() const noexcept { return info_; }
  errc code_value() const noexcept { return static_cast<errc>(code().value()); }

 private:
  failure_info info_;
};

/// A transport whose abort carries the failure's fields to the other ranks, so every rank's error
/// names the same origin, blamed rank and disagreement: t.abort(e) (beside abort(why) of
/// abortable_transport). The collectives use it when the transport has it.
template <class T>
concept failure_carrying_transport = requires(T& t, const comm_error& e) {
  t.abort(e);
};

}  // namespace weft::comm

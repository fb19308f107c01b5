// Failure semantics for collectives: a structured description of why a collective failed (which
// rank failed, which collective, tag and phase), and a guard that restores the caller's input
// buffer when a collective aborts, so the caller can retry the step (as PCCL does on peer loss).
#pragma once

#include <weft/comm/allreduce.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/core/error.hpp>

#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft::comm::fault {

/// What a failed collective tells its caller. failed_rank is the peer the first failing transport
/// call named (the dead or stalled rank for a direct neighbour; for errc::timeout it may be a live
/// rank that was itself waiting on the failure), or -1 when the error named none.
struct failure_report {
  errc code = errc::aborted;
  int rank = -1;              ///< the rank reporting
  int failed_rank = -1;       ///< the rank blamed
  std::string collective;     ///< e.g. "weft::comm::allreduce[ring]"
  std::uint32_t channel = 0;  ///< the tag's channel
  std::string phase;          ///< e.g. "ring reduce-scatter step 1"
  std::string message;        ///< the original error text
};

namespace detail {
inline int last_int_after(std::string_view s, std::string_view key) {
  int found = -1;  // the last occurrence of key followed by a number ("peer 2", not "peer died")
  for (auto at = s.find(key); at != std::string_view::npos; at = s.find(key, at + 1)) {
    const auto from = at + key.size();
    if (from < s.size() && s[from] >= '0' && s[from] <= '9') found = std::atoi(std::string(s.substr(from, 12)).c_str());
  }
  return found;
}
inline std::string quoted_after(std::string_view s, std::string_view key) {
  const auto at = s.find(key);
  if (at == std::string_view::npos) return {};
  const auto from = at + key.size();
  const auto to = s.find('\'', from);
  if (to == std::string_view::npos) return {};
  std::string out(s.substr(from, to - from));
  const auto rest = s.substr(to + 1);
  if (rest.rfind(" step ", 0) == 0)
    out += " step " + std::to_string(std::atoi(std::string(rest.substr(6, 12)).c_str()));
  return out;
}
}  // namespace detail

/// Reads a weft::comm error into a failure_report. The blamed rank is the innermost "peer N" of
/// the message (the first failing call is quoted last), the phase the outermost "phase '...'".
/// O(message length); thread-safe.
inline failure_report describe(const error& e, int rank, std::uint32_t channel) {
  failure_report r;
  r.code = static_cast<errc>(e.code().value());
  r.rank = rank;
  r.channel = channel;
  r.collective = e.context();
  r.message = e.what();
  r.failed_rank = detail::last_int_after(r.message, "peer ");
  r.phase = detail::quoted_after(r.message, "phase '");
  return r;
}

/// The error a restoring collective throws: weft::error (same code) plus the report.
/// Thread-safe to read (immutable).
class collective_failure : public error {
 public:
  explicit collective_failure(failure_report r)
      : error(r.code, r.collective,
              weft::detail::concat("rank ", r.rank, " channel ", r.channel, " phase '", r.phase, "' failed rank ",
                                   r.failed_rank, " (input restored): ", r.message)),
        report_(std::move(r)) {}
  const failure_report& report() const noexcept { return report_; }

 private:
  failure_report report_;
};

/// Runs fn() (a collective that writes `data` in place); if it throws weft::error, copies the
/// saved input back into data and throws collective_failure. Memory O(n) for the copy; time O(n)
/// plus fn's. Thread-safety: fn's.
template <class T, class Fn>
void restoring(std::span<T> data, int rank, std::uint32_t channel, Fn&& fn) {
  std::vector<T> saved(data.begin(), data.end());
  try {
    fn();
  } catch (const error& e) {
    std::copy(saved.begin(), saved.end(), data.begin());
    throw collective_failure(describe(e, rank, channel));
  }
}

/// weft::comm::allreduce that restores `data` when it fails (see restoring). Same arguments and
/// guarantees as allreduce otherwise.
template <transport Tr, element_type T, class Op = op::sum>
requires reduce_op<Op, T>
void restoring_allreduce(Tr& t, std::span<T> data, Op op = {}, const options& opt = {}) {
  restoring(data, static_cast<int>(t.rank()), opt.channel, [&] { allreduce(t, data, op, opt); });
}

}  // namespace weft::comm::fault

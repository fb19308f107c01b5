// Failure semantics for collectives: a structured description of why a collective failed (which
// rank failed, which collective, tag and phase — read from comm_error's fields), and a guard that
// restores the caller's input buffer when a collective aborts, so the caller can retry the step (as
// PCCL does on peer loss).
#pragma once

#include <weft/comm/allreduce.hpp>
#include <weft/comm/comm_error.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/core/error.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft::comm::fault {

/// What a failed collective tells its caller, copied from the comm_error's fields (never parsed
/// from its text). failed_rank is the rank held responsible: the dead, stalled (the one the others
/// were waiting on, by their reports) or disagreeing rank, or -1 when nobody could be named.
struct failure_report {
  errc code = errc::aborted;
  int rank = -1;              ///< the rank reporting
  int failed_rank = -1;       ///< the rank blamed
  std::string collective;     ///< e.g. "weft::comm::allreduce[ring]"
  std::uint32_t channel = 0;  ///< the tag's channel
  std::string phase;          ///< e.g. "ring reduce-scatter step 1"
  std::string message;        ///< the original error text
  failure_info info;          ///< every field of the comm_error (empty for another weft::error)
};

/// Reads a weft::comm error into a failure_report: a comm_error's fields are copied; any other
/// weft::error gives its code, context and text and blames nobody. O(fields); thread-safe.
inline failure_report describe(const error& e, int rank, std::uint32_t channel) {
  failure_report r;
  r.code = static_cast<errc>(e.code().value());
  r.rank = rank;
  r.channel = channel;
  r.collective = e.context();
  r.message = e.what();
  if (const auto* ce = dynamic_cast<const comm_error*>(&e)) {
    r.info = ce->info();
    r.failed_rank = r.info.blamed;
    r.phase = r.info.phase;
    if (r.info.step >= 0) r.phase += " step " + std::to_string(r.info.step);
    if (!r.info.collective.empty()) r.collective = r.info.collective;
  }
  return r;
}

/// The error a restoring collective throws: a comm_error (same code and fields, the detail saying
/// the input was restored) plus the report. Thread-safe to read (immutable).
class collective_failure : public comm_error {
 public:
  explicit collective_failure(failure_report r)
      : comm_error(r.code, r.collective, restored(r)), report_(std::move(r)) {}
  const failure_report& report() const noexcept { return report_; }

 private:
  static failure_info restored(const failure_report& r) {
    failure_info i = r.info;
    if (i.rank < 0) i.rank = r.rank;
    i.channel = r.channel;
    i.blamed = r.failed_rank;
    i.detail = (i.detail.empty() ? r.message : i.detail) + " (input restored)";
    return i;
  }
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

// Internal: the parts of schedule() and complete() weft's batch schedulers share: the checks of the
// engine's report (finished ids and decoded tokens against the batch in flight, all three schedulers),
// made before anything changes, and the KV transaction frames of prefill_first_scheduler and
// layered_prefill_scheduler (iteration_scheduler keeps its own inline: measured ~4% faster there).
#pragma once

#include <weft/core/error.hpp>
#include <weft/sched/batch.hpp>
#include <weft/sched/request.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace weft::sched::detail {

/// Checks complete()'s arguments against the non-empty batch b and marks is_done[k] (resized to the
/// entries) for every entry k whose request is listed in `finished`; returns how many were marked.
/// `not_emitting_note` is appended to the message for a finished request whose entry emitted no token;
/// carries_ids(k) says whether entry k's request carries token ids (then an emitting entry that does
/// not finish needs its decoded token). Throws weft::error naming the request and the rule, changing
/// nothing but is_done. O(E * F) (E entries, F finished).
template <class CarriesIds>
std::size_t check_completion(const batch& b, std::span<const request_id> finished, std::span<const token_id> decoded,
                             std::vector<char>& is_done, const char* where, const char* not_emitting_note,
                             CarriesIds&& carries_ids) {
  const std::size_t n = b.entries.size();
  expects(decoded.empty() || decoded.size() == n, errc::invalid_argument, where, "the last batch has ", n,
          " entries but ", decoded.size(), " decoded tokens were given; give one per entry, in entry order");
  // One pass finds every finished id among the entries (F is small: a linear find per entry).
  is_done.assign(n, 0);
  std::size_t found = 0;
  for (std::size_t k = 0; k < n && !finished.empty(); ++k) {
    const batch_entry& e = b.entries[k];
    if (std::find(finished.begin(), finished.end(), e.id) == finished.end()) continue;
    expects(e.emits_token, errc::invalid_argument, where, "request ", e.id,
            " is listed as finished but its entry in the last batch emitted no token", not_emitting_note);
    is_done[k] = 1;
    ++found;
  }
  if (found != finished.size()) {
    for (std::size_t f = 0; f < finished.size(); ++f) {
      const request_id id = finished[f];
      expects(std::any_of(b.entries.begin(), b.entries.end(), [&](const batch_entry& e) { return e.id == id; }),
              errc::not_found, where, "request ", id, " is listed as finished but is not in the last batch");
      expects(std::find(finished.begin() + static_cast<std::ptrdiff_t>(f) + 1, finished.end(), id) == finished.end(),
              errc::invalid_argument, where, "request ", id, " is listed as finished twice");
    }
  }
  if (decoded.empty())
    for (std::size_t k = 0; k < n; ++k)
      expects(!b.entries[k].emits_token || is_done[k] || !carries_ids(k), errc::invalid_argument, where, "request ",
              b.entries[k].id, " carries token ids and emitted a token in the last batch: complete() needs ",
              "the decoded token of every entry (decoded is empty)");
  return found;
}

/// Runs body(begin) where begin() opens kv's transaction the first time it is called: committed when
/// body returns, rolled back (and the exception passed on) when it throws; a body that never calls
/// begin() leaves the KV manager untouched. O(1) plus body.
template <class KV, class Body>
void in_lazy_transaction(KV& kv, Body&& body) {
  bool open = false;
  auto begin = [&] {
    if (!open) kv.begin_transaction();
    open = true;
  };
  try {
    body(begin);
  } catch (...) {
    if (open) kv.rollback_transaction();
    throw;
  }
  if (open) kv.commit_transaction();
}

/// schedule()'s frame: body() runs inside kv's transaction, committed when it returns; when it
/// throws, the transaction is rolled back, undo() restores the scheduler's own state (it must not
/// throw) and the exception passes on. O(1) plus body (and undo).
template <class KV, class Body, class Undo>
void in_transaction(KV& kv, Body&& body, Undo&& undo) {
  kv.begin_transaction();
  try {
    body();
  } catch (...) {
    kv.rollback_transaction();
    undo();
    throw;
  }
  kv.commit_transaction();
}

/// complete()'s answer when no batch is in flight (n == 0 entries): true, after checking that nothing
/// was reported for it (weft::error(precondition) otherwise); false while a batch is in flight. O(1).
inline bool nothing_in_flight(std::size_t n, std::span<const request_id> finished, std::span<const token_id> decoded,
                              const char* where) {
  if (n != 0) return false;
  expects(finished.empty() && decoded.empty(), errc::precondition, where,
          "no batch is in flight (complete() was already called, or schedule() returned an empty batch)");
  return true;
}

}  // namespace weft::sched::detail

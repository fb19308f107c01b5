// Internal: complete()'s check of the engine's report (finished ids and decoded tokens against the
// batch in flight), made before anything changes, and a KV transaction frame for the scheduler's
// smaller calls (schedule() and complete() keep theirs inline: measured ~4% faster there).
#pragma once

#include <weft/core/error.hpp>
#include <weft/sched/batch.hpp>
#include <weft/sched/request.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace weft::sched::detail {

/// Where complete() found no decoded token for an entry.
inline constexpr std::size_t no_token = static_cast<std::size_t>(-1);

/// Checks complete()'s arguments against the non-empty batch b, before anything changes: marks
/// is_done[k] (resized to the entries) for every entry k whose request is listed in `finished`, and
/// sets token_at[k] to the index in `decoded` of entry k's token (no_token when none was given);
/// returns how many entries were marked done. The tokens are matched by request id, in any order (a
/// list in entry order is matched in one pass; another order sorts a copy of the ids). Every token
/// must belong to an entry of b that emitted one, at most one per request; `not_emitting_note` is
/// appended to the message for a finished request whose entry emitted no token; carries_ids(k) says
/// whether entry k's request carries token ids (then an emitting entry that does not finish needs its
/// token). Throws weft::error naming the request and the rule. O(E * F + D) in entry order, else
/// O(E * F + (D + E) log D) (E entries, F finished, D decoded).
template <class CarriesIds>
std::size_t check_completion(const batch& b, std::span<const request_id> finished,
                             std::span<const decoded_token> decoded, std::vector<char>& is_done,
                             std::vector<std::size_t>& token_at,
                             std::vector<std::pair<request_id, std::size_t>>& sorted, const char* where,
                             const char* not_emitting_note, CarriesIds&& carries_ids) {
  const std::size_t n = b.entries.size();
  // One pass finds every finished id among the entries (F is small: a linear find per entry, behind
  // a 64-bit filter of the finished ids' low bits that rejects most entries with one test).
  is_done.assign(n, 0);
  std::size_t found = 0;
  std::uint64_t filter = 0;
  for (const request_id id : finished) filter |= std::uint64_t{1} << (id.value() & 63);
  for (std::size_t k = 0; k < n && !finished.empty(); ++k) {
    const batch_entry& e = b.entries[k];
    if ((filter >> (e.id.value() & 63) & 1) == 0) continue;
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
  // The tokens, by id: the common list (one per emitting entry, in entry order) is matched and checked
  // in one pass; anything else takes the general path below, which also names what is wrong.
  token_at.resize(n);
  std::size_t j = 0;
  bool clean = true;
  for (std::size_t k = 0; k < n; ++k) {
    const batch_entry& e = b.entries[k];
    if (j < decoded.size() && decoded[j].id == e.id) {
      token_at[k] = j++;
      clean = clean && e.emits_token;
    } else {
      token_at[k] = no_token;
      clean = clean && (!e.emits_token || is_done[k] || !carries_ids(k));
    }
  }
  if (clean && j == decoded.size()) return found;
  if (j != decoded.size()) {
    // Another order (or a stray token): match through the sorted ids, naming what does not fit.
    sorted.clear();
    for (std::size_t d = 0; d < decoded.size(); ++d) sorted.emplace_back(decoded[d].id, d);
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t d = 1; d < sorted.size(); ++d)
      expects(sorted[d - 1].first != sorted[d].first, errc::invalid_argument, where, "request ", sorted[d].first,
              " is given two decoded tokens; give one per request");
    std::size_t matched = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const auto it = std::lower_bound(sorted.begin(), sorted.end(), std::pair(b.entries[k].id, std::size_t{0}));
      token_at[k] = no_token;
      if (it == sorted.end() || it->first != b.entries[k].id) continue;
      token_at[k] = it->second;
      ++matched;
    }
    if (matched != decoded.size())
      for (const decoded_token& t : decoded)
        expects(std::any_of(b.entries.begin(), b.entries.end(), [&](const batch_entry& e) { return e.id == t.id; }),
                errc::not_found, where, "request ", t.id,
                " is given a decoded token but is not in the last batch; each token must name its own request");
  }
  for (std::size_t k = 0; k < n; ++k) {
    const batch_entry& e = b.entries[k];
    expects(token_at[k] == no_token || e.emits_token, errc::invalid_argument, where, "request ", e.id,
            " is given a decoded token but its entry in the last batch emitted none", not_emitting_note);
    expects(!e.emits_token || is_done[k] || token_at[k] != no_token || !carries_ids(k), errc::invalid_argument, where,
            "request ", e.id, " carries token ids and emitted a token in the last batch: complete() needs its ",
            "decoded token ({id, token} in decoded)");
  }
  return found;
}

/// A call's frame: body() runs inside kv's transaction, committed when it returns; when it throws, the
/// transaction is rolled back, undo() restores the scheduler's own state (it must not throw) and the
/// exception passes on. O(1) plus body (and undo).
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

}  // namespace weft::sched::detail

// Internal: the undo log of a batch scheduler's own state (its running set and waiting lists), kept
// by schedule() beside the KV manager's transaction so a failed call changes nothing (the undo log of
// a database transaction; Gray & Reuter, Transaction Processing, ch. 9-10), under every phase.
#pragma once

#include <cstddef>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

namespace weft::sched::detail {

/// An append-only log of Entry records (Entry has members `kind` and `index`), rolled back newest
/// first. Entries and their buffers are reused from call to call, so a steady-state schedule()
/// allocates nothing for its log. Not thread-safe. reserve amortised O(1) per entry; push O(1);
/// roll_back O(entries) plus the undo calls.
template <class Entry>
class undo_log {
 public:
  using kind_type = decltype(Entry::kind);

  /// Makes the next n push() calls non-throwing.
  void reserve(std::size_t n) {
    while (entries_.size() < count_ + n) entries_.emplace_back();
  }
  /// The entry the next push() logs: fill in what may throw (a saved copy) here, before push(), so
  /// a throw leaves the log as it was. reserve() first.
  Entry& next() noexcept { return entries_[count_]; }
  /// Logs the next entry as (kind, index), keeping what next() filled in. reserve() first.
  Entry& push(kind_type kind, std::size_t index) noexcept {
    Entry& e = entries_[count_++];
    e.kind = kind;
    e.index = index;
    return e;
  }
  /// Forgets the newest entry (its change turned out not to happen).
  void pop() noexcept { --count_; }
  /// Calls undo(entry) for every logged entry, newest first, then empties the log.
  template <class Undo>
  void roll_back(Undo&& undo) noexcept {
    for (std::size_t u = count_; u-- > 0;) undo(entries_[u]);
    count_ = 0;
  }
  /// Empties the log (the call succeeded: its changes stay).
  void clear() noexcept { count_ = 0; }
  std::size_t size() const noexcept { return count_; }

 private:
  std::vector<Entry> entries_;
  std::size_t count_ = 0;  // entries_[0, count_) are logged
};

/// The undo of the changes to the waiting lines the scheduler logs: an insert into a list at
/// `index`, an erase from it (the entry saved the element), and a request taken from the front line or
/// popped from the queue (both go back to the front line, so the next schedule() admits it first).
template <class T>
void undo_insert(std::vector<T>& list, std::size_t index) noexcept {
  list.erase(list.begin() + static_cast<std::ptrdiff_t>(index));
}
template <class T>
void undo_erase(std::vector<T>& list, std::size_t index, std::optional<T>& saved) noexcept {
  list.insert(list.begin() + static_cast<std::ptrdiff_t>(index), std::move(*saved));
}
template <class Request>
void undo_take(std::vector<Request>& front, Request& taken) noexcept {
  front.insert(front.begin(), std::move(taken));
}

}  // namespace weft::sched::detail

// weft::kv::detail::undo_journal: the record of every change a transaction made to a block pool, a
// prefix cache's keys and a kv_manager's requests, so rollback can undo them exactly, newest first
// (the undo log of a database transaction; Gray & Reuter, Transaction Processing, ch. 9-10).
#pragma once

#include <weft/kv/types.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace weft::kv::detail {

/// Makes room for n more elements with geometric growth (a plain reserve(size() + n) per push would
/// reallocate on every call), so the next n push_backs cannot throw. O(size) when it grows.
template <class T>
void reserve_more(std::vector<T>& v, std::size_t n) {
  if (v.capacity() - v.size() >= n) return;
  v.reserve(std::max(v.capacity() * 2, v.size() + n));
}

/// What one undo record undoes. Rolled back newest first, each record finds the structure exactly as
/// the change left it, which is what makes the free-list positions restorable.
enum class undo_op : std::uint8_t {
  pool_popped,    ///< block left the front of the free list with ref 1 (allocate): relink at the front
  pool_taken,     ///< block left the free list from after `aux` with ref 1 (take): relink after aux
  pool_linked,    ///< block's ref dropped 1 -> 0 and it joined the free list: unlink, ref 1
  pool_ref_down,  ///< block's ref dropped n -> n-1 > 0
  pool_ref_up,    ///< block's ref rose n -> n+1
  pool_moved,     ///< free block moved from after `aux` to the back (touch_free)
  key_dropped,    ///< block lost `key` (evicted): give it back
  key_added,      ///< block got `key` (commit): take it away
  owner,          ///< the journal owner's own record number `aux` (a kv_manager request change)
};

/// One change. `target` tells the owner which structure it belongs to (device or host tier, or the
/// owner itself).
struct undo_record {
  undo_op op = undo_op::owner;
  std::uint8_t target = 0;
  std::uint32_t block = 0;
  std::uint32_t aux = 0;
  block_key key{};
};

/// An append-only list of undo records. Not thread-safe. push O(1) amortised.
class undo_journal {
 public:
  void push(undo_op op, std::uint8_t target, std::uint32_t block, std::uint32_t aux = 0, block_key key = {}) {
    records_.push_back(undo_record{op, target, block, aux, key});
  }
  /// Makes room for n more records, so the next n pushes cannot throw.
  void reserve_more(std::size_t n) { detail::reserve_more(records_, n); }
  std::size_t size() const noexcept { return records_.size(); }
  const undo_record& operator[](std::size_t i) const noexcept { return records_[i]; }
  void truncate(std::size_t n) noexcept { records_.resize(n < records_.size() ? n : records_.size()); }
  void clear() noexcept { records_.clear(); }

 private:
  std::vector<undo_record> records_;
};

}  // namespace weft::kv::detail

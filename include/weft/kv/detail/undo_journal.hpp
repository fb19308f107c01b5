// weft::kv::detail::undo_journal: the record of every change a transaction made to a block pool, a
// prefix cache's keys and a kv_manager's requests, so rollback can undo them exactly, newest first
// (the undo log of a database transaction; Gray & Reuter, Transaction Processing, ch. 9-10).
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/detail/reserve_more.hpp>
#include <weft/kv/types.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace weft::kv::detail {

/// What one undo record undoes. Rolled back newest first, each record finds the structure exactly as
/// the change left it, which is what makes the free-list positions restorable.
enum class undo_op : std::uint8_t {
  pool_popped,        ///< block left the front of the free list with ref 1 (allocate): relink at the front
  pool_taken,         ///< block left the free list from after `aux` with ref 1 (take): relink after aux
  pool_linked,        ///< block's ref dropped 1 -> 0 and it joined the free list: unlink, ref 1
  pool_ref_down,      ///< block's ref dropped n -> n-1 > 0
  pool_ref_up,        ///< block's ref rose n -> n+1
  pool_moved,         ///< free block moved from after `aux` to the back (touch_free)
  key_dropped,        ///< block lost `key` (evicted): give it back
  key_added,          ///< block got `key` (commit): take it away
  verify_saved,       ///< block's verify-on-hit contents were overwritten: tokens saved at `aux`, print in key.lo
  collision_counted,  ///< a verify-on-hit mismatch was counted: uncount it
  owner,              ///< the journal owner's own record number `aux` (a kv_manager request change)
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

/// An append-only list of undo records, and the token contents that verify_saved records point
/// at. Not thread-safe. push O(1) amortised; save_verify_state O(tokens) amortised.
class undo_journal {
 public:
  void push(undo_op op, std::uint8_t target, std::uint32_t block, std::uint32_t aux = 0, block_key key = {}) {
    records_.push_back(undo_record{op, target, block, aux, key});
  }
  /// Pushes a verify_saved record for `block` holding a copy of `tokens` and `print`. Changes
  /// nothing when it throws (bad_alloc, or more saved tokens than 32-bit offsets reach).
  void save_verify_state(std::uint8_t target, std::uint32_t block, std::span<const token_id> tokens,
                         std::uint64_t print) {
    const auto at = checked_cast<std::uint32_t>(saved_.size(), "weft::kv::detail::undo_journal");
    reserve_more(1);
    saved_.insert(saved_.end(), tokens.begin(), tokens.end());
    records_.push_back(undo_record{undo_op::verify_saved, target, block, at, block_key{0, print}});
  }
  /// The n tokens a verify_saved record saved at offset `at`. Valid until the next change.
  std::span<const token_id> saved_tokens(std::uint32_t at, std::size_t n) const noexcept {
    return std::span<const token_id>(saved_).subspan(at, n);
  }
  /// Forgets the saved tokens from offset `at` on (their record has been undone). O(1).
  void drop_saved_tokens_from(std::uint32_t at) noexcept { saved_.resize(std::min<std::size_t>(at, saved_.size())); }
  /// Makes room for n more records, so the next n pushes cannot throw.
  void reserve_more(std::size_t n) { weft::detail::reserve_more(records_, n); }
  std::size_t size() const noexcept { return records_.size(); }
  const undo_record& operator[](std::size_t i) const noexcept { return records_[i]; }
  void truncate(std::size_t n) noexcept { records_.resize(n < records_.size() ? n : records_.size()); }
  void clear() noexcept {
    records_.clear();
    saved_.clear();
  }

 private:
  std::vector<undo_record> records_;
  std::vector<token_id> saved_;  // tokens of verify_saved records, in push order
};

}  // namespace weft::kv::detail

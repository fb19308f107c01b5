// weft::kv::block_pool: a fixed number of KV blocks with reference counts and an O(1) intrusive,
// doubly linked free list (the allocator of PagedAttention, Kwon et al. SOSP 2023, section 4.2; the
// doubly linked queue lets a prefix cache revive a freed block from the middle, as vLLM v1 does).
#pragma once

#include <weft/core/detail/reserve_more.hpp>
#include <weft/core/error.hpp>
#include <weft/kv/detail/undo_journal.hpp>
#include <weft/kv/types.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace weft::kv {

/// Where a block goes when its last reference is released: front = reused first (it holds nothing
/// worth keeping), back = reused last (least recently used order; cached content survives longest).
enum class free_position : std::uint8_t { front, back };

/// A pool of `capacity` block ids. Block 0 is the null block: never allocated, never freed, usable
/// as padding in block tables (sliding-window attention). Every other block is either free (ref
/// count 0, on the free list) or in use (ref count >= 1, not on the free list).
///
/// Allocation pops the front of the free list; release pushes to the front or the back. take()
/// removes a particular free block (a prefix-cache hit on freed content). All O(1).
///
/// Not thread-safe: one owner (the scheduler thread) calls it. Bad ids throw weft::error and leave
/// the pool unchanged. Memory: 12 bytes of bookkeeping per block.
///
/// With a journal attached (attach_journal, used by kv_manager's transactions) every change is
/// recorded before it is made, and undo() reverses a record exactly, free-list position included.
class block_pool {
 public:
  static constexpr block_id null_block{0};

  /// A pool of `capacity` ids, including the null block. capacity must be in [2, 2^32 - 2].
  explicit block_pool(std::size_t capacity) {
    expects(capacity >= 2 && capacity < std::numeric_limits<std::uint32_t>::max() - 1, errc::invalid_argument,
            "weft::kv::block_pool::block_pool", "capacity must be in [2, 2^32-2] (block 0 is the null block), got ",
            capacity);
    const auto n = static_cast<std::uint32_t>(capacity);
    nodes_.resize(std::size_t{n} + 1);
    sentinel_ = n;
    // Free list in id order 1..n-1, so a fresh pool hands out contiguous runs (large copy units).
    nodes_[sentinel_] = {sentinel_, sentinel_, 0};
    nodes_[0] = {0, 0, 1};  // the null block: permanently "in use", never linked
    for (std::uint32_t i = 1; i < n; ++i) link_before(i, sentinel_);
    free_count_ = n - 1;
  }

  /// Total ids including the null block. O(1).
  std::size_t capacity() const noexcept { return sentinel_; }
  /// Blocks that can ever be allocated (capacity - 1). O(1).
  std::size_t usable_blocks() const noexcept { return sentinel_ - 1; }
  /// Blocks on the free list. O(1).
  std::size_t free_blocks() const noexcept { return free_count_; }
  /// Blocks with a reference count >= 1, the null block excluded. O(1).
  std::size_t used_blocks() const noexcept { return usable_blocks() - free_count_; }

  /// One block with reference count 1, or nullopt when the pool is exhausted. O(1). Throws only
  /// when a journal is attached and recording fails (bad_alloc), changing nothing.
  std::optional<block_id> allocate() {
    if (free_count_ == 0) return std::nullopt;
    const std::uint32_t b = nodes_[sentinel_].next;
    record(detail::undo_op::pool_popped, b);
    unlink(b);
    nodes_[b].ref = 1;
    return block_id(b);
  }

  /// Appends n blocks (each with reference count 1) to out, or appends nothing and returns false
  /// when fewer than n are free. O(n).
  bool allocate(std::size_t n, std::vector<block_id>& out) {
    if (n > free_count_) return false;
    weft::detail::reserve_more(out, n);
    for (std::size_t i = 0; i < n; ++i) out.push_back(*allocate());
    return true;
  }

  /// Hints the CPU to fetch block b's bookkeeping (its reference count and links). O(1).
  void prefetch(block_id b) const noexcept {
#if defined(__GNUC__) || defined(__clang__)
    if (b.value() < nodes_.size()) __builtin_prefetch(&nodes_[b.value()]);
#else
    (void)b;
#endif
  }

  /// The block allocate() would return next (the eviction victim), without taking it; invalid()
  /// when none is free. O(1).
  block_id peek_free() const noexcept {
    return free_count_ == 0 ? block_id::invalid() : block_id(nodes_[sentinel_].next);
  }

  /// Adds a reference to a block in use (sharing it with another sequence). O(1).
  void add_ref(block_id b) {
    check_in_use(b, "weft::kv::block_pool::add_ref");
    expects(nodes_[b.value()].ref < std::numeric_limits<std::uint32_t>::max(), errc::capacity,
            "weft::kv::block_pool::add_ref", "reference count of block ", b, " would overflow");
    record(detail::undo_op::pool_ref_up, b.value());
    ++nodes_[b.value()].ref;
  }

  /// Drops one reference; at zero the block returns to the free list at `where`. Returns true when
  /// the block became free. Throws (pool unchanged) for the null block, an id out of range, or a
  /// block that is already free (a double free or an id never allocated). O(1).
  bool release(block_id b, free_position where = free_position::back) {
    check_in_use(b, "weft::kv::block_pool::release");
    node& n = nodes_[b.value()];
    record(n.ref > 1 ? detail::undo_op::pool_ref_down : detail::undo_op::pool_linked, b.value());
    if (--n.ref != 0) return false;
    link_before(b.value(), where == free_position::back ? sentinel_ : nodes_[sentinel_].next);
    ++free_count_;
    return true;
  }

  /// Takes a specific free block off the free list with reference count 1 (a prefix-cache hit on a
  /// freed block). Throws when b is not free. O(1).
  void take(block_id b) {
    check_range(b, "weft::kv::block_pool::take");
    expects(nodes_[b.value()].ref == 0, errc::precondition, "weft::kv::block_pool::take", "block ", b,
            " is not free (reference count ", nodes_[b.value()].ref, ")");
    record(detail::undo_op::pool_taken, b.value(), nodes_[b.value()].prev);
    unlink(b.value());
    nodes_[b.value()].ref = 1;
  }

  /// Moves a free block to the back of the free list (most recently used). Throws when not free. O(1).
  void touch_free(block_id b) {
    check_range(b, "weft::kv::block_pool::touch_free");
    expects(nodes_[b.value()].ref == 0, errc::precondition, "weft::kv::block_pool::touch_free", "block ", b,
            " is not free");
    record(detail::undo_op::pool_moved, b.value(), nodes_[b.value()].prev);
    unlink(b.value());
    link_before(b.value(), sentinel_);
    ++free_count_;
  }

  /// Reference count of b (0 = free). The null block reports 0. Throws when out of range. O(1).
  std::uint32_t ref_count(block_id b) const {
    check_range_or_null(b, "weft::kv::block_pool::ref_count");
    return b == null_block ? 0 : nodes_[b.value()].ref;
  }

  /// True when b is on the free list. O(1).
  bool is_free(block_id b) const {
    check_range_or_null(b, "weft::kv::block_pool::is_free");
    return b != null_block && nodes_[b.value()].ref == 0;
  }

  /// Calls f(block_id) for each free block, front (next victim) to back. O(free blocks).
  template <class F>
  void for_each_free(F&& f) const {
    for (std::uint32_t i = nodes_[sentinel_].next; i != sentinel_; i = nodes_[i].next) f(block_id(i));
  }

  /// Bytes of bookkeeping per block (for capacity planning). O(1).
  static constexpr std::size_t bytes_per_block() noexcept { return sizeof(std::uint32_t) * 3; }

  /// Records every later change into `journal` under `target` (nullptr stops recording). The
  /// journal must outlive the attachment. O(1).
  void attach_journal(detail::undo_journal* journal, std::uint8_t target) noexcept {
    journal_ = journal;
    journal_target_ = target;
  }

  /// Reverses one record this pool made. Records must be undone newest first, each exactly once;
  /// then every reference count and the free-list order are as before the change. O(1).
  void undo(const detail::undo_record& r) noexcept {
    const std::uint32_t b = r.block;
    switch (r.op) {
      case detail::undo_op::pool_popped:
        link_before(b, nodes_[sentinel_].next);
        nodes_[b].ref = 0;
        ++free_count_;
        break;
      case detail::undo_op::pool_taken:
        link_before(b, nodes_[r.aux].next);
        nodes_[b].ref = 0;
        ++free_count_;
        break;
      case detail::undo_op::pool_linked:
        unlink(b);
        nodes_[b].ref = 1;
        break;
      case detail::undo_op::pool_ref_down:
        ++nodes_[b].ref;
        break;
      case detail::undo_op::pool_ref_up:
        --nodes_[b].ref;
        break;
      case detail::undo_op::pool_moved:
        unlink(b);
        link_before(b, nodes_[r.aux].next);
        ++free_count_;
        break;
      default:
        break;
    }
  }

 private:
  // Invariants: node.ref == 0 exactly when the node is linked into the circular list through
  // sentinel_; free_count_ counts the linked nodes; nodes_[0] (null) has ref 1 and is never linked.
  struct node {
    std::uint32_t prev, next, ref;
  };

  void record(detail::undo_op op, std::uint32_t b, std::uint32_t aux = 0) {
    if (journal_ != nullptr) [[unlikely]]
      journal_->push(op, journal_target_, b, aux);
  }
  void unlink(std::uint32_t i) noexcept {
    node& n = nodes_[i];
    nodes_[n.prev].next = n.next;
    nodes_[n.next].prev = n.prev;
    --free_count_;
  }
  // Inserts i before `at` (at == sentinel_ appends to the back). Caller adjusts free_count_ except
  // in the constructor, which sets it at the end.
  void link_before(std::uint32_t i, std::uint32_t at) noexcept {
    node& a = nodes_[at];
    nodes_[i].prev = a.prev;
    nodes_[i].next = at;
    nodes_[a.prev].next = i;
    a.prev = i;
  }
  void check_range(block_id b, const char* where) const {
    expects(b.valid() && b.value() < sentinel_ && b != null_block, errc::out_of_range, where, "block ", b,
            " is not a data block of this pool (valid ids are 1..", sentinel_ - 1, "; 0 is the null block)");
  }
  void check_range_or_null(block_id b, const char* where) const {
    expects(b.valid() && b.value() < sentinel_, errc::out_of_range, where, "block ", b,
            " is out of range (pool capacity ", sentinel_, ")");
  }
  void check_in_use(block_id b, const char* where) const {
    check_range(b, where);
    expects(nodes_[b.value()].ref != 0, errc::invalid_argument, where, "block ", b,
            " is free: it was never allocated or was already released (double free)");
  }

  std::vector<node> nodes_;
  std::uint32_t sentinel_ = 0;
  std::size_t free_count_ = 0;
  detail::undo_journal* journal_ = nullptr;
  std::uint8_t journal_target_ = 0;
};

}  // namespace weft::kv

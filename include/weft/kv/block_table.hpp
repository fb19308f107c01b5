// weft::kv::block_table: one sequence's logical-to-physical block map, the slot mapping attention
// kernels consume, and copy-on-write forking for parallel sampling and beam search (PagedAttention,
// Kwon et al. SOSP 2023, sections 4.3-4.4).
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/kv/concepts.hpp>
#include <weft/kv/types.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace weft::kv {

/// Outcome of block_table::append: whether the tokens fit, and the copy the engine must run before
/// writing them when they land in a block shared with another sequence (at most one per append:
/// only the partially filled last block can be shared and written).
struct append_result {
  bool fits = false;
  std::optional<block_copy> copy;
  explicit operator bool() const noexcept { return fits; }
};

/// Block ids of one sequence in logical order plus its token count. Blocks past the last token
/// are reserved room (ensure_room). The table holds one reference to each of its blocks in the
/// allocator it was filled from; release() gives them back. Move-only: a copy would hold the same
/// block ids without references of its own, so releasing both would hand a block to two sequences
/// (share blocks with fork(), which takes the references). Not thread-safe. Memory: 4 bytes per
/// block.
class block_table {
 public:
  /// block_size must be in [1, 2^31] (so every flat slot index fits an int64).
  explicit block_table(std::size_t block_size) : block_size_(block_size) {
    expects(block_size > 0 && block_size <= (std::size_t{1} << 31), errc::invalid_argument,
            "weft::kv::block_table::block_table", "block_size must be in [1, 2^31], got ", block_size);
  }
  block_table(const block_table&) = delete;
  block_table& operator=(const block_table&) = delete;
  block_table(block_table&& other) noexcept
      : blocks_(std::move(other.blocks_)), num_tokens_(other.num_tokens_), block_size_(other.block_size_) {
    other.num_tokens_ = 0;
  }
  block_table& operator=(block_table&& other) noexcept {
    blocks_ = std::move(other.blocks_);
    num_tokens_ = other.num_tokens_;
    block_size_ = other.block_size_;
    other.blocks_.clear();
    other.num_tokens_ = 0;
    return *this;
  }

  std::size_t block_size() const noexcept { return block_size_; }
  std::size_t num_tokens() const noexcept { return num_tokens_; }
  std::size_t num_blocks() const noexcept { return blocks_.size(); }
  /// Tokens the current blocks can hold. O(1).
  std::size_t capacity_tokens() const noexcept { return blocks_.size() * block_size_; }
  /// The block ids, in order: what the engine copies into its kernel's block-table row. O(1).
  std::span<const block_id> blocks() const noexcept { return blocks_; }

  /// New blocks needed so `more` further tokens fit (copy-on-write not counted). Throws
  /// weft::error(out_of_range) when num_tokens() + more overflows. O(1).
  std::size_t blocks_needed(std::size_t more) const {
    const std::size_t total = checked_add(num_tokens_, more, "weft::kv::block_table::blocks_needed");
    const std::size_t want = total / block_size_ + (total % block_size_ != 0 ? 1 : 0);
    return want > blocks_.size() ? want - blocks_.size() : 0;
  }

  /// Whether appending `more` tokens needs a copy-on-write of the partial last block. O(1).
  template <block_allocator A>
  bool needs_copy(const A& alloc, std::size_t more) const {
    if (more == 0 || num_tokens_ % block_size_ == 0) return false;
    return alloc.ref_count(blocks_[num_tokens_ / block_size_]) > 1;
  }

  /// Where token i lives. Throws when i >= num_tokens(). O(1).
  slot slot_of(std::size_t i) const {
    expects(i < num_tokens_, errc::out_of_range, "weft::kv::block_table::slot_of", "token ", i,
            " is past the sequence's ", num_tokens_, " tokens");
    return slot{blocks_[i / block_size_], static_cast<std::uint32_t>(i % block_size_)};
  }

  /// Writes the flat slot index (block * block_size + offset) of tokens [first, first + out.size())
  /// into out: vLLM's slot_mapping for the tokens being computed this step. O(out.size()).
  void slot_mapping(std::size_t first, std::span<std::int64_t> out) const {
    expects(first <= capacity_tokens() && out.size() <= capacity_tokens() - first, errc::out_of_range,
            "weft::kv::block_table::slot_mapping", out.size(), " tokens from token ", first,
            " exceed the table's room of ", capacity_tokens(), " tokens");
    for (std::size_t k = 0; k < out.size(); ++k) {
      const std::size_t i = first + k;
      out[k] = static_cast<std::int64_t>(blocks_[i / block_size_].value()) * static_cast<std::int64_t>(block_size_) +
               static_cast<std::int64_t>(i % block_size_);
    }
  }

  /// Allocates blocks so `more` further tokens fit without allocating; all-or-nothing. Throws (table
  /// unchanged) when num_tokens() + more overflows. O(new blocks).
  template <block_allocator A>
  bool ensure_room(A& alloc, std::size_t more) {
    return alloc.allocate(blocks_needed(more), blocks_);
  }

  /// Appends n tokens: allocates the blocks they need plus, when they start in a partial block
  /// shared with another sequence, a private copy of it (returned as a copy order). All-or-nothing:
  /// when the blocks are not available, returns fits == false and changes nothing; throws (nothing
  /// changed) when num_tokens() + n overflows. O(new blocks).
  template <block_allocator A>
  append_result append(A& alloc, std::size_t n) {
    const std::size_t grow = blocks_needed(n);  // checks the token count first
    return append_checked(alloc, n, grow, needs_copy(alloc, n));
  }

  /// append() for an owner that knows whether the partial last block is shared: copy_tail must equal
  /// needs_copy(alloc, n) (a table that was never forked never needs a copy, and the owner skips
  /// reading the block's reference count). O(new blocks).
  template <block_allocator A>
  append_result append(A& alloc, std::size_t n, bool copy_tail) {
    const std::size_t grow = blocks_needed(n);
    return append_checked(alloc, n, grow, copy_tail);
  }

 private:
  template <block_allocator A>
  append_result append_checked(A& alloc, std::size_t n, std::size_t grow, bool cow) {
    if (!alloc.allocate(grow + (cow ? 1 : 0), blocks_)) return {};
    append_result r{true, std::nullopt};
    if (cow) {
      const std::size_t w = num_tokens_ / block_size_;
      const block_id dst = blocks_.back();
      blocks_.pop_back();
      r.copy = block_copy{blocks_[w], dst};
      alloc.release(blocks_[w]);  // shared: only drops this sequence's reference
      blocks_[w] = dst;
    }
    num_tokens_ += n;
    return r;
  }

 public:
  /// Appends blocks the caller already holds a reference to (prefix-cache hits, fresh blocks) as
  /// room at the end of the table. O(blocks).
  void adopt(std::span<const block_id> blocks) { blocks_.insert(blocks_.end(), blocks.begin(), blocks.end()); }

  /// Marks tokens as written, within the room the table already has. Throws when it would exceed
  /// capacity_tokens(). O(1).
  void advance(std::size_t n) {
    expects(n <= capacity_tokens() - num_tokens_, errc::out_of_range, "weft::kv::block_table::advance", "advancing by ",
            n, " tokens exceeds the room of ", capacity_tokens() - num_tokens_, " tokens; allocate first");
    num_tokens_ += n;
  }

  /// A table sharing this one's blocks that hold tokens (one more reference each; nothing is
  /// allocated). Reserved empty blocks are not shared. O(blocks).
  template <block_allocator A>
  block_table fork(A& alloc) const {
    block_table child(block_size_);
    const std::size_t used = (num_tokens_ + block_size_ - 1) / block_size_;
    child.blocks_.assign(blocks_.begin(), blocks_.begin() + static_cast<std::ptrdiff_t>(used));
    for (const block_id b : child.blocks_) alloc.add_ref(b);
    child.num_tokens_ = num_tokens_;
    return child;
  }

  /// Keeps the first num_tokens tokens: releases the blocks past the one holding the last of them
  /// (tail first) and forgets the rest (rejected speculative tokens, KV that was never computed).
  /// Throws (table unchanged) when num_tokens > num_tokens(). O(released blocks).
  template <block_allocator A>
  void truncate(A& alloc, std::size_t num_tokens) {
    expects(num_tokens <= num_tokens_, errc::out_of_range, "weft::kv::block_table::truncate", "cannot keep ",
            num_tokens, " tokens of a table holding ", num_tokens_);
    const std::size_t keep = num_tokens / block_size_ + (num_tokens % block_size_ != 0 ? 1 : 0);
    for (std::size_t i = blocks_.size(); i-- > keep;) alloc.release(blocks_[i]);
    blocks_.resize(keep);
    num_tokens_ = num_tokens;
  }

  /// Forgets blocks past the first num_blocks and sets the token count, releasing nothing: for an
  /// owner that restores an earlier shape after undoing the references itself. Throws (unchanged)
  /// when num_blocks exceeds num_blocks() or num_tokens does not fit them. O(forgotten blocks).
  void truncate_without_release(std::size_t num_blocks, std::size_t num_tokens) {
    expects(num_blocks <= blocks_.size() && num_tokens / block_size_ <= num_blocks &&
                (num_tokens / block_size_ < num_blocks || num_tokens % block_size_ == 0),
            errc::out_of_range, "weft::kv::block_table::truncate_without_release", "cannot shrink a table of ",
            blocks_.size(), " blocks to ", num_blocks, " blocks holding ", num_tokens, " tokens");
    blocks_.resize(num_blocks);
    num_tokens_ = num_tokens;
  }

  /// Replaces the block list and token count without touching any reference: for an owner that
  /// restores a table it saved (undoing its own changes). O(1).
  void restore_without_refs(std::vector<block_id>&& blocks, std::size_t num_tokens) noexcept {
    blocks_.swap(blocks);
    num_tokens_ = num_tokens;
  }

  /// Releases every block, tail first (so the tail of a cached prefix is evicted first), and
  /// empties the table. O(blocks).
  template <block_allocator A>
  void release(A& alloc) {
    for (std::size_t i = blocks_.size(); i-- > 0;) alloc.release(blocks_[i]);
    blocks_.clear();
    num_tokens_ = 0;
  }

  /// Forgets the blocks without releasing them (after the caller moved their references). O(1).
  void clear_without_release() noexcept {
    blocks_.clear();
    num_tokens_ = 0;
  }

 private:
  // Invariant: num_tokens_ <= blocks_.size() * block_size_.
  std::vector<block_id> blocks_;
  std::size_t num_tokens_ = 0;
  std::size_t block_size_;
};

}  // namespace weft::kv

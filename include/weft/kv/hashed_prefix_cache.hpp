// weft::kv::hashed_prefix_cache: a block pool whose full blocks are indexed by chained content key
// so later requests reuse their KV (vLLM v1 automatic prefix caching; SGLang/RadixAttention, Zheng
// et al. 2024, for the idea of keeping freed KV until memory is needed). Freed cached blocks stay on
// the free list in LRU order and are evicted only when allocation reaches them.
#pragma once

#include <weft/core/error.hpp>
#include <weft/kv/block_hasher.hpp>
#include <weft/kv/block_pool.hpp>
#include <weft/kv/concepts.hpp>
#include <weft/kv/detail/key_map.hpp>
#include <weft/kv/detail/undo_journal.hpp>
#include <weft/kv/types.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace weft::kv {

/// Owns a block_pool (so no allocation can bypass eviction and leave a stale key) and a map from
/// content key to the block holding that content.
///
/// Eviction order: a block is evicted when allocation pops it from the front of the free list.
/// Released blocks with a key go to the back (least recently used leaves first); released blocks
/// without a key go to the front (they are worth nothing, so they are reused before any cached
/// one). Callers release a sequence's blocks tail first, so among one sequence's blocks the tail
/// (the least shareable part of a prefix) is evicted first.
///
/// Invariants: each key maps to exactly one block and that block's key is the key (keys unique per
/// content); a block on the free list with a key is reusable until evicted; an evicted block has no
/// key. Not thread-safe. Memory: block_pool's 12 bytes + 8 (key) + ~16-32 (index) per block.
template <block_hasher Hasher = chained_block_hasher>
class hashed_prefix_cache {
 public:
  using hasher_type = Hasher;

  /// A pool of `capacity` blocks (block 0 is the null block) of block_size tokens each.
  hashed_prefix_cache(std::size_t capacity, std::size_t block_size, Hasher hasher = Hasher{})
      : pool_(capacity), index_(capacity), keys_(capacity, 0), has_key_(capacity, 0), hasher_(hasher) {
    expects(block_size > 0 && block_size <= (1u << 20), errc::invalid_argument,
            "weft::kv::hashed_prefix_cache::hashed_prefix_cache", "block_size must be in [1, 2^20], got ", block_size);
    block_size_ = block_size;
  }

  std::size_t block_size() const noexcept { return block_size_; }
  const block_pool& pool() const noexcept { return pool_; }
  const Hasher& hasher() const noexcept { return hasher_; }
  std::size_t free_blocks() const noexcept { return pool_.free_blocks(); }
  std::size_t used_blocks() const noexcept { return pool_.used_blocks(); }
  /// Blocks that currently carry a key (in use or free-but-cached). O(1).
  std::size_t cached_blocks() const noexcept { return index_.size(); }
  /// Cached blocks evicted so far (their key was dropped to reuse the block). O(1).
  std::uint64_t evictions() const noexcept { return evictions_; }

  /// Appends the content keys of tokens' full blocks beyond keys.size(); see extend_block_keys.
  void extend_keys(std::span<const token_id> tokens, const key_options& options, std::vector<block_key>& keys) const {
    extend_block_keys(tokens, block_size_, options, keys, hasher_);
  }

  /// The block caching `key`, or nullopt. Changes nothing. O(1) expected.
  std::optional<block_id> find(block_key key) const noexcept {
    const std::uint32_t b = index_.find(key);
    if (b == detail::key_map::npos) return std::nullopt;
    return block_id(b);
  }

  /// Number of leading keys that are cached; appends their blocks to `hits` when given. Changes
  /// nothing (no reference is taken). O(matched) expected.
  std::size_t match(std::span<const block_key> keys, std::vector<block_id>* hits = nullptr) const {
    std::size_t n = 0;
    for (const block_key k : keys) {
      const std::uint32_t b = index_.find(k);
      if (b == detail::key_map::npos) break;
      if (hits) hits->push_back(block_id(b));
      ++n;
    }
    return n;
  }

  /// Takes a reference to a cached block found by match(): revives it from the free list when free.
  /// Throws when b carries no key. O(1).
  void acquire(block_id b) {
    check_id(b, "weft::kv::hashed_prefix_cache::acquire");
    expects(has_key_[b.value()] != 0, errc::precondition, "weft::kv::hashed_prefix_cache::acquire", "block ", b,
            " is not cached");
    if (pool_.is_free(b))
      pool_.take(b);
    else
      pool_.add_ref(b);
  }

  /// Appends n fresh blocks (reference count 1, no key) to out, evicting cached content from the
  /// front of the free list; or appends nothing and returns false when fewer than n are free. O(n).
  bool allocate(std::size_t n, std::vector<block_id>& out) {
    if (n > pool_.free_blocks()) return false;
    detail::reserve_more(out, n);  // geometric: a table growing block by block must not copy itself each time
    for (std::size_t i = 0; i < n; ++i) {
      const block_id b = *pool_.allocate();
      if (has_key_[b.value()]) drop_key(b);
      out.push_back(b);
    }
    return true;
  }

  /// Records that in-use block b now holds full content with key `key`. Returns false (and leaves
  /// b uncached) when another block already caches that key or b already has a key. O(1) expected.
  bool commit(block_id b, block_key key) {
    check_id(b, "weft::kv::hashed_prefix_cache::commit");
    expects(!pool_.is_free(b), errc::invalid_argument, "weft::kv::hashed_prefix_cache::commit", "block ", b,
            " is free; only a block in use can be filled and cached");
    if (has_key_[b.value()]) return false;
    if (index_.find(key) != detail::key_map::npos) return false;
    if (journal_ != nullptr) journal_->push(detail::undo_op::key_added, journal_target_, b.value(), 0, key);
    index_.insert(key, b.value());
    keys_[b.value()] = key;
    has_key_[b.value()] = 1;
    return true;
  }

  /// Adds a reference to an in-use block (copy-on-write sharing). O(1).
  void add_ref(block_id b) { pool_.add_ref(b); }

  /// Drops a reference; a block that becomes free keeps its key (reusable until evicted) and goes
  /// to the back of the free list, an uncached one to the front. Returns whether it became free. O(1).
  bool release(block_id b) {
    check_id(b, "weft::kv::hashed_prefix_cache::release");
    return pool_.release(b, has_key_[b.value()] ? free_position::back : free_position::front);
  }

  std::uint32_t ref_count(block_id b) const { return pool_.ref_count(b); }
  bool is_free(block_id b) const { return pool_.is_free(b); }

  /// The key block b caches, or nullopt. O(1).
  std::optional<block_key> key_of(block_id b) const {
    check_id(b, "weft::kv::hashed_prefix_cache::key_of");
    if (!has_key_[b.value()]) return std::nullopt;
    return keys_[b.value()];
  }

  /// Drops every key. Returns false and changes nothing while any block is in use (their holders
  /// still rely on the content). O(capacity).
  bool reset() {
    if (pool_.used_blocks() != 0) return false;
    index_.clear();
    for (auto& h : has_key_) h = 0;
    return true;
  }

  /// Records every later change (pool and keys) into `journal` under `target`; nullptr stops
  /// recording. Used by kv_manager's transactions. O(1).
  void attach_journal(detail::undo_journal* journal, std::uint8_t target) noexcept {
    journal_ = journal;
    journal_target_ = target;
    pool_.attach_journal(journal, target);
  }

  /// Reverses one record of this cache or its pool (newest first, each once). O(1) expected.
  void undo(const detail::undo_record& r) {
    if (r.op == detail::undo_op::key_dropped) {
      index_.insert(r.key, r.block);
      keys_[r.block] = r.key;
      has_key_[r.block] = 1;
      --evictions_;
    } else if (r.op == detail::undo_op::key_added) {
      index_.erase(r.key);
      has_key_[r.block] = 0;
    } else {
      pool_.undo(r);
    }
  }

  /// Bookkeeping bytes per block: pool + key + flag + index slots. O(1).
  std::size_t bytes_per_block() const noexcept {
    return block_pool::bytes_per_block() + sizeof(block_key) + 1 +
           (index_.table_size() * 16 + pool_.capacity() - 1) / pool_.capacity();
  }

 private:
  void drop_key(block_id b) {
    if (journal_ != nullptr)
      journal_->push(detail::undo_op::key_dropped, journal_target_, b.value(), 0, keys_[b.value()]);
    index_.erase(keys_[b.value()]);
    has_key_[b.value()] = 0;
    ++evictions_;
  }
  void check_id(block_id b, const char* where) const {
    expects(b.valid() && b.value() < pool_.capacity() && b != block_pool::null_block, errc::out_of_range, where,
            "block ", b, " is not a data block of this pool (valid ids are 1..", pool_.capacity() - 1, ")");
  }

  block_pool pool_;
  detail::key_map index_;
  std::vector<block_key> keys_;  // keys_[b] valid when has_key_[b]
  std::vector<std::uint8_t> has_key_;
  Hasher hasher_;
  std::size_t block_size_ = 0;
  std::uint64_t evictions_ = 0;
  detail::undo_journal* journal_ = nullptr;  // kv_manager's transaction journal, while one is open
  std::uint8_t journal_target_ = 0;
};

}  // namespace weft::kv

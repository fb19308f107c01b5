// weft::kv::hashed_prefix_cache: a block pool whose full blocks are indexed by chained content key
// so later requests reuse their KV (vLLM v1 automatic prefix caching; SGLang/RadixAttention, Zheng
// et al. 2024, for the idea of keeping freed KV until memory is needed). Freed cached blocks stay on
// the free list in LRU order and are evicted only when allocation reaches them. Optionally verifies
// every hit against the block's stored tokens and an independent fingerprint (verify on hit).
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/detail/reserve_more.hpp>
#include <weft/core/error.hpp>
#include <weft/kv/block_hasher.hpp>
#include <weft/kv/block_pool.hpp>
#include <weft/kv/concepts.hpp>
#include <weft/kv/detail/key_map.hpp>
#include <weft/kv/detail/undo_journal.hpp>
#include <weft/kv/types.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace weft::kv {

/// What a hashed_prefix_cache checks before it serves a block whose key matched.
enum class hit_check : std::uint8_t {
  key_only,        ///< the key's collision resistance is the whole guarantee (vLLM's behaviour)
  verify_content,  ///< also the block's tokens (exactly) and an independent fingerprint of its
                   ///< prefix and fields: a key collision is counted and treated as a miss
};

/// A sequence's full blocks as a hashed_prefix_cache indexes them: keys[i] is block i's content
/// key. For hit_check::verify_content, tokens is the sequence's tokens (at least up to the blocks
/// asked about) and prints[i] is block i's fingerprint from the cache's extend_prints(); both may
/// stay empty for hit_check::key_only.
struct block_chain {
  std::span<const block_key> keys;
  std::span<const token_id> tokens{};
  std::span<const block_key> prints{};
};

/// A verify-on-hit mismatch: a cached block whose key matched a query whose content differs.
struct key_collision {
  block_key key;            ///< the key both contents hash to
  block_id block;           ///< the cached block, which was not served
  std::size_t block_index;  ///< position of the queried block in its sequence
  bool tokens_differ;       ///< true: the block's own tokens differ; false: its prefix or a field does
};

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
/// key.
///
/// Verify on hit (hit_check::verify_content): each cached block also keeps its tokens and a 64-bit
/// fingerprint of its whole prefix and fields computed by a second hasher (fast_block_hasher with
/// its own random seed), and a key match is served only when both agree with the query. A key
/// collision therefore hands out foreign KV only if, at the same time, the block's tokens are
/// equal and the independent fingerprint collides too. A mismatch is counted (collisions()),
/// reported to the collision handler and treated as a miss.
///
/// Not thread-safe, const members included (extend_keys reuses one hasher state). Memory per
/// block: block_pool's 12 bytes + 16 (key) + 1 (flag) + 24 x table slots per block (32-64) for the
/// index; verify_content adds 4 x block_size (tokens) + 8 (fingerprint).
template <block_hasher Hasher = default_block_hasher>
class hashed_prefix_cache {
 public:
  using hasher_type = Hasher;

  /// A pool of `capacity` blocks (block 0 is the null block) of block_size tokens each, keyed by
  /// `hasher`. With hit_check::verify_content, hits are verified with `fingerprint` (a fresh random
  /// seed by default; pass the same one to caches that exchange blocks, such as a host tier).
  hashed_prefix_cache(std::size_t capacity, std::size_t block_size, Hasher hasher = Hasher{},
                      hit_check check = hit_check::key_only, fast_block_hasher fingerprint = fast_block_hasher{})
      : pool_(capacity),
        index_(capacity),
        keys_(capacity),
        has_key_(capacity, 0),
        hasher_(std::move(hasher)),
        fingerprint_(fingerprint),
        check_(check) {
    expects(block_size > 0 && block_size <= (1u << 20), errc::invalid_argument,
            "weft::kv::hashed_prefix_cache::hashed_prefix_cache", "block_size must be in [1, 2^20], got ", block_size);
    block_size_ = block_size;
    if (check_ == hit_check::verify_content) {
      block_tokens_.assign(checked_mul(capacity, block_size, "weft::kv::hashed_prefix_cache::hashed_prefix_cache"), 0);
      prints_.assign(capacity, 0);
    }
  }

  std::size_t block_size() const noexcept { return block_size_; }
  const block_pool& pool() const noexcept { return pool_; }
  const Hasher& hasher() const noexcept { return hasher_; }
  hit_check verification() const noexcept { return check_; }
  /// The hasher of verify-on-hit fingerprints (used only with hit_check::verify_content).
  const fast_block_hasher& fingerprint_hasher() const noexcept { return fingerprint_; }
  std::size_t free_blocks() const noexcept { return pool_.free_blocks(); }
  std::size_t used_blocks() const noexcept { return pool_.used_blocks(); }
  /// Blocks that currently carry a key (in use or free-but-cached). O(1).
  std::size_t cached_blocks() const noexcept { return index_.size(); }
  /// Cached blocks evicted so far (their key was dropped to reuse the block). O(1).
  std::uint64_t evictions() const noexcept { return evictions_; }
  /// Verify-on-hit mismatches so far: key matches that were not served. O(1).
  std::uint64_t collisions() const noexcept { return collisions_; }
  /// Calls `handler` for every verify-on-hit mismatch (after counting it); empty to stop. O(1).
  void set_collision_handler(std::function<void(const key_collision&)> handler) { on_collision_ = std::move(handler); }

  /// Appends the content keys of tokens' full blocks beyond keys.size(); see extend_block_keys.
  void extend_keys(std::span<const token_id> tokens, const key_options& options, std::vector<block_key>& keys) const {
    extend_block_keys(tokens, block_size_, options, keys, hasher_, scratch_);
  }
  /// Appends the verify-on-hit fingerprints of tokens' full blocks beyond prints.size() (as
  /// extend_keys, with the fingerprint hasher). O(new tokens).
  void extend_prints(std::span<const token_id> tokens, const key_options& options,
                     std::vector<block_key>& prints) const {
    fast_block_hasher::state s;
    extend_block_keys(tokens, block_size_, options, prints, fingerprint_, s);
  }

  /// The block holding `key`, or nullopt: a raw index lookup that verifies nothing (to serve a
  /// block use find(chain, i) or match(chain)). Changes nothing. O(1) expected.
  std::optional<block_id> find(const block_key& key) const noexcept {
    const std::uint32_t b = index_.find(key);
    if (b == detail::key_map::npos) return std::nullopt;
    return block_id(b);
  }

  /// The cached block that may serve block i of `chain`, or nullopt on a miss or a verify-on-hit
  /// mismatch (counted and reported). Takes no reference. Throws when i is outside the chain or,
  /// with verify_content, the chain lacks block i's tokens or fingerprint. O(block_size).
  std::optional<block_id> find(const block_chain& chain, std::size_t i) {
    expects(i < chain.keys.size(), errc::invalid_argument, "weft::kv::hashed_prefix_cache::find", "block ", i,
            " is outside the chain of ", chain.keys.size(), " keys");
    check_chain(chain, i + 1, "weft::kv::hashed_prefix_cache::find");
    const std::uint32_t b = index_.find(chain.keys[i]);
    if (b == detail::key_map::npos || !verified(block_id(b), chain, i)) return std::nullopt;
    return block_id(b);
  }

  /// As find(chain, i), for a what-if query: a verify-on-hit mismatch is a miss but is neither
  /// counted nor reported. Changes nothing. O(block_size).
  std::optional<block_id> peek(const block_chain& chain, std::size_t i) const {
    expects(i < chain.keys.size(), errc::invalid_argument, "weft::kv::hashed_prefix_cache::peek", "block ", i,
            " is outside the chain of ", chain.keys.size(), " keys");
    check_chain(chain, i + 1, "weft::kv::hashed_prefix_cache::peek");
    const std::uint32_t b = index_.find(chain.keys[i]);
    if (b == detail::key_map::npos || !content_matches(block_id(b), chain, i)) return std::nullopt;
    return block_id(b);
  }

  /// As match(chain, hits), for a what-if query: a verify-on-hit mismatch ends the match but is
  /// neither counted nor reported. Changes nothing. O(matched x block_size).
  std::size_t peek_match(const block_chain& chain, std::vector<block_id>* hits = nullptr) const {
    check_chain(chain, chain.keys.size(), "weft::kv::hashed_prefix_cache::peek_match");
    std::size_t n = 0;
    for (std::size_t i = 0; i < std::min(chain.keys.size(), prefetch_distance); ++i) index_.prefetch(chain.keys[i]);
    for (; n < chain.keys.size(); ++n) {
      if (n + prefetch_distance < chain.keys.size()) index_.prefetch(chain.keys[n + prefetch_distance]);
      const std::uint32_t b = index_.find(chain.keys[n]);
      if (b == detail::key_map::npos || !content_matches(block_id(b), chain, n)) break;
      if (hits) hits->push_back(block_id(b));
    }
    return n;
  }

  /// Number of leading blocks of `chain` the cache can serve (verified with verify_content); appends
  /// their blocks to `hits` when given. Stops at the first miss or mismatch. Takes no reference.
  /// Throws, changing nothing, when verify_content lacks tokens or fingerprints. O(matched x block_size).
  std::size_t match(const block_chain& chain, std::vector<block_id>* hits = nullptr) {
    check_chain(chain, chain.keys.size(), "weft::kv::hashed_prefix_cache::match");
    std::size_t n = 0;
    for (std::size_t i = 0; i < std::min(chain.keys.size(), prefetch_distance); ++i) index_.prefetch(chain.keys[i]);
    for (; n < chain.keys.size(); ++n) {
      if (n + prefetch_distance < chain.keys.size()) index_.prefetch(chain.keys[n + prefetch_distance]);
      const std::uint32_t b = index_.find(chain.keys[n]);
      if (b == detail::key_map::npos || !verified(block_id(b), chain, n)) break;
      if (hits) hits->push_back(block_id(b));
    }
    return n;
  }

  /// Number of leading keys that are cached; appends their blocks to `hits` when given. Changes
  /// nothing (no reference is taken). Only for hit_check::key_only: throws otherwise (use
  /// match(chain)). O(matched) expected.
  std::size_t match(std::span<const block_key> keys, std::vector<block_id>* hits = nullptr) const {
    expects(check_ == hit_check::key_only, errc::precondition, "weft::kv::hashed_prefix_cache::match",
            "this cache verifies hits: pass a block_chain with tokens and fingerprints");
    std::size_t n = 0;
    for (std::size_t i = 0; i < std::min(keys.size(), prefetch_distance); ++i) index_.prefetch(keys[i]);
    for (const block_key& k : keys) {
      if (n + prefetch_distance < keys.size()) index_.prefetch(keys[n + prefetch_distance]);
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
    weft::detail::reserve_more(out, n);  // geometric: a table growing block by block must not copy itself each time
    if (n == 1) {
      const block_id b = *pool_.allocate();
      if (has_key_[b.value()]) drop_key(b);
      out.push_back(b);
      return true;
    }
    // In two passes, so the cache misses of a large cache overlap instead of queueing one behind the
    // other: take the blocks (asking for each one's key), then drop the evicted keys (asking for their
    // index slots ahead). Same result and journal as one pass: a key drop and a pop never interact.
    const std::size_t first = out.size();
    for (std::size_t i = 0; i < n; ++i) {
      const block_id b = *pool_.allocate();
      prefetch_key_of(b);
      out.push_back(b);
    }
    const auto taken = std::span<const block_id>(out).subspan(first);
    for (std::size_t i = 0; i < std::min(n, prefetch_distance); ++i) prefetch_slot_of(taken[i]);
    for (std::size_t i = 0; i < n; ++i) {
      if (i + prefetch_distance < n) prefetch_slot_of(taken[i + prefetch_distance]);
      if (has_key_[taken[i].value()]) drop_key(taken[i]);
    }
    return true;
  }

  /// Hints the CPU to fetch what commit(b, chain, i) reads for block b and key `key`: a caller
  /// committing many blocks asks a few blocks ahead, so their cache misses overlap. O(1).
  void prefetch_commit(block_id b, const block_key& key) const noexcept {
    if (b.value() >= pool_.capacity()) return;
    prefetch_key_of(b);
    pool_.prefetch(b);
    index_.prefetch(key);
  }

  /// Records that in-use block b now holds full content with key `key`. Returns false (and leaves
  /// b uncached) when another block already caches that key or b already has a key. Only for
  /// hit_check::key_only: throws otherwise (use commit(b, chain, i)). O(1) expected.
  bool commit(block_id b, const block_key& key) {
    expects(check_ == hit_check::key_only, errc::precondition, "weft::kv::hashed_prefix_cache::commit",
            "this cache verifies hits: pass the block's chain so its tokens and fingerprint are kept");
    return insert_key(b, key);
  }

  /// Records that in-use block b holds block i of `chain` (with verify_content, keeping its tokens
  /// and fingerprint). Returns false as commit(b, key) does. Throws, changing nothing, for a block
  /// not in use, i outside the chain, or a chain lacking what verify_content keeps. O(block_size).
  bool commit(block_id b, const block_chain& chain, std::size_t i) {
    constexpr const char* where = "weft::kv::hashed_prefix_cache::commit";
    expects(i < chain.keys.size(), errc::invalid_argument, where, "block ", i, " is outside the chain of ",
            chain.keys.size(), " keys");
    check_chain(chain, i + 1, where);
    if (check_ != hit_check::verify_content) return insert_key(b, chain.keys[i]);
    check_id(b, where);
    expects(!pool_.is_free(b), errc::invalid_argument, where, "block ", b,
            " is free; only a block in use can be filled and cached");
    if (has_key_[b.value()] || index_.find(chain.keys[i]) != detail::key_map::npos) return false;
    token_id* const stored = block_tokens_.data() + b.value() * block_size_;
    // Inside a transaction, save what the block's verify slot held: a key this transaction evicted
    // from b comes back on rollback, and it must come back with its own tokens and fingerprint.
    if (journal_ != nullptr)
      journal_->save_verify_state(journal_target_, b.value(), std::span<const token_id>(stored, block_size_),
                                  prints_[b.value()]);
    if (!insert_key(b, chain.keys[i])) return false;
    const auto tokens = chain.tokens.subspan(i * block_size_, block_size_);
    std::copy(tokens.begin(), tokens.end(), stored);
    prints_[b.value()] = chain.prints[i].lo;
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

  /// Records every later change (pool, keys and verify-on-hit contents) into `journal` under
  /// `target`; nullptr stops recording. Used by kv_manager's transactions. O(1).
  void attach_journal(detail::undo_journal* journal, std::uint8_t target) noexcept {
    journal_ = journal;
    journal_target_ = target;
    pool_.attach_journal(journal, target);
  }

  /// Reverses one record of this cache or its pool (newest first, each once, while the journal
  /// that holds it is attached). O(1) expected; O(block_size) for saved verify-on-hit contents.
  void undo(const detail::undo_record& r) {
    if (r.op == detail::undo_op::key_dropped) {
      index_.insert(r.key, r.block);
      keys_[r.block] = r.key;
      has_key_[r.block] = 1;
      --evictions_;
    } else if (r.op == detail::undo_op::key_added) {
      index_.erase(r.key);
      has_key_[r.block] = 0;
    } else if (r.op == detail::undo_op::collision_counted) {
      --collisions_;
    } else if (r.op == detail::undo_op::verify_saved) {
      const auto saved = journal_->saved_tokens(r.aux, block_size_);
      std::copy(saved.begin(), saved.end(), block_tokens_.data() + std::size_t{r.block} * block_size_);
      prints_[r.block] = r.key.lo;
      journal_->drop_saved_tokens_from(r.aux);
    } else {
      pool_.undo(r);
    }
  }

  /// Bookkeeping bytes per block: pool + key + flag + index slots (+ tokens and fingerprint with
  /// verify_content). O(1).
  std::size_t bytes_per_block() const noexcept {
    const std::size_t verify = check_ == hit_check::verify_content ? block_size_ * sizeof(token_id) + 8 : 0;
    return block_pool::bytes_per_block() + sizeof(block_key) + 1 +
           (index_.table_size() * detail::key_map::slot_bytes + pool_.capacity() - 1) / pool_.capacity() + verify;
  }
  /// What verify_content adds per block: its tokens and the fingerprint. O(1).
  static constexpr std::size_t verify_bytes_per_block(std::size_t block_size) noexcept {
    return block_size * sizeof(token_id) + 8;
  }

 private:
  void prefetch_key_of(block_id b) const noexcept {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(&has_key_[b.value()]);
    __builtin_prefetch(&keys_[b.value()]);
#else
    (void)b;
#endif
  }
  // Block b's key's index slot, when it has a key (its key must be in cache already to find the slot).
  void prefetch_slot_of(block_id b) const noexcept {
    if (has_key_[b.value()]) index_.prefetch(keys_[b.value()]);
  }
  void drop_key(block_id b) {
    if (journal_ != nullptr)
      journal_->push(detail::undo_op::key_dropped, journal_target_, b.value(), 0, keys_[b.value()]);
    index_.erase(keys_[b.value()]);
    has_key_[b.value()] = 0;
    ++evictions_;
  }
  bool insert_key(block_id b, const block_key& key) {
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

  // With verify_content, the chain must carry the tokens and fingerprints of its first n blocks.
  void check_chain(const block_chain& chain, std::size_t n, const char* where) const {
    if (check_ != hit_check::verify_content) return;
    expects(chain.tokens.size() / block_size_ >= n && chain.prints.size() >= n, errc::invalid_argument, where,
            "verify on hit needs the tokens and fingerprints of ", n, " blocks; the chain has ", chain.tokens.size(),
            " tokens (block size ", block_size_, ") and ", chain.prints.size(), " fingerprints");
  }

  // Whether block b's stored tokens equal block i of chain (always true with key_only).
  bool same_tokens(block_id b, const block_chain& chain, std::size_t i) const {
    if (check_ != hit_check::verify_content) return true;
    const auto want = chain.tokens.subspan(i * block_size_, block_size_);
    return std::equal(want.begin(), want.end(), block_tokens_.data() + b.value() * block_size_);
  }
  // Whether cached block b may serve block i of chain: always with key_only; with verify_content,
  // its tokens and fingerprint must equal the query's.
  bool content_matches(block_id b, const block_chain& chain, std::size_t i) const {
    if (check_ != hit_check::verify_content) return true;
    return same_tokens(b, chain, i) && prints_[b.value()] == chain.prints[i].lo;
  }
  // content_matches, counting and reporting a mismatch. Inside a transaction the count is journaled
  // (a rolled-back call counted nothing); the handler is the caller's and is not undone.
  bool verified(block_id b, const block_chain& chain, std::size_t i) {
    if (content_matches(b, chain, i)) return true;
    if (journal_ != nullptr) journal_->push(detail::undo_op::collision_counted, journal_target_, b.value());
    ++collisions_;
    if (on_collision_) on_collision_(key_collision{chain.keys[i], b, i, !same_tokens(b, chain, i)});
    return false;
  }

  // How many keys ahead match() asks for index slots: enough to cover a DRAM miss per probe.
  static constexpr std::size_t prefetch_distance = 8;

  void check_id(block_id b, const char* where) const {
    expects(b.valid() && b.value() < pool_.capacity() && b != block_pool::null_block, errc::out_of_range, where,
            "block ", b, " is not a data block of this pool (valid ids are 1..", pool_.capacity() - 1, ")");
  }

  block_pool pool_;
  detail::key_map index_;
  std::vector<block_key> keys_;  // keys_[b] valid when has_key_[b]
  std::vector<std::uint8_t> has_key_;
  Hasher hasher_;
  mutable typename Hasher::state scratch_;  // extend_keys' working state, reused for every block
  fast_block_hasher fingerprint_;
  hit_check check_;
  // verify_content only: block b's tokens at [b * block_size, (b + 1) * block_size) and the low
  // 64 bits of its fingerprint, both valid while has_key_[b].
  std::vector<token_id> block_tokens_;
  std::vector<std::uint64_t> prints_;
  std::function<void(const key_collision&)> on_collision_;
  std::size_t block_size_ = 0;
  std::uint64_t evictions_ = 0;
  std::uint64_t collisions_ = 0;
  detail::undo_journal* journal_ = nullptr;  // kv_manager's transaction journal, while one is open
  std::uint8_t journal_target_ = 0;
};

}  // namespace weft::kv

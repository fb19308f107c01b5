// weft::kv::cluster_pool: the KV blocks of several instances pooled across a cluster, so a request on
// one instance can hold blocks ("rBlocks") in other instances' free memory (Lin et al., "Infinite-LLM:
// Efficient LLM Service for Long Context with DistAttention and Distributed KVCache", 2024, §4-5).
#pragma once

#include <weft/core/detail/reserve_more.hpp>
#include <weft/core/error.hpp>
#include <weft/kv/block_pool.hpp>
#include <weft/kv/detail/undo_journal.hpp>
#include <weft/kv/types.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace weft::kv {

/// A block somewhere in the cluster: the instance whose memory holds it and its id in that
/// instance's block pool (1..capacity; 0 is never handed out).
struct cluster_block {
  std::uint32_t owner = 0;
  block_id block = block_id::invalid();
  friend bool operator==(const cluster_block&, const cluster_block&) = default;
};

/// One block moved by reclaim(): `borrower`'s KV in `from` (a block of the reclaiming owner) must be
/// copied to `to` before `from` is reused. The copy is the caller's (one block of KV on the network).
struct cluster_block_move {
  std::uint32_t borrower = 0;
  cluster_block from;
  cluster_block to;
};

/// One instance's blocks by state. Invariant: free + used_local + lent == capacity.
struct instance_blocks {
  std::size_t capacity = 0;
  std::size_t free = 0;        ///< on this instance's free list
  std::size_t used_local = 0;  ///< in this instance's memory, held by itself
  std::size_t lent = 0;        ///< in this instance's memory, held by other instances (creditor side)
  std::size_t borrowed = 0;    ///< in other instances' memory, held by this one (debtor side)
  friend bool operator==(const instance_blocks&, const instance_blocks&) = default;
};

/// The cluster-wide KV pool of Infinite-LLM's gManager: one block_pool per instance, plus who holds
/// each block. An instance allocates from its own memory first; only the rest is borrowed, in units
/// of `borrow_unit` blocks, each unit from the creditor with the most free blocks at that moment
/// (the paper's greedy placement: the instance with the most spare memory lends; ties go to the
/// lowest index, so the placement is deterministic). Freed blocks return to their owner's free list.
///
/// An owner's own demand comes first: reclaim(owner, n) frees n of its lent blocks by moving each
/// borrower's block elsewhere (back into the borrower's own memory when it has room, else to the
/// instance with the most free blocks), and reports the moves so the caller copies their KV; the
/// borrower keeps its data, paying one block of network copy per move.
///
/// All-or-nothing: allocate and reclaim either do everything asked or return false with the pool
/// unchanged (also against bad_alloc: output vectors are grown first). Bad ids throw weft::error,
/// naming the value, and change nothing. Not thread-safe: one owner (the cluster manager, as the
/// paper's single gManager) calls it. Memory: 16 bytes per block.
class cluster_pool {
 public:
  static constexpr std::size_t max_instances = 65536;

  /// One instance per entry of blocks_per_instance (each in [1, 2^32 - 3] blocks), borrowing in
  /// units of borrow_unit blocks (>= 1; Infinite-LLM's rBlock is a few KV blocks). O(total blocks).
  explicit cluster_pool(std::span<const std::size_t> blocks_per_instance, std::size_t borrow_unit = 1)
      : unit_(borrow_unit) {
    constexpr const char* where = "weft::kv::cluster_pool::cluster_pool";
    expects(!blocks_per_instance.empty() && blocks_per_instance.size() <= max_instances, errc::invalid_argument, where,
            "need 1..", max_instances, " instances, got ", blocks_per_instance.size());
    expects(borrow_unit >= 1, errc::invalid_argument, where, "borrow_unit must be >= 1 block, got 0");
    for (std::size_t i = 0; i < blocks_per_instance.size(); ++i)
      expects(blocks_per_instance[i] >= 1 && blocks_per_instance[i] < std::numeric_limits<std::uint32_t>::max() - 2,
              errc::invalid_argument, where, "instance ", i, " has ", blocks_per_instance[i],
              " blocks; each needs 1..2^32-3");
    nodes_.reserve(blocks_per_instance.size());
    for (const std::size_t b : blocks_per_instance) {
      node n{block_pool(b + 1), std::vector<std::uint32_t>(b + 1, unheld), {}};
      n.count.capacity = b;
      n.count.free = b;
      nodes_.push_back(std::move(n));
    }
  }

  /// Number of instances. O(1).
  std::size_t instances() const noexcept { return nodes_.size(); }
  /// Blocks per borrowed unit. O(1).
  std::size_t borrow_unit() const noexcept { return unit_; }
  /// Instance i's blocks by state. Throws when i is out of range. O(1).
  const instance_blocks& blocks(std::size_t i) const {
    check_instance(i, "weft::kv::cluster_pool::blocks");
    return nodes_[i].count;
  }
  /// Free blocks in the whole cluster. O(instances).
  std::size_t total_free() const noexcept {
    std::size_t f = 0;
    for (const auto& n : nodes_) f += n.count.free;
    return f;
  }
  /// The instance holding block b (a free block throws: it has no holder). O(1).
  std::size_t holder(cluster_block b) const {
    check_held(b, "weft::kv::cluster_pool::holder");
    return nodes_[b.owner].holder[b.block.value()];
  }

  /// Appends n blocks for instance `user` to out: min(n, its free) of its own, the rest borrowed unit
  /// by unit from the creditor with the most free blocks (a unit is cut short only when that creditor
  /// has less than a unit free). Returns false, appending and changing nothing, when the cluster has
  /// fewer than n free blocks. Throws for a bad user. O(n + units borrowed * instances).
  bool allocate(std::size_t user, std::size_t n, std::vector<cluster_block>& out) {
    check_instance(user, "weft::kv::cluster_pool::allocate");
    if (n == 0) return true;
    if (n > total_free()) return false;
    weft::detail::reserve_more(out, n);  // the one step that may throw, before any change
    const auto u = static_cast<std::uint32_t>(user);
    std::size_t left = n;
    left -= take(u, u, std::min(left, nodes_[u].count.free), out);
    while (left > 0) {
      const std::uint32_t c = richest_except(u);
      left -= take(u, c, std::min({left, unit_, nodes_[c].count.free}), out);
    }
    return true;
  }

  /// Instance `user` gives block b back; it returns to its owner's free list. Throws (changing
  /// nothing) when b is not a block of this cluster, is free, or is held by another instance. O(1).
  void release(std::size_t user, cluster_block b) {
    constexpr const char* where = "weft::kv::cluster_pool::release";
    check_instance(user, where);
    check_held(b, where);
    const std::uint32_t h = nodes_[b.owner].holder[b.block.value()];
    expects(h == user, errc::invalid_argument, where, "block ", b.block, " of instance ", b.owner,
            " is held by instance ", h, ", not by ", user);
    give_back(b);
  }

  /// Owner's own demand first: makes n of owner's lent blocks free by moving each borrower's KV to a
  /// block elsewhere (the borrower's own memory when it has a free block, else the non-owner instance
  /// with the most free blocks), appending each move to `moves`. Returns false, changing nothing,
  /// when owner has fewer than n lent blocks or the other instances fewer than n free blocks in all.
  /// Lent blocks go in block-id order. Throws for a bad owner. O(owner's capacity + n * instances).
  bool reclaim(std::size_t owner, std::size_t n, std::vector<cluster_block_move>& moves) {
    check_instance(owner, "weft::kv::cluster_pool::reclaim");
    node& o = nodes_[owner];
    if (n == 0) return true;
    if (n > o.count.lent || n > total_free() - o.count.free) return false;
    weft::detail::reserve_more(moves, n);
    scratch_.clear();
    weft::detail::reserve_more(scratch_, 1);
    const auto own = static_cast<std::uint32_t>(owner);
    std::size_t done = 0;
    for (std::uint32_t b = 1; b < o.holder.size() && done < n; ++b) {
      const std::uint32_t borrower = o.holder[b];
      if (borrower == unheld || borrower == own) continue;
      const std::uint32_t to = nodes_[borrower].count.free > 0 ? borrower : richest_except(own);
      scratch_.clear();
      take(borrower, to, 1, scratch_);  // capacity reserved above: cannot throw
      const cluster_block from{own, block_id(b)};
      give_back(from);
      moves.push_back({borrower, from, scratch_.front()});
      ++done;
    }
    return true;
  }

 private:
  static constexpr std::uint32_t unheld = std::numeric_limits<std::uint32_t>::max();

  // Invariants: holder[b] == unheld exactly when block b of this instance is free in `pool`
  // (holder[0] stays unheld: the null block is never handed out); count matches the holders; the sum
  // of lent over all instances equals the sum of borrowed.
  struct node {
    block_pool pool;
    std::vector<std::uint32_t> holder;
    instance_blocks count;
  };

  // The instance (not `except`) with the most free blocks, lowest index first. Callers ensure one
  // with a free block exists.
  std::uint32_t richest_except(std::uint32_t except) const noexcept {
    std::uint32_t best = unheld;
    for (std::uint32_t i = 0; i < nodes_.size(); ++i)
      if (i != except && (best == unheld || nodes_[i].count.free > nodes_[best].count.free)) best = i;
    return best;
  }

  // Moves k free blocks of `owner` to `user` (k <= owner's free; out has room). Returns k.
  std::size_t take(std::uint32_t user, std::uint32_t owner, std::size_t k, std::vector<cluster_block>& out) noexcept {
    node& o = nodes_[owner];
    for (std::size_t i = 0; i < k; ++i) {
      const block_id b = *o.pool.allocate();
      o.holder[b.value()] = user;
      out.push_back({owner, b});
    }
    o.count.free -= k;
    if (owner == user) {
      o.count.used_local += k;
    } else {
      o.count.lent += k;
      nodes_[user].count.borrowed += k;
    }
    return k;
  }

  void give_back(cluster_block b) noexcept {
    node& o = nodes_[b.owner];
    const std::uint32_t h = o.holder[b.block.value()];
    if (h == b.owner) {
      --o.count.used_local;
    } else {
      --o.count.lent;
      --nodes_[h].count.borrowed;
    }
    o.holder[b.block.value()] = unheld;
    o.pool.release(b.block, free_position::front);
    ++o.count.free;
  }

  void check_instance(std::size_t i, const char* where) const {
    expects(i < nodes_.size(), errc::out_of_range, where, "instance ", i, " is out of range (the cluster has ",
            nodes_.size(), ")");
  }
  void check_held(cluster_block b, const char* where) const {
    check_instance(b.owner, where);
    const node& o = nodes_[b.owner];
    expects(b.block.valid() && b.block.value() >= 1 && b.block.value() < o.holder.size(), errc::out_of_range, where,
            "block ", b.block, " is not a block of instance ", b.owner, " (valid ids are 1..", o.holder.size() - 1,
            ")");
    expects(o.holder[b.block.value()] != unheld, errc::invalid_argument, where, "block ", b.block, " of instance ",
            b.owner, " is free: never allocated or already released (double free)");
  }

  std::vector<node> nodes_;
  std::size_t unit_;
  std::vector<cluster_block> scratch_;
};

}  // namespace weft::kv

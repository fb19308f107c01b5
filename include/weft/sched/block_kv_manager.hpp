// A block-counting KV-cache manager for schedulers and the simulator: paged allocation in fixed
// blocks (Kwon et al., "Efficient Memory Management for LLM Serving with PagedAttention", SOSP 2023,
// §4), a host tier for swapping, and a prefix cache of shared prompt blocks kept after use until evicted LRU.
#pragma once

#include <weft/sched/batch.hpp>
#include <weft/sched/request.hpp>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <list>
#include <optional>
#include <unordered_map>
#include <utility>

namespace weft::sched {

/// Counts blocks; stores no tensors. A request's blocks are its share of a cached prefix (full blocks
/// of prefix_tokens, shared by every request with that prefix_id) plus its private blocks. A prefix
/// nobody uses stays cached and counts as free: grow() evicts such prefixes, least recently used first,
/// when the free pool runs short. Swapping moves only private blocks (the prefix stays pinned on device).
/// copy_unit_blocks groups contiguous blocks into one copy for swap costs (FastSwitch's coarse units).
/// Satisfies kv_manager. Not thread-safe. grow/release/swap O(1) amortised plus evictions.
class block_kv_manager {
 public:
  /// Stores nothing per token: a scheduler may skip grow() while tokens fit the blocks held.
  static constexpr bool counts_blocks_only = true;

  struct options {
    std::int64_t device_blocks = 4096;
    std::int64_t host_blocks = 0;
    std::int64_t block_tokens = 16;
    std::int64_t bytes_per_token = 512 * 1024;  ///< KV bytes per token (Llama-2-7B fp16: 512 KiB)
    std::int64_t copy_unit_blocks = 1;          ///< blocks per swap copy; >= 1
    bool prefix_caching = true;
  };

  block_kv_manager() : block_kv_manager(options{}) {}
  explicit block_kv_manager(options o) : opt_(o), free_(o.device_blocks), host_free_(o.host_blocks) {
    const char* where = "weft::sched::block_kv_manager";
    expects(o.device_blocks >= 1, errc::invalid_argument, where, "device_blocks must be >= 1, got ", o.device_blocks);
    expects(o.host_blocks >= 0, errc::invalid_argument, where, "host_blocks must be >= 0, got ", o.host_blocks);
    expects(o.block_tokens >= 1, errc::invalid_argument, where, "block_tokens must be >= 1, got ", o.block_tokens);
    expects(o.bytes_per_token >= 1, errc::invalid_argument, where, "bytes_per_token must be >= 1, got ",
            o.bytes_per_token);
    expects(o.copy_unit_blocks >= 1, errc::invalid_argument, where, "copy_unit_blocks must be >= 1, got ",
            o.copy_unit_blocks);
  }

  std::int64_t block_tokens() const noexcept { return opt_.block_tokens; }
  std::int64_t total_blocks() const noexcept { return opt_.device_blocks; }
  /// Blocks a grow() may use: the free pool plus cached prefixes nobody holds.
  std::int64_t free_blocks() const noexcept { return free_ + evictable_; }
  std::int64_t host_free_blocks() const noexcept { return host_free_; }
  std::int64_t bytes_per_block() const noexcept { return opt_.bytes_per_token * opt_.block_tokens; }

  /// Extra device blocks r needs to hold `tokens` tokens (a cached prefix counts as present; an
  /// uncached one is allocated whole on r's first grow).
  std::int64_t blocks_to_grow(const request& r, std::int64_t tokens) const {
    expects(tokens >= 0, errc::invalid_argument, "weft::sched::block_kv_manager::blocks_to_grow", "request ", r.id,
            ": tokens must be >= 0, got ", tokens);
    auto it = held_.find(r.id);
    if (it != held_.end()) {
      expects(!it->second.swapped, errc::precondition, "weft::sched::block_kv_manager::blocks_to_grow", "request ",
              r.id, " is swapped out");
      return std::max<std::int64_t>(0, blocks_for(tokens) - it->second.shared - it->second.own);
    }
    const auto [shared, cached] = prefix_share(r);
    const std::int64_t own = std::max<std::int64_t>(0, blocks_for(tokens) - shared);
    return own + (cached ? 0 : shared);
  }

  /// Makes r hold KV for `tokens` tokens. false, with nothing changed, when the blocks are not there.
  bool grow(const request& r, std::int64_t tokens) {
    auto it = held_.find(r.id);
    if (it != held_.end()) {
      // The decode hot path: one lookup, and usually no new block.
      expects(tokens >= 0 && !it->second.swapped, errc::invalid_argument, "weft::sched::block_kv_manager::grow",
              "request ", r.id, ": tokens must be >= 0 (got ", tokens, ") and the request not swapped out");
      const std::int64_t need = blocks_for(tokens) - it->second.shared - it->second.own;
      if (need <= 0) return true;
      if (need > free_ + evictable_) return false;
      make_free(need);
      free_ -= need;
      it->second.own += need;
      return true;
    }
    const std::int64_t need = blocks_to_grow(r, tokens);
    const auto [shared, cached] = prefix_share(r);
    // Pinning an unused cached prefix takes its blocks out of the evictable pool.
    std::int64_t pin = 0;
    if (cached && prefixes_.find(r.prefix_id)->second.users == 0) pin = shared;
    if (need > free_ + evictable_ - pin) return false;
    it = held_.emplace(r.id, holding{}).first;
    if (shared > 0) attach(r, it->second, shared, cached);
    const std::int64_t own = std::max<std::int64_t>(0, blocks_for(tokens) - shared);
    make_free(own);
    free_ -= own;
    it->second.own = own;
    return true;
  }

  void release(request_id id) {
    auto it = held_.find(id);
    expects(it != held_.end(), errc::not_found, "weft::sched::block_kv_manager::release", "request ", id,
            " holds no KV blocks");
    if (it->second.swapped)
      host_free_ += it->second.own;
    else
      free_ += it->second.own;
    detach(it->second);
    held_.erase(it);
  }

  /// Moves id's private blocks to the host tier. nullopt (nothing moved) when the host lacks room.
  std::optional<kv_transfer> swap_out(request_id id) {
    auto& h = holding_of(id, "weft::sched::block_kv_manager::swap_out");
    expects(!h.swapped, errc::precondition, "weft::sched::block_kv_manager::swap_out", "request ", id,
            " is already swapped out");
    if (h.own > host_free_) return std::nullopt;
    host_free_ -= h.own;
    free_ += h.own;
    h.swapped = true;
    return transfer(id, h.own);
  }

  /// Moves id's blocks back to the device. nullopt (nothing moved) when the device lacks room.
  std::optional<kv_transfer> swap_in(request_id id) {
    auto& h = holding_of(id, "weft::sched::block_kv_manager::swap_in");
    expects(h.swapped, errc::precondition, "weft::sched::block_kv_manager::swap_in", "request ", id,
            " is not swapped out");
    if (h.own > free_ + evictable_) return std::nullopt;
    make_free(h.own);
    free_ -= h.own;
    host_free_ += h.own;
    h.swapped = false;
    return transfer(id, h.own);
  }

  /// Device blocks id holds (its prefix share included); 0 when it holds none or is swapped out.
  std::int64_t held_blocks(request_id id) const noexcept {
    auto it = held_.find(id);
    if (it == held_.end()) return 0;
    return it->second.shared + (it->second.swapped ? 0 : it->second.own);
  }

  /// Prompt tokens of r already cached on device (full blocks of its shared prefix), else 0.
  std::int64_t cached_prefix_tokens(const request& r) const noexcept {
    const auto [shared, cached] = prefix_share(r);
    return cached ? shared * opt_.block_tokens : 0;
  }

  /// Prefixes currently cached (in use or evictable).
  std::size_t cached_prefixes() const noexcept { return prefixes_.size(); }
  std::int64_t evictions() const noexcept { return evictions_; }

 private:
  struct holding {
    std::int64_t own = 0;
    std::int64_t shared = 0;  // blocks of the prefix entry this request pins
    std::uint64_t prefix = 0;
    bool swapped = false;
  };
  struct prefix_entry {
    std::int64_t blocks = 0;
    std::int64_t users = 0;
    std::list<std::uint64_t>::iterator lru;  // valid only while users == 0
  };

  std::int64_t blocks_for(std::int64_t tokens) const noexcept {
    return (tokens + opt_.block_tokens - 1) / opt_.block_tokens;
  }

  // (full prefix blocks r would share, whether they are already cached)
  std::pair<std::int64_t, bool> prefix_share(const request& r) const noexcept {
    if (!opt_.prefix_caching || r.prefix_id == 0) return {0, false};
    const std::int64_t blocks = r.prefix_tokens / opt_.block_tokens;
    auto it = prefixes_.find(r.prefix_id);
    if (it != prefixes_.end()) return {it->second.blocks, true};
    return {blocks, false};
  }

  void attach(const request& r, holding& h, std::int64_t shared, bool cached) {
    h.prefix = r.prefix_id;
    h.shared = shared;
    if (cached) {
      auto& p = prefixes_.find(r.prefix_id)->second;
      if (p.users++ == 0) {
        lru_.erase(p.lru);
        evictable_ -= p.blocks;
      }
    } else {
      make_free(shared);
      free_ -= shared;
      prefixes_.emplace(r.prefix_id, prefix_entry{shared, 1, {}});
    }
  }

  void detach(holding& h) {
    if (h.shared == 0) return;
    auto& p = prefixes_.find(h.prefix)->second;
    if (--p.users == 0) {
      lru_.push_back(h.prefix);
      p.lru = std::prev(lru_.end());
      evictable_ += p.blocks;
    }
  }

  // Evicts unused cached prefixes (LRU) until the free pool holds n blocks. Caller checked n fits.
  void make_free(std::int64_t n) {
    while (free_ < n && !lru_.empty()) {
      auto it = prefixes_.find(lru_.front());
      free_ += it->second.blocks;
      evictable_ -= it->second.blocks;
      prefixes_.erase(it);
      lru_.pop_front();
      ++evictions_;
    }
  }

  holding& holding_of(request_id id, const char* where) {
    auto it = held_.find(id);
    expects(it != held_.end(), errc::not_found, where, "request ", id, " holds no KV blocks");
    return it->second;
  }

  kv_transfer transfer(request_id id, std::int64_t blocks) const noexcept {
    return {id, blocks, (blocks + opt_.copy_unit_blocks - 1) / opt_.copy_unit_blocks, blocks * bytes_per_block()};
  }

  options opt_;
  // Invariant: free_ + evictable_ + (device blocks held by requests and in-use prefixes) == device_blocks.
  std::int64_t free_;
  std::int64_t evictable_ = 0;
  std::int64_t host_free_;
  std::int64_t evictions_ = 0;
  std::unordered_map<request_id, holding> held_;
  std::unordered_map<std::uint64_t, prefix_entry> prefixes_;
  std::list<std::uint64_t> lru_;
};

}  // namespace weft::sched

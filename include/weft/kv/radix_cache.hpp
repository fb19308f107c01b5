// weft::kv::radix_cache: a page-granular radix tree over token sequences whose edges own KV blocks
// (RadixAttention, Zheng et al., "SGLang", NeurIPS 2024, section 3): longest-prefix match with node
// splitting, lock counts that protect blocks in use, leaf-first eviction ranked by a pluggable
// policy, and time-to-live pins for agent sessions that return after a tool call (Continuum-style
// KV pinning).
#pragma once

#include <weft/core/clock.hpp>
#include <weft/core/error.hpp>
#include <weft/kv/block_pool.hpp>
#include <weft/kv/concepts.hpp>
#include <weft/kv/eviction.hpp>
#include <weft/kv/types.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
#include <span>
#include <tuple>
#include <vector>

namespace weft::kv {

/// Handle of a radix-tree node (returned by match and insert; used to lock, unlock and pin). Valid
/// until the node is evicted; the root (value 0) is always valid and never evicted.
using radix_node = weft::strong_id<struct radix_node_tag, std::uint32_t>;

/// Result of radix_cache::match: the blocks of the longest cached page-aligned prefix, in order,
/// and the deepest node covering it (lock it while the blocks are in use).
struct radix_match {
  std::vector<block_id> blocks;
  std::size_t matched_tokens = 0;
  radix_node node;
};

/// Prefix cache as a radix tree. Every edge holds whole pages (page_size tokens) and one block per
/// page; the tree holds one pool reference per block it stores. A node with lock count > 0 (it or
/// a descendant is in use by a running request) is protected; unlocked leaves are evictable,
/// smallest Policy score first; a pinned node is not evicted before its pin expires.
///
/// Invariants: every non-root node has >= 1 page; children of a node start with distinct first
/// pages; lock(n) >= sum of direct locks of n's subtree; evictable_blocks() + protected_blocks() ==
/// blocks stored. Not thread-safe. Complexity: match/insert O(tokens + depth * children),
/// lock/unlock O(depth), evict O(nodes log nodes).
template <eviction_policy Policy = lru_eviction, weft::clock Clock = weft::steady_clock>
class radix_cache {
 public:
  using time_point = typename Clock::time_point;
  using duration = typename Clock::duration;

  /// A tree over `pool` (which must outlive it) with page_size tokens per block, reading time for
  /// pins from `clock` (which must outlive it).
  radix_cache(block_pool& pool, std::size_t page_size, const Clock& clock, Policy policy = Policy{})
      : pool_(&pool), clock_(&clock), policy_(std::move(policy)), page_(page_size) {
    expects(page_size > 0, errc::invalid_argument, "weft::kv::radix_cache::radix_cache", "page_size must be positive");
    nodes_.emplace_back();  // root
    nodes_[0].live = true;
  }
  /// As above with the process-wide steady clock.
  radix_cache(block_pool& pool, std::size_t page_size,
              Policy policy = Policy{}) requires std::same_as<Clock, weft::steady_clock>
      : radix_cache(pool, page_size, steady_instance(), std::move(policy)) {}

  radix_cache(const radix_cache&) = delete;
  radix_cache& operator=(const radix_cache&) = delete;

  std::size_t page_size() const noexcept { return page_; }
  std::size_t evictable_blocks() const noexcept { return evictable_; }
  std::size_t protected_blocks() const noexcept { return protected_; }
  std::size_t cached_blocks() const noexcept { return evictable_ + protected_; }
  std::size_t node_count() const noexcept { return live_nodes_; }
  static constexpr radix_node root() noexcept { return radix_node(0); }

  /// Longest cached page-aligned prefix of tokens. Splits a node when the match ends inside it, so
  /// the returned node covers exactly the match. Counts a hit and refreshes access time on every
  /// node on the path. O(tokens + depth * children).
  radix_match match(std::span<const token_id> tokens) {
    ++tick_;
    radix_match m;
    std::uint32_t cur = 0;
    std::size_t pos = 0;
    while (tokens.size() - pos >= page_) {
      const std::uint32_t c = child_with(cur, tokens.subspan(pos, page_));
      if (c == npos) break;
      const std::size_t k = common_pages(nodes_[c].tokens, tokens.subspan(pos));
      const std::uint32_t n = k < nodes_[c].blocks.size() ? split(c, k) : c;
      touch(n);
      m.blocks.insert(m.blocks.end(), nodes_[n].blocks.begin(), nodes_[n].blocks.end());
      pos += k * page_;
      cur = n;
      if (n != c) break;
    }
    m.matched_tokens = pos;
    m.node = radix_node(cur);
    return m;
  }

  /// Stores tokens' whole pages with their blocks (blocks.size() must equal tokens.size() /
  /// page_size). Pages already cached keep their existing block: the return value says how many
  /// leading pages were already present, and the caller still owns (and should release) its own
  /// blocks for those. The tree takes over the caller's reference to the blocks of new pages.
  /// Returns (pages already present, node covering the whole inserted prefix). O(tokens).
  std::pair<std::size_t, radix_node> insert(std::span<const token_id> tokens, std::span<const block_id> blocks,
                                            std::int32_t priority = 0) {
    constexpr const char* where = "weft::kv::radix_cache::insert";
    const std::size_t pages = tokens.size() / page_;
    expects(blocks.size() == pages, errc::invalid_argument, where, "got ", blocks.size(), " blocks for ", pages,
            " whole pages of ", tokens.size(), " tokens (page size ", page_, ")");
    for (const block_id b : blocks)
      expects(pool_->ref_count(b) > 0, errc::invalid_argument, where, "block ", b, " is not allocated");
    ++tick_;
    std::uint32_t cur = 0;
    std::size_t p = 0;
    while (p < pages) {
      const auto rest = tokens.subspan(p * page_, (pages - p) * page_);
      const std::uint32_t c = child_with(cur, rest.first(page_));
      if (c == npos) break;
      const std::size_t k = common_pages(nodes_[c].tokens, rest);
      const std::uint32_t n = k < nodes_[c].blocks.size() ? split(c, k) : c;
      touch(n);
      nodes_[n].stats.priority = std::max(nodes_[n].stats.priority, priority);
      p += k;
      cur = n;
    }
    const std::size_t present = p;
    if (p < pages) {
      const std::uint32_t n = new_node(cur);
      node& leaf = nodes_[n];
      leaf.tokens.assign(tokens.begin() + static_cast<std::ptrdiff_t>(p * page_),
                         tokens.begin() + static_cast<std::ptrdiff_t>(pages * page_));
      leaf.blocks.assign(blocks.begin() + static_cast<std::ptrdiff_t>(p), blocks.end());
      leaf.stats = eviction_stats{tick_, tick_, 0, priority};
      leaf.lock = 0;
      evictable_ += leaf.blocks.size();
      cur = n;
    }
    return {present, radix_node(cur)};
  }

  /// Protects node n and its ancestors from eviction (a request uses their blocks). O(depth).
  void lock(radix_node n) {
    for (std::uint32_t i = checked(n, "weft::kv::radix_cache::lock"); i != 0; i = nodes_[i].parent) {
      if (nodes_[i].lock++ == 0) {
        evictable_ -= nodes_[i].blocks.size();
        protected_ += nodes_[i].blocks.size();
      }
    }
  }

  /// Undoes one lock(n). Throws (nothing changed) when n is not locked. O(depth).
  void unlock(radix_node n) {
    const std::uint32_t start = checked(n, "weft::kv::radix_cache::unlock");
    expects(start == 0 || nodes_[start].lock > 0, errc::precondition, "weft::kv::radix_cache::unlock", "node ", n,
            " is not locked");
    for (std::uint32_t i = start; i != 0; i = nodes_[i].parent) {
      if (--nodes_[i].lock == 0) {
        protected_ -= nodes_[i].blocks.size();
        evictable_ += nodes_[i].blocks.size();
      }
    }
  }

  /// Keeps node n (and so its ancestors) from eviction until now + ttl, even when unlocked: an
  /// agent's context survives the tool call it is waiting on. A later pin can extend, not shorten. O(1).
  void pin(radix_node n, duration ttl) {
    const std::uint32_t i = checked(n, "weft::kv::radix_cache::pin");
    expects(ttl.count() >= 0, errc::invalid_argument, "weft::kv::radix_cache::pin", "ttl must be non-negative");
    const time_point until = clock_->now() + ttl;
    if (!nodes_[i].pinned || nodes_[i].pin_until < until) nodes_[i].pin_until = until;
    nodes_[i].pinned = true;
  }

  /// Lock count of n (0 = evictable once it is a leaf). O(1).
  std::uint32_t lock_count(radix_node n) const { return nodes_[checked(n, "weft::kv::radix_cache::lock_count")].lock; }

  /// Evicts unlocked, unpinned leaves in Policy order (whole nodes) until at least num_blocks blocks
  /// were released to the pool or nothing evictable is left. Returns blocks released. O(nodes log nodes).
  std::size_t evict(std::size_t num_blocks) {
    if (num_blocks == 0) return 0;
    const time_point now = clock_->now();
    using key = std::tuple<decltype(policy_.score(eviction_stats{})), std::uint64_t, std::uint32_t>;
    std::priority_queue<key, std::vector<key>, std::greater<>> heap;
    auto candidate = [&](std::uint32_t i) {
      const node& x = nodes_[i];
      return i != 0 && x.live && x.children.empty() && x.lock == 0 && !(x.pinned && now < x.pin_until);
    };
    auto push = [&](std::uint32_t i) { heap.emplace(policy_.score(nodes_[i].stats), nodes_[i].stats.created, i); };
    for (std::uint32_t i = 1; i < nodes_.size(); ++i)
      if (candidate(i)) push(i);
    std::size_t freed = 0;
    while (freed < num_blocks && !heap.empty()) {
      const std::uint32_t i = std::get<2>(heap.top());
      heap.pop();
      const std::uint32_t parent = nodes_[i].parent;
      for (const block_id b : nodes_[i].blocks) pool_->release(b);
      freed += nodes_[i].blocks.size();
      evictable_ -= nodes_[i].blocks.size();
      remove_leaf(i);
      if (candidate(parent)) push(parent);
    }
    return freed;
  }

  /// Visits (tokens, blocks, lock count) of every node except the root; for tests and debugging.
  template <class F>
  void for_each_node(F&& f) const {
    for (std::uint32_t i = 1; i < nodes_.size(); ++i)
      if (nodes_[i].live)
        f(std::span<const token_id>(nodes_[i].tokens), std::span<const block_id>(nodes_[i].blocks), nodes_[i].lock);
  }

 private:
  static constexpr std::uint32_t npos = 0xffffffffu;
  struct node {
    std::vector<token_id> tokens;  // whole pages
    std::vector<block_id> blocks;  // one per page
    std::vector<std::uint32_t> children;
    std::uint32_t parent = 0;
    std::uint32_t lock = 0;
    eviction_stats stats{};
    time_point pin_until{};
    bool pinned = false;
    bool live = false;
  };

  static const weft::steady_clock& steady_instance() {
    static const weft::steady_clock c{};
    return c;
  }

  std::uint32_t checked(radix_node n, const char* where) const {
    expects(n.valid() && n.value() < nodes_.size() && nodes_[n.value()].live, errc::invalid_argument, where, "node ", n,
            " does not exist (never returned by match/insert, or evicted)");
    return n.value();
  }

  std::uint32_t child_with(std::uint32_t parent, std::span<const token_id> page) const {
    for (const std::uint32_t c : nodes_[parent].children)
      if (std::equal(page.begin(), page.end(), nodes_[c].tokens.begin())) return c;
    return npos;
  }

  // Whole pages at the start of a that equal the start of b.
  std::size_t common_pages(const std::vector<token_id>& a, std::span<const token_id> b) const {
    const std::size_t n = std::min(a.size(), b.size());
    const auto diff = std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin());
    return static_cast<std::size_t>(diff.first - a.begin()) / page_;
  }

  void touch(std::uint32_t i) {
    nodes_[i].stats.last_access = tick_;
    ++nodes_[i].stats.hits;
  }

  std::uint32_t new_node(std::uint32_t parent) {
    std::uint32_t i;
    if (!free_nodes_.empty()) {
      i = free_nodes_.back();
      free_nodes_.pop_back();
      nodes_[i] = node{};
    } else {
      i = static_cast<std::uint32_t>(nodes_.size());
      nodes_.emplace_back();
    }
    nodes_[i].live = true;
    nodes_[i].parent = parent;
    nodes_[parent].children.push_back(i);
    ++live_nodes_;
    return i;
  }

  // Splits node c after k pages (0 < k < pages): a new node takes the first k pages and c's place
  // under its parent, c keeps the rest below it. Locks, stats and the pin carry over (the lock
  // counted c's subtree, which the new node now heads). Returns the new node.
  std::uint32_t split(std::uint32_t c, std::size_t k) {
    const std::uint32_t parent = nodes_[c].parent;
    const std::uint32_t m = new_node(parent);
    auto& siblings = nodes_[parent].children;
    siblings.pop_back();  // new_node appended m; put it where c was
    *std::find(siblings.begin(), siblings.end(), c) = m;
    node& top = nodes_[m];
    node& bottom = nodes_[c];
    const auto cut = static_cast<std::ptrdiff_t>(k * page_);
    top.tokens.assign(bottom.tokens.begin(), bottom.tokens.begin() + cut);
    bottom.tokens.erase(bottom.tokens.begin(), bottom.tokens.begin() + cut);
    top.blocks.assign(bottom.blocks.begin(), bottom.blocks.begin() + static_cast<std::ptrdiff_t>(k));
    bottom.blocks.erase(bottom.blocks.begin(), bottom.blocks.begin() + static_cast<std::ptrdiff_t>(k));
    top.lock = bottom.lock;
    top.stats = bottom.stats;
    top.pinned = bottom.pinned;
    top.pin_until = bottom.pin_until;
    top.children.push_back(c);
    bottom.parent = m;
    return m;
  }

  void remove_leaf(std::uint32_t i) {
    auto& siblings = nodes_[nodes_[i].parent].children;
    siblings.erase(std::find(siblings.begin(), siblings.end(), i));
    nodes_[i] = node{};
    free_nodes_.push_back(i);
    --live_nodes_;
  }

  block_pool* pool_;
  const Clock* clock_;
  Policy policy_;
  std::size_t page_;
  std::vector<node> nodes_;  // nodes_[0] is the root (no tokens, never evicted)
  std::vector<std::uint32_t> free_nodes_;
  std::size_t live_nodes_ = 0;
  std::size_t evictable_ = 0;
  std::size_t protected_ = 0;
  std::uint64_t tick_ = 0;
};

}  // namespace weft::kv

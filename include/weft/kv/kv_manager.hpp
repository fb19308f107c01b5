// weft::kv::kv_manager: the per-request facade a batch scheduler drives — prompt allocation with
// prefix-cache hits, decode appends with copy-on-write, forks, frees, swap to the host tier and
// back, and admission queries. Composes block_table, hashed_prefix_cache, host_tier and
// admission_controller the way vLLM's KVCacheManager composes its block pool (Kwon et al. 2023).
#pragma once

#include <weft/core/error.hpp>
#include <weft/kv/admission.hpp>
#include <weft/kv/block_hasher.hpp>
#include <weft/kv/block_table.hpp>
#include <weft/kv/concepts.hpp>
#include <weft/kv/hashed_prefix_cache.hpp>
#include <weft/kv/host_tier.hpp>
#include <weft/kv/types.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace weft::kv {

/// Sizes and switches of a kv_manager.
struct kv_config {
  std::size_t num_blocks = 0;   ///< device block ids including the null block 0 (usable = num_blocks - 1)
  std::size_t block_size = 16;  ///< tokens per block
  std::size_t host_blocks = 0;  ///< host-tier block ids including the reserved 0; 0 = no host tier
  double watermark = 0.01;      ///< fraction of usable blocks a new prompt must leave free
  bool enable_prefix_caching = true;
  std::size_t max_copy_unit_blocks = std::numeric_limits<std::uint32_t>::max();  ///< cap per swap unit
  /// Prefix cache per tenant: request_options::tenant enters the first block's key, so requests of
  /// different tenants never share cached blocks (nor reveal them through time to first token).
  bool isolate_tenants = false;
  /// Verify every prefix hit against the block's stored tokens and an independent fingerprint; a
  /// key collision is counted (cache().collisions()) and treated as a miss. Costs 4 x block_size +
  /// 8 bytes per block (device and host tier).
  bool verify_on_hit = false;
};

/// Per-request inputs besides the tokens.
struct request_options {
  std::uint64_t cache_salt = 0;              ///< isolates this request's cache namespace (first block)
  std::uint64_t adapter_id = 0;              ///< LoRA adapter; 0 = base model
  std::span<const multimodal_item> media{};  ///< multimodal items in the prompt, sorted by offset
  tenant_id tenant = tenant_id::invalid();   ///< quota account; invalid() = not charged
};

/// What allocate_prompt did: the engine skips computing the first cached_tokens tokens (their KV is
/// already in the hit blocks, or arrives by host_to_device) and runs prefill on the rest.
struct prompt_allocation {
  std::size_t cached_tokens = 0;    ///< leading prompt tokens whose KV is reused (a multiple of block_size)
  std::size_t hit_blocks = 0;       ///< blocks shared from the device prefix cache
  std::size_t host_hit_blocks = 0;  ///< following blocks found in the host tier (copied in, not recomputed)
  std::size_t new_blocks = 0;       ///< blocks freshly allocated (the host hits' device blocks included)
  /// Host-to-device copies the engine runs before prefill: the host hits' KV into their new device
  /// blocks. Empty without a host tier.
  swap_plan host_to_device{swap_direction::in, {}, 0};
};

/// Cumulative prefix-cache statistics over prompt allocations.
struct prefix_stats {
  std::uint64_t queried_tokens = 0;  ///< prompt tokens of all allocate_prompt calls that succeeded
  std::uint64_t hit_tokens = 0;      ///< of those, tokens served from the cache
  double hit_rate() const noexcept {
    return queried_tokens == 0 ? 0.0 : static_cast<double>(hit_tokens) / static_cast<double>(queried_tokens);
  }
};

/// Drives the KV blocks of every request of one engine (one model replica, one cache tensor).
/// With a host tier (kv_config::host_blocks), the prefix cache spans both tiers: swapped-out full
/// blocks stay cached in host memory (LRU) and a prompt whose prefix continues there gets those
/// blocks copied in (prompt_allocation::host_to_device) instead of recomputed.
///
/// Typical scheduler loop:
///   admit:   if (auto a = kv.allocate_prompt(id, prompt, opts)) prefill from a->cached_tokens;
///   decode:  auto r = kv.append(id, {next_token}); if (!r) preempt someone; if (r.copy) run it;
///   finish:  kv.free(id);
///   preempt: kv.swap_out(id) -> copy plan (or kv.free(id) to recompute later); resume: kv.swap_in(id).
/// Then give the kernel kv.blocks(id) (block-table row) and kv.slot_mapping(id, ...).
///
/// Failures that are expected (no room, quota) return false/nullopt and change nothing; misuse
/// (unknown or duplicate request id, appending to a swapped request) throws weft::error and changes
/// nothing. Not thread-safe: one scheduler thread owns it. Complexity per call is O(blocks touched)
/// plus O(1) expected hash-map work per request.
template <block_hasher Hasher = default_block_hasher>
class kv_manager {
 public:
  using cache_type = hashed_prefix_cache<Hasher>;

  explicit kv_manager(const kv_config& config, Hasher hasher = Hasher{})
      : config_(validated(config)),
        cache_(config.num_blocks, config.block_size, hasher,
               config.verify_on_hit ? hit_check::verify_content : hit_check::key_only) {
    if (config.host_blocks > 0)
      host_ = std::make_unique<cache_type>(config.host_blocks, config.block_size, hasher, cache_.verification(),
                                           cache_.fingerprint_hasher());
    admission_.set_watermark_blocks(
        static_cast<std::size_t>(std::floor(config.watermark * static_cast<double>(cache_.pool().usable_blocks()))));
  }

  // ----- sizes ---------------------------------------------------------------------------------
  std::size_t block_size() const noexcept { return config_.block_size; }
  std::size_t free_blocks() const noexcept { return cache_.free_blocks(); }
  std::size_t used_blocks() const noexcept { return cache_.used_blocks(); }
  std::size_t usable_blocks() const noexcept { return cache_.pool().usable_blocks(); }
  std::size_t watermark_blocks() const noexcept { return admission_.watermark_blocks(); }
  std::size_t host_free_blocks() const noexcept { return host_ ? host_->free_blocks() : 0; }
  /// The host tier: a hashed_prefix_cache over host block ids (stored as block_id values), or
  /// nullptr without one. Its keyed blocks are the host half of the two-tier prefix cache.
  const cache_type* host_cache() const noexcept { return host_.get(); }
  std::size_t num_requests() const noexcept { return requests_.size(); }
  const kv_config& config() const noexcept { return config_; }
  const prefix_stats& stats() const noexcept { return stats_; }
  const cache_type& cache() const noexcept { return cache_; }
  admission_controller& admission() noexcept { return admission_; }
  const admission_controller& admission() const noexcept { return admission_; }

  // ----- admission -----------------------------------------------------------------------------
  /// Whether a request of num_tokens tokens fits now with no prefix hit, leaving the watermark. O(1).
  bool can_fit(std::size_t num_tokens) const noexcept {
    return admission_.fits((num_tokens + block_size() - 1) / block_size(), free_blocks());
  }

  /// Whether allocate_prompt(prompt, options) would succeed now (prefix hits counted). O(prompt).
  bool can_allocate_prompt(std::span<const token_id> prompt, const request_options& options = {}) {
    if (prompt.empty()) return false;
    return plan(prompt, options).ok;
  }

  /// Whether append(id, n) would fit now (decode may dip into the watermark). O(1) expected.
  bool can_append(request_id id, std::size_t n) const {
    const request& r = get(id, "weft::kv::kv_manager::can_append");
    if (r.swapped) return false;
    const std::size_t need = r.table.blocks_needed(n) + (r.table.needs_copy(cache_, n) ? 1 : 0);
    return need <= free_blocks() && admission_.within_quota(r.options.tenant, r.table.blocks_needed(n));
  }

  // ----- lifecycle -----------------------------------------------------------------------------
  /// Allocates blocks for a new request's prompt, reusing cached blocks of its longest cached
  /// prefix (never the block holding the last prompt token: it must be computed to produce logits).
  /// Returns nullopt, changing nothing, when the blocks (plus watermark) or the tenant's quota are
  /// not available. Throws for an empty prompt, an id already in use, or media outside the prompt
  /// or out of order. O(prompt tokens).
  std::optional<prompt_allocation> allocate_prompt(request_id id, std::span<const token_id> prompt,
                                                   const request_options& options = {}) {
    constexpr const char* where = "weft::kv::kv_manager::allocate_prompt";
    expects(id.valid(), errc::invalid_argument, where, "request id is invalid()");
    expects(!requests_.contains(id), errc::already_exists, where, "request ", id, " is already allocated");
    expects(!prompt.empty(), errc::invalid_argument, where, "request ", id, " has an empty prompt");
    for (std::size_t i = 0; i < options.media.size(); ++i) {
      const multimodal_item& m = options.media[i];
      expects(m.offset <= prompt.size() && m.length <= prompt.size() - m.offset, errc::invalid_argument, where,
              "multimodal item ", i, " spans tokens [", m.offset, ", ", m.offset + m.length, ") outside the prompt of ",
              prompt.size(), " tokens");
      expects(i == 0 || options.media[i - 1].offset <= m.offset, errc::invalid_argument, where, "multimodal item ", i,
              " starts before item ", i - 1, "; media must be sorted by offset");
    }
    prompt_plan p = plan(prompt, options);
    if (!p.ok) return std::nullopt;

    request r(block_size());
    r.options = options;
    r.media.assign(options.media.begin(), options.media.end());
    r.options.media = {};
    r.keys = std::move(p.keys);
    r.prints = std::move(p.prints);
    for (const block_id b : hits_) cache_.acquire(b);  // before allocating: never evict our own hits
    r.table.adopt(hits_);
    fresh_.clear();
    cache_.allocate(p.new_blocks, fresh_);    // cannot fail: plan() checked free blocks
    std::sort(fresh_.begin(), fresh_.end());  // ascending ids make longer copy units
    r.table.adopt(fresh_);
    prompt_allocation result{(hits_.size() + host_hits_.size()) * block_size(), hits_.size(), host_hits_.size(),
                             p.new_blocks};
    // No host block is allocated in this call, so the host hits cannot be evicted before the copy.
    result.host_to_device =
        make_swap_plan(swap_direction::in, std::span<const block_id>(fresh_).first(host_hits_.size()), host_hits_,
                       config_.max_copy_unit_blocks);
    r.table.advance(prompt.size());
    r.tokens.assign(prompt.begin(), prompt.end());
    commit_full_blocks(r);
    admission_.charge(options.tenant, r.table.num_blocks());
    requests_.emplace(id, std::move(r));
    stats_.queried_tokens += prompt.size();
    stats_.hit_tokens += result.cached_tokens;
    return result;
  }

  /// Appends decoded tokens to a running request (their KV is written this step). All-or-nothing:
  /// returns fits == false, changing nothing, when blocks or quota are short (preempt someone).
  /// When the tokens land in a block shared with a fork, returns the copy the engine must run
  /// first. Full blocks become cached. O(tokens + new blocks).
  append_result append(request_id id, std::span<const token_id> tokens) {
    request& r = get(id, "weft::kv::kv_manager::append");
    append_result res = grow(r, id, tokens.size());
    if (res.fits && r.tokens_known) {
      r.tokens.insert(r.tokens.end(), tokens.begin(), tokens.end());
      commit_full_blocks(r);
    }
    return res;
  }

  /// Appends n tokens whose ids the caller does not pass (a simulator, a scheduler that counts).
  /// Blocks filled from here on are not cached for this request. Otherwise as append(id, tokens).
  append_result append(request_id id, std::size_t n) {
    request& r = get(id, "weft::kv::kv_manager::append");
    append_result res = grow(r, id, n);
    if (res.fits && n > 0) r.tokens_known = false;
    return res;
  }

  /// Starts `child` as a copy of running request `parent` (parallel sampling, beam search): shares
  /// every block, allocates nothing. Returns false, changing nothing, when the child's tenant
  /// quota (the parent's tenant) cannot hold the shared blocks. Throws for unknown parent, swapped
  /// parent or child id in use. O(blocks).
  bool fork(request_id parent, request_id child) {
    constexpr const char* where = "weft::kv::kv_manager::fork";
    const request& p = get(parent, where);
    expects(!p.swapped, errc::precondition, where, "request ", parent, " is swapped out; swap it in before forking");
    expects(child.valid(), errc::invalid_argument, where, "child id is invalid()");
    expects(!requests_.contains(child), errc::already_exists, where, "request ", child, " is already allocated");
    const std::size_t shared = (p.table.num_tokens() + block_size() - 1) / block_size();
    if (!admission_.within_quota(p.options.tenant, shared)) return false;
    request c(block_size());
    c.table = p.table.fork(cache_);
    c.tokens = p.tokens;
    c.keys = p.keys;
    c.prints = p.prints;
    c.committed = p.committed;
    c.tokens_known = p.tokens_known;
    c.options = p.options;
    c.media = p.media;
    admission_.charge(c.options.tenant, c.table.num_blocks());
    requests_.emplace(child, std::move(c));
    return true;
  }

  /// Releases a finished or aborted request's blocks (device, tail first; or host if swapped).
  /// Cached blocks stay reusable until evicted. Throws for an unknown id. O(blocks).
  void free(request_id id) {
    auto it = find(id, "weft::kv::kv_manager::free");
    request& r = it->second;
    if (r.swapped) {
      for (const host_block_id h : r.host_blocks) host_->release(block_id(h.value()));
    } else {
      admission_.refund(r.options.tenant, r.table.num_blocks());
      r.table.release(cache_);
    }
    requests_.erase(it);
  }

  /// Preempts a running request to the host tier: returns the device-to-host copy plan (coarse
  /// units) and releases its device blocks (cached ones stay reusable on the device). Full blocks
  /// whose content the host tier already holds are shared there, not copied (plan.blocks counts
  /// only the copies); the host copies of full blocks become host-tier prefix-cache entries that
  /// later prompts can copy in. nullopt, changing nothing, when the host tier lacks room. Throws when
  /// there is no host tier or the request is unknown or already swapped. O(blocks).
  std::optional<swap_plan> swap_out(request_id id) {
    constexpr const char* where = "weft::kv::kv_manager::swap_out";
    request& r = get(id, where);
    expects(host_ != nullptr, errc::unsupported, where, "no host tier: set kv_config::host_blocks");
    expects(!r.swapped, errc::precondition, where, "request ", id, " is already swapped out");
    // Full blocks whose content the host tier already caches (a shared prefix swapped out before)
    // are shared there, not copied again. Take them before allocating so allocation cannot evict them.
    const std::size_t n = r.table.num_blocks();
    std::vector<block_id> host(n, block_id::invalid());
    std::size_t hit = 0, revive = 0;
    for (std::size_t i = 0; i < n && i < r.committed; ++i) {
      if (const auto h = host_->find(chain_of(r), i)) {
        host[i] = *h;
        ++hit;
        if (host_->is_free(*h)) ++revive;
      }
    }
    if (n - hit + revive > host_->free_blocks()) return std::nullopt;
    for (const block_id h : host)
      if (h.valid()) host_->acquire(h);
    fresh_.clear();
    host_->allocate(n - hit, fresh_);
    std::sort(fresh_.begin(), fresh_.end());  // ascending ids make longer copy units
    std::vector<block_id> copy_dev;
    std::vector<host_block_id> copy_host;
    const auto dev = r.table.blocks();
    for (std::size_t i = 0, f = 0; i < n; ++i) {
      if (host[i].valid()) continue;
      host[i] = fresh_[f++];
      copy_dev.push_back(dev[i]);
      copy_host.push_back(host_block_id(host[i].value()));
      if (i < r.committed) host_->commit(host[i], chain_of(r), i);
    }
    swap_plan p = make_swap_plan(swap_direction::out, copy_dev, copy_host, config_.max_copy_unit_blocks);
    std::vector<host_block_id> hb(n);
    for (std::size_t i = 0; i < n; ++i) hb[i] = host_block_id(host[i].value());
    r.swapped_tokens = r.table.num_tokens();
    admission_.refund(r.options.tenant, r.table.num_blocks());
    r.table.release(cache_);
    r.host_blocks = std::move(hb);
    r.swapped = true;
    return p;
  }

  /// Resumes a swapped request: blocks whose content is still cached on the device are shared
  /// (no copy); the rest are allocated and listed in the host-to-device plan; host blocks are
  /// freed. nullopt, changing nothing, when device blocks (plus watermark) or quota are short.
  /// Throws when the request is unknown or not swapped. O(blocks).
  std::optional<swap_plan> swap_in(request_id id) {
    constexpr const char* where = "weft::kv::kv_manager::swap_in";
    request& r = get(id, where);
    expects(r.swapped, errc::precondition, where, "request ", id, " is not swapped out");
    const std::size_t n = r.host_blocks.size();
    std::size_t hit = 0, revive = 0;
    hits_.assign(n, block_id::invalid());
    for (std::size_t i = 0; i < n && i < r.committed; ++i) {
      if (auto b = cache_.find(chain_of(r), i)) {
        hits_[i] = *b;
        ++hit;
        if (cache_.is_free(*b)) ++revive;
      }
    }
    if (!admission_.fits(n - hit + revive, free_blocks()) || !admission_.within_quota(r.options.tenant, n))
      return std::nullopt;
    for (const block_id b : hits_)
      if (b.valid()) cache_.acquire(b);
    fresh_.clear();
    cache_.allocate(n - hit, fresh_);
    std::sort(fresh_.begin(), fresh_.end());  // ascending ids make longer copy units
    std::vector<block_id> device(n);
    std::vector<block_id> copy_dev;
    std::vector<host_block_id> copy_host;
    for (std::size_t i = 0, f = 0; i < n; ++i) {
      if (hits_[i].valid()) {
        device[i] = hits_[i];
      } else {
        device[i] = fresh_[f++];
        copy_dev.push_back(device[i]);
        copy_host.push_back(r.host_blocks[i]);
        if (i < r.committed) cache_.commit(device[i], chain_of(r), i);
      }
    }
    swap_plan p = make_swap_plan(swap_direction::in, copy_dev, copy_host, config_.max_copy_unit_blocks);
    for (const host_block_id h : r.host_blocks) host_->release(block_id(h.value()));
    r.host_blocks.clear();
    r.table.adopt(device);
    r.table.advance(r.swapped_tokens);
    r.swapped = false;
    admission_.charge(r.options.tenant, n);
    return p;
  }

  /// Calls `handler` for every verify-on-hit mismatch (kv_config::verify_on_hit) in the device or
  /// host tier, after counting it in that tier's cache().collisions(); empty to stop. O(1).
  void set_collision_handler(const std::function<void(const key_collision&)>& handler) {
    cache_.set_collision_handler(handler);
    if (host_) host_->set_collision_handler(handler);
  }

  /// Drops every cached key. Returns false, changing nothing, while any request holds blocks. O(capacity).
  bool reset_prefix_cache() { return cache_.reset(); }

  // ----- what the kernel needs -------------------------------------------------------------------
  bool contains(request_id id) const noexcept { return requests_.contains(id); }
  bool is_swapped(request_id id) const { return get(id, "weft::kv::kv_manager::is_swapped").swapped; }
  /// Tokens the request holds (swapped requests report what they will resume with). O(1).
  std::size_t num_tokens(request_id id) const {
    const request& r = get(id, "weft::kv::kv_manager::num_tokens");
    return r.swapped ? r.swapped_tokens : r.table.num_tokens();
  }
  /// The request's block-table row (empty while swapped). Valid until the next call that changes
  /// this request. O(1).
  std::span<const block_id> blocks(request_id id) const {
    return get(id, "weft::kv::kv_manager::blocks").table.blocks();
  }
  /// Flat slots of tokens [first, first + out.size()). See block_table::slot_mapping. O(out.size()).
  void slot_mapping(request_id id, std::size_t first, std::span<std::int64_t> out) const {
    get(id, "weft::kv::kv_manager::slot_mapping").table.slot_mapping(first, out);
  }
  /// Host blocks of a swapped request, in logical order (empty while running). O(1).
  std::span<const host_block_id> host_blocks(request_id id) const {
    return get(id, "weft::kv::kv_manager::host_blocks").host_blocks;
  }
  /// Visits every live request as (request_id, const block_table&, bool swapped). O(requests).
  template <class F>
  void for_each_request(F&& f) const {
    for (const auto& [id, r] : requests_) f(id, r.table, r.swapped);
  }

 private:
  struct request {
    explicit request(std::size_t bs) : table(bs) {}
    block_table table;
    std::vector<token_id> tokens;        // known token ids (prompt + decoded), for block keys
    std::vector<block_key> keys;         // keys of tokens' full blocks
    std::vector<block_key> prints;       // verify_on_hit: fingerprints of the same blocks
    std::size_t committed = 0;           // blocks [0, committed) were offered to the cache
    bool tokens_known = true;            // false after a count-only append: stop caching
    request_options options;             // media span cleared; see media
    std::vector<multimodal_item> media;  // owned copy of options.media
    bool swapped = false;
    std::size_t swapped_tokens = 0;
    std::vector<host_block_id> host_blocks;  // while swapped, host copy of table blocks in order
  };
  struct prompt_plan {
    bool ok = false;
    std::size_t new_blocks = 0;
    std::vector<block_key> keys;
    std::vector<block_key> prints;
  };

  static const kv_config& validated(const kv_config& c) {
    constexpr const char* where = "weft::kv::kv_manager::kv_manager";
    expects(c.num_blocks >= 2, errc::invalid_argument, where, "num_blocks must be >= 2 (block 0 is null), got ",
            c.num_blocks);
    expects(c.block_size > 0, errc::invalid_argument, where, "block_size must be positive");
    expects(c.host_blocks == 0 || c.host_blocks >= 2, errc::invalid_argument, where,
            "host_blocks must be 0 (no host tier) or >= 2, got ", c.host_blocks);
    expects(c.watermark >= 0.0 && c.watermark < 1.0, errc::invalid_argument, where, "watermark must be in [0, 1), got ",
            c.watermark);
    expects(c.max_copy_unit_blocks > 0, errc::invalid_argument, where, "max_copy_unit_blocks must be positive");
    return c;
  }

  // Computes keys, finds hits (into hits_) and checks room and quota; changes no reference.
  prompt_plan plan(std::span<const token_id> prompt, const request_options& options) {
    prompt_plan p;
    hits_.clear();
    host_hits_.clear();
    if (config_.enable_prefix_caching) {
      const key_options ko = key_options_for(options, options.media);
      cache_.extend_keys(prompt, ko, p.keys);
      if (config_.verify_on_hit) cache_.extend_prints(prompt, ko, p.prints);
      const std::size_t max_hit = std::min(p.keys.size(), (prompt.size() - 1) / block_size());
      const block_chain chain{std::span<const block_key>(p.keys).first(max_hit), prompt, p.prints};
      cache_.match(chain, &hits_);
      host_hits_.clear();
      if (host_) {
        // The prefix continues in the host tier: those blocks are copied in instead of recomputed.
        for (std::size_t i = hits_.size(); i < max_hit; ++i) {
          const auto h = host_->find(chain, i);
          if (!h) break;
          host_hits_.push_back(host_block_id(h->value()));
        }
      }
    }
    std::size_t revive = 0;
    for (const block_id b : hits_) revive += cache_.is_free(b) ? 1 : 0;
    const std::size_t total = (prompt.size() + block_size() - 1) / block_size();
    p.new_blocks = total - hits_.size();
    p.ok = admission_.fits(p.new_blocks + revive, free_blocks()) && admission_.within_quota(options.tenant, total);
    return p;
  }

  append_result grow(request& r, request_id id, std::size_t n) {
    expects(!r.swapped, errc::precondition, "weft::kv::kv_manager::append", "request ", id,
            " is swapped out; swap_in before appending");
    const std::size_t before = r.table.num_blocks();
    if (!admission_.within_quota(r.options.tenant, r.table.blocks_needed(n))) return {};
    append_result res = r.table.append(cache_, n);
    if (res.fits) admission_.charge(r.options.tenant, r.table.num_blocks() - before);
    return res;
  }

  void commit_full_blocks(request& r) {
    if (!config_.enable_prefix_caching || !r.tokens_known) return;
    if (r.tokens.size() / block_size() == r.committed) return;  // no block filled up: nothing to hash
    const key_options ko = key_options_for(r.options, r.media);
    cache_.extend_keys(r.tokens, ko, r.keys);
    if (config_.verify_on_hit) cache_.extend_prints(r.tokens, ko, r.prints);
    const auto blocks = r.table.blocks();
    for (; r.committed < r.keys.size(); ++r.committed) cache_.commit(blocks[r.committed], chain_of(r), r.committed);
  }

  // What enters a request's block keys: its salt, adapter and media, and its tenant when the
  // cache is isolated per tenant.
  key_options key_options_for(const request_options& o, std::span<const multimodal_item> media) const {
    key_options k{o.cache_salt, o.adapter_id, media, std::nullopt};
    if (config_.isolate_tenants) k.tenant = o.tenant;
    return k;
  }
  // The request's full blocks as the prefix cache indexes them (tokens and fingerprints are
  // used only with verify_on_hit).
  static block_chain chain_of(const request& r) { return block_chain{r.keys, r.tokens, r.prints}; }

  request& get(request_id id, const char* where) { return find(id, where)->second; }
  const request& get(request_id id, const char* where) const {
    auto it = requests_.find(id);
    expects(it != requests_.end(), errc::not_found, where, "request ", id,
            " is not allocated (never was, or was freed)");
    return it->second;
  }
  typename std::unordered_map<request_id, request>::iterator find(request_id id, const char* where) {
    auto it = requests_.find(id);
    expects(it != requests_.end(), errc::not_found, where, "request ", id,
            " is not allocated (never was, or was freed)");
    return it;
  }

  kv_config config_;
  cache_type cache_;
  std::unique_ptr<cache_type> host_;  // host tier: same structure over host block ids
  admission_controller admission_;
  std::unordered_map<request_id, request> requests_;
  std::vector<block_id> hits_;            // scratch: prefix hits of the call in progress
  std::vector<block_id> fresh_;           // scratch: fresh blocks of the call in progress
  std::vector<host_block_id> host_hits_;  // scratch: host-tier prefix hits of the call in progress
  prefix_stats stats_;
};

}  // namespace weft::kv

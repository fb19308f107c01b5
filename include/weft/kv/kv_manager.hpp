// weft::kv::kv_manager: the per-request facade a batch scheduler drives — prompt allocation with
// prefix-cache hits, slots for each prefill chunk and decode token, compute-aware publishing of full
// blocks, copy-on-write forks, frees, swap to the host tier and back, admission queries and
// all-or-nothing transactions. Composes block_table, hashed_prefix_cache, host_tier and
// admission_controller the way vLLM's KVCacheManager composes its block pool (Kwon et al. 2023).
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/detail/reserve_more.hpp>
#include <weft/core/error.hpp>
#include <weft/core/hash.hpp>
#include <weft/kv/admission.hpp>
#include <weft/kv/block_hasher.hpp>
#include <weft/kv/block_table.hpp>
#include <weft/kv/concepts.hpp>
#include <weft/kv/detail/request_index.hpp>
#include <weft/kv/detail/undo_journal.hpp>
#include <weft/kv/hashed_prefix_cache.hpp>
#include <weft/kv/host_tier.hpp>
#include <weft/kv/types.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace weft::kv {

/// Sizes and switches of a kv_manager.
struct kv_config {
  std::size_t num_blocks = 0;   ///< device block ids including the null block 0 (usable = num_blocks - 1)
  std::size_t block_size = 16;  ///< tokens per block
  std::size_t host_blocks = 0;  ///< host-tier block ids including the reserved 0; 0 = no host tier
  /// Fraction of usable blocks a new prompt (or a swap-in) must leave free, so running sequences can
  /// keep decoding (vLLM's watermark). Waived while no request holds a device block: a watermark
  /// must never keep an idle machine idle.
  double watermark = 0.01;
  bool enable_prefix_caching = true;
  std::size_t max_copy_unit_blocks = std::numeric_limits<std::uint32_t>::max();  ///< cap per swap unit
  /// KV bytes of one token (keys and values of every layer), used only to report sizes
  /// (bytes_per_block); 0 = unknown.
  std::size_t bytes_per_token = 0;
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
  std::size_t slots = 0;            ///< tokens that have a slot after the call (num_tokens(id))
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
///
/// A request holds token ids (its prompt, then decoded tokens as they are appended) and slots: the
/// cache positions of the tokens whose KV is written or being written (num_tokens). Slots come at
/// allocate_prompt (the cached prefix plus as many prompt tokens as asked), grow (the next prefill
/// chunk) and append (decoded tokens with their ids). A request allocated by length instead of token
/// ids is counted only: it never hits or feeds the prefix cache (a simulator's mode).
///
/// Compute-aware publishing: a full block enters the prefix cache only after the engine reports its
/// KV computed with computed(id, n); until then no other request can hit it. Blocks copied in from
/// the host tier (prompt host hits, swap_in) and blocks shared by fork follow the same rule.
///
/// With a host tier (kv_config::host_blocks), the prefix cache spans both tiers: swapped-out full
/// blocks stay cached in host memory (LRU) and a prompt whose prefix continues there gets those
/// blocks copied in (prompt_allocation::host_to_device) instead of recomputed. Copy plans must run in
/// the order they were returned (a host block a swap-out writes may be read by a later copy-in).
///
/// Engine loop, with or without weft::sched:
///   admit:    if (auto a = kv.allocate_prompt(id, prompt, opts)) prefill from a->cached_tokens;
///   decode:   auto r = kv.append(id, {next_token}); if (!r) preempt someone; if (r.copy) run it;
///   computed: after each step, kv.computed(id, tokens_whose_kv_is_written);
///   finish:   kv.free(id);
///   preempt:  kv.swap_out(id) -> copy plan (or kv.free(id) to recompute later); resume: kv.swap_in(id).
/// Give the kernel kv.blocks(id) (block-table row) and kv.slot_mapping(id, ...).
///
/// Failures that are expected (no room, quota) return false/nullopt and change nothing; misuse
/// (unknown or duplicate request id, appending to a swapped request) throws weft::error and changes
/// nothing. Between begin_transaction() and commit_transaction(), every change is journaled and
/// rollback_transaction() undoes all of them exactly (free-list order included); inside a
/// transaction every call is also all-or-nothing against bad_alloc. Not thread-safe: one scheduler
/// thread owns it; do not move it while a transaction is open. Complexity per call is O(blocks and
/// tokens touched) plus O(1) expected per request lookup.
template <block_hasher Hasher = default_block_hasher>
class kv_manager {
 public:
  using cache_type = hashed_prefix_cache<Hasher>;
  /// allocate_prompt's default: give every prompt token a slot.
  static constexpr std::size_t whole_prompt = std::numeric_limits<std::size_t>::max();

  explicit kv_manager(const kv_config& config, Hasher hasher = Hasher{})
      : config_(validated(config)),
        cache_(config.num_blocks, config.block_size, hasher,
               config.verify_on_hit ? hit_check::verify_content : hit_check::key_only) {
    if (config.host_blocks > 0)
      host_ = std::make_unique<cache_type>(config.host_blocks, config.block_size, hasher, cache_.verification(),
                                           cache_.fingerprint_hasher());
    admission_.set_watermark_blocks(
        static_cast<std::size_t>(std::floor(config.watermark * static_cast<double>(cache_.pool().usable_blocks()))));
    bytes_per_block_ = checked_mul(config.bytes_per_token, config.block_size, "weft::kv::kv_manager::kv_manager");
  }
  kv_manager(kv_manager&&) noexcept = default;
  kv_manager& operator=(kv_manager&&) noexcept = default;
  kv_manager(const kv_manager&) = delete;
  kv_manager& operator=(const kv_manager&) = delete;

  // ----- sizes ---------------------------------------------------------------------------------
  std::size_t block_size() const noexcept { return config_.block_size; }
  std::size_t free_blocks() const noexcept { return cache_.free_blocks(); }
  std::size_t used_blocks() const noexcept { return cache_.used_blocks(); }
  std::size_t usable_blocks() const noexcept { return cache_.pool().usable_blocks(); }
  std::size_t watermark_blocks() const noexcept { return admission_.watermark_blocks(); }
  std::size_t host_free_blocks() const noexcept { return host_ ? host_->free_blocks() : 0; }
  /// KV bytes of one block (kv_config::bytes_per_token * block_size; 0 = unknown). O(1).
  std::size_t bytes_per_block() const noexcept { return bytes_per_block_; }
  /// The host tier: a hashed_prefix_cache over host block ids (stored as block_id values), or
  /// nullptr without one. Its keyed blocks are the host half of the two-tier prefix cache.
  const cache_type* host_cache() const noexcept { return host_.get(); }
  std::size_t num_requests() const noexcept { return index_.size(); }
  const kv_config& config() const noexcept { return config_; }
  const prefix_stats& stats() const noexcept { return stats_; }
  const cache_type& cache() const noexcept { return cache_; }
  admission_controller& admission() noexcept { return admission_; }
  const admission_controller& admission() const noexcept { return admission_; }

  // ----- admission -----------------------------------------------------------------------------
  /// Whether a request of num_tokens tokens fits now with no prefix hit, leaving the watermark. O(1).
  bool can_fit(std::size_t num_tokens) const noexcept { return fits_new(blocks_for(num_tokens)); }

  /// Whether allocate_prompt(id, prompt, options) would succeed now (prefix hits counted). O(prompt).
  bool can_allocate_prompt(std::span<const token_id> prompt, const request_options& options = {}) {
    if (prompt.empty()) return false;
    return plan(prompt, prompt.size(), options, 0, lookup::probe, nullptr).ok;
  }

  /// Leading tokens of prompt that allocate_prompt would find cached (device hits, then host hits;
  /// a multiple of block_size and less than prompt.size()). Changes nothing (with verify_on_hit, a
  /// mismatch found here is not counted: allocate_prompt counts it). O(prompt).
  std::size_t cached_prefix_tokens(std::span<const token_id> prompt, const request_options& options = {}) const {
    return cached_prefix(prompt, options, nullptr);
  }
  /// As above, starting from keys compute_prompt_keys computed for prompt (or a prefix of it): only the
  /// blocks past them are hashed. Throws weft::error (invalid_argument), changing nothing, when `known`
  /// was computed by another manager, over other tokens or with other options. O(prompt) fast hashing.
  std::size_t cached_prefix_tokens(std::span<const token_id> prompt, const request_options& options,
                                   const prompt_keys& known) const {
    check_keys(known, prompt, options, "weft::kv::kv_manager::cached_prefix_tokens");
    return cached_prefix(prompt, options, &known);
  }

  /// The content keys of prompt's full blocks under options (and their verify_on_hit fingerprints),
  /// computed now so that allocate_prompt and cached_prefix_tokens, given them, hash nothing of the
  /// prompt: a scheduler computes them when a request is submitted, off its per-iteration path. They
  /// are valid for this manager (and its moved-to object), this prompt or a longer one starting with
  /// it, and the same options; the calls that take them check that. Throws weft::error for media
  /// outside the prompt or out of order. O(prompt) hashing.
  prompt_keys compute_prompt_keys(std::span<const token_id> prompt, const request_options& options = {}) const {
    check_media(request_id::invalid(), options.media, prompt.size(), "weft::kv::kv_manager::compute_prompt_keys");
    prompt_keys k;
    k.tokens = prompt.size();
    k.check = keys_check(prompt, options);
    if (config_.enable_prefix_caching && !prompt.empty()) {
      const key_options ko = key_options_of(options, options.media);
      cache_.extend_keys(prompt, ko, k.keys);
      if (config_.verify_on_hit) cache_.extend_prints(prompt, ko, k.prints);
    }
    return k;
  }

 private:
  std::size_t cached_prefix(std::span<const token_id> prompt, const request_options& options,
                            const prompt_keys* known) const {
    if (prompt.empty() || !config_.enable_prefix_caching) return 0;
    const key_options ko = key_options_of(options, options.media);
    probe_keys_.clear();
    probe_prints_.clear();
    if (known != nullptr) {
      probe_keys_.assign(known->keys.begin(), known->keys.end());
      probe_prints_.assign(known->prints.begin(), known->prints.end());
    }
    cache_.extend_keys(prompt, ko, probe_keys_);
    if (config_.verify_on_hit) cache_.extend_prints(prompt, ko, probe_prints_);
    const std::size_t max_hit = std::min(probe_keys_.size(), (prompt.size() - 1) / block_size());
    const block_chain chain{std::span<const block_key>(probe_keys_).first(max_hit), prompt, probe_prints_};
    std::size_t hit = cache_.peek_match(chain);
    if (host_)
      while (hit < max_hit && host_->peek(chain, hit)) ++hit;
    return hit * block_size();
  }

 public:
  /// Whether append(id, n) would fit now (decode may dip into the watermark). O(1) expected.
  bool can_append(request_id id, std::size_t n) const {
    const request& r = get(id, "weft::kv::kv_manager::can_append");
    if (r.s.swapped) return false;
    const std::size_t need = r.table.blocks_needed(n) + (r.table.needs_copy(cache_, n) ? 1 : 0);
    return need <= free_blocks() && admission_.within_quota(r.s.options.tenant, r.table.blocks_needed(n));
  }

  // ----- lifecycle -----------------------------------------------------------------------------
  /// Registers a new request with its prompt token ids, reusing cached blocks of its longest cached
  /// prefix (never the block holding the last prompt token: it must be computed to produce logits),
  /// and gives slots to max(cached tokens, min(slots, prompt size)) tokens — by default the whole
  /// prompt; a scheduler doing chunked prefill asks for fewer and grows later. Returns nullopt,
  /// changing nothing, when the whole prompt's blocks (plus the watermark) or the tenant's quota are
  /// not available. Throws for an empty prompt, an invalid or already used id, or media outside the
  /// prompt or out of order. Cached blocks count as computed; nothing new is published. O(prompt).
  std::optional<prompt_allocation> allocate_prompt(request_id id, std::span<const token_id> prompt,
                                                   const request_options& options = {},
                                                   std::size_t slots = whole_prompt) {
    constexpr const char* where = "weft::kv::kv_manager::allocate_prompt";
    check_new_id(id, where);
    expects(!prompt.empty(), errc::invalid_argument, where, "request ", id, " has an empty prompt");
    check_media(id, options.media, prompt.size(), where);
    return atomically([&] { return allocate(id, prompt, prompt.size(), options, slots); });
  }
  /// As above, starting from keys compute_prompt_keys computed for prompt (or a prefix of it: a
  /// request readmitted with its decoded tokens): only the blocks past them are hashed. Throws
  /// weft::error (invalid_argument), changing nothing, when `known` was computed by another manager,
  /// over other tokens or with other options. O(prompt) fast hashing plus the new blocks' keys.
  std::optional<prompt_allocation> allocate_prompt(request_id id, std::span<const token_id> prompt,
                                                   const request_options& options, std::size_t slots,
                                                   const prompt_keys& known) {
    constexpr const char* where = "weft::kv::kv_manager::allocate_prompt";
    check_new_id(id, where);
    expects(!prompt.empty(), errc::invalid_argument, where, "request ", id, " has an empty prompt");
    check_media(id, options.media, prompt.size(), where);
    check_keys(known, prompt, options, where);
    return atomically([&] { return allocate(id, prompt, prompt.size(), options, slots, &known); });
  }

  /// As allocate_prompt, for a request whose token ids the caller does not have (a simulator, a
  /// scheduler that counts): `length` tokens, no prefix hit, nothing ever cached. O(blocks).
  std::optional<prompt_allocation> allocate_prompt(request_id id, std::size_t length,
                                                   const request_options& options = {},
                                                   std::size_t slots = whole_prompt) {
    constexpr const char* where = "weft::kv::kv_manager::allocate_prompt";
    check_new_id(id, where);
    expects(length > 0, errc::invalid_argument, where, "request ", id, " has an empty prompt");
    return atomically([&] { return allocate(id, {}, length, options, slots); });
  }

  /// Gives slots to the request's first `tokens` tokens (the next prefill chunk), whose ids it
  /// already holds (a request allocated by length holds none, and may grow freely). All-or-nothing:
  /// returns fits == false, changing nothing, when blocks or quota are short; a copy order when the
  /// first new slot lands in a block shared with a fork. No-op when the request already holds that
  /// many. Throws for an unknown or swapped request, or tokens beyond its known ids. O(new blocks).
  append_result grow(request_id id, std::size_t tokens) {
    constexpr const char* where = "weft::kv::kv_manager::grow";
    request& r = get(id, where);
    expects(!r.s.swapped, errc::precondition, where, "request ", id, " is swapped out; swap_in before growing");
    expects(!r.s.tokens_known || tokens <= r.s.tokens.size(), errc::out_of_range, where, "request ", id, " knows ",
            r.s.tokens.size(), " token ids, so ", tokens, " tokens cannot get slots; append the new ids instead");
    if (tokens <= r.table.num_tokens()) return {true, std::nullopt};
    return atomically([&] { return extend(r, tokens - r.table.num_tokens()); });
  }

  /// Appends decoded tokens to a running request: their ids and their slots (their KV is written this
  /// step). All-or-nothing: returns fits == false, changing nothing, when blocks or quota are short
  /// (preempt someone). When the tokens land in a block shared with a fork, returns the copy the
  /// engine must run first. Throws when the request still holds prompt ids without slots (grow those
  /// first). For a request allocated by length the ids are dropped. O(tokens + new blocks).
  append_result append(request_id id, std::span<const token_id> tokens) {
    constexpr const char* where = "weft::kv::kv_manager::append";
    request& r = get(id, where);
    expects(!r.s.swapped, errc::precondition, where, "request ", id, " is swapped out; swap_in before appending");
    expects(!r.s.tokens_known || r.s.tokens.size() == r.table.num_tokens(), errc::precondition, where, "request ", id,
            " holds ", r.s.tokens.size() - r.table.num_tokens(), " token ids without slots; grow() them first");
    return atomically([&] {
      if (r.s.tokens_known) weft::detail::reserve_more(r.s.tokens, tokens.size());  // the only throw: first
      append_result res = extend(r, tokens.size());
      if (res.fits && r.s.tokens_known) r.s.tokens.insert(r.s.tokens.end(), tokens.begin(), tokens.end());
      return res;
    });
  }

  /// Appends n tokens whose ids the caller does not pass (a simulator, a scheduler that counts).
  /// Blocks filled from here on are never cached for this request. Otherwise as append(id, tokens).
  append_result append(request_id id, std::size_t n) {
    constexpr const char* where = "weft::kv::kv_manager::append";
    request& r = get(id, where);
    expects(!r.s.swapped, errc::precondition, where, "request ", id, " is swapped out; swap_in before appending");
    return atomically([&] {
      const bool was_known = r.s.tokens_known;
      append_result res = extend(r, n);
      if (res.fits && n > 0 && was_known) r.s.tokens_known = false;  // extend() recorded the old value
      return res;
    });
  }

  /// The engine computed (wrote) the KV of the request's first `tokens` tokens: full blocks among
  /// them enter the prefix cache now (with their content key), and not before. `tokens` never goes
  /// back and never exceeds num_tokens(id). Calling it again with the same count publishes blocks
  /// copied in since (swap_in, host hits). Throws for an unknown or swapped request or a bad count.
  /// O(new full blocks) plus hashing their tokens.
  void computed(request_id id, std::size_t tokens) {
    constexpr const char* where = "weft::kv::kv_manager::computed";
    request& r = get(id, where);
    expects(!r.s.swapped, errc::precondition, where, "request ", id, " is swapped out");
    expects(tokens <= r.table.num_tokens(), errc::out_of_range, where, "request ", id, " has slots for ",
            r.table.num_tokens(), " tokens; KV of ", tokens, " tokens cannot have been computed");
    expects(tokens >= r.s.computed, errc::invalid_argument, where, "request ", id, " already reported ", r.s.computed,
            " tokens computed; the count cannot go back to ", tokens);
    atomically([&] {
      record_shape(r);
      r.s.computed = tokens;
      publish(r);
    });
  }

  /// Starts `child` as a copy of running request `parent` (parallel sampling, beam search): shares
  /// every block holding a slot, allocates nothing, and copies its token ids and computed count
  /// (shared blocks not yet published stay unpublished until computed() says so). Returns false,
  /// changing nothing, when the child's tenant quota (the parent's tenant) cannot hold the shared
  /// blocks. Throws for unknown parent, swapped parent or child id in use. O(blocks + tokens).
  bool fork(request_id parent, request_id child) {
    constexpr const char* where = "weft::kv::kv_manager::fork";
    const std::uint32_t pseq = seq_of(parent, where);
    expects(!seqs_[pseq].s.swapped, errc::precondition, where, "request ", parent,
            " is swapped out; swap it in before forking");
    check_new_id(child, where);
    const std::size_t shared = blocks_for(seqs_[pseq].table.num_tokens());
    if (!admission_.within_quota(seqs_[pseq].s.options.tenant, shared)) return false;
    return atomically([&] {
      sequence_state state = seqs_[pseq].s;  // copies first: the only throws
      state.id = child;
      const std::uint32_t cseq = create(child);
      request& c = seqs_[cseq];
      const request& p = seqs_[pseq];  // create() may have moved the slab
      c.table = p.table.fork(cache_);
      c.s = std::move(state);
      c.s.tail_shared = true;
      if (!seqs_[pseq].s.tail_shared) {
        record_shape(seqs_[pseq]);  // the parent's last block is shared now too
        seqs_[pseq].s.tail_shared = true;
      }
      charge(c.s.options.tenant, c.table.num_blocks());
      return true;
    });
  }

  /// Releases a finished or aborted request's blocks (device, tail first; or host if swapped).
  /// Published blocks stay reusable until evicted. Throws for an unknown id; for a known one it
  /// cannot throw (frees_without_failing), so a caller may free last, after committing its
  /// transaction (outside one, no undo records are written). O(blocks).
  void free(request_id id) {
    const std::uint32_t seq = seq_of(id, "weft::kv::kv_manager::free");
    atomically([&] { erase(seq); });
  }

  /// Preempts a running request to the host tier: returns the device-to-host copy plan (coarse units)
  /// of the blocks holding its computed tokens and releases every device block (published ones stay
  /// reusable on the device). Slots past the computed tokens are dropped (their KV was never
  /// written); the token ids are kept. Full blocks whose content the host tier already holds are
  /// shared there, not copied (plan.blocks counts only the copies); the host copies of published
  /// blocks become host-tier prefix-cache entries that later prompts can copy in. nullopt, changing
  /// nothing, when there is no host tier or it lacks room. Throws when the request is unknown or
  /// already swapped. O(blocks).
  std::optional<swap_plan> swap_out(request_id id) {
    constexpr const char* where = "weft::kv::kv_manager::swap_out";
    request& r = get(id, where);
    expects(!r.s.swapped, errc::precondition, where, "request ", id, " is already swapped out");
    if (!host_) return std::nullopt;
    // Full blocks whose content the host tier already caches (a shared prefix swapped out before)
    // are shared there, not copied again.
    const std::size_t n = blocks_for(r.s.computed);
    std::size_t hit = 0, revive = 0;
    for (std::size_t i = 0; i < n && i < r.s.committed; ++i) {
      if (const auto h = host_->peek(chain_of(r), i)) {
        ++hit;
        if (host_->is_free(*h)) ++revive;
      }
    }
    if (n - hit + revive > host_->free_blocks()) return std::nullopt;
    return atomically([&] { return swap_out_now(r, n); });
  }

  /// Resumes a swapped request: blocks whose content is still published on the device are shared
  /// (no copy); the rest get fresh blocks, listed in the host-to-device plan, and are published only
  /// at the next computed() call (after the engine ran the copy); host blocks are freed. nullopt,
  /// changing nothing, when device blocks (plus watermark) or quota are short. Throws when the
  /// request is unknown or not swapped. O(blocks).
  std::optional<swap_plan> swap_in(request_id id) {
    constexpr const char* where = "weft::kv::kv_manager::swap_in";
    request& r = get(id, where);
    expects(r.s.swapped, errc::precondition, where, "request ", id, " is not swapped out");
    const std::size_t n = r.s.host_blocks.size();
    std::size_t hit = 0, revive = 0;
    for (std::size_t i = 0; i < n && i < r.s.committed; ++i) {
      if (const auto b = cache_.peek(chain_of(r), i)) {
        ++hit;
        if (cache_.is_free(*b)) ++revive;
      }
    }
    if (!fits_new(n - hit + revive) || !admission_.within_quota(r.s.options.tenant, n)) return std::nullopt;
    return atomically([&] { return swap_in_now(r, n); });
  }

  /// Calls `handler` for every verify-on-hit mismatch (kv_config::verify_on_hit) in the device or
  /// host tier, after counting it in that tier's cache().collisions(); empty to stop. Mismatches
  /// found by what-if queries (cached_prefix_tokens, can_allocate_prompt, the room checks of
  /// swap_out and swap_in) are neither counted nor reported. O(1).
  void set_collision_handler(const std::function<void(const key_collision&)>& handler) {
    cache_.set_collision_handler(handler);
    if (host_) host_->set_collision_handler(handler);
  }

  /// Drops every cached key. Returns false, changing nothing, while any request holds blocks. Throws
  /// inside a transaction. O(capacity).
  bool reset_prefix_cache() {
    expects(!tx_open_, errc::precondition, "weft::kv::kv_manager::reset_prefix_cache",
            "cannot reset the prefix cache inside a transaction");
    return cache_.reset();
  }

  // ----- transactions --------------------------------------------------------------------------
  /// Starts journaling every change, so rollback_transaction() can undo them all (a batch
  /// scheduler's iteration is one transaction: it either happens whole or not at all). Throws when a
  /// transaction is already open. O(1).
  void begin_transaction() {
    expects(!tx_open_, errc::precondition, "weft::kv::kv_manager::begin_transaction",
            "a transaction is already open (transactions do not nest)");
    journal_.clear();
    shapes_.clear();
    states_.clear();
    charges_.clear();
    stats_before_ = stats_;
    cache_.attach_journal(&journal_, device_target);
    if (host_) host_->attach_journal(&journal_, host_target);
    tx_open_ = true;
  }
  /// Keeps every change since begin_transaction(). No-op without an open transaction. O(1).
  void commit_transaction() noexcept { close(); }
  /// Undoes every change since begin_transaction(), newest first: requests, tables, token ids,
  /// reference counts, free-list order, cached keys (with verify_on_hit, their stored tokens and
  /// fingerprints, and the collision count), quotas and statistics are as they were. No-op
  /// without an open transaction. O(changes).
  void rollback_transaction() noexcept {
    if (!tx_open_) return;
    undo_to(0);
    stats_ = stats_before_;
    close();
  }
  bool in_transaction() const noexcept { return tx_open_; }

  /// free() of a request this manager holds never throws (weft::sched's schedulers rely on it to
  /// free finished requests outside their transaction).
  static constexpr bool frees_without_failing = true;

  // ----- what the kernel needs -------------------------------------------------------------------
  bool contains(request_id id) const noexcept { return index_.find(id) != detail::request_index::npos; }
  bool is_swapped(request_id id) const { return get(id, "weft::kv::kv_manager::is_swapped").s.swapped; }
  /// Tokens with a slot (swapped requests report the computed tokens they will resume with). O(1).
  std::size_t num_tokens(request_id id) const {
    const request& r = get(id, "weft::kv::kv_manager::num_tokens");
    return r.s.swapped ? r.s.swapped_tokens : r.table.num_tokens();
  }
  /// Tokens whose KV the engine reported computed. O(1).
  std::size_t computed_tokens(request_id id) const {
    return get(id, "weft::kv::kv_manager::computed_tokens").s.computed;
  }
  /// The request's known token ids (prompt, then appended decoded tokens); empty for a request
  /// allocated by length. Valid until the next call that changes this request. O(1).
  std::span<const token_id> tokens(request_id id) const {
    const request& r = get(id, "weft::kv::kv_manager::tokens");
    return r.s.tokens_known ? std::span<const token_id>(r.s.tokens) : std::span<const token_id>();
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
    return get(id, "weft::kv::kv_manager::host_blocks").s.host_blocks;
  }
  /// Visits every live request as (request_id, const block_table&, bool swapped), in a
  /// deterministic order. O(requests ever held at once).
  template <class F>
  void for_each_request(F&& f) const {
    for (const request& r : seqs_)
      if (r.live) f(r.s.id, r.table, r.s.swapped);
  }

 private:
  static constexpr std::uint8_t device_target = 0, host_target = 1, owner_target = 2;

  // Everything a request holds besides its block table: a plain, copyable value, so an undo record
  // can save it whole.
  struct sequence_state {
    request_id id{};
    std::vector<token_id> tokens;        // known token ids (prompt + decoded), for block keys
    std::vector<block_key> keys;         // keys of tokens' full blocks, computed lazily
    std::vector<block_key> prints;       // verify_on_hit: fingerprints of the same blocks (as many as keys)
    std::size_t computed = 0;            // tokens whose KV the engine reported computed
    std::size_t committed = 0;           // blocks [0, committed) were offered to the cache
    bool tokens_known = true;            // false: counted only (allocated by length or a count append)
    request_options options;             // media span cleared; see media
    std::vector<multimodal_item> media;  // owned copy of options.media
    bool swapped = false;
    std::size_t swapped_tokens = 0;
    std::vector<host_block_id> host_blocks;  // while swapped, host copy of table blocks in order
    bool tail_shared = false;                // the partial last block may be shared (set by fork; cleared by an append)
  };
  struct request {
    explicit request(std::size_t bs) : table(bs) {}
    block_table table;
    sequence_state s;
    bool live = false;
  };
  struct prompt_plan {
    bool ok = false;
    std::size_t now_blocks = 0;  // blocks the request holds after the call (hits included)
    std::size_t slot_tokens = 0;
    std::vector<block_key> keys;
    std::vector<block_key> prints;
  };
  // Whether a prefix lookup is a what-if (a verify-on-hit mismatch is not counted) or serves blocks.
  enum class lookup : std::uint8_t { probe, serve };
  // Undo of a hot change (grow, append, computed): everything grows monotonically, so restoring the
  // old sizes restores the request.
  struct shape_record {
    std::uint32_t seq;
    std::size_t table_blocks, table_tokens, tokens, keys, prints, computed, committed;
    bool tokens_known, tail_shared;
  };
  enum class state_kind : std::uint8_t { created, erased, restored };
  // Owner records in the journal: the block field says which log aux indexes.
  static constexpr std::uint32_t owner_shape = 0, owner_state = 1, owner_charged = 2, owner_refunded = 3;
  struct charge_record {
    tenant_id tenant;
    std::size_t blocks;
  };
  // Undo of a rare change: a request created, erased or rebuilt (swap, copy-on-write), or a quota
  // charge.
  struct state_record {
    state_kind what{};
    std::uint32_t seq = 0;
    tenant_id tenant{};
    std::size_t blocks = 0;
    std::vector<block_id> table_ids;
    std::size_t table_tokens = 0;
    std::optional<sequence_state> state;
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

  // The one place the key inputs of a request are assembled: salt, adapter, media, and the tenant
  // when the cache is isolated per tenant.
  key_options key_options_of(const request_options& o, std::span<const multimodal_item> media) const noexcept {
    key_options k{o.cache_salt, o.adapter_id, media, std::nullopt};
    if (config_.isolate_tenants) k.tenant = o.tenant;
    return k;
  }
  // The request's full blocks as the prefix cache indexes them (tokens and fingerprints are read
  // only with verify_on_hit).
  static block_chain chain_of(const request& r) noexcept { return block_chain{r.s.keys, r.s.tokens, r.s.prints}; }

  std::size_t blocks_for(std::size_t tokens) const noexcept {
    return tokens / block_size() + (tokens % block_size() != 0 ? 1 : 0);
  }
  // Whether `blocks` fresh blocks can be taken now, leaving the watermark while anyone holds blocks.
  bool fits_new(std::size_t blocks) const noexcept {
    if (used_blocks() == 0) return blocks <= free_blocks();
    return admission_.fits(blocks, free_blocks());
  }

  void check_new_id(request_id id, const char* where) const {
    expects(id.valid(), errc::invalid_argument, where, "request id is invalid()");
    expects(!contains(id), errc::already_exists, where, "request ", id, " is already allocated");
  }
  // The fingerprint prompt_keys carry: this manager, the tokens they cover and every option a key
  // depends on, under the one fast hash (a mismatch is misuse, not an attack: the keys stay SHA-256).
  std::uint64_t keys_check(std::span<const token_id> tokens, const request_options& o) const noexcept {
    std::uint64_t h = hash_bytes(std::as_bytes(tokens), instance_);
    h = hash_combine(h, o.cache_salt);
    h = hash_combine(h, o.adapter_id);
    h = hash_combine(h, config_.isolate_tenants ? o.tenant.value() : 0);
    return hash_bytes(std::as_bytes(o.media), h);
  }
  void check_keys(const prompt_keys& known, std::span<const token_id> prompt, const request_options& options,
                  const char* where) const {
    expects(known.tokens <= prompt.size() && known.check == keys_check(prompt.first(known.tokens), options),
            errc::invalid_argument, where, "the precomputed prompt keys (over ", known.tokens,
            " tokens) were not computed by this kv_manager's compute_prompt_keys for this prompt's first ",
            std::min(known.tokens, prompt.size()), " tokens with these options");
    const std::size_t full = config_.enable_prefix_caching ? known.tokens / block_size() : 0;
    expects(known.keys.size() == full && known.prints.size() == (config_.verify_on_hit ? full : 0),
            errc::invalid_argument, where, "the precomputed prompt keys hold ", known.keys.size(), " keys and ",
            known.prints.size(), " fingerprints; ", known.tokens, " tokens make ", full, " full blocks");
  }
  static std::uint64_t next_instance() noexcept {
    static std::atomic<std::uint64_t> count{0};
    return hash_combine(count.fetch_add(1, std::memory_order_relaxed), hash_k3);
  }

  static void check_media(request_id id, std::span<const multimodal_item> media, std::size_t prompt,
                          const char* where) {
    for (std::size_t i = 0; i < media.size(); ++i) {
      const multimodal_item& m = media[i];
      expects(m.offset <= prompt && m.length <= prompt - m.offset, errc::invalid_argument, where, "request ", id,
              ": multimodal item ", i, " (offset ", m.offset, ", length ", m.length, ") lies outside the prompt of ",
              prompt, " tokens");
      expects(i == 0 || media[i - 1].offset <= m.offset, errc::invalid_argument, where, "request ", id,
              ": multimodal item ", i, " starts before item ", i - 1, "; media must be sorted by offset");
    }
  }

  // Computes keys, finds hits (into hits_ / host_hits_) and checks room and quota; changes no
  // reference. prompt is empty for a request allocated by length.
  prompt_plan plan(std::span<const token_id> prompt, std::size_t length, const request_options& options,
                   std::size_t slots, lookup how, const prompt_keys* known) {
    prompt_plan p;
    hits_.clear();
    host_hits_.clear();
    if (config_.enable_prefix_caching && !prompt.empty()) {
      const key_options ko = key_options_of(options, options.media);
      if (known != nullptr) {  // computed ahead (check_keys verified them): only the blocks past them
        p.keys = known->keys;
        p.prints = known->prints;
      }
      cache_.extend_keys(prompt, ko, p.keys);
      if (config_.verify_on_hit) cache_.extend_prints(prompt, ko, p.prints);
      const std::size_t max_hit = std::min(p.keys.size(), (prompt.size() - 1) / block_size());
      const block_chain chain{std::span<const block_key>(p.keys).first(max_hit), prompt, p.prints};
      if (how == lookup::serve)
        cache_.match(chain, &hits_);
      else
        cache_.peek_match(chain, &hits_);
      if (host_) {
        // The prefix continues in the host tier: those blocks are copied in instead of recomputed.
        for (std::size_t i = hits_.size(); i < max_hit; ++i) {
          const auto h = how == lookup::serve ? host_->find(chain, i) : host_->peek(chain, i);
          if (!h) break;
          host_hits_.push_back(host_block_id(h->value()));
        }
      }
    }
    std::size_t revive = 0;
    for (const block_id b : hits_) revive += cache_.is_free(b) ? std::size_t{1} : std::size_t{0};
    const std::size_t total = blocks_for(length);
    const std::size_t cached = (hits_.size() + host_hits_.size()) * block_size();
    p.slot_tokens = std::max(cached, std::min(slots, length));
    p.now_blocks = blocks_for(p.slot_tokens);
    p.ok = fits_new(total - hits_.size() + revive) && admission_.within_quota(options.tenant, total);
    return p;
  }

  std::optional<prompt_allocation> allocate(request_id id, std::span<const token_id> prompt, std::size_t length,
                                            const request_options& options, std::size_t slots,
                                            const prompt_keys* known = nullptr) {
    prompt_plan p = plan(prompt, length, options, slots, lookup::serve, known);
    if (!p.ok) return std::nullopt;
    // Everything that can throw first: the request's own copies and the plan.
    sequence_state st;
    st.id = id;
    st.options = options;
    st.options.media = {};
    st.media.assign(options.media.begin(), options.media.end());
    st.tokens_known = !prompt.empty();
    st.tokens.assign(prompt.begin(), prompt.end());
    st.keys = std::move(p.keys);
    st.prints = std::move(p.prints);
    const std::size_t fresh_count = p.now_blocks - hits_.size();
    fresh_.clear();
    fresh_.reserve(fresh_count);
    const std::uint32_t seq = create(id);
    request& r = seqs_[seq];
    r.s = std::move(st);
    for (const block_id b : hits_) cache_.acquire(b);  // before allocating: never evict our own hits
    r.table.adopt(hits_);
    cache_.allocate(fresh_count, fresh_);     // cannot fail: plan() checked free blocks
    std::sort(fresh_.begin(), fresh_.end());  // ascending ids make longer copy units
    r.table.adopt(fresh_);
    prompt_allocation result{(hits_.size() + host_hits_.size()) * block_size(), hits_.size(), host_hits_.size(),
                             fresh_count, p.slot_tokens};
    // No host block is allocated in this call, so the host hits cannot be evicted before the copy.
    result.host_to_device =
        make_swap_plan(swap_direction::in, std::span<const block_id>(fresh_).first(host_hits_.size()), host_hits_,
                       config_.max_copy_unit_blocks);
    r.table.advance(p.slot_tokens);
    // Device hits are published and computed; host hits are computed once the copy ran, which the
    // engine reports with computed().
    r.s.computed = hits_.size() * block_size();
    r.s.committed = hits_.size();
    charge(options.tenant, r.table.num_blocks());
    stats_.queried_tokens += length;
    stats_.hit_tokens += result.cached_tokens;
    return result;
  }

  // Adds n slots (and any copy-on-write) to a running request; all-or-nothing.
  append_result extend(request& r, std::size_t n) {
    const std::size_t grow_blocks = r.table.blocks_needed(n);  // throws on overflow, before any change
    if (!admission_.within_quota(r.s.options.tenant, grow_blocks)) return {};
    const std::size_t before = r.table.num_blocks();
    // Only a fork shares a partial last block: a request never forked skips the reference count.
    const bool cow = r.s.tail_shared && r.table.needs_copy(cache_, n);
    if (cow)
      record_state(r);  // copy-on-write replaces a block: save the whole table
    else
      record_shape(r);
    append_result res = r.table.append(cache_, n, cow);
    if (res.fits) {
      charge(r.s.options.tenant, r.table.num_blocks() - before);
      if (n > 0) r.s.tail_shared = false;  // copied, or no longer shared: the last block is private now
    }
    return res;
  }

  // Offers the request's computed full blocks with known ids to the cache.
  void publish(request& r) {
    if (!config_.enable_prefix_caching || !r.s.tokens_known) return;
    const std::size_t full = std::min(r.s.computed, r.s.tokens.size()) / block_size();
    if (full <= r.s.committed) return;
    const std::span<const token_id> filled = std::span<const token_id>(r.s.tokens).first(full * block_size());
    const key_options ko = key_options_of(r.s.options, r.s.media);
    if (r.s.keys.size() < full) cache_.extend_keys(filled, ko, r.s.keys);
    if (config_.verify_on_hit && r.s.prints.size() < full) cache_.extend_prints(filled, ko, r.s.prints);
    const auto blocks = r.table.blocks();
    // The blocks are scattered over a large cache: ask a few ahead so their misses overlap.
    constexpr std::size_t ahead = 8;
    for (std::size_t i = r.s.committed; i < std::min(full, r.s.committed + ahead); ++i)
      cache_.prefetch_commit(blocks[i], r.s.keys[i]);
    for (; r.s.committed < full; ++r.s.committed) {
      if (r.s.committed + ahead < full)
        cache_.prefetch_commit(blocks[r.s.committed + ahead], r.s.keys[r.s.committed + ahead]);
      cache_.commit(blocks[r.s.committed], chain_of(r), r.s.committed);
    }
  }

  std::optional<swap_plan> swap_out_now(request& r, std::size_t n) {
    record_state(r);
    publish(r);
    std::vector<block_id> host(n, block_id::invalid());
    std::size_t hit = 0;
    for (std::size_t i = 0; i < n && i < r.s.committed; ++i) {
      if (const auto h = host_->find(chain_of(r), i)) {
        host[i] = *h;
        ++hit;
      }
    }
    std::vector<block_id> copy_dev;
    std::vector<host_block_id> copy_host;
    std::vector<host_block_id> hb(n);
    copy_dev.reserve(n - hit);
    copy_host.reserve(n - hit);
    fresh_.clear();
    fresh_.reserve(n - hit);
    // Take the shared host blocks before allocating, so allocation cannot evict them.
    for (const block_id h : host)
      if (h.valid()) host_->acquire(h);
    host_->allocate(n - hit, fresh_);
    std::sort(fresh_.begin(), fresh_.end());  // ascending ids make longer copy units
    const auto dev = r.table.blocks();
    for (std::size_t i = 0, f = 0; i < n; ++i) {
      if (!host[i].valid()) {
        host[i] = fresh_[f++];
        copy_dev.push_back(dev[i]);
        copy_host.push_back(host_block_id(host[i].value()));
        // The host copy holds this content once the plan ran; plans run in order, so a later copy-in
        // of it reads valid KV.
        if (i < r.s.committed) host_->commit(host[i], chain_of(r), i);
      }
      hb[i] = host_block_id(host[i].value());
    }
    swap_plan p = make_swap_plan(swap_direction::out, copy_dev, copy_host, config_.max_copy_unit_blocks);
    refund(r.s.options.tenant, r.table.num_blocks());
    r.table.release(cache_);
    r.s.host_blocks = std::move(hb);
    r.s.swapped = true;
    r.s.swapped_tokens = r.s.computed;
    return p;
  }

  std::optional<swap_plan> swap_in_now(request& r, std::size_t n) {
    record_state(r);
    hits_.assign(n, block_id::invalid());
    std::size_t hit = 0;
    for (std::size_t i = 0; i < n && i < r.s.committed; ++i) {
      if (auto b = cache_.find(chain_of(r), i)) {
        hits_[i] = *b;
        ++hit;
      }
    }
    std::vector<block_id> device(n);
    std::vector<block_id> copy_dev;
    std::vector<host_block_id> copy_host;
    copy_dev.reserve(n - hit);
    copy_host.reserve(n - hit);
    fresh_.clear();
    fresh_.reserve(n - hit);
    for (const block_id b : hits_)
      if (b.valid()) cache_.acquire(b);
    cache_.allocate(n - hit, fresh_);
    std::sort(fresh_.begin(), fresh_.end());  // ascending ids make longer copy units
    std::size_t leading_hits = 0;
    while (leading_hits < n && hits_[leading_hits].valid()) ++leading_hits;
    for (std::size_t i = 0, f = 0; i < n; ++i) {
      if (hits_[i].valid()) {
        device[i] = hits_[i];
      } else {
        device[i] = fresh_[f++];
        copy_dev.push_back(device[i]);
        copy_host.push_back(r.s.host_blocks[i]);
      }
    }
    swap_plan p = make_swap_plan(swap_direction::in, copy_dev, copy_host, config_.max_copy_unit_blocks);
    for (const host_block_id h : r.s.host_blocks) host_->release(block_id(h.value()));
    r.s.host_blocks.clear();
    r.table.adopt(device);
    r.table.advance(r.s.swapped_tokens);
    r.s.swapped = false;
    r.s.committed = std::min(r.s.committed, leading_hits);  // copied-in blocks wait for computed()
    charge(r.s.options.tenant, n);
    return p;
  }

  // ----- slab of requests ------------------------------------------------------------------------
  // A new live entry for id (journaled); may throw bad_alloc before anything changes.
  std::uint32_t create(request_id id) {
    if (vacant_.empty()) {
      expects(seqs_.size() < detail::request_index::npos - 1, errc::capacity, "weft::kv::kv_manager",
              "too many requests");
      weft::detail::reserve_more(
          vacant_,
          seqs_.size() + 1 - vacant_.size());  // invariant: vacant_ can hold every entry, so pushes never throw
      seqs_.emplace_back(block_size());
      vacant_.push_back(static_cast<std::uint32_t>(seqs_.size() - 1));
    }
    if (tx_open_) {
      weft::detail::reserve_more(states_, 1);
      journal_.reserve_more(1);
    }
    const std::uint32_t seq = vacant_.back();
    index_.insert(id, seq);  // the last step that can throw
    vacant_.pop_back();
    seqs_[seq].live = true;
    seqs_[seq].s.id = id;
    if (tx_open_) push_state({state_kind::created, seq, {}, 0, {}, 0, std::nullopt});
    return seq;
  }

  void erase(std::uint32_t seq) {
    request& r = seqs_[seq];
    if (!tx_open_) {
      release_blocks(r);
      index_.erase(r.s.id);
      r.s = sequence_state{};
      r.live = false;
      vacant_.push_back(seq);
      return;
    }
    // Every allocation first, so nothing after the first change can throw: the erased record must
    // be pushed after the request is gone.
    state_record rec{state_kind::erased, seq, {}, 0, {}, r.table.num_tokens(), std::nullopt};
    rec.table_ids.assign(r.table.blocks().begin(), r.table.blocks().end());
    weft::detail::reserve_more(states_, 1);
    weft::detail::reserve_more(charges_, 1);
    journal_.reserve_more(r.table.num_blocks() + r.s.host_blocks.size() + 2);
    release_blocks(r);
    r.table.clear_without_release();
    index_.erase(r.s.id);
    rec.state = std::move(r.s);
    r.s = sequence_state{};
    r.live = false;
    vacant_.push_back(seq);
    push_state(std::move(rec));
  }

  void release_blocks(request& r) {
    if (r.s.swapped) {
      for (const host_block_id h : r.s.host_blocks) host_->release(block_id(h.value()));
    } else {
      refund(r.s.options.tenant, r.table.num_blocks());
      r.table.release(cache_);
    }
  }

  void charge(tenant_id t, std::size_t blocks) {
    if (!t.valid() || blocks == 0) return;
    std::size_t& used = admission_.usage_counter(t);  // one lookup; creating the account is the only throw
    if (tx_open_) record_charge(t, blocks, owner_charged);
    used += blocks;
  }
  void refund(tenant_id t, std::size_t blocks) {
    if (!t.valid() || blocks == 0) return;
    if (tx_open_) record_charge(t, blocks, owner_refunded);
    admission_.refund(t, blocks);
  }
  void record_charge(tenant_id t, std::size_t blocks, std::uint32_t kind) {
    charges_.push_back({t, blocks});
    try {
      journal_.push(detail::undo_op::owner, owner_target, kind, static_cast<std::uint32_t>(charges_.size() - 1));
    } catch (...) {
      charges_.pop_back();
      throw;
    }
  }

  // ----- journal ---------------------------------------------------------------------------------
  template <class F>
  decltype(auto) atomically(F&& f) {
    if (!tx_open_) return f();
    const std::size_t mark = journal_.size();
    try {
      return f();
    } catch (...) {
      undo_to(mark);
      throw;
    }
  }

  void record_shape(request& r) {
    if (!tx_open_) return;
    shapes_.push_back({static_cast<std::uint32_t>(&r - seqs_.data()), r.table.num_blocks(), r.table.num_tokens(),
                       r.s.tokens.size(), r.s.keys.size(), r.s.prints.size(), r.s.computed, r.s.committed,
                       r.s.tokens_known, r.s.tail_shared});
    try {
      journal_.push(detail::undo_op::owner, owner_target, owner_shape, static_cast<std::uint32_t>(shapes_.size() - 1));
    } catch (...) {
      shapes_.pop_back();
      throw;
    }
  }
  void record_state(request& r) {
    if (!tx_open_) return;
    state_record rec{
        state_kind::restored, static_cast<std::uint32_t>(&r - seqs_.data()), {}, 0, {}, r.table.num_tokens(), r.s};
    rec.table_ids.assign(r.table.blocks().begin(), r.table.blocks().end());
    push_state(std::move(rec));
  }
  void push_state(state_record rec) {
    journal_.push(detail::undo_op::owner, owner_target, owner_state, static_cast<std::uint32_t>(states_.size()));
    try {
      states_.push_back(std::move(rec));
    } catch (...) {
      journal_.truncate(journal_.size() - 1);
      throw;
    }
  }

  void undo_to(std::size_t mark) noexcept {
    for (std::size_t i = journal_.size(); i-- > mark;) {
      const detail::undo_record& u = journal_[i];
      if (u.target == device_target) {
        cache_.undo(u);
      } else if (u.target == host_target) {
        host_->undo(u);
      } else if (u.block == owner_shape) {
        undo_shape(shapes_[u.aux]);
        shapes_.resize(u.aux);
      } else if (u.block == owner_state) {
        undo_state(states_[u.aux]);
        states_.resize(u.aux);
      } else {
        const charge_record& c = charges_[u.aux];
        if (u.block == owner_charged)
          admission_.refund(c.tenant, c.blocks);
        else
          admission_.charge(c.tenant, c.blocks);
        charges_.resize(u.aux);
      }
    }
    journal_.truncate(mark);
  }

  void undo_shape(const shape_record& rec) noexcept {
    request& r = seqs_[rec.seq];
    r.table.truncate_without_release(rec.table_blocks, rec.table_tokens);
    r.s.tokens.resize(rec.tokens);
    r.s.keys.resize(rec.keys);
    r.s.prints.resize(rec.prints);
    r.s.computed = rec.computed;
    r.s.committed = rec.committed;
    r.s.tokens_known = rec.tokens_known;
    r.s.tail_shared = rec.tail_shared;
  }

  void undo_state(state_record& rec) noexcept {
    switch (rec.what) {
      case state_kind::created: {
        request& r = seqs_[rec.seq];
        index_.erase(r.s.id);
        r.table.clear_without_release();
        r.s = sequence_state{};
        r.live = false;
        vacant_.push_back(rec.seq);
        break;
      }
      case state_kind::erased:
      case state_kind::restored: {
        request& r = seqs_[rec.seq];
        if (rec.what == state_kind::erased) {
          vacant_.pop_back();  // erase() pushed rec.seq last; everything after it is undone already
          r.live = true;
          index_.insert(rec.state->id, rec.seq);  // the index only shrank since: cannot grow, cannot throw
        }
        r.table.restore_without_refs(std::move(rec.table_ids), rec.table_tokens);
        r.s = std::move(*rec.state);
        break;
      }
    }
  }

  void close() noexcept {
    if (!tx_open_) return;
    cache_.attach_journal(nullptr, device_target);
    if (host_) host_->attach_journal(nullptr, host_target);
    journal_.clear();
    shapes_.clear();
    states_.clear();
    charges_.clear();
    tx_open_ = false;
  }

  // ----- lookup ----------------------------------------------------------------------------------
  std::uint32_t seq_of(request_id id, const char* where) const {
    const std::uint32_t seq = index_.find(id);
    expects(seq != detail::request_index::npos, errc::not_found, where, "request ", id,
            " is not allocated (never was, or was freed)");
    return seq;
  }
  request& get(request_id id, const char* where) { return seqs_[seq_of(id, where)]; }
  const request& get(request_id id, const char* where) const { return seqs_[seq_of(id, where)]; }

  kv_config config_;
  cache_type cache_;
  std::unique_ptr<cache_type> host_;  // host tier: same structure over host block ids
  admission_controller admission_;
  std::size_t bytes_per_block_ = 0;
  std::uint64_t instance_ = next_instance();  // tells this manager's prompt_keys from another's
  // Requests live in a slab (entries are reused, keeping their vectors' capacity) found through an
  // open-addressing index. Invariant: index_ maps exactly the live entries' ids to their positions;
  // vacant_ lists the others.
  std::vector<request> seqs_;
  std::vector<std::uint32_t> vacant_;
  detail::request_index index_;
  std::vector<block_id> hits_;                   // scratch: prefix hits of the call in progress
  std::vector<block_id> fresh_;                  // scratch: fresh blocks of the call in progress
  std::vector<host_block_id> host_hits_;         // scratch: host-tier prefix hits of the call in progress
  mutable std::vector<block_key> probe_keys_;    // scratch: cached_prefix_tokens
  mutable std::vector<block_key> probe_prints_;  // scratch: cached_prefix_tokens with verify_on_hit
  prefix_stats stats_;
  // Transaction state. Invariant: while tx_open_, the caches record into journal_, and every owner
  // record in journal_ indexes shapes_, states_ or charges_ (by its block field) in push order.
  bool tx_open_ = false;
  detail::undo_journal journal_;
  std::vector<shape_record> shapes_;
  std::vector<state_record> states_;
  std::vector<charge_record> charges_;
  prefix_stats stats_before_;
};

}  // namespace weft::kv

// Runs weft::sched's batch schedulers on weft::kv's real KV manager (paged blocks, hashed prefix
// cache with copy-on-write, host tier with coarse swap units): an adapter from weft::kv::kv_manager to
// the sched::kv_manager concept. Prefix matching uses synthetic token ids (see below).
#pragma once

#include <weft/kv/kv_manager.hpp>
#include <weft/sched/batch.hpp>
#include <weft/sched/request.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace weft::sched {

/// Owns a weft::kv::kv_manager and satisfies sched::kv_manager. A scheduler request carries lengths,
/// not tokens, so the adapter synthesises token ids: the first prefix_tokens of a request with prefix
/// id P are a fixed function of (P, position) — identical across requests sharing P, so the hashed
/// prefix cache finds them — and the rest a function of (request id, position), so a request preempted
/// by recompute can hit its own still-cached blocks, as in vLLM. Swaps return weft::kv's copy plans,
/// whose coarse units (runs of consecutive blocks) are the kv_transfer copy_units.
///
/// Construct the kv_config with watermark = 0: the scheduler applies its own watermark, and a second
/// one inside weft::kv could refuse a request that the scheduler admits into an idle machine.
/// Not thread-safe. grow/release/swap: weft::kv's costs plus O(prompt) to synthesise tokens on the
/// first grow; cached_prefix_tokens and blocks_to_grow of a new request: O(prompt).
template <class Hasher = weft::kv::chained_block_hasher>
class weft_kv_adapter {
 public:
  using manager_type = weft::kv::kv_manager<Hasher>;

  /// bytes_per_token: KV bytes of one token (for kv_transfer::bytes); >= 1.
  weft_kv_adapter(const weft::kv::kv_config& config, std::int64_t bytes_per_token)
      : kv_(config), bytes_per_token_(bytes_per_token) {
    expects(bytes_per_token >= 1, errc::invalid_argument, "weft::sched::weft_kv_adapter",
            "bytes_per_token must be >= 1, got ", bytes_per_token);
  }

  std::int64_t block_tokens() const noexcept { return static_cast<std::int64_t>(kv_.block_size()); }
  std::int64_t total_blocks() const noexcept { return static_cast<std::int64_t>(kv_.usable_blocks()); }
  std::int64_t free_blocks() const noexcept { return static_cast<std::int64_t>(kv_.free_blocks()); }

  std::int64_t blocks_to_grow(const request& r, std::int64_t tokens) const {
    expects(tokens >= 0, errc::invalid_argument, "weft::sched::weft_kv_adapter::blocks_to_grow", "request ", r.id,
            ": tokens must be >= 0, got ", tokens);
    const auto id = key(r.id);
    if (kv_.contains(id)) {
      const auto held = static_cast<std::int64_t>(kv_.blocks(id).size());
      return std::max<std::int64_t>(0, blocks_for(tokens) - held);
    }
    const std::int64_t first = std::max(tokens, r.prompt_tokens);
    return blocks_for(first) - cached_prefix_tokens(r) / block_tokens();
  }

  bool grow(const request& r, std::int64_t tokens) {
    const auto id = key(r.id);
    if (!kv_.contains(id)) {
      // First allocation: the whole prompt (and, after a recompute preemption, the generated tokens).
      synthesise(r, std::max(tokens, r.prompt_tokens));
      return kv_.allocate_prompt(id, std::span<const weft::kv::token_id>(tokens_)).has_value();
    }
    const auto have = static_cast<std::int64_t>(kv_.num_tokens(id));
    if (tokens <= have) return true;
    return kv_.append(id, static_cast<std::size_t>(tokens - have)).fits;
  }

  void release(request_id id) { kv_.free(key(id)); }

  std::optional<kv_transfer> swap_out(request_id id) {
    if (kv_.config().host_blocks == 0) return std::nullopt;
    auto plan = kv_.swap_out(key(id));
    if (!plan) return std::nullopt;
    return transfer(id, *plan);
  }

  std::optional<kv_transfer> swap_in(request_id id) {
    auto plan = kv_.swap_in(key(id));
    if (!plan) return std::nullopt;
    return transfer(id, *plan);
  }

  std::int64_t held_blocks(request_id id) const {
    const auto k = key(id);
    if (!kv_.contains(k) || kv_.is_swapped(k)) return 0;
    return static_cast<std::int64_t>(kv_.blocks(k).size());
  }

  /// Leading prompt tokens of r whose blocks weft::kv's prefix cache holds (whole blocks; never the
  /// block of the last prompt token, which must be computed). Changes nothing.
  std::int64_t cached_prefix_tokens(const request& r) const {
    if (!kv_.config().enable_prefix_caching) return 0;
    synthesise(r, r.prompt_tokens);
    keys_.clear();
    kv_.cache().extend_keys(std::span<const weft::kv::token_id>(tokens_), weft::kv::key_options{}, keys_);
    const std::size_t max_hit = std::min(keys_.size(), (tokens_.size() - 1) / kv_.block_size());
    const std::size_t hit = kv_.cache().match(std::span<const weft::kv::block_key>(keys_).first(max_hit));
    return static_cast<std::int64_t>(hit * kv_.block_size());
  }

  /// The wrapped manager (block tables and slot mappings for a real engine).
  const manager_type& manager() const noexcept { return kv_; }

 private:
  static weft::kv::request_id key(request_id id) noexcept { return weft::kv::request_id(id.value()); }
  std::int64_t blocks_for(std::int64_t tokens) const noexcept { return (tokens + block_tokens() - 1) / block_tokens(); }

  static weft::kv::token_id mix(std::uint64_t a, std::uint64_t b) noexcept {
    std::uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<weft::kv::token_id>((z ^ (z >> 31)) & 0x3FFFFFFF);
  }

  void synthesise(const request& r, std::int64_t n) const {
    tokens_.resize(static_cast<std::size_t>(n));
    const std::int64_t shared = r.prefix_id == 0 ? 0 : std::min(r.prefix_tokens, n);
    for (std::int64_t i = 0; i < shared; ++i)
      tokens_[static_cast<std::size_t>(i)] = mix(r.prefix_id, static_cast<std::uint64_t>(i));
    for (std::int64_t i = shared; i < n; ++i)
      tokens_[static_cast<std::size_t>(i)] = mix(~r.id.value(), static_cast<std::uint64_t>(i));
  }

  kv_transfer transfer(request_id id, const weft::kv::swap_plan& plan) const {
    const auto blocks = static_cast<std::int64_t>(plan.blocks);
    return {id, blocks, static_cast<std::int64_t>(plan.units.size()), blocks * block_tokens() * bytes_per_token_};
  }

  manager_type kv_;
  std::int64_t bytes_per_token_;
  mutable std::vector<weft::kv::token_id> tokens_;  // scratch
  mutable std::vector<weft::kv::block_key> keys_;   // scratch
};

}  // namespace weft::sched

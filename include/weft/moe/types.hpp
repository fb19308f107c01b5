// Vocabulary of weft::moe: which expert (layer, expert), the shape of a model's expert grid, and
// the context a cache hands to its eviction policy on every event. Plain values, no algorithms.
#pragma once

#include <weft/core/error.hpp>

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>

namespace weft::moe {

/// One expert of one MoE layer. A plain value: thread-safe to copy, O(1) everything.
struct expert_key {
  std::uint32_t layer = 0;
  std::uint32_t expert = 0;

  friend constexpr auto operator<=>(const expert_key&, const expert_key&) noexcept = default;
  friend std::ostream& operator<<(std::ostream& out, const expert_key& k) {
    return out << "(layer " << k.layer << ", expert " << k.expert << ')';
  }
};

/// The expert grid of a model: num_layers MoE layers of num_experts experts each, top_k experts
/// active per token per layer. Keys map densely to [0, num_layers * num_experts), which is how
/// caches and policies keep O(1) per-key state in flat arrays. Thread-safe to read. O(1) all.
struct model_shape {
  std::uint32_t num_layers = 0;
  std::uint32_t num_experts = 0;
  std::uint32_t top_k = 1;

  /// The most (layer, expert) entries a shape may have: caches keep a few bytes per entry.
  static constexpr std::size_t max_keys = std::size_t{1} << 24;

  constexpr std::size_t num_keys() const noexcept { return std::size_t{num_layers} * num_experts; }
  constexpr bool contains(expert_key k) const noexcept { return k.layer < num_layers && k.expert < num_experts; }
  constexpr std::size_t index(expert_key k) const noexcept { return std::size_t{k.layer} * num_experts + k.expert; }
  constexpr expert_key key(std::size_t index) const noexcept {
    return {static_cast<std::uint32_t>(index / num_experts), static_cast<std::uint32_t>(index % num_experts)};
  }

  /// Throws weft::error unless the shape is usable (every dimension >= 1, top_k <= num_experts).
  void validate(const char* context) const {
    expects(num_layers >= 1, errc::invalid_argument, context, "num_layers is ", num_layers, "; it must be >= 1");
    expects(num_experts >= 1, errc::invalid_argument, context, "num_experts is ", num_experts, "; it must be >= 1");
    expects(top_k >= 1 && top_k <= num_experts, errc::invalid_argument, context, "top_k is ", top_k,
            "; it must be in [1, num_experts = ", num_experts, "]");
    expects(num_keys() <= max_keys, errc::capacity, context, "num_layers * num_experts = ", num_keys(),
            " exceeds model_shape::max_keys = ", max_keys, " (per-expert state would not fit in memory)");
  }
  /// Throws weft::error naming the key unless it lies inside the grid.
  void check(expert_key k, const char* context) const {
    expects(contains(k), errc::out_of_range, context, "unknown expert ", k, ": the model has ", num_layers,
            " layers of ", num_experts, " experts");
  }

  friend constexpr bool operator==(const model_shape&, const model_shape&) noexcept = default;
};

/// What the cache tells a policy about the moment of an event.
/// tick: the number of demand lookups made so far, counting the current one; an access at tick t
///       is the t-th lookup (1-based), so "the next use at or after tick" is the future.
/// layer: the layer the engine is executing (the layer of the key being looked up).
/// request: the engine's current request (sequence) id, set by expert_cache::begin_request.
/// demand: true for a lookup or a load started by a miss, false for a prefetch.
struct access_info {
  std::uint64_t tick = 0;
  std::uint32_t layer = 0;
  std::uint64_t request = 0;
  bool demand = true;
};

}  // namespace weft::moe

template <>
struct std::hash<weft::moe::expert_key> {
  std::size_t operator()(const weft::moe::expert_key& k) const noexcept {
    return std::hash<std::uint64_t>{}((std::uint64_t{k.layer} << 32) | k.expert);
  }
};

// Token regrouping: split a set of routed tokens into micro-batches so that each batch activates as
// few distinct experts as possible, so fewer experts must be resident (or loaded) per batch
// (ExpertFlow, He et al. 2024, §3.3 "token scheduling"). Greedy affinity grouping.
#pragma once

#include <weft/core/error.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace weft::moe {

/// The micro-batches found: token indices per batch, and the objective they reach.
struct regrouping {
  std::vector<std::vector<std::uint32_t>> batches;
  std::uint64_t distinct_experts = 0;  ///< sum over batches of the distinct experts each activates
};

/// Sum over batches of the distinct experts each batch activates. experts holds experts_per_token
/// ids per token (token-major); ids may be any values below num_ids (e.g. model_shape::index).
/// Throws weft::error on malformed input. O(tokens * experts_per_token).
inline std::uint64_t distinct_experts(std::span<const std::uint32_t> experts, std::uint32_t experts_per_token,
                                      std::uint32_t num_ids, const std::vector<std::vector<std::uint32_t>>& batches) {
  constexpr const char* where = "weft::moe::distinct_experts";
  expects(experts_per_token >= 1 && experts.size() % experts_per_token == 0, errc::invalid_argument, where,
          experts.size(), " ids is not a whole number of tokens of ", experts_per_token);
  const std::size_t tokens = experts.size() / experts_per_token;
  std::vector<std::uint32_t> mark(num_ids, 0);
  std::uint32_t stamp = 0;
  std::uint64_t total = 0;
  for (const auto& batch : batches) {
    ++stamp;
    for (const std::uint32_t t : batch) {
      expects(t < tokens, errc::out_of_range, where, "token ", t, " does not exist (", tokens, " tokens)");
      for (std::uint32_t j = 0; j < experts_per_token; ++j) {
        const std::uint32_t e = experts[std::size_t{t} * experts_per_token + j];
        expects(e < num_ids, errc::out_of_range, where, "expert id ", e, " >= num_ids = ", num_ids);
        if (mark[e] != stamp) mark[e] = stamp, ++total;
      }
    }
  }
  return total;
}

/// Partitions the tokens into ceil(tokens / batch_size) micro-batches of at most batch_size tokens
/// (all full but the last), minimising the summed distinct experts greedily: each batch starts from
/// the first unassigned token, then repeatedly takes the unassigned token adding the fewest new
/// experts (ties: most shared experts, then smallest index). The result is never worse than
/// batching the tokens in their given order (that split is computed too and returned if better).
/// Deterministic and pure (thread-safe). Throws weft::error on malformed input.
/// O(tokens^2 * experts_per_token) time, O(tokens + num_ids) memory.
inline regrouping regroup_tokens(std::span<const std::uint32_t> experts, std::uint32_t experts_per_token,
                                 std::uint32_t num_ids, std::uint32_t batch_size) {
  constexpr const char* where = "weft::moe::regroup_tokens";
  expects(batch_size >= 1, errc::invalid_argument, where, "batch_size is 0; it must be >= 1");
  expects(experts_per_token >= 1 && experts.size() % experts_per_token == 0, errc::invalid_argument, where,
          experts.size(), " ids is not a whole number of tokens of ", experts_per_token);
  for (const std::uint32_t e : experts)
    expects(e < num_ids, errc::out_of_range, where, "expert id ", e, " >= num_ids = ", num_ids);
  const std::uint32_t tokens = static_cast<std::uint32_t>(experts.size() / experts_per_token);

  regrouping in_order;
  for (std::uint32_t t = 0; t < tokens; ++t) {
    if (t % batch_size == 0) in_order.batches.emplace_back();
    in_order.batches.back().push_back(t);
  }
  in_order.distinct_experts = distinct_experts(experts, experts_per_token, num_ids, in_order.batches);

  regrouping greedy;
  std::vector<std::uint8_t> assigned(tokens, 0);
  std::vector<std::uint32_t> in_batch(num_ids, 0);
  std::uint32_t stamp = 0, left = tokens, next_seed = 0;
  while (left > 0) {
    ++stamp;
    auto& batch = greedy.batches.emplace_back();
    auto take = [&](std::uint32_t t) {
      assigned[t] = 1;
      --left;
      batch.push_back(t);
      for (std::uint32_t j = 0; j < experts_per_token; ++j) {
        std::uint32_t& m = in_batch[experts[std::size_t{t} * experts_per_token + j]];
        if (m != stamp) m = stamp, ++greedy.distinct_experts;
      }
    };
    while (assigned[next_seed]) ++next_seed;
    take(next_seed);
    while (batch.size() < batch_size && left > 0) {
      std::uint32_t best = tokens, best_new = 0, best_shared = 0;
      for (std::uint32_t t = 0; t < tokens; ++t) {
        if (assigned[t]) continue;
        std::uint32_t fresh = 0;
        for (std::uint32_t j = 0; j < experts_per_token; ++j)
          fresh += in_batch[experts[std::size_t{t} * experts_per_token + j]] == stamp ? 0u : 1u;
        const std::uint32_t shared = experts_per_token - fresh;
        if (best == tokens || fresh < best_new || (fresh == best_new && shared > best_shared))
          best = t, best_new = fresh, best_shared = shared;
      }
      take(best);
    }
  }
  return greedy.distinct_experts <= in_order.distinct_experts ? greedy : in_order;
}

}  // namespace weft::moe

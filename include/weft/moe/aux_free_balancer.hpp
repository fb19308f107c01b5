// Auxiliary-loss-free load balancing for MoE routers (Wang et al. 2024, "Auxiliary-Loss-Free Load
// Balancing Strategy for Mixture-of-Experts"; DeepSeek-V3 technical report §2.1.2): a per-expert
// bias is added to the router's affinity scores for top-k selection only, and after each step the
// bias moves against the expert's load error, so overloaded experts are chosen less often.
#pragma once

#include <weft/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

namespace weft::moe {

/// How the bias follows the load error e_i = mean_load - load_i.
enum class bias_rule {
  sign,         ///< b_i += step * sign(e_i)            (DeepSeek-V3)
  proportional  ///< b_i += step * e_i / mean_load      (a smooth variant; the primal-dual reading)
};

struct balancer_options {
  double step = 1e-3;  ///< the bias update speed (DeepSeek-V3 uses 0.001)
  bias_rule rule = bias_rule::sign;
};

/// Per-expert bias for top-k routing. route() selects top_k experts by score + bias and counts the
/// load; update() applies the rule to the loads counted since the last update and clears them.
/// The bias only decides which experts are chosen; gating weights stay the router's raw scores.
/// Not thread-safe. Complexity: route O(E log k); update O(E).
class aux_free_balancer {
 public:
  aux_free_balancer(std::uint32_t num_experts, std::uint32_t top_k, balancer_options options = {})
      : top_k_(top_k), options_(options), bias_(num_experts, 0.0), load_(num_experts, 0) {
    constexpr const char* where = "weft::moe::aux_free_balancer";
    expects(num_experts >= 1, errc::invalid_argument, where, "num_experts is 0");
    expects(top_k >= 1 && top_k <= num_experts, errc::invalid_argument, where, "top_k is ", top_k,
            "; it must be in [1, num_experts = ", num_experts, "]");
    expects(options.step > 0 && std::isfinite(options.step), errc::invalid_argument, where, "step is ", options.step,
            "; it must be a positive finite number");
  }

  /// Writes the top_k experts by scores[i] + bias[i] into `out` (size top_k), best first, ties to
  /// the smaller id, and counts one token of load on each. Throws weft::error on size mismatches.
  void route(std::span<const float> scores, std::span<std::uint32_t> out) {
    constexpr const char* where = "weft::moe::aux_free_balancer::route";
    expects(scores.size() == bias_.size(), errc::mismatch, where, scores.size(), " scores for ", bias_.size(),
            " experts");
    expects(out.size() == top_k_, errc::mismatch, where, "output holds ", out.size(), " ids; top_k is ", top_k_);
    order_.resize(bias_.size());
    std::iota(order_.begin(), order_.end(), 0u);
    auto biased = [&](std::uint32_t e) { return static_cast<double>(scores[e]) + bias_[e]; };
    std::partial_sort(order_.begin(), order_.begin() + top_k_, order_.end(), [&](std::uint32_t a, std::uint32_t b) {
      const double x = biased(a), y = biased(b);
      return x > y || (x == y && a < b);
    });
    for (std::uint32_t j = 0; j < top_k_; ++j) {
      out[j] = order_[j];
      ++load_[order_[j]];
    }
  }

  /// Applies the rule to the loads counted by route() since the last update, then clears them.
  void update() {
    apply(load_);
    std::fill(load_.begin(), load_.end(), std::uint64_t{0});
  }
  /// Applies the rule to loads measured elsewhere (e.g. summed over data-parallel ranks).
  void update(std::span<const std::uint64_t> loads) {
    expects(loads.size() == bias_.size(), errc::mismatch, "weft::moe::aux_free_balancer::update", loads.size(),
            " loads for ", bias_.size(), " experts");
    apply(loads);
  }

  std::span<const double> bias() const noexcept { return bias_; }
  std::span<const std::uint64_t> pending_load() const noexcept { return load_; }
  const balancer_options& options() const noexcept { return options_; }
  void set_options(balancer_options options) {
    expects(options.step > 0 && std::isfinite(options.step), errc::invalid_argument,
            "weft::moe::aux_free_balancer::set_options", "step is ", options.step, "; it must be positive");
    options_ = options;
  }

 private:
  void apply(std::span<const std::uint64_t> loads) {
    const double total = std::accumulate(loads.begin(), loads.end(), 0.0);
    if (total == 0) return;
    const double mean = total / static_cast<double>(loads.size());
    for (std::size_t i = 0; i < bias_.size(); ++i) {
      const double error = mean - static_cast<double>(loads[i]);
      if (options_.rule == bias_rule::sign)
        bias_[i] += options_.step * static_cast<double>((error > 0) - (error < 0));
      else
        bias_[i] += options_.step * error / mean;
    }
  }

  std::uint32_t top_k_;
  balancer_options options_;
  std::vector<double> bias_;
  std::vector<std::uint64_t> load_;
  std::vector<std::uint32_t> order_;
};

/// max load / mean load of a load vector (1 = perfectly balanced; 0 for an all-zero vector). O(n).
inline double max_over_mean(std::span<const std::uint64_t> loads) {
  if (loads.empty()) return 0;
  const double total = std::accumulate(loads.begin(), loads.end(), 0.0);
  if (total == 0) return 0;
  return static_cast<double>(*std::max_element(loads.begin(), loads.end())) /
         (total / static_cast<double>(loads.size()));
}

}  // namespace weft::moe

// The MoE dispatch step with Thrust: given each (token, choice) slot's expert, sort the slots by
// expert (stable, so tokens keep their order within an expert), count tokens per expert, take the
// exclusive offsets, and build the inverse permutation that scatters expert outputs back, as in
// the token-permutation stage of GShard/Switch-style MoE layers (Lepikhin et al., 2021, sec. 2).
#pragma once

#include <weft/core/error.hpp>

#include <thrust/binary_search.h>
#include <thrust/count.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/fill.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/scatter.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include <cstdint>

namespace weft::quant {

/// The dispatch plan of one MoE layer for n = tokens x top_k slots (slot s = token * top_k + k).
/// Invariants: order is a permutation of 0..n-1 sorted by expert (stable); offsets has
/// num_experts + 1 entries, offsets[e]..offsets[e+1] are expert e's positions in order;
/// inverse[order[j]] = j. Thread-safety: a plain value (device vectors).
struct moe_dispatch_plan {
  thrust::device_vector<std::int32_t> order;    ///< slot index at each sorted position
  thrust::device_vector<std::int32_t> tokens;   ///< token of each sorted position (order / top_k)
  thrust::device_vector<std::int32_t> counts;   ///< slots per expert
  thrust::device_vector<std::int32_t> offsets;  ///< exclusive prefix sums of counts, plus the total
  thrust::device_vector<std::int32_t> inverse;  ///< sorted position of each slot
};

namespace detail {
struct div_by {
  std::int32_t d;
  WEFT_HOST_DEVICE std::int32_t operator()(std::int32_t v) const noexcept { return v / d; }
};
struct outside {
  std::int32_t experts;
  WEFT_HOST_DEVICE bool operator()(std::int32_t e) const noexcept { return e < 0 || e >= experts; }
};
struct difference {
  WEFT_HOST_DEVICE std::int32_t operator()(std::int32_t hi, std::int32_t lo) const noexcept { return hi - lo; }
};
}  // namespace detail

/// Builds the dispatch plan from expert_ids (tokens x top_k, row-major). Throws weft::error when
/// top_k or num_experts is not positive, the size is not a multiple of top_k, or an id is outside
/// [0, num_experts). O(n log n) work (a stable sort), O(n + experts) memory. Runs on `exec`.
template <class DerivedPolicy>
moe_dispatch_plan moe_dispatch(const thrust::detail::execution_policy_base<DerivedPolicy>& exec,
                               const thrust::device_vector<std::int32_t>& expert_ids, int top_k, int num_experts) {
  constexpr const char* where = "weft::quant::moe_dispatch";
  expects(top_k > 0 && num_experts > 0, errc::invalid_argument, where, "top_k = ", top_k,
          " and num_experts = ", num_experts, " must be positive");
  expects(expert_ids.size() % static_cast<std::size_t>(top_k) == 0, errc::invalid_argument, where, "expert_ids has ",
          expert_ids.size(), " entries, not a multiple of top_k = ", top_k);
  expects(expert_ids.size() < 0x7fffffffu, errc::invalid_argument, where, "expert_ids has ", expert_ids.size(),
          " entries; slot indices are int32");
  const auto bad = thrust::count_if(exec, expert_ids.begin(), expert_ids.end(), detail::outside{num_experts});
  expects(bad == 0, errc::out_of_range, where, bad, " expert ids are outside [0, ", num_experts, ")");
  const auto n = static_cast<std::int32_t>(expert_ids.size());
  moe_dispatch_plan plan;
  plan.order.resize(static_cast<std::size_t>(n));
  plan.tokens.resize(static_cast<std::size_t>(n));
  plan.inverse.resize(static_cast<std::size_t>(n));
  plan.counts.resize(static_cast<std::size_t>(num_experts));
  plan.offsets.resize(static_cast<std::size_t>(num_experts) + 1);
  thrust::device_vector<std::int32_t> keys = expert_ids;
  thrust::sequence(exec, plan.order.begin(), plan.order.end());
  thrust::stable_sort_by_key(exec, keys.begin(), keys.end(), plan.order.begin());
  // offsets[e + 1] = number of slots with expert <= e (upper bound in the sorted keys).
  thrust::fill_n(exec, plan.offsets.begin(), 1, 0);
  const thrust::counting_iterator<std::int32_t> e0(0);
  thrust::upper_bound(exec, keys.begin(), keys.end(), e0, e0 + num_experts, plan.offsets.begin() + 1);
  thrust::transform(exec, plan.offsets.begin() + 1, plan.offsets.end(), plan.offsets.begin(), plan.counts.begin(),
                    detail::difference{});
  thrust::scatter(exec, thrust::counting_iterator<std::int32_t>(0), thrust::counting_iterator<std::int32_t>(n),
                  plan.order.begin(), plan.inverse.begin());
  thrust::transform(exec, plan.order.begin(), plan.order.end(), plan.tokens.begin(), detail::div_by{top_k});
  return plan;
}

/// moe_dispatch on thrust::device (the configured device system).
inline moe_dispatch_plan moe_dispatch(const thrust::device_vector<std::int32_t>& expert_ids, int top_k,
                                      int num_experts) {
  return moe_dispatch(thrust::device, expert_ids, top_k, num_experts);
}

}  // namespace weft::quant

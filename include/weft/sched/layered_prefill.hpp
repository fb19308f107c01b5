// Layered prefill (Lee, Kim, Park, Lee and Ahn, "From Tokens to Layers: Redefining Stall-Free Scheduling
// for LLM Serving with Layered Prefill", arXiv 2510.08055, 2025): the scheduling unit of a prefill is a
// group of contiguous layers instead of a chunk of tokens. A prompt runs whole through one layer group
// per iteration, so it is done after G iterations, while every running decode runs all layers in every
// iteration (stall-free, as Sarathi-Serve's chunked prefill); each layer's weights are read once per
// iteration for all the tokens that pass it, instead of once per chunk.
#pragma once

#include <weft/core/error.hpp>
#include <weft/kv/kv_manager.hpp>
#include <weft/sched/batch.hpp>
#include <weft/sched/concepts.hpp>
#include <weft/sched/fcfs_queue.hpp>
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/request.hpp>
#include <weft/sched/victim_policy.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace weft::sched {

/// How a layered_prefill_scheduler splits prefills. A plain value; see layered_prefill() for the rules.
struct layered_prefill_options {
  int layers = 32;       ///< the model's transformer layers (L), >= 1
  int layer_groups = 4;  ///< groups a prefill is split into (G), in [1, L]: a prompt's first token after G iterations
  std::size_t max_running = 256;  ///< requests holding KV at once, >= 1
  /// Prompt tokens of the prefills that advance together (admitted in the same iteration); the first
  /// one is admitted whatever its length (a prompt is never split by tokens). >= 1.
  std::int64_t max_prefill_tokens = 8192;
  /// 0: every prefill takes layer_groups groups (the paper's fixed split). > 0: the group count of the
  /// prefills admitted together is chosen at admission as clamp(ceil(their prompt tokens /
  /// group_token_budget), 1, layers), so an iteration runs about group_token_budget prompt tokens' worth
  /// of whole-model work whatever the prompt's length (a short prompt runs whole in one iteration, a
  /// long one in many): weft's addition, to hold a TBT target on prompts of very different lengths as
  /// Sarathi-Serve's token budget does. layer_groups is then unused (but still validated).
  std::int64_t group_token_budget = 0;
  /// How a running request is preempted when KV runs out (default: recompute; a prefill in flight
  /// always restarts). With swap, a swapped-out decode comes back before new prompts are admitted.
  preemption_mode preemption = preemption_mode::recompute;
};

/// Throws weft::error(invalid_argument) naming the field and the rule unless layers >= 1,
/// 1 <= layer_groups <= layers, max_running >= 1 and max_prefill_tokens >= 1. O(1). Thread-safe.
inline void validate(const layered_prefill_options& o, const char* where) {
  expects(o.layers >= 1, errc::invalid_argument, where, "layers must be >= 1, got ", o.layers);
  expects(o.layer_groups >= 1 && o.layer_groups <= o.layers, errc::invalid_argument, where,
          "layer_groups must be in [1, layers = ", o.layers, "], got ", o.layer_groups);
  expects(o.max_running >= 1, errc::invalid_argument, where, "max_running must be >= 1, got ", o.max_running);
  expects(o.max_prefill_tokens >= 1, errc::invalid_argument, where, "max_prefill_tokens must be >= 1, got ",
          o.max_prefill_tokens);
  expects(o.group_token_budget >= 0, errc::invalid_argument, where, "group_token_budget must be >= 0, got ",
          o.group_token_budget);
}

/// Layered-prefill settings in one call, validated (see validate()): every prefill in layer_groups
/// groups of the model's layers. O(1). Thread-safe.
inline layered_prefill_options layered_prefill(int layers, int layer_groups, std::int64_t max_prefill_tokens = 8192,
                                               std::size_t max_running = 256) {
  layered_prefill_options o{layers, layer_groups, max_running, max_prefill_tokens, 0, preemption_mode::recompute};
  validate(o, "weft::sched::layered_prefill");
  return o;
}

/// Layered-prefill settings whose group count follows the prompt (see group_token_budget), validated.
/// O(1). Thread-safe.
inline layered_prefill_options layered_prefill_budget(int layers, std::int64_t group_token_budget,
                                                      std::int64_t max_prefill_tokens = 8192,
                                                      std::size_t max_running = 256) {
  layered_prefill_options o{layers, 1, max_running, max_prefill_tokens, group_token_budget, preemption_mode::recompute};
  validate(o, "weft::sched::layered_prefill_budget");
  expects(group_token_budget >= 1, errc::invalid_argument, "weft::sched::layered_prefill_budget",
          "group_token_budget must be >= 1, got ", group_token_budget);
  return o;
}

/// Layer group g of `groups` over `layers` layers: [floor(g L / G), floor((g + 1) L / G)). The G groups
/// partition [0, L) in order, their sizes differ by at most one. Throws weft::error(invalid_argument)
/// unless 1 <= groups <= layers, and out_of_range unless 0 <= g < groups. O(1). Thread-safe.
inline layer_range layer_group(int layers, int groups, int g) {
  constexpr const char* where = "weft::sched::layer_group";
  expects(layers >= 1 && groups >= 1 && groups <= layers, errc::invalid_argument, where,
          "need 1 <= groups <= layers, got ", groups, " groups of ", layers, " layers");
  expects(g >= 0 && g < groups, errc::out_of_range, where, "group must be in [0, ", groups, "), got ", g);
  const auto bound = [&](int k) { return static_cast<int>(static_cast<std::int64_t>(k) * layers / groups); };
  return {bound(g), bound(g + 1), layers};
}
/// Layer group g of o's fixed split (o.layer_groups groups of o.layers). O(1). Thread-safe.
inline layer_range layer_group(const layered_prefill_options& o, int g) {
  return layer_group(o.layers, o.layer_groups, g);
}

/// Layered prefill's phase. Each schedule(now): (1) every running decode gets one token, oldest
/// arrival first (when KV cannot grow, the Victim's choice among later arrivals is preempted — by
/// recompute, or with preemption = swap a decode to the host tier — or the request itself when none is
/// left), and swapped-out requests come back; (2) the prefills in flight advance one layer group: each
/// entry carries the request's whole remaining prompt and `layers` = the group, and only the entry of
/// the last group emits the first token; (3) when no prefill is in flight (and none waits swapped out),
/// preempted then queued requests are admitted while their prompts fit max_prefill_tokens (the first
/// always), max_running and the KV cache — every admitted prompt's KV is allocated whole at admission —
/// and run their first group at once. Requests whose KV arrives ready (kv_ready_tokens ==
/// prompt_tokens) join as decodes. Decoded ids reach the KV manager one at a time, blocks published as
/// they fill; a prefill's computed KV is reported only after its last group. A plain value.
///
/// The engine runs an entry whose `layers` is not all() through those layers only, and keeps that
/// request's hidden states at `layers.end` until its next entry (examples/mini_engine does).
class layered_phase {
 public:
  using options_type = layered_prefill_options;

  /// Throws weft::error(invalid_argument), as validate() does, for bad options.
  explicit layered_phase(const layered_prefill_options& o) : o_(o) {
    validate(o, "weft::sched::layered_prefill_scheduler");
  }

  const layered_prefill_options& options() const noexcept { return o_; }
  std::size_t max_running() const noexcept { return o_.max_running; }
  preemption_mode preemption() const noexcept { return o_.preemption; }
  bool accepts(const request&) const noexcept { return true; }
  static constexpr bool ranks_by_preemptions = false;  // oldest arrival first
  static constexpr bool batches_decoded_ids = false;   // every decoded id at once; blocks published as they fill

  template <class Steps>
  void plan(Steps& s, double now) const {
    const auto range_of = [&](int groups, int g) { return layer_group(o_.layers, groups, g); };
    s.decode_in_arrival_order();
    s.resume_swapped(now, false);
    s.advance_layer_groups(range_of);
    if (s.prefill_in_flight() || s.has_swapped()) return;
    // No prefill in flight: admit prompts that fit, each starting its first layer group now.
    const std::size_t first_new = s.running_slots();
    std::int64_t prompt_tokens = 0;
    s.admit_whole(
        now,
        [&](const typename Steps::candidate& c) {
          return !(prompt_tokens > 0 && prompt_tokens + (c.target - c.start) > o_.max_prefill_tokens);
        },
        [&](std::size_t i) { prompt_tokens += s.prefill_left(i); });
    // The admitted prompts' split: fixed, or from their tokens (group_token_budget).
    int groups = o_.layer_groups;
    if (o_.group_token_budget > 0)
      groups = static_cast<int>(std::clamp<std::int64_t>(
          prompt_tokens / o_.group_token_budget + (prompt_tokens % o_.group_token_budget != 0 ? 1 : 0), 1, o_.layers));
    s.start_layer_groups(first_new, groups, range_of);
  }

 private:
  layered_prefill_options o_;
};

/// Layered prefill: weft's one batch scheduler in its layered phase (see layered_phase; every call,
/// counter and guarantee is iteration_scheduler's: swap, forks, cancellation and migration included).
/// The name stays for one release.
template <fair_queue Queue = fcfs_queue, kv_manager KV = weft::kv::kv_manager<>,
          victim_policy Victim = latest_arrival_victim>
using layered_prefill_scheduler = iteration_scheduler<Queue, KV, Victim, layered_phase>;

}  // namespace weft::sched

// The stall-free phase of weft's one batch scheduler (iteration_scheduler): running decodes first, then
// swapped-out requests back, then partial prefills, then new prompts, within a token budget. With
// chunked prefill it is Sarathi-Serve's stall-free batching (Agrawal et al., OSDI 2024, §4) and
// DeepSpeed-FastGen's Dynamic SplitFuse (a budget at the saturating pass size); without, Orca's
// continuous batching (Yu et al., OSDI 2022, §4.2: whole prompts, requests join and leave every
// iteration). The presets continuous_batching(), chunked_prefill() and dynamic_splitfuse() choose.
#pragma once

#include <weft/core/error.hpp>
#include <weft/sched/request.hpp>
#include <weft/sched/scheduler_options.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

namespace weft::sched {

/// The default Phase of iteration_scheduler. Its options are scheduler_options (validated here: a
/// token budget >= 1, max_running >= 1, and with chunks a budget >= max_running so no running decode
/// is ever left out). A plain value; thread-safe to copy. plan() is O(R + A) steps of the scheduler.
class stall_free_phase {
 public:
  using options_type = scheduler_options;

  explicit stall_free_phase(const scheduler_options& o) : o_(o) {
    const char* where = "weft::sched::iteration_scheduler";
    expects(o.token_budget >= 1, errc::invalid_argument, where, "token_budget must be >= 1, got ", o.token_budget);
    expects(o.max_running >= 1, errc::invalid_argument, where, "max_running must be >= 1, got ", o.max_running);
    expects(!o.chunked_prefill || std::cmp_greater_equal(o.token_budget, o.max_running), errc::invalid_argument, where,
            "chunked prefill needs token_budget >= max_running so no running decode is starved; got budget ",
            o.token_budget, " and max_running ", o.max_running);
  }

  const scheduler_options& options() const noexcept { return o_; }
  std::size_t max_running() const noexcept { return o_.max_running; }
  preemption_mode preemption() const noexcept { return o_.preemption; }
  /// Every request that fits the device cache may run.
  bool accepts(const request&) const noexcept { return true; }
  /// Rank of a waiting or running request (preemptions descending, arrival, id): the head is the
  /// best-ranked running request, and preempted requests come back in this order (no livelock).
  static constexpr bool ranks_by_preemptions = true;
  /// Decoded ids go to the KV manager a block at a time; decoded blocks are published when the
  /// request leaves the batch.
  static constexpr bool batches_decoded_ids = true;

  /// (1) every running decode, the head first; (2) swapped-out requests back; (3) partial prefills;
  /// (4) preempted, then queued requests, while the batch, the budget and the KV cache allow.
  template <class Steps>
  void plan(Steps& s, double now) const {
    s.set_token_budget(o_.chunked_prefill ? o_.token_budget : std::numeric_limits<std::int64_t>::max());
    s.decode_head_first();
    s.resume_swapped(now, o_.inter_tenant_preemption);
    s.continue_prefills(o_.chunked_prefill);
    s.admit_chunks(now, o_.chunked_prefill, o_.token_budget, o_.inter_tenant_preemption);
  }

 private:
  scheduler_options o_;
};

}  // namespace weft::sched

// What a batch scheduler hands the engine each iteration (Orca's iteration-level batch): which
// requests run, how many prompt tokens each prefills, which decode, the KV copies to run first
// (swaps, host-tier prefix hits, copy-on-write) and the preemptions the iteration pays for. Also the
// KV transfer record a cost model charges and the victim candidate view.
#pragma once

#include <weft/kv/host_tier.hpp>
#include <weft/kv/types.hpp>
#include <weft/sched/request.hpp>

#include <cstdint>
#include <vector>

namespace weft::sched {

/// Bytes moved between tiers or instances. copy_units is the number of separate copies issued
/// (a block each for a naive copier; FastSwitch-style coarse units group contiguous blocks), which
/// a cost model charges a fixed launch overhead per unit.
struct kv_transfer {
  request_id id{};
  std::int64_t blocks = 0;
  std::int64_t copy_units = 0;
  std::int64_t bytes = 0;
};

/// The layers a batch entry runs through: [begin, end) of `of` equal-sized scheduling layers (the
/// default, of == 0, is every layer: the whole forward pass). Layered prefill (layered_prefill.hpp)
/// runs a prompt through one group of layers per iteration; a cost model scales the range to its own
/// layer count by the fraction (end - begin) / of.
struct layer_range {
  int begin = 0;
  int end = 0;
  int of = 0;  ///< the scheduler's layer count; 0: all layers (begin and end unused)
  /// True when the entry runs the whole model. O(1).
  constexpr bool all() const noexcept { return of == 0 || (begin == 0 && end == of); }
  /// True when the entry's last layer is the model's last (its logits exist: it may sample). O(1).
  constexpr bool reaches_output() const noexcept { return of == 0 || end == of; }
  /// The share of the model's layers it covers, in (0, 1]. O(1).
  constexpr double fraction() const noexcept { return of == 0 ? 1.0 : static_cast<double>(end - begin) / of; }
  friend constexpr bool operator==(const layer_range&, const layer_range&) = default;
};

/// One request's share of an iteration. The step computes the KV of the request's tokens at
/// positions [first_position(), context_tokens) — prompt (or recompute) tokens while prefilling, whose
/// ids the KV manager holds (kv().tokens(id)); else one decode token, `token` — and, when emits_token,
/// samples the next token from the last position's logits. By default the step runs every layer; see
/// `layers` for an entry of a layered prefill.
struct batch_entry {
  request_id id{};
  client_id client{};
  std::int64_t prefill_tokens = 0;  ///< prompt (or recompute) tokens computed this iteration
  std::int64_t decode_tokens = 0;   ///< 1 for a decode step, 0 otherwise
  std::int64_t context_tokens = 0;  ///< tokens whose KV this entry reads (attention), after the step
  bool emits_token = false;         ///< true when this step produces an output token
  token_id token = -1;              ///< a decode step's input: the request's latest sampled token (-1: prefill)
  /// The layers this step runs (default: all). A prefill entry over part of the layers computes its
  /// tokens' hidden states and KV in those layers only; the request's later entries continue from the
  /// hidden state at `layers.end`, and only the entry that reaches the last layer may emit a token.
  layer_range layers{};
  /// Position of the first token this step computes. O(1).
  std::int64_t first_position() const noexcept { return context_tokens - prefill_tokens - decode_tokens; }
};

/// The token an engine sampled for one request in the last batch: complete() takes these, matched by
/// id, so a list in any order feeds each request its own token (and a token for a request that was not
/// in the batch is an error, not another request's input).
struct decoded_token {
  request_id id{};
  token_id token = 0;
  friend constexpr bool operator==(const decoded_token&, const decoded_token&) = default;
};

/// One KV copy the engine runs before the iteration's forward pass. Run batch::copies in list order:
/// a later copy may overwrite a block an earlier one reads (a host block freed by a swap-in can be
/// the target of a later swap-out), so the order is part of the plan.
struct kv_copy {
  enum class kind : std::uint8_t {
    swap_out,       ///< preemption: device blocks to host blocks (plan)
    swap_in,        ///< resumption: host blocks back to device blocks (plan)
    prefix_in,      ///< a new request's prefix found in the host tier, copied to its device blocks (plan)
    copy_on_write,  ///< a block shared with a fork, copied before this request writes into it (block)
  };
  kind what = kind::copy_on_write;
  request_id id{};
  weft::kv::swap_plan plan{};    ///< for swap_out, swap_in and prefix_in: coarse units of consecutive blocks
  weft::kv::block_copy block{};  ///< for copy_on_write: every layer's KV of block.src into block.dst
};

/// An iteration. Invariants: prefill_tokens and decode_tokens are the sums over entries; every id
/// appears at most once.
struct batch {
  std::vector<batch_entry> entries;
  std::int64_t prefill_tokens = 0;
  std::int64_t decode_tokens = 0;
  std::vector<kv_copy> copies;                  ///< KV copies to run first, in order (see kv_copy)
  std::vector<kv_transfer> swapped_out;         ///< device -> host before the iteration (sizes, for cost models)
  std::vector<kv_transfer> swapped_in;          ///< host -> device before the iteration (sizes, for cost models)
  std::vector<request_id> preempted_recompute;  ///< KV dropped; the request will prefill again
  std::vector<request_id> aborted;              ///< cannot fit in KV even alone; the engine ends them

  bool empty() const noexcept { return entries.empty(); }
  std::int64_t tokens() const noexcept { return prefill_tokens + decode_tokens; }
  void clear() noexcept {
    entries.clear();
    prefill_tokens = decode_tokens = 0;
    copies.clear();
    swapped_out.clear();
    swapped_in.clear();
    preempted_recompute.clear();
    aborted.clear();
  }
};

/// How a victim policy sees a running request.
struct victim_candidate {
  request_id id{};
  client_id client{};
  int priority = 0;
  double arrival_s = 0.0;
  int preemptions = 0;         ///< times this request was preempted already
  std::int64_t kv_blocks = 0;  ///< device blocks it holds
  std::int64_t generated = 0;  ///< output tokens produced so far
};

/// How a running request is preempted when KV runs out.
enum class preemption_mode {
  recompute,  ///< drop its KV; prefill prompt + generated tokens again later (vLLM's default)
  swap,       ///< copy its KV to the host tier; copy back before it resumes
};

}  // namespace weft::sched

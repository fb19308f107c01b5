// The arrays a paged-attention kernel takes, built from a scheduler's batch and its KV manager, once
// per iteration between schedule() and the forward pass: vLLM's attention metadata (query_start_loc,
// seq_lens, block_table, slot_mapping, positions; Kwon et al., "PagedAttention", SOSP 2023, §4 and
// vLLM v1's FlashAttentionMetadata) and FlashInfer's paged-KV CSR layout (qo_indptr = query_start_loc,
// paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len; Ye et al., "FlashInfer", MLSys 2025, §3).
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/sched/batch.hpp>
#include <weft/sched/concepts.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace weft::sched {

/// One iteration's kernel inputs. Row k describes batch entry k; token t is the t-th token the step
/// computes, entries in batch order and positions in order within an entry. Integer widths are the
/// kernels' (int32 indices, int64 slots). A plain value; its buffers are reused by
/// build_paged_attention_inputs. The KV of every position below seq_lens[k] lives in the blocks of row
/// k, the step's own tokens included (their slots are in slot_mapping): run batch::copies first.
struct paged_attention_inputs {
  std::int32_t block_size = 0;
  std::int64_t num_tokens = 0;     ///< tokens the step computes: query_start_loc.back()
  std::int32_t max_query_len = 0;  ///< longest query of the batch (a kernel's launch shape)
  std::int32_t max_seq_len = 0;    ///< longest context of the batch
  std::int32_t max_blocks = 0;     ///< block_table's row length: blocks of the longest context
  /// [E + 1]: entry k computes tokens [query_start_loc[k], query_start_loc[k + 1]) — vLLM's
  /// query_start_loc, FlashInfer's qo_indptr.
  std::vector<std::int32_t> query_start_loc;
  /// [E]: positions entry k's attention reads after the step, its own tokens included
  /// (batch_entry::context_tokens) — vLLM's seq_lens.
  std::vector<std::int32_t> seq_lens;
  /// [E, max_blocks], row-major: row k lists the blocks holding positions [0, seq_lens[k]) in order,
  /// padded with block 0 (weft::kv's null block) — vLLM's block_table.
  std::vector<std::int32_t> block_table;
  /// [num_tokens]: where token t's K and V are written: block * block_size + offset — vLLM's
  /// slot_mapping (reshape_and_cache's input).
  std::vector<std::int64_t> slot_mapping;
  /// [num_tokens]: token t's position in its sequence (RoPE's input).
  std::vector<std::int64_t> positions;
  /// [num_tokens]: token t's id — the KV manager's ids for prefill tokens, batch_entry::token for a
  /// decode step; -1 for a request counted by length (a simulation: no ids).
  std::vector<token_id> input_ids;
  /// [E]: the token whose logits entry k samples from (its last), or -1 when the entry emits no token
  /// (a chunk short of the prompt's end, a layer group short of the last layer).
  std::vector<std::int32_t> logits_indices;
  /// [E + 1], [kv_indptr.back()], [E]: FlashInfer's paged_kv_indptr, paged_kv_indices (row k's used
  /// blocks, concatenated) and paged_kv_last_page_len (positions in row k's last block, in
  /// [1, block_size]).
  std::vector<std::int32_t> kv_indptr;
  std::vector<std::int32_t> kv_indices;
  std::vector<std::int32_t> kv_last_page_len;
};

/// Fills `out` (reusing its buffers) from batch b, just returned by schedule(), and the scheduler's KV
/// manager (scheduler.kv()): the blocks of each entry's request (kv.blocks(id)) and the ids of its
/// prefill tokens (kv.tokens(id); a decode step's input is entry.token, since a scheduler may hand
/// decoded ids to the KV manager a block later). Throws weft::error, naming the request, when the KV
/// manager holds fewer slots than an entry's context or fewer ids than its prefill needs (b is not
/// this KV manager's batch), or when a size exceeds int32; `out` is then unspecified. Thread-safe for
/// distinct `out` while nobody changes kv. O(T + E * max_blocks) (T tokens computed, E entries).
template <kv_manager KV>
void build_paged_attention_inputs(const batch& b, const KV& kv, paged_attention_inputs& out) {
  constexpr const char* where = "weft::sched::build_paged_attention_inputs";
  const std::size_t bs = kv.block_size();
  const std::size_t n = b.entries.size();
  out.block_size = checked_cast<std::int32_t>(bs, where);
  out.query_start_loc.assign(1, 0);
  out.seq_lens.clear();
  out.logits_indices.clear();
  out.kv_indptr.assign(1, 0);
  out.kv_indices.clear();
  out.kv_last_page_len.clear();
  out.slot_mapping.clear();
  out.positions.clear();
  out.input_ids.clear();
  out.max_query_len = out.max_seq_len = out.max_blocks = 0;
  std::int64_t tokens = 0;
  for (const batch_entry& e : b.entries) {
    const std::int64_t first = e.first_position(), query = e.context_tokens - first;
    expects(first >= 0 && query >= 1, errc::invalid_argument, where, "request ", e.id, ": entry computes ", query,
            " tokens from position ", first, "; an entry computes at least one token from a position >= 0");
    const std::span<const weft::kv::block_id> blocks = kv.blocks(e.id);
    const auto seq = static_cast<std::size_t>(e.context_tokens);
    expects(blocks.size() * bs >= seq, errc::invalid_argument, where, "request ", e.id, " reads ", seq,
            " positions but the KV manager holds ", blocks.size(), " blocks of ", bs,
            " tokens for it; build the inputs from the batch schedule() just returned and the same "
            "scheduler's kv()");
    const std::span<const token_id> ids = kv.tokens(e.id);
    const bool counted = ids.empty();
    expects(e.decode_tokens > 0 || counted || ids.size() >= seq, errc::invalid_argument, where, "request ", e.id,
            " prefills up to position ", seq, " but the KV manager holds ", ids.size(), " of its token ids");
    for (std::int64_t p = first; p < e.context_tokens; ++p) {
      const auto pos = static_cast<std::size_t>(p);
      out.slot_mapping.push_back(static_cast<std::int64_t>(blocks[pos / bs].value()) * static_cast<std::int64_t>(bs) +
                                 static_cast<std::int64_t>(pos % bs));
      out.positions.push_back(p);
      out.input_ids.push_back(e.decode_tokens > 0 ? e.token : counted ? token_id{-1} : ids[pos]);
    }
    tokens += query;
    out.query_start_loc.push_back(checked_cast<std::int32_t>(tokens, where));
    out.seq_lens.push_back(checked_cast<std::int32_t>(e.context_tokens, where));
    out.logits_indices.push_back(e.emits_token ? checked_cast<std::int32_t>(tokens - 1, where) : -1);
    const std::size_t used = (seq + bs - 1) / bs;
    for (std::size_t k = 0; k < used; ++k)
      out.kv_indices.push_back(checked_cast<std::int32_t>(blocks[k].value(), where));
    out.kv_indptr.push_back(checked_cast<std::int32_t>(out.kv_indices.size(), where));
    out.kv_last_page_len.push_back(static_cast<std::int32_t>(seq - (used - 1) * bs));
    out.max_query_len = std::max(out.max_query_len, checked_cast<std::int32_t>(query, where));
    out.max_seq_len = std::max(out.max_seq_len, out.seq_lens.back());
    out.max_blocks = std::max(out.max_blocks, checked_cast<std::int32_t>(used, where));
  }
  out.num_tokens = tokens;
  // The padded table, from the CSR rows.
  const auto width = static_cast<std::size_t>(out.max_blocks);
  out.block_table.assign(n * width, 0);
  for (std::size_t k = 0; k < n; ++k)
    std::copy(out.kv_indices.begin() + out.kv_indptr[k], out.kv_indices.begin() + out.kv_indptr[k + 1],
              out.block_table.begin() + static_cast<std::ptrdiff_t>(k * width));
}

/// build_paged_attention_inputs into a new value. O(T + E * max_blocks).
template <kv_manager KV>
paged_attention_inputs make_paged_attention_inputs(const batch& b, const KV& kv) {
  paged_attention_inputs out;
  build_paged_attention_inputs(b, kv, out);
  return out;
}

}  // namespace weft::sched

// The vocabulary every sched component shares: client and request ids (weft's own, shared with
// weft::kv), the request a scheduler sees (its prompt token ids or length, arrival, tenant, priority,
// cache salt, adapter, media, SLOs) and its validation rules. The true output length is deliberately
// absent: an engine learns it only when EOS is produced.
#pragma once

#include <weft/core/error.hpp>
#include <weft/core/ids.hpp>
#include <weft/kv/block_hasher.hpp>

#include <cmath>
#include <cstdint>
#include <span>
#include <utility>

namespace weft::sched {

/// A tenant (user, API key, application): weft's one tenant id (core/ids.hpp), the same type
/// weft::kv charges block quotas to. Fair queues share service between clients.
using client_id = weft::tenant_id;
using tenant_id = weft::tenant_id;
/// One generation request: weft's one request id, the same the KV manager uses. Unique within a
/// scheduler (submit refuses a duplicate).
using request_id = weft::request_id;
/// A token id as the tokenizer produced it.
using token_id = weft::token_id;

/// What a scheduler knows about a request when it arrives. A plain value: thread-safe to copy. It
/// does not own its prompt: `prompt` and `media` are views. A batch scheduler copies both at submit,
/// so the caller's buffers may go as soon as submit() returns; a queue used on its own keeps the
/// views, so there the caller keeps them alive until the request is popped.
struct request {
  request_id id{};
  client_id client{0};
  std::int64_t prompt_tokens = 0;            ///< input length, >= 1 (equal to prompt.size() when ids are given)
  std::int64_t predicted_output_tokens = 0;  ///< a length predictor's guess, >= 0 (0: no prediction)
  std::int64_t max_output_tokens = 0;        ///< the engine's cap, >= 0 (0: no cap known)
  double arrival_s = 0.0;                    ///< arrival time in seconds, finite and >= 0
  int priority = 0;                          ///< larger is more important (strict priority, SLO policies)
  /// A grouping hint for prefix_group_queue and prefix_aware_queue (requests that likely share a
  /// prompt prefix); 0: none. It never shares KV: prefix-cache hits come from the prompt's token ids.
  std::uint64_t prefix_id = 0;
  std::int64_t prefix_tokens = 0;    ///< length of that shared prefix, 0 <= prefix <= prompt (a hint too)
  std::int64_t kv_ready_tokens = 0;  ///< tokens whose KV arrives ready (disaggregation, migration); see submit()
  double ttft_slo_s = 0.0;           ///< time-to-first-token target; 0: none
  double tpot_slo_s = 0.0;           ///< time-per-output-token target; 0: none
  /// The prompt's token ids. With them the KV manager finds cached prefixes by content and caches
  /// this request's blocks (prompt and decoded) for others. A request without them must say so with
  /// counted_by_length: a batch scheduler refuses an empty prompt otherwise.
  std::span<const token_id> prompt{};
  /// True for a request scheduled by its length alone, with no token ids (a simulator's mode: no
  /// prefix caching, and the KV manager holds no ids an engine could read). An explicit opt-in, so an
  /// engine that forgot to set `prompt` gets an error instead of a request whose ids are missing.
  bool counted_by_length = false;
  std::uint64_t cache_salt = 0;  ///< prefix-cache namespace (0: shared with every unsalted request)
  std::uint64_t adapter_id = 0;  ///< LoRA adapter (0: base model); part of every block's key
  std::span<const weft::kv::multimodal_item> media{};  ///< multimodal items in the prompt, sorted by offset
  /// Parallel samples (vLLM's SamplingParams.n): at the request's first token the batch scheduler
  /// starts n - 1 more sequences from its prompt, sharing the prompt's KV blocks (forks), under the
  /// ids in sample_ids; the engine samples n first tokens then (its own and one per sample id) and
  /// reports each sample's tokens under its own id from then on. >= 1.
  int n = 1;
  std::span<const request_id> sample_ids{};  ///< ids of the other n - 1 samples (a view, as prompt is)
};

/// Throws weft::error(invalid_argument) naming the field and the rule when r is not a valid
/// request; `where` is the calling operation. O(1). Thread-safe.
inline void validate(const request& r, const char* where) {
  expects(r.id.valid(), errc::invalid_argument, where, "request id must be valid (not request_id::invalid())");
  expects(r.client.valid(), errc::invalid_argument, where, "request ", r.id, ": client id must be valid");
  expects(r.prompt_tokens >= 1, errc::invalid_argument, where, "request ", r.id, ": prompt_tokens must be >= 1, got ",
          r.prompt_tokens);
  expects(!r.counted_by_length || r.prompt.empty(), errc::invalid_argument, where, "request ", r.id,
          ": counted_by_length is set but prompt holds ", r.prompt.size(),
          " token ids; clear one of them (a request is scheduled by its ids or by its length)");
  expects(r.prompt.empty() || std::cmp_equal(r.prompt.size(), r.prompt_tokens), errc::invalid_argument, where,
          "request ", r.id, ": prompt holds ", r.prompt.size(), " token ids but prompt_tokens is ", r.prompt_tokens,
          "; they must match");
  expects(r.media.empty() || !r.prompt.empty(), errc::invalid_argument, where, "request ", r.id,
          ": media needs the prompt's token ids");
  for (std::size_t i = 0; i < r.media.size(); ++i) {
    const weft::kv::multimodal_item& m = r.media[i];
    expects(m.offset <= r.prompt.size() && m.length <= r.prompt.size() - m.offset, errc::invalid_argument, where,
            "request ", r.id, ": multimodal item ", i, " (offset ", m.offset, ", length ", m.length,
            ") lies outside the prompt of ", r.prompt.size(), " tokens");
    expects(i == 0 || r.media[i - 1].offset <= m.offset, errc::invalid_argument, where, "request ", r.id,
            ": multimodal item ", i, " starts before item ", i - 1, "; media must be sorted by offset");
  }
  expects(r.predicted_output_tokens >= 0, errc::invalid_argument, where, "request ", r.id,
          ": predicted_output_tokens must be >= 0, got ", r.predicted_output_tokens);
  expects(r.max_output_tokens >= 0, errc::invalid_argument, where, "request ", r.id,
          ": max_output_tokens must be >= 0, got ", r.max_output_tokens);
  expects(std::isfinite(r.arrival_s) && r.arrival_s >= 0.0, errc::invalid_argument, where, "request ", r.id,
          ": arrival_s must be finite and >= 0, got ", r.arrival_s);
  expects(r.prefix_tokens >= 0 && r.prefix_tokens <= r.prompt_tokens, errc::invalid_argument, where, "request ", r.id,
          ": prefix_tokens must be in [0, prompt_tokens=", r.prompt_tokens, "], got ", r.prefix_tokens);
  expects(r.kv_ready_tokens >= 0 && r.kv_ready_tokens <= r.prompt_tokens, errc::invalid_argument, where, "request ",
          r.id, ": kv_ready_tokens must be in [0, prompt_tokens=", r.prompt_tokens, "], got ", r.kv_ready_tokens);
  expects(r.n >= 1, errc::invalid_argument, where, "request ", r.id, ": n (parallel samples) must be >= 1, got ", r.n);
  expects(std::cmp_equal(r.sample_ids.size(), r.n - 1), errc::invalid_argument, where, "request ", r.id, ": n is ", r.n,
          " so sample_ids must hold ", r.n - 1, " ids (one per other sample), got ", r.sample_ids.size());
  for (std::size_t i = 0; i < r.sample_ids.size(); ++i) {
    const request_id c = r.sample_ids[i];
    expects(c.valid() && c != r.id, errc::invalid_argument, where, "request ", r.id, ": sample id ", i, " (", c,
            ") must be valid and differ from the request's own id");
    for (std::size_t j = 0; j < i; ++j)
      expects(r.sample_ids[j] != c, errc::invalid_argument, where, "request ", r.id, ": sample id ", c,
              " is listed twice");
  }
  expects(r.n == 1 || r.kv_ready_tokens == 0, errc::unsupported, where, "request ", r.id,
          ": n > 1 needs the request's first token sampled here, so kv_ready_tokens must be 0");
  expects(r.ttft_slo_s >= 0.0 && r.tpot_slo_s >= 0.0, errc::invalid_argument, where, "request ", r.id,
          ": SLOs must be >= 0, got ttft ", r.ttft_slo_s, " tpot ", r.tpot_slo_s);
}

/// The weights with which fair queues charge service (VTC's w_p and w_q; Sheng et al., OSDI 2024,
/// §4.1 use 1 per input token and 2 per output token, after OpenAI's price ratio).
struct service_weights {
  double input = 1.0;
  double output = 2.0;

  /// Service of a request that produces output_tokens: input weight per prompt token still to be
  /// prefilled (tokens whose KV arrived ready are free) plus output weight per output token. O(1).
  double charge(const request& r, std::int64_t output_tokens) const noexcept {
    return input * static_cast<double>(r.prompt_tokens - r.kv_ready_tokens) +
           output * static_cast<double>(output_tokens);
  }
};

inline void validate(const service_weights& w, const char* where) {
  expects(std::isfinite(w.input) && std::isfinite(w.output) && w.input >= 0.0 && w.output >= 0.0 &&
              w.input + w.output > 0.0,
          errc::invalid_argument, where, "service weights must be finite, >= 0 and not both 0, got input ", w.input,
          " output ", w.output);
}

}  // namespace weft::sched

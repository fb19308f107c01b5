// The vocabulary every sched component shares: client and request ids, the request a scheduler
// sees (lengths, arrival, tenant, priority, shared prefix, SLOs) and its validation rules.
// The true output length is deliberately absent: an engine learns it only when EOS is produced.
#pragma once

#include <weft/core/error.hpp>
#include <weft/core/strong_id.hpp>

#include <cmath>
#include <cstdint>

namespace weft::sched {

struct client_tag;
struct request_tag;
/// A tenant (user, API key, application). Fair queues share service between clients.
using client_id = weft::strong_id<client_tag, std::uint32_t>;
/// One generation request; unique within a scheduler.
using request_id = weft::strong_id<request_tag, std::uint64_t>;

/// What a scheduler knows about a request when it arrives. A plain value: thread-safe to copy.
struct request {
  request_id id{};
  client_id client{0};
  std::int64_t prompt_tokens = 0;            ///< input length, >= 1
  std::int64_t predicted_output_tokens = 0;  ///< a length predictor's guess, >= 0 (0: no prediction)
  std::int64_t max_output_tokens = 0;        ///< the engine's cap, >= 0 (0: no cap known)
  double arrival_s = 0.0;                    ///< arrival time in seconds, finite and >= 0
  int priority = 0;                          ///< larger is more important (strict priority, SLO policies)
  std::uint64_t prefix_id = 0;               ///< requests sharing a prompt prefix share this id; 0: none
  std::int64_t prefix_tokens = 0;            ///< length of that shared prefix, 0 <= prefix <= prompt
  std::int64_t kv_ready_tokens = 0;          ///< tokens whose KV arrives ready (disaggregation, migration)
  double ttft_slo_s = 0.0;                   ///< time-to-first-token target; 0: none
  double tpot_slo_s = 0.0;                   ///< time-per-output-token target; 0: none
};

/// Throws weft::error(invalid_argument) naming the field and the rule when r is not a valid
/// request; `where` is the calling operation. O(1). Thread-safe.
inline void validate(const request& r, const char* where) {
  expects(r.id.valid(), errc::invalid_argument, where, "request id must be valid (not request_id::invalid())");
  expects(r.client.valid(), errc::invalid_argument, where, "request ", r.id, ": client id must be valid");
  expects(r.prompt_tokens >= 1, errc::invalid_argument, where, "request ", r.id, ": prompt_tokens must be >= 1, got ",
          r.prompt_tokens);
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

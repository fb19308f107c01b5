// Synthetic token ids for simulated requests, so the KV manager's prefix cache works from content in
// the simulator as it does in an engine: a conversation's turns repeat one stream, requests that
// declare a shared prefix share its tokens, and everything else is fresh. Each stream is a weft::rng
// sequence, read at random positions (SplitMix64 advances its state by a constant per draw).
#pragma once

#include <weft/core/hash.hpp>
#include <weft/core/random.hpp>
#include <weft/sched/sim/sim_request.hpp>

#include <cstdint>
#include <vector>

namespace weft::sched::sim::detail {

/// Vocabulary of synthetic tokens (Llama 2's size): two unrelated streams agree on a 16-token block
/// with probability 32000^-16, so every prefix hit comes from a real shared prefix.
inline constexpr std::uint64_t synthetic_vocabulary = 32000;

/// Which stream a token comes from: a conversation's, a declared prefix's, or the request's own.
enum class token_stream : std::uint64_t { session = 1, prefix = 2, own = 3 };

/// The seed of one stream of a run seeded `seed`. O(1).
constexpr std::uint64_t stream_seed(std::uint64_t seed, token_stream kind, std::uint64_t id) noexcept {
  return weft::hash_combine(weft::hash_combine(seed, static_cast<std::uint64_t>(kind)), id);
}

/// Token `position` of the stream seeded `stream`: draw number `position` (from 0) of weft::rng(stream),
/// reduced to the vocabulary. O(1).
constexpr token_id synthetic_token(std::uint64_t stream, std::uint64_t position) noexcept {
  weft::rng g(stream + position * 0x9E3779B97F4A7C15ull);  // the state after `position` draws
  return static_cast<token_id>(g.next() % synthetic_vocabulary);
}

/// Token `position` of request s (prompt positions first, then its output) in a run seeded `seed`:
/// the conversation's stream for a session turn; else the declared prefix's stream before
/// prefix_tokens and the request's own stream after. O(1).
inline token_id token_at(const sim_request& s, std::int64_t position, std::uint64_t seed) noexcept {
  const auto p = static_cast<std::uint64_t>(position);
  if (s.session != 0) return synthetic_token(stream_seed(seed, token_stream::session, s.session), p);
  if (s.req.prefix_id != 0 && position < s.req.prefix_tokens)
    return synthetic_token(stream_seed(seed, token_stream::prefix, s.req.prefix_id), p);
  return synthetic_token(stream_seed(seed, token_stream::own, s.req.id.value()), p);
}

/// Whether the simulator gives s token ids: it shares a prefix with others (a conversation turn or a
/// declared prefix). Others are counted by length. O(1).
inline bool shares_prefix(const sim_request& s) noexcept { return s.session != 0 || s.req.prefix_id != 0; }

/// s's prompt token ids into out (replacing its contents). O(prompt).
inline void prompt_tokens(const sim_request& s, std::uint64_t seed, std::vector<token_id>& out) {
  out.resize(static_cast<std::size_t>(s.req.prompt_tokens));
  for (std::size_t p = 0; p < out.size(); ++p) out[p] = token_at(s, static_cast<std::int64_t>(p), seed);
}

}  // namespace weft::sched::sim::detail

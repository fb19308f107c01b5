// The segment-level cache oracle of Liang et al., "Not All Models Suit Expert Offloading: On Local
// Routing Consistency of Mixture-of-Expert Models" (arXiv 2505.16056, §3.2, "Segment Cache Best Hit
// Rate", SCH): the hit rate of a per-layer expert cache that, before each token, may hold ANY
// `capacity` experts chosen with knowledge of the next `segment` tokens — the experts used most
// often in that window (ties to the most recently used). Unlike Belady's MIN (demand loads only),
// it may change its whole content between tokens for free, so it bounds what any cache fed by a
// prefetcher with a `segment`-token lookahead can reach, and measures how consistent routing is.
#pragma once

#include <weft/core/error.hpp>
#include <weft/moe/trace.hpp>
#include <weft/moe/types.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace weft::moe {

/// SCH(segment, c) for every capacity c in [1, max_capacity], per-layer caches of c experts each.
/// Element c - 1 of the result is the fraction of the trace's lookups that hit. Tokens are taken in
/// trace order; the window at token t is tokens [t, t + segment) of the same request (a request's
/// routing says nothing about the next request's). Throws weft::error for segment == 0,
/// max_capacity == 0 or an empty trace. Deterministic; thread-safe for distinct outputs.
/// O(tokens * layers * E log E) time, O(E) memory per layer.
inline std::vector<double> segment_cache_hit_rates(const routing_trace& trace, std::uint32_t segment,
                                                   std::uint32_t max_capacity) {
  constexpr const char* where = "weft::moe::segment_cache_hit_rates";
  const model_shape& s = trace.shape();
  expects(segment >= 1, errc::invalid_argument, where, "segment is 0; it must be >= 1 token");
  expects(max_capacity >= 1, errc::invalid_argument, where, "max_capacity is 0; it must be >= 1");
  expects(trace.num_tokens() > 0, errc::invalid_argument, where, "the trace has no tokens");
  const std::uint32_t E = s.num_experts;
  // hits_at[r]: lookups whose expert ranked r-th (0-based) among the layer's experts in the
  // oracle's priority order; a cache of c holds ranks [0, c), so SCH(c) = sum of hits_at[0..c).
  std::vector<std::uint64_t> hits_at(E, 0);
  std::vector<std::uint32_t> count(E), order(E), rank_of(E);
  std::vector<std::uint64_t> last_use(E);
  for (std::uint32_t l = 0; l < s.num_layers; ++l) {
    std::size_t t = 0;
    while (t < trace.num_tokens()) {
      // One request: [t, end).
      std::size_t end = t;
      while (end < trace.num_tokens() && trace.request(end) == trace.request(t)) ++end;
      std::fill(count.begin(), count.end(), 0);
      std::fill(last_use.begin(), last_use.end(), 0);
      for (std::size_t u = t; u < std::min(end, t + segment); ++u)
        for (const std::uint32_t e : trace.experts(u, l)) ++count[e];
      for (std::size_t u = t; u < end; ++u) {
        // Priority: uses in the window [u, u + segment), then most recent use (stamp u + 1).
        std::iota(order.begin(), order.end(), 0u);
        std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
          if (count[a] != count[b]) return count[a] > count[b];
          if (last_use[a] != last_use[b]) return last_use[a] > last_use[b];
          return a < b;
        });
        for (std::uint32_t r = 0; r < E; ++r) rank_of[order[r]] = r;
        for (const std::uint32_t e : trace.experts(u, l)) {
          ++hits_at[rank_of[e]];
          --count[e];
          last_use[e] = u + 1;
        }
        if (u + segment < end)
          for (const std::uint32_t e : trace.experts(u + segment, l)) ++count[e];
      }
      t = end;
    }
  }
  const double lookups = static_cast<double>(trace.num_tokens()) * s.num_layers * s.top_k;
  std::vector<double> out(max_capacity);
  std::uint64_t cumulative = 0;
  for (std::uint32_t c = 1; c <= max_capacity; ++c) {
    if (c <= E) cumulative += hits_at[c - 1];
    out[c - 1] = static_cast<double>(cumulative) / lookups;
  }
  return out;
}

}  // namespace weft::moe

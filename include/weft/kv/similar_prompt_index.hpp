// Similar-prompt matching for cross-request KV reuse: an index of prompts whose KV is kept, a lookup
// that finds the cached prompt most similar to a new one and aligns the two token sequences, naming per
// new token the cached position whose KV can be reused or "recompute" (KVShare, Yang et al., arXiv
// 2503.16525, 2025: semantic alignment + differential editing; candidate search by MinHash of n-grams).
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/core/hash.hpp>
#include <weft/kv/types.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace weft::kv {

/// The limits and knobs of a similar_prompt_index. Every field is checked by the constructor.
struct similar_prompt_options {
  std::size_t max_prompts = 1024;          ///< prompts kept; the least recently used goes first; >= 1
  std::size_t max_prompt_tokens = 32768;   ///< longest prompt indexed or looked up; >= 1, <= 2^24
  std::size_t max_total_tokens = 1 << 22;  ///< tokens held over all prompts; >= max_prompt_tokens
  std::size_t ngram = 4;                   ///< n-gram length of the similarity sketch; 1..64
  std::size_t sketch_size = 32;            ///< MinHash values per prompt; 1..256
  std::size_t max_candidates = 4;          ///< sketch-best prompts aligned per lookup; >= 1
  std::size_t band = 64;             ///< edit-distance band: alignments of more edits are not found; >= 1, <= 4096
  double min_reuse_fraction = 0.25;  ///< lookup reports a plan only if it reuses at least this share; [0, 1]
};

/// Per new-prompt position: the cached prompt's position whose KV is reused, or recompute.
inline constexpr std::int64_t recompute_position = -1;

/// The result of a lookup: which cached prompt, and how the new prompt maps onto it.
/// source_position[i] is the cached position whose KV token i of the new prompt reuses (the two tokens
/// are equal; positions increase strictly over the reused entries), or recompute_position. Reused KV was
/// computed at a different position and in a different context: the engine re-rotates positional
/// encodings by i - source_position[i] and decides what else to recompute (see docs/kv.md).
struct alignment_plan {
  std::uint64_t source_key = 0;               ///< the key the cached prompt was inserted under
  std::vector<std::int64_t> source_position;  ///< one entry per new-prompt token
  std::size_t reused = 0;                     ///< entries that are not recompute_position
  std::size_t edit_distance = 0;              ///< Levenshtein distance (unit costs) of the two prompts
  std::size_t same_position = 0;              ///< reused entries with source_position[i] == i
  /// The share of the new prompt whose KV is reused, in [0, 1].
  double reuse_fraction() const noexcept {
    return source_position.empty() ? 0.0 : static_cast<double>(reused) / static_cast<double>(source_position.size());
  }
};

/// Cached prompts (token ids) under caller keys (e.g. the id of the request whose KV the engine keeps),
/// with LRU eviction by count and by total tokens. lookup():
///  1. candidate search: each prompt carries a MinHash sketch of its n-gram set (sketch_size minimum
///     hashes, one seed each, weft's hash_combine); the max_candidates prompts whose sketches agree most
///     with the new prompt's are aligned (ties: the most recently used);
///  2. alignment: a banded Levenshtein DP (|i - j| <= band) that among minimum-edit alignments keeps the
///     one with the most matches; it finds the exact distance whenever that distance is <= band (any
///     alignment of d edits stays within d of the diagonal) and rejects the candidate otherwise;
///  3. the candidate that reuses the most tokens wins (ties: fewer edits, then more recent).
/// Insert a prompt only once its KV is computed and kept: the index hands out positions, not blocks.
/// Not thread-safe (one owner, like the KV manager it sits beside).
/// Complexity: insert O(n * sketch_size) hashing plus eviction; lookup O(P * sketch_size) candidate
/// scan over the P cached prompts, plus O(max_candidates * n * band) alignment time and O(n * band)
/// bytes, n the new prompt's length; erase O(1) amortised.
class similar_prompt_index {
 public:
  similar_prompt_index() : similar_prompt_index(similar_prompt_options{}) {}
  explicit similar_prompt_index(const similar_prompt_options& o) : opt_(o) {
    const char* where = "weft::kv::similar_prompt_index";
    expects(o.max_prompts >= 1, errc::invalid_argument, where, "max_prompts must be >= 1, got ", o.max_prompts);
    expects(o.max_prompt_tokens >= 1 && o.max_prompt_tokens <= (std::size_t{1} << 24), errc::invalid_argument, where,
            "max_prompt_tokens must be in [1, 2^24], got ", o.max_prompt_tokens);
    expects(o.max_total_tokens >= o.max_prompt_tokens, errc::invalid_argument, where, "max_total_tokens (",
            o.max_total_tokens, ") must be >= max_prompt_tokens (", o.max_prompt_tokens, ")");
    expects(o.ngram >= 1 && o.ngram <= 64, errc::invalid_argument, where, "ngram must be in [1, 64], got ", o.ngram);
    expects(o.sketch_size >= 1 && o.sketch_size <= 256, errc::invalid_argument, where,
            "sketch_size must be in [1, 256], got ", o.sketch_size);
    expects(o.max_candidates >= 1, errc::invalid_argument, where, "max_candidates must be >= 1, got ",
            o.max_candidates);
    expects(o.band >= 1 && o.band <= 4096, errc::invalid_argument, where, "band must be in [1, 4096], got ", o.band);
    expects(o.min_reuse_fraction >= 0.0 && o.min_reuse_fraction <= 1.0, errc::invalid_argument, where,
            "min_reuse_fraction must be in [0, 1], got ", o.min_reuse_fraction);
  }

  const similar_prompt_options& options() const noexcept { return opt_; }
  /// Prompts held. O(1).
  std::size_t size() const noexcept { return entries_.size(); }
  /// Tokens held over all prompts. O(1).
  std::size_t total_tokens() const noexcept { return total_tokens_; }
  /// Whether key is held (does not touch recency). O(1).
  bool contains(std::uint64_t key) const noexcept { return entries_.contains(key); }

  /// Adds prompt under key, the most recently used; returns the keys evicted to make room (least
  /// recently used first), whose KV the caller may now free. Throws weft::error, changing nothing, when
  /// prompt is empty or longer than max_prompt_tokens, or key is already held.
  /// O(n * sketch_size) plus O(1) per eviction.
  std::vector<std::uint64_t> insert(std::uint64_t key, std::span<const token_id> prompt) {
    const char* where = "weft::kv::similar_prompt_index::insert";
    check_prompt(prompt, where);
    expects(!entries_.contains(key), errc::already_exists, where, "key ", key, " is already held; erase it first");
    entry e{std::vector<token_id>(prompt.begin(), prompt.end()), sketch(prompt), {}};
    // Everything that can throw (allocation) happens before the first change.
    lru_.push_front(key);
    try {
      e.recency = lru_.begin();
      entries_.emplace(key, std::move(e));
    } catch (...) {
      lru_.pop_front();
      throw;
    }
    total_tokens_ += prompt.size();
    std::vector<std::uint64_t> evicted;
    while (entries_.size() > opt_.max_prompts || total_tokens_ > opt_.max_total_tokens) {
      const std::uint64_t victim = lru_.back();
      evicted.push_back(victim);
      erase(victim);
    }
    return evicted;
  }

  /// Removes key; false when it is not held. O(1) amortised.
  bool erase(std::uint64_t key) noexcept {
    const auto it = entries_.find(key);
    if (it == entries_.end()) return false;
    total_tokens_ -= it->second.tokens.size();
    lru_.erase(it->second.recency);
    entries_.erase(it);
    return true;
  }

  /// The best reuse plan for prompt among the cached prompts, or nullopt when none reuses at least
  /// min_reuse_fraction of it within the band. A hit makes its source the most recently used. Throws
  /// weft::error (nothing changes) when prompt is empty or longer than max_prompt_tokens.
  /// O(P * sketch_size + max_candidates * n * band).
  std::optional<alignment_plan> lookup(std::span<const token_id> prompt) {
    check_prompt(prompt, "weft::kv::similar_prompt_index::lookup");
    if (entries_.empty()) return std::nullopt;
    const std::vector<std::uint64_t> mine = sketch(prompt);
    // Candidate scan; rank = position in recency order, the tie-break among equal sketch scores.
    struct candidate {
      std::size_t agree;
      std::size_t rank;
      std::uint64_t key;
    };
    std::vector<candidate> scored;
    scored.reserve(entries_.size());
    std::size_t rank = 0;
    for (const std::uint64_t key : lru_) {
      const entry& e = entries_.find(key)->second;
      std::size_t agree = 0;
      for (std::size_t s = 0; s < mine.size(); ++s) agree += mine[s] == e.sketch[s] ? 1u : 0u;
      scored.push_back(candidate{agree, rank++, key});
    }
    const std::size_t take = std::min(opt_.max_candidates, scored.size());
    std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(take), scored.end(),
                      [](const candidate& x, const candidate& y) {
                        return x.agree != y.agree ? x.agree > y.agree : x.rank < y.rank;
                      });
    std::optional<alignment_plan> best;
    std::size_t best_rank = 0;
    for (std::size_t c = 0; c < take; ++c) {
      std::optional<alignment_plan> p = align(prompt, entries_.find(scored[c].key)->second.tokens, opt_.band);
      if (!p) continue;
      p->source_key = scored[c].key;
      if (!best || p->reused > best->reused || (p->reused == best->reused && p->edit_distance < best->edit_distance) ||
          (p->reused == best->reused && p->edit_distance == best->edit_distance && scored[c].rank < best_rank)) {
        best = std::move(p);
        best_rank = scored[c].rank;
      }
    }
    if (!best || best->reuse_fraction() < opt_.min_reuse_fraction || best->reused == 0) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, entries_.find(best->source_key)->second.recency);
    return best;
  }

  /// The cached tokens of key (valid until the next insert or erase), or an empty span. O(1).
  std::span<const token_id> tokens(std::uint64_t key) const noexcept {
    const auto it = entries_.find(key);
    return it == entries_.end() ? std::span<const token_id>{} : std::span<const token_id>(it->second.tokens);
  }

  /// Aligns a (new) onto b (cached) with at most band edits: the minimum-edit Levenshtein alignment
  /// with the most matches, as a plan (source_key 0), or nullopt when more than band edits are needed.
  /// Throws weft::error when band is 0 or either sequence is longer than 2^24 tokens.
  /// O(|a| * band) time and bytes. Thread-safe (a pure function).
  static std::optional<alignment_plan> align(std::span<const token_id> a, std::span<const token_id> b,
                                             std::size_t band) {
    const char* where = "weft::kv::similar_prompt_index::align";
    expects(band >= 1, errc::invalid_argument, where, "band must be >= 1");
    check_limit(a.size(), std::size_t{1} << 24, where, "new prompt length");
    check_limit(b.size(), std::size_t{1} << 24, where, "cached prompt length");
    const std::size_t n = a.size(), m = b.size();
    if ((n > m ? n - m : m - n) > band) return std::nullopt;
    const std::size_t w = std::min(band, std::max(n, m));
    const std::size_t width = 2 * w + 1;  // column j of row i lives at j - i + w
    // cost = edits * 2^32 - matches: one integer compares edits first, then prefers more matches.
    constexpr std::uint64_t edit = std::uint64_t{1} << 32;
    constexpr std::uint64_t inf = std::numeric_limits<std::uint64_t>::max() / 2;
    const std::uint64_t bias = static_cast<std::uint64_t>(n) + 1;  // keeps "edits * 2^32 - matches" unsigned
    std::vector<std::uint64_t> prev(width, inf), cur(width, inf);
    std::vector<std::uint8_t> move(checked_mul(n + 1, width, where), 0);  // 0 diag, 1 up (insert a), 2 left (delete b)
    auto col = [&](std::size_t i, std::size_t j) { return j + w - i; };
    for (std::size_t j = 0; j <= std::min(m, w); ++j) {
      prev[col(0, j)] = bias + j * edit;
      move[col(0, j)] = 2;
    }
    for (std::size_t i = 1; i <= n; ++i) {
      std::fill(cur.begin(), cur.end(), inf);
      const std::size_t lo = i > w ? i - w : 0, hi = std::min(m, i + w);
      for (std::size_t j = lo; j <= hi; ++j) {
        std::uint64_t best = inf;
        std::uint8_t how = 0;
        if (j >= 1 && j - 1 + w >= i - 1 && j - 1 <= i - 1 + w) {
          const std::uint64_t d = prev[col(i - 1, j - 1)];
          if (d < inf) {
            best = a[i - 1] == b[j - 1] ? d - 1 : d + edit;
            how = 0;
          }
        }
        if (j + w >= i - 1 && j <= i - 1 + w) {  // up: a[i-1] inserted (no source)
          const std::uint64_t u = prev[col(i - 1, j)];
          if (u < inf && u + edit < best) {
            best = u + edit;
            how = 1;
          }
        }
        if (j >= 1 && j - 1 >= lo) {  // left: b[j-1] deleted
          const std::uint64_t l = cur[col(i, j - 1)];
          if (l < inf && l + edit < best) {
            best = l + edit;
            how = 2;
          }
        }
        cur[col(i, j)] = best;
        move[i * width + col(i, j)] = how;
      }
      std::swap(prev, cur);
    }
    const std::uint64_t total = prev[col(n, m)];
    if (total >= inf) return std::nullopt;
    const std::uint64_t edits = total >> 32;  // total = edits * 2^32 + (bias - matches), bias - matches < 2^32
    if (edits > band) return std::nullopt;
    alignment_plan p;
    p.edit_distance = static_cast<std::size_t>(edits);
    p.source_position.assign(n, recompute_position);
    for (std::size_t i = n, j = m; i > 0 || j > 0;) {
      const std::uint8_t how = i == 0 ? 2 : move[i * width + col(i, j)];
      if (how == 0) {
        if (a[i - 1] == b[j - 1]) {
          p.source_position[i - 1] = static_cast<std::int64_t>(j - 1);
          ++p.reused;
          if (i == j) ++p.same_position;
        }
        --i;
        --j;
      } else if (how == 1) {
        --i;
      } else {
        --j;
      }
    }
    return p;
  }

 private:
  struct entry {
    std::vector<token_id> tokens;
    std::vector<std::uint64_t> sketch;
    std::list<std::uint64_t>::iterator recency;
  };

  void check_prompt(std::span<const token_id> prompt, const char* where) const {
    expects(!prompt.empty(), errc::invalid_argument, where, "prompt must hold at least one token");
    check_limit(prompt.size(), opt_.max_prompt_tokens, where, "prompt length");
  }

  // MinHash over the prompt's n-grams (the whole prompt when shorter than ngram): sketch_size minima,
  // each under its own seed, so two sketches agree at a slot with probability = Jaccard similarity.
  std::vector<std::uint64_t> sketch(std::span<const token_id> prompt) const {
    std::vector<std::uint64_t> mins(opt_.sketch_size, std::numeric_limits<std::uint64_t>::max());
    const std::size_t g = std::min(opt_.ngram, prompt.size());
    for (std::size_t start = 0; start + g <= prompt.size(); ++start) {
      std::uint64_t h = hash_k0;
      for (std::size_t t = 0; t < g; ++t)
        h = hash_combine(h, static_cast<std::uint64_t>(static_cast<std::uint32_t>(prompt[start + t])));
      for (std::size_t s = 0; s < mins.size(); ++s)
        mins[s] = std::min(mins[s], hash_mix(h ^ hash_k1, hash_k2 + s * hash_k3));
    }
    return mins;
  }

  similar_prompt_options opt_;
  std::unordered_map<std::uint64_t, entry> entries_;
  std::list<std::uint64_t> lru_;  // most recently used first
  std::size_t total_tokens_ = 0;
};

}  // namespace weft::kv

// KVShare-style prefill on the mini_engine model: reuse the KV of a similar cached prompt where the
// alignment (weft::kv::similar_prompt_index) matches tokens, recompute the differing tokens, and
// optionally a share of the reused tokens whose KV deviates most (Yang et al., KVShare, arXiv
// 2503.16525, 2025; the selection at the second layer follows CacheBlend, Yao et al., EuroSys 2025).
// Reused KV is not exact: it was computed at another position and in another context. This file
// measures how far the result is from a full recompute.
#pragma once

#include "mini_engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <stdexcept>
#include <vector>

namespace mini_engine {

// The K and V of every position of one prompt, [layer][position][width], as a prefill computed them.
struct prompt_kv {
  std::size_t positions = 0;
  std::vector<float> k, v;
};

struct reuse_options {
  // Share of the reused tokens recomputed anyway, those whose layer-1 V deviates most from the reused V
  // (0: recompute only the differing tokens). With a share > 0, layer 0 runs for every token (its
  // outputs feed the deviation check), as in CacheBlend.
  double deviation_recompute = 0.0;
  bool rerotate = true;  // move reused keys to their new positions (false: keep the cached rotation)
  int max_new = 8;       // greedy tokens generated after the prefill
};

struct reuse_result {
  std::vector<float> first_logits;  // logits after the last prompt token
  std::vector<token_id> generated;  // greedy continuation, max_new tokens
  prompt_kv kv;                     // the prompt's KV as this prefill left it (reusable by the next)
  std::size_t token_layers = 0;  // token-layers of prefill computed (a layer-1 deviation check counts as one per token)
  std::size_t token_layers_full = 0;  // prompt tokens * layers: a full prefill
};

// Prefill of prompt (reusing source's KV at source_position[i] >= 0, recomputing the rest) and a
// greedy decode of max_new tokens. With source == nullptr every token is recomputed: a full prefill,
// whose float operations are those of generate_dense (so the outputs are equal bit for bit).
inline reuse_result prefill_with_reuse(const model& m, std::span<const token_id> prompt, const prompt_kv* source,
                                       std::span<const std::int64_t> source_position, const reuse_options& o) {
  const std::size_t n = prompt.size(), d = static_cast<std::size_t>(m.width()),
                    layers = static_cast<std::size_t>(m.layers());
  if (n == 0) throw std::invalid_argument("prefill_with_reuse: empty prompt");
  if (source != nullptr && source_position.size() != n)
    throw std::invalid_argument("prefill_with_reuse: one source position per prompt token");
  if (!(o.deviation_recompute >= 0.0 && o.deviation_recompute <= 1.0) || o.max_new < 1)
    throw std::invalid_argument("prefill_with_reuse: deviation_recompute in [0, 1], max_new >= 1");
  const std::size_t total = n + static_cast<std::size_t>(o.max_new);
  std::vector<float> k(layers * total * d), v(k.size());
  auto at = [&](std::size_t l, std::size_t pos) { return (l * total + pos) * d; };
  // Which prompt tokens run each layer: the unmatched ones and the last (its logits are the output).
  std::vector<char> fresh(n, 1);
  if (source != nullptr)
    for (std::size_t i = 0; i + 1 < n; ++i) {
      const std::int64_t s = source_position[i];
      if (s < 0) continue;
      if (static_cast<std::size_t>(s) >= source->positions)
        throw std::invalid_argument("prefill_with_reuse: source position outside the source prompt");
      fresh[i] = 0;
    }
  const bool select = source != nullptr && o.deviation_recompute > 0.0 && layers > 1;
  std::vector<float> x(n * d), q(n * d), att(d), scratch(d), scores, mlp;
  for (std::size_t i = 0; i < n; ++i) m.embed(prompt[i], static_cast<std::int64_t>(i), 0, {}, x.data() + i * d);
  reuse_result r;
  r.token_layers_full = n * layers;
  std::vector<float> kk(d), vv(d);
  for (std::size_t l = 0; l < layers; ++l) {
    const int li = static_cast<int>(l);
    std::vector<char> run = fresh;
    if (select && l == 0) std::fill(run.begin(), run.end(), 1);
    if (select && l == 1) {
      // Deviation of each reused token's V from what its (layer-0-updated) input gives now.
      std::vector<std::pair<float, std::size_t>> dev;
      for (std::size_t i = 0; i < n; ++i) {
        if (fresh[i]) continue;
        m.qkv(li, x.data() + i * d, static_cast<std::int64_t>(i), q.data() + i * d, kk.data(), vv.data(),
              scratch.data());
        const float* old =
            source->v.data() + (l * source->positions + static_cast<std::size_t>(source_position[i])) * d;
        float e = 0.0f;
        for (std::size_t c = 0; c < d; ++c) e += (vv[c] - old[c]) * (vv[c] - old[c]);
        dev.emplace_back(e, i);
      }
      r.token_layers += dev.size();
      const auto pick = static_cast<std::size_t>(std::ceil(o.deviation_recompute * static_cast<double>(dev.size())));
      std::partial_sort(
          dev.begin(), dev.begin() + static_cast<std::ptrdiff_t>(std::min(pick, dev.size())), dev.end(),
          [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
      for (std::size_t p = 0; p < std::min(pick, dev.size()); ++p) fresh[dev[p].second] = 1;
      run = fresh;
      // The checked tokens' own layer-1 KV was computed above but is counted only once: recount below.
      for (std::size_t p = 0; p < std::min(pick, dev.size()); ++p) --r.token_layers;
    }
    // Reused KV first (attention of a fresh token reads every earlier position), then the fresh ones.
    for (std::size_t i = 0; i < n; ++i) {
      if (run[i]) {
        m.qkv(li, x.data() + i * d, static_cast<std::int64_t>(i), q.data() + i * d, k.data() + at(l, i),
              v.data() + at(l, i), scratch.data());
        ++r.token_layers;
        continue;
      }
      const std::size_t s = static_cast<std::size_t>(source_position[i]);
      const std::size_t from = (l * source->positions + s) * d;
      std::copy_n(source->k.data() + from, d, k.data() + at(l, i));
      std::copy_n(source->v.data() + from, d, v.data() + at(l, i));
      const std::int64_t delta = static_cast<std::int64_t>(i) - static_cast<std::int64_t>(s);
      if (o.rerotate && delta != 0) m.shift_position(k.data() + at(l, i), delta);
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (!run[i]) continue;
      m.attend(
          q.data() + i * d, static_cast<std::int64_t>(i) + 1,
          [&](std::int64_t j) {
            const std::size_t a = at(l, static_cast<std::size_t>(j));
            return std::pair<const float*, const float*>(k.data() + a, v.data() + a);
          },
          att.data(), scores);
      m.finish_layer(li, x.data() + i * d, att.data(), mlp);
    }
  }
  std::vector<float> logits(static_cast<std::size_t>(m.vocab()));
  m.logits(x.data() + (n - 1) * d, logits.data(), scratch.data());
  r.first_logits = logits;
  // Greedy decode over the (possibly blended) cache, as generate_dense does.
  token_id next = top_tokens(logits, 1)[0];
  r.generated.push_back(next);
  std::vector<float> xd(d), qd(d);
  for (std::size_t pos = n; r.generated.size() < static_cast<std::size_t>(o.max_new); ++pos) {
    m.embed(next, static_cast<std::int64_t>(pos), 0, {}, xd.data());
    for (std::size_t l = 0; l < layers; ++l) {
      const int li = static_cast<int>(l);
      m.qkv(li, xd.data(), static_cast<std::int64_t>(pos), qd.data(), k.data() + at(l, pos), v.data() + at(l, pos),
            scratch.data());
      m.attend(
          qd.data(), static_cast<std::int64_t>(pos) + 1,
          [&](std::int64_t j) {
            const std::size_t a = at(l, static_cast<std::size_t>(j));
            return std::pair<const float*, const float*>(k.data() + a, v.data() + a);
          },
          att.data(), scores);
      m.finish_layer(li, xd.data(), att.data(), mlp);
    }
    m.logits(xd.data(), logits.data(), scratch.data());
    next = top_tokens(logits, 1)[0];
    r.generated.push_back(next);
  }
  // Keep the prompt's KV (positions < n) for later reuse.
  r.kv.positions = n;
  r.kv.k.resize(layers * n * d);
  r.kv.v.resize(r.kv.k.size());
  for (std::size_t l = 0; l < layers; ++l) {
    std::copy_n(k.data() + at(l, 0), n * d, r.kv.k.data() + l * n * d);
    std::copy_n(v.data() + at(l, 0), n * d, r.kv.v.data() + l * n * d);
  }
  return r;
}

// How close a reuse prefill came to the full one.
struct reuse_accuracy {
  bool top1_equal = false;          // the first generated token matches
  std::size_t generated_equal = 0;  // leading generated tokens that match
  double logits_rel_l2 = 0.0;       // ||logits - full|| / ||full|| after the last prompt token
};

inline reuse_accuracy compare(const reuse_result& full, const reuse_result& reuse) {
  reuse_accuracy a;
  a.top1_equal = full.generated.front() == reuse.generated.front();
  while (a.generated_equal < full.generated.size() && a.generated_equal < reuse.generated.size() &&
         full.generated[a.generated_equal] == reuse.generated[a.generated_equal])
    ++a.generated_equal;
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < full.first_logits.size(); ++i) {
    const double e = static_cast<double>(reuse.first_logits[i]) - static_cast<double>(full.first_logits[i]);
    num += e * e;
    den += static_cast<double>(full.first_logits[i]) * static_cast<double>(full.first_logits[i]);
  }
  a.logits_rel_l2 = den > 0.0 ? std::sqrt(num / den) : 0.0;
  return a;
}

}  // namespace mini_engine

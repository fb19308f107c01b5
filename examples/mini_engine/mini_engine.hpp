// mini_engine: a tiny decoder-only transformer on the CPU (RMSNorm, RoPE attention, SwiGLU; seeded
// random fp32 weights) served by weft::sched over paged KV from weft::kv — continuous batching,
// chunked prefill, fair queueing across tenants, preemption by recompute and by swap to a host KV
// tensor, prefix caching and copy-on-write forks — and the same model run densely, one request at a
// time with no cache. Every per-token computation does the same float operations in the same order in
// both, so a correct engine's outputs equal the dense ones bit for bit (PagedAttention, Kwon et al.
// SOSP 2023, §4; vLLM's engine loop).
//
// The engine loop (serve(), below) is what a user copies:
//   b = sched.schedule(now)                      what runs this iteration
//   run b.copies in order                        swap-outs, swap-ins, host-tier prefix hits, copy-on-write
//   in = build_paged_attention_inputs(b, kv)     the kernel's arrays: input ids, positions, slot mapping,
//                                                block table, sequence lengths, logits indices
//   forward(in)                                  K/V written to in.slot_mapping, read through in.block_table
//   sched.complete(finished, decoded)            feeds the sampled {id, token} back; computed KV gets published
//   sched.cancel(id)                             between iterations, for a client that went away
//
// It also runs layered prefill (weft::sched::layered_prefill_scheduler; Lee et al., arXiv 2510.08055,
// 2025): an entry whose `layers` is a group [a, b) of the model's layers runs only those layers, starting
// from the hidden states its request's previous group left, which the engine holds until the next one.
#pragma once

#include <weft/core/random.hpp>
#include <weft/kv/kv_manager.hpp>
#include <weft/sched/iteration_scheduler.hpp>
#include <weft/sched/paged_attention_inputs.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

namespace mini_engine {

using weft::request_id;
using weft::tenant_id;
using weft::token_id;

// ----- the model ---------------------------------------------------------------------------------

struct model_config {
  int layers = 4;
  int width = 256;  // a multiple of 8 * heads (so every dot product runs whole 8-lane rounds)
  int heads = 8;
  int vocab = 2048;
  int ffn = 1024;  // a multiple of 8
  std::uint64_t seed = 1;
};

// The one dot product every matrix-vector product and attention score goes through: eight partial
// sums in a fixed order, then a fixed reduction. Vectorisable (the lanes are explicit) and
// deterministic: the same inputs give the same bits wherever it is called from. n % 8 == 0.
inline float dot(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// A multimodal item: its content and the token positions it covers (its embedding is added there).
using weft::kv::multimodal_item;

class model {
 public:
  explicit model(const model_config& c) : c_(c) {
    if (c.width % (8 * c.heads) != 0 || c.ffn % 8 != 0 || c.vocab < 2 || c.layers < 1)
      throw std::invalid_argument("mini_engine::model: width must be a multiple of 8 * heads, ffn of 8");
    head_dim_ = c.width / c.heads;
    weft::rng g(c.seed);
    auto fill = [&](std::vector<float>& w, std::size_t n, double scale) {
      w.resize(n);
      for (auto& x : w) x = static_cast<float>(g.normal(0.0, scale));
    };
    const auto d = static_cast<std::size_t>(c.width), f = static_cast<std::size_t>(c.ffn);
    fill(embed_, static_cast<std::size_t>(c.vocab) * d, 1.0);
    layer_.resize(static_cast<std::size_t>(c.layers));
    for (auto& l : layer_) {
      l.norm1.assign(d, 1.0f);
      l.norm2.assign(d, 1.0f);
      fill(l.wq, d * d, 1.0 / std::sqrt(static_cast<double>(d)));
      fill(l.wk, d * d, 1.0 / std::sqrt(static_cast<double>(d)));
      fill(l.wv, d * d, 1.0 / std::sqrt(static_cast<double>(d)));
      fill(l.wo, d * d, 1.0 / std::sqrt(static_cast<double>(d)));
      fill(l.w1, f * d, 1.0 / std::sqrt(static_cast<double>(d)));
      fill(l.w3, f * d, 1.0 / std::sqrt(static_cast<double>(d)));
      fill(l.w2, d * f, 1.0 / std::sqrt(static_cast<double>(f)));
    }
    norm_f_.assign(d, 1.0f);
    fill(head_, static_cast<std::size_t>(c.vocab) * d, 1.0 / std::sqrt(static_cast<double>(d)));
    for (int i = 0; i < head_dim_ / 2; ++i)
      inv_freq_.push_back(static_cast<float>(std::pow(10000.0, -2.0 * i / head_dim_)));
  }

  const model_config& config() const noexcept { return c_; }
  int width() const noexcept { return c_.width; }
  int layers() const noexcept { return c_.layers; }
  int vocab() const noexcept { return c_.vocab; }

  // The input vector of token t at position pos: its embedding, plus the LoRA adapter's and any
  // multimodal item's contribution (so KV differs by adapter and by image, as in a real model).
  void embed(token_id t, std::int64_t pos, std::uint64_t adapter, std::span<const multimodal_item> media,
             float* x) const {
    const int d = c_.width;
    const float* e = row(embed_, static_cast<std::size_t>(t % c_.vocab), d);
    for (int i = 0; i < d; ++i) x[i] = e[i];
    if (adapter != 0) {
      const float* a = row(embed_, static_cast<std::size_t>(adapter % static_cast<std::uint64_t>(c_.vocab)), d);
      for (int i = 0; i < d; ++i) x[i] += 0.25f * a[i];
    }
    for (const multimodal_item& m : media) {
      const auto p = static_cast<std::size_t>(pos);
      if (p < m.offset || p >= m.offset + m.length) continue;
      const auto r = (m.content_hash + (p - m.offset)) % static_cast<std::uint64_t>(c_.vocab);
      const float* v = row(embed_, static_cast<std::size_t>(r), d);
      for (int i = 0; i < d; ++i) x[i] += 0.5f * v[i];
    }
  }

  // Layer l's projections of residual x at position pos: q, and the k and v to cache (RoPE applied).
  void qkv(int l, const float* x, std::int64_t pos, float* q, float* k, float* v, float* scratch) const {
    const auto& w = layer_[static_cast<std::size_t>(l)];
    rmsnorm(x, w.norm1.data(), scratch);
    matvec(w.wq, scratch, c_.width, c_.width, q);
    matvec(w.wk, scratch, c_.width, c_.width, k);
    matvec(w.wv, scratch, c_.width, c_.width, v);
    rope(q, pos);
    rope(k, pos);
  }

  // Causal attention of q over n cached positions, read in position order through kv(j) -> (k, v).
  template <class KvAt>
  void attend(const float* q, std::int64_t n, KvAt&& kv, float* out, std::vector<float>& scores) const {
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
    scores.resize(static_cast<std::size_t>(n));
    for (int h = 0; h < c_.heads; ++h) {
      const int o = h * head_dim_;
      float best = -INFINITY;
      for (std::int64_t j = 0; j < n; ++j) {
        const float s = dot(q + o, kv(j).first + o, head_dim_) * scale;
        scores[static_cast<std::size_t>(j)] = s;
        best = std::max(best, s);
      }
      float sum = 0.0f;
      for (std::int64_t j = 0; j < n; ++j) {
        const float e = std::exp(scores[static_cast<std::size_t>(j)] - best);
        scores[static_cast<std::size_t>(j)] = e;
        sum += e;
      }
      for (int i = 0; i < head_dim_; ++i) out[o + i] = 0.0f;
      for (std::int64_t j = 0; j < n; ++j) {
        const float p = scores[static_cast<std::size_t>(j)] / sum;
        const float* v = kv(j).second + o;
        for (int i = 0; i < head_dim_; ++i) out[o + i] += p * v[i];
      }
    }
  }

  // The rest of layer l: output projection and residual, then the SwiGLU MLP and residual.
  void finish_layer(int l, float* x, const float* attn, std::vector<float>& scratch) const {
    const auto& w = layer_[static_cast<std::size_t>(l)];
    const auto d = static_cast<std::size_t>(c_.width), f = static_cast<std::size_t>(c_.ffn);
    scratch.resize(d + 3 * f);
    float* o = scratch.data();
    float* a = o + d;
    float* b = a + f;
    float* g = b + f;
    matvec(w.wo, attn, c_.width, c_.width, o);
    for (std::size_t i = 0; i < d; ++i) x[i] += o[i];
    rmsnorm(x, w.norm2.data(), o);
    matvec(w.w1, o, c_.ffn, c_.width, a);
    matvec(w.w3, o, c_.ffn, c_.width, b);
    for (std::size_t i = 0; i < f; ++i) g[i] = a[i] / (1.0f + std::exp(-a[i])) * b[i];
    matvec(w.w2, g, c_.width, c_.ffn, o);
    for (std::size_t i = 0; i < d; ++i) x[i] += o[i];
  }

  // Moves a cached key from position p to p + delta (RoPE is a rotation, so rotating by delta composes;
  // in float the result is close to, not bitwise, a key computed at p + delta). For KV reuse across
  // prompts whose tokens sit at other positions (kvshare.hpp).
  void shift_position(float* k, std::int64_t delta) const { rope(k, delta); }

  // Logits of the final residual x.
  void logits(const float* x, float* out, float* scratch) const {
    rmsnorm(x, norm_f_.data(), scratch);
    matvec(head_, scratch, c_.vocab, c_.width, out);
  }

 private:
  struct layer_weights {
    std::vector<float> norm1, wq, wk, wv, wo, norm2, w1, w3, w2;
  };
  static const float* row(const std::vector<float>& w, std::size_t r, int n) {
    return w.data() + r * static_cast<std::size_t>(n);
  }
  void matvec(const std::vector<float>& w, const float* x, int rows, int cols, float* out) const {
    for (int r = 0; r < rows; ++r) out[r] = dot(row(w, static_cast<std::size_t>(r), cols), x, cols);
  }
  void rmsnorm(const float* x, const float* gamma, float* out) const {
    const float ms = dot(x, x, c_.width) / static_cast<float>(c_.width);
    const float inv = 1.0f / std::sqrt(ms + 1e-5f);
    for (int i = 0; i < c_.width; ++i) out[i] = x[i] * inv * gamma[i];
  }
  void rope(float* v, std::int64_t pos) const {
    for (int h = 0; h < c_.heads; ++h) {
      float* p = v + h * head_dim_;
      for (int i = 0; i < head_dim_ / 2; ++i) {
        const float angle = static_cast<float>(pos) * inv_freq_[static_cast<std::size_t>(i)];
        const float c = std::cos(angle), s = std::sin(angle);
        const float a = p[2 * i], b = p[2 * i + 1];
        p[2 * i] = a * c - b * s;
        p[2 * i + 1] = a * s + b * c;
      }
    }
  }

  model_config c_;
  int head_dim_ = 0;
  std::vector<float> embed_, norm_f_, head_, inv_freq_;
  std::vector<layer_weights> layer_;
};

// The k best tokens of logits, best first (ties: the lower id first). Greedy decoding takes rank 0;
// parallel samples of one prompt start from ranks 1, 2, ... .
inline std::vector<token_id> top_tokens(std::span<const float> logits, int k) {
  std::vector<token_id> ids(logits.size());
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<token_id>(i);
  const auto kk = static_cast<std::size_t>(std::min<std::size_t>(static_cast<std::size_t>(k), ids.size()));
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(kk), ids.end(), [&](token_id a, token_id b) {
    const float la = logits[static_cast<std::size_t>(a)], lb = logits[static_cast<std::size_t>(b)];
    return la != lb ? la > lb : a < b;
  });
  ids.resize(kk);
  return ids;
}

// ----- the dense reference -----------------------------------------------------------------------

// What one request asks for. A parallel sample (fork) starts from its prompt's rank-`first_rank`
// token instead of the best one.
struct request_spec {
  std::vector<token_id> prompt;
  std::uint64_t adapter = 0;
  std::vector<multimodal_item> media;
  int max_new = 8;
  int first_rank = 0;
};

// The model run on one request alone, token by token, with a contiguous KV array: no paging, no
// batching, no cache shared with anyone. The ground truth the engine must reproduce exactly.
inline std::vector<token_id> generate_dense(const model& m, const request_spec& r) {
  const int d = m.width(), layers = m.layers();
  const std::size_t total = r.prompt.size() + static_cast<std::size_t>(r.max_new);
  std::vector<float> k(static_cast<std::size_t>(layers) * total * static_cast<std::size_t>(d)), v(k.size());
  std::vector<float> x(static_cast<std::size_t>(d)), q(x.size()), att(x.size()), scratch(x.size()), scores, mlp;
  std::vector<float> logits(static_cast<std::size_t>(m.vocab()));
  std::vector<token_id> out;
  token_id next = 0;
  for (std::size_t pos = 0; pos + 1 < total; ++pos) {
    const token_id t = pos < r.prompt.size() ? r.prompt[pos] : next;
    m.embed(t, static_cast<std::int64_t>(pos), r.adapter, r.media, x.data());
    for (int l = 0; l < layers; ++l) {
      const std::size_t base = static_cast<std::size_t>(l) * total * static_cast<std::size_t>(d);
      float* kp = k.data() + base + pos * static_cast<std::size_t>(d);
      float* vp = v.data() + base + pos * static_cast<std::size_t>(d);
      m.qkv(l, x.data(), static_cast<std::int64_t>(pos), q.data(), kp, vp, scratch.data());
      m.attend(
          q.data(), static_cast<std::int64_t>(pos) + 1,
          [&](std::int64_t j) {
            const std::size_t at = base + static_cast<std::size_t>(j) * static_cast<std::size_t>(d);
            return std::pair<const float*, const float*>(k.data() + at, v.data() + at);
          },
          att.data(), scores);
      m.finish_layer(l, x.data(), att.data(), mlp);
    }
    if (pos + 1 >= r.prompt.size()) {
      m.logits(x.data(), logits.data(), scratch.data());
      const int rank = out.empty() ? r.first_rank : 0;
      next = top_tokens(logits, rank + 1)[static_cast<std::size_t>(rank)];
      out.push_back(next);
    }
  }
  return out;
}

// ----- the paged KV tensor -----------------------------------------------------------------------

// The engine's KV memory: device blocks and host blocks, each [layer][k|v][block offset][width]
// floats, indexed by the block ids weft::kv hands out.
class kv_tensor {
 public:
  kv_tensor(const model& m, std::size_t device_blocks, std::size_t host_blocks, std::size_t block_size)
      : width_(static_cast<std::size_t>(m.width())),
        layers_(static_cast<std::size_t>(m.layers())),
        block_size_(block_size),
        block_floats_(layers_ * 2 * block_size * width_),
        device_(device_blocks * block_floats_),
        host_(host_blocks * block_floats_) {}

  std::size_t block_size() const noexcept { return block_size_; }
  float* k(weft::kv::block_id b, std::size_t layer, std::size_t offset) {
    return at(device_, b.value(), layer, 0, offset);
  }
  float* v(weft::kv::block_id b, std::size_t layer, std::size_t offset) {
    return at(device_, b.value(), layer, 1, offset);
  }

  // Runs one swap plan: each copy unit is one contiguous copy per direction (FastSwitch's coarse units).
  // host_shift > 0 copies the wrong host blocks (a deliberately broken swap, for tests).
  void run(const weft::kv::swap_plan& p, std::size_t host_shift = 0) {
    for (const weft::kv::copy_unit& u : p.units) {
      const std::size_t n = u.count * block_floats_;
      float* dev = device_.data() + u.device_first.value() * block_floats_;
      float* host = host_.data() + ((u.host_first.value() + host_shift) % host_blocks()) * block_floats_;
      if ((u.host_first.value() + host_shift) % host_blocks() + u.count > host_blocks()) continue;
      if (p.direction == weft::kv::swap_direction::out)
        std::memcpy(host, dev, n * sizeof(float));
      else
        std::memcpy(dev, host, n * sizeof(float));
    }
  }
  // Copy-on-write: every layer's K and V of block src into block dst.
  void copy(const weft::kv::block_copy& c) {
    std::memcpy(device_.data() + c.dst.value() * block_floats_, device_.data() + c.src.value() * block_floats_,
                block_floats_ * sizeof(float));
  }

 private:
  std::size_t host_blocks() const noexcept { return host_.size() / block_floats_; }
  float* at(std::vector<float>& mem, std::size_t block, std::size_t layer, std::size_t kind, std::size_t offset) {
    return mem.data() + block * block_floats_ + ((layer * 2 + kind) * block_size_ + offset) * width_;
  }
  std::size_t width_, layers_, block_size_, block_floats_;
  std::vector<float> device_, host_;
};

// ----- the engine --------------------------------------------------------------------------------

// Deliberately broken variants, for the test that shows the equality check catches them.
struct faults {
  bool skip_copy_on_write = false;  // a fork's first write lands in the block it still shares
  bool wrong_swap_blocks = false;   // swap-ins copy the host blocks next to the right ones
};

// One tenant's counters.
struct tenant_stats {
  std::uint64_t requests = 0, tokens = 0, preempted_recompute = 0, preempted_swap = 0;
};

struct serve_result {
  std::map<request_id, std::vector<token_id>> outputs;  // every finished (or cancelled) request's generated tokens
  std::map<request_id, request_spec> specs;             // what each request (turn, fork) asked for
  std::map<tenant_id, tenant_stats> tenants;
  std::uint64_t iterations = 0, computed_tokens = 0, forks = 0, copies_on_write = 0, swap_ins = 0, cancelled = 0;
  double forward_seconds = 0.0;
};

// A request as the workload describes it: who, when, what; `samples` parallel samples share its
// prompt (forks); `turns` follow-up turns each extend the conversation by its answer and `follow_up`;
// a client that goes away at iteration `cancel_at` (>= 0) cancels it wherever it is then (waiting,
// prefilling, swapped out or decoding), keeping the tokens it had.
struct workload_request {
  request_id id;
  tenant_id tenant;
  double arrival = 0.0;  // iteration at which it is submitted
  request_spec spec;
  std::uint64_t cache_salt = 0;
  int samples = 1;
  int turns = 1;
  std::vector<token_id> follow_up;
  double cancel_at = -1.0;
};

// The engine: runs one scheduled batch through the model over the paged KV tensor.
template <class Sched>
class engine {
 public:
  engine(const model& m, Sched& s, kv_tensor& kv, faults f = {}) : m_(m), s_(s), kv_(kv), f_(f) {}

  // A cancelled request: the hidden states a layered prefill left for its next group go.
  void forget(request_id id) { held_.erase(id); }

  // Runs b's copies (in order), then its forward pass; fills sampled (one token per entry; -1 where
  // nothing is emitted) and, for entries that emit, their top tokens (parallel samples need them).
  void run(const weft::sched::batch& b, const std::map<request_id, request_spec>& specs, std::vector<token_id>& sampled,
           std::vector<std::vector<token_id>>& top, int top_k, serve_result& stats) {
    for (const weft::sched::kv_copy& c : b.copies) {
      switch (c.what) {
        case weft::sched::kv_copy::kind::copy_on_write:
          ++stats.copies_on_write;
          if (!f_.skip_copy_on_write) kv_.copy(c.block);
          break;
        case weft::sched::kv_copy::kind::swap_in:
          ++stats.swap_ins;
          kv_.run(c.plan, f_.wrong_swap_blocks ? 1 : 0);
          break;
        default:
          kv_.run(c.plan);
          break;
      }
    }
    // The paged-attention kernel's inputs, as vLLM and FlashInfer take them: every token of the step
    // (its entry, position and id), where its K and V go, and each entry's block-table row.
    weft::sched::build_paged_attention_inputs(b, s_.kv(), in_);
    const auto bs = static_cast<std::size_t>(in_.block_size), d = static_cast<std::size_t>(m_.width());
    const auto row_width = static_cast<std::size_t>(in_.max_blocks);
    tokens_.clear();
    first_.assign(b.entries.size(), 0);
    for (std::size_t e = 0; e < b.entries.size(); ++e) {
      const auto& en = b.entries[e];
      if (!en.layers.all() && en.layers.of != m_.layers())
        throw std::invalid_argument("mini_engine: a batch entry's layer range is not over the model's layers");
      first_[e] = static_cast<std::size_t>(in_.query_start_loc[e]);
      for (auto t = first_[e]; t < static_cast<std::size_t>(in_.query_start_loc[e + 1]); ++t)
        tokens_.push_back({e, in_.positions[t], in_.input_ids[t]});
    }
    x_.resize(tokens_.size() * d);
    q_.resize(x_.size());
    att_.resize(x_.size());
    scratch_.resize(d);
    for (std::size_t t = 0; t < tokens_.size(); ++t) {
      const auto& en = b.entries[tokens_[t].entry];
      if (!en.layers.all() && en.layers.begin > 0) {
        // Layered prefill: the residual its previous layer group left.
        const std::vector<float>& held = held_.at(en.id);
        std::copy_n(held.begin() + static_cast<std::ptrdiff_t>((t - first_[tokens_[t].entry]) * d), d, &x_[t * d]);
        continue;
      }
      const auto& sp = specs.at(en.id);
      m_.embed(tokens_[t].id, tokens_[t].pos, sp.adapter, sp.media, &x_[t * d]);
    }
    // Whether token t's entry runs layer l (every entry but a layered prefill's runs them all).
    const auto runs = [&](std::size_t t, int l) {
      const weft::sched::layer_range& r = b.entries[tokens_[t].entry].layers;
      return r.all() || (l >= r.begin && l < r.end);
    };
    for (int l = 0; l < m_.layers(); ++l) {
      const auto layer = static_cast<std::size_t>(l);
      // All of this step's K and V first, into their slots; then attention, which reads them.
      for (std::size_t t = 0; t < tokens_.size(); ++t) {
        if (!runs(t, l)) continue;
        const auto slot = static_cast<std::size_t>(in_.slot_mapping[t]);
        const weft::kv::block_id blk(static_cast<std::uint32_t>(slot / bs));
        m_.qkv(l, &x_[t * d], tokens_[t].pos, &q_[t * d], kv_.k(blk, layer, slot % bs), kv_.v(blk, layer, slot % bs),
               scratch_.data());
      }
      for (std::size_t t = 0; t < tokens_.size(); ++t) {
        if (!runs(t, l)) continue;
        const std::int32_t* row = in_.block_table.data() + tokens_[t].entry * row_width;
        m_.attend(
            &q_[t * d], tokens_[t].pos + 1,
            [&](std::int64_t j) {
              const auto pos = static_cast<std::size_t>(j);
              const weft::kv::block_id blk(static_cast<std::uint32_t>(row[pos / bs]));
              return std::pair<const float*, const float*>(kv_.k(blk, layer, pos % bs), kv_.v(blk, layer, pos % bs));
            },
            &att_[t * d], scores_);
      }
      for (std::size_t t = 0; t < tokens_.size(); ++t)
        if (runs(t, l)) m_.finish_layer(l, &x_[t * d], &att_[t * d], mlp_);
    }
    // A layered prefill short of the last layer: hold its residuals for its next group.
    for (std::size_t e = 0; e < b.entries.size(); ++e) {
      const auto& en = b.entries[e];
      if (en.layers.reaches_output()) {
        held_.erase(en.id);
        continue;
      }
      const std::size_t n = static_cast<std::size_t>(en.context_tokens - en.first_position());
      held_[en.id].assign(x_.begin() + static_cast<std::ptrdiff_t>(first_[e] * d),
                          x_.begin() + static_cast<std::ptrdiff_t>((first_[e] + n) * d));
    }
    stats.computed_tokens += tokens_.size();
    // Sampling: each emitting entry's last token (in.logits_indices).
    sampled.assign(b.entries.size(), -1);
    top.assign(b.entries.size(), {});
    logits_.resize(static_cast<std::size_t>(m_.vocab()));
    for (std::size_t e = 0; e < b.entries.size(); ++e) {
      if (in_.logits_indices[e] < 0) continue;
      const auto t = static_cast<std::size_t>(in_.logits_indices[e]);
      m_.logits(&x_[t * d], logits_.data(), scratch_.data());
      top[e] = top_tokens(logits_, top_k);
      sampled[e] = top[e][0];
    }
  }

 private:
  struct step_token {
    std::size_t entry;
    std::int64_t pos;
    token_id id;
  };
  const model& m_;
  Sched& s_;
  kv_tensor& kv_;
  faults f_;
  std::vector<step_token> tokens_;
  weft::sched::paged_attention_inputs in_;
  std::vector<std::size_t> first_;                 // first_[e]: index in tokens_ of entry e's first token
  std::map<request_id, std::vector<float>> held_;  // layered prefills between groups: their residuals
  std::vector<float> x_, q_, att_, scratch_, scores_, mlp_, logits_;
};

// Serves a workload to the end: submits arrivals, runs every iteration through the engine, feeds the
// sampled tokens back (with the first tokens of a request's parallel samples, which the scheduler
// starts then: request::n) and submits follow-up turns when a turn ends. Counts per tenant what
// happened.
template <class Sched>
serve_result serve(const model& m, Sched& s, kv_tensor& kv, std::vector<workload_request> work, faults f = {},
                   std::uint64_t max_iterations = 1'000'000) {
  serve_result res;
  engine<Sched> eng(m, s, kv, f);
  std::sort(work.begin(), work.end(), [](const auto& a, const auto& b) { return a.arrival < b.arrival; });
  // The scheduler copies a request's prompt ids and media at submit, so the workload entry a request
  // is submitted from may go at once (a follow-up turn's is erased right after); `live` keeps what the
  // engine itself needs: the prompt for the next turn, the tokens so far.
  struct live {
    workload_request w;
    std::vector<token_id> prompt;
    std::vector<token_id> out;
    bool fork_pending = false;
    bool done = false;
    std::vector<request_id> sample_ids;  // w.samples > 1: the other samples' ids (request::n)
  };
  std::map<request_id, live> active;
  std::vector<workload_request> later;  // follow-up turns, submitted when due
  std::uint64_t next_id = 1'000'000;
  std::size_t next = 0;
  std::vector<token_id> sampled;
  std::vector<std::vector<token_id>> top;
  std::vector<request_id> finished;
  int top_k = 1;
  for (const auto& w : work) top_k = std::max(top_k, w.samples);
  auto submit = [&](const workload_request& w, std::uint64_t it) {
    live l{w, w.spec.prompt, {}, w.samples > 1, false, {}};
    // Parallel samples are request-level n: the scheduler starts them at the first token.
    for (int k = 1; k < w.samples; ++k) l.sample_ids.push_back(request_id(next_id++));
    weft::sched::request r;
    r.n = w.samples;
    r.sample_ids = l.sample_ids;
    r.id = w.id;
    r.client = w.tenant;
    r.prompt = w.spec.prompt;
    r.prompt_tokens = static_cast<std::int64_t>(r.prompt.size());
    r.max_output_tokens = w.spec.max_new;
    r.arrival_s = static_cast<double>(it);
    r.cache_salt = w.cache_salt;
    r.adapter_id = w.spec.adapter;
    r.media = w.spec.media;
    res.specs[w.id] = w.spec;
    ++res.tenants[w.tenant].requests;
    if (!s.submit(r, static_cast<double>(it)))
      throw std::runtime_error("mini_engine: a request can never fit the cache");
    active.emplace(w.id, std::move(l));  // (after submit: the scheduler copied the sample ids)
  };
  std::vector<weft::sched::decoded_token> decoded;
  for (std::uint64_t it = 0; it < max_iterations; ++it) {
    // Clients that go away now: their requests end wherever they are; the tokens so far are kept.
    for (auto& [id, l] : active) {
      if (l.done || l.w.cancel_at < 0 || l.w.cancel_at > static_cast<double>(it)) continue;
      if constexpr (requires(Sched & x, request_id a) { x.cancel(a); }) {
        if (!s.cancel(id)) throw std::runtime_error("mini_engine: cancel() did not find a live request");
        eng.forget(id);
        l.done = true;
        res.outputs[id] = l.out;
        ++res.cancelled;
      }
    }
    while (next < work.size() && work[next].arrival <= static_cast<double>(it)) submit(work[next++], it);
    for (std::size_t i = 0; i < later.size();) {
      if (later[i].arrival <= static_cast<double>(it)) {
        submit(later[i], it);
        later.erase(later.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    if (s.idle() && next == work.size() && later.empty()) break;
    const weft::sched::batch& b = s.schedule(static_cast<double>(it));
    ++res.iterations;
    for (request_id id : b.preempted_recompute) ++res.tenants[active.at(id).w.tenant].preempted_recompute;
    for (const auto& t : b.swapped_out) ++res.tenants[active.at(t.id).w.tenant].preempted_swap;
    if (!b.aborted.empty()) throw std::runtime_error("mini_engine: a request was aborted (cache too small)");
    if (b.empty()) {
      s.complete({}, {});
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    eng.run(b, res.specs, sampled, top, top_k, res);
    res.forward_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    finished.clear();
    decoded.clear();
    std::vector<live> started;  // parallel samples that start at this step's first tokens
    for (std::size_t e = 0; e < b.entries.size(); ++e) {
      const auto& en = b.entries[e];
      if (!en.emits_token) continue;
      live& l = active.at(en.id);
      l.out.push_back(sampled[e]);
      decoded.push_back({en.id, sampled[e]});
      ++res.tenants[l.w.tenant].tokens;
      if (l.fork_pending) {
        // The prompt's first token: sample k (k = 1..n-1) starts from the k-th best one, under its own
        // id (request::sample_ids); the scheduler forks it from the parent's prompt blocks.
        l.fork_pending = false;
        for (std::size_t k = 1; k < static_cast<std::size_t>(l.w.samples); ++k) {
          const token_id first = top[e].at(k);
          live c = l;
          c.w.id = l.sample_ids[k - 1];
          c.w.samples = 1;
          c.w.turns = 1;
          c.w.cancel_at = -1.0;  // a cancelled parent's samples go on
          c.out = {first};
          c.sample_ids.clear();
          c.w.spec.first_rank = static_cast<int>(k);
          decoded.push_back({c.w.id, first});
          if (c.w.spec.max_new == 1) finished.push_back(c.w.id);  // its first token is its last
          started.push_back(std::move(c));
        }
      }
      if (static_cast<int>(l.out.size()) == l.w.spec.max_new) finished.push_back(en.id);
    }
    s.complete(finished, decoded);
    for (live& c : started) {
      res.specs[c.w.id] = c.w.spec;
      ++res.forks;
      ++res.tenants[c.w.tenant].requests;
      ++res.tenants[c.w.tenant].tokens;
      const request_id id = c.w.id;
      active.emplace(id, std::move(c));  // (before the finished loop below, which reads it)
    }
    for (request_id id : finished) {
      live& l = active.at(id);
      l.done = true;
      res.outputs[id] = l.out;
      if (l.w.turns > 1) {
        // The next turn: the whole conversation so far plus the user's follow-up.
        workload_request nw = l.w;
        nw.id = request_id(next_id++);
        nw.arrival = static_cast<double>(it) + 2;
        nw.spec.prompt = l.prompt;
        nw.spec.prompt.insert(nw.spec.prompt.end(), l.out.begin(), l.out.end());
        nw.spec.prompt.insert(nw.spec.prompt.end(), l.w.follow_up.begin(), l.w.follow_up.end());
        nw.turns = l.w.turns - 1;
        nw.samples = 1;
        later.push_back(std::move(nw));
      }
    }
  }
  if (!s.idle()) throw std::runtime_error("mini_engine: the workload did not finish");
  return res;
}

// The check: every request's output against the model run densely on its own. Returns the number
// of requests whose tokens differ (0 for a correct engine).
inline std::size_t count_mismatches(const model& m, const serve_result& r, std::size_t* checked = nullptr) {
  std::size_t bad = 0, n = 0;
  for (const auto& [id, out] : r.outputs) {
    request_spec spec = r.specs.at(id);
    spec.max_new = static_cast<int>(out.size());
    ++n;
    if (generate_dense(m, spec) != out) ++bad;
  }
  if (checked) *checked = n;
  return bad;
}

}  // namespace mini_engine

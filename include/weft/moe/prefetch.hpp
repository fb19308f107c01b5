// Expert prefetchers, models of weft::moe::prefetcher. eam_prefetcher predicts the next layers'
// experts from the similarity of the request's expert activation matrix (EAM) to past requests'
// (MoE-Infinity, Xue et al. 2024, §4); gate_prefetcher applies the next layers' gates to the current
// hidden state (Pre-gated MoE, Hwang et al. ISCA 2024; Fate, 2025). Both correct themselves on a
// misprediction by widening their next predictions (AdapMoE-style adaptive width).
#pragma once

#include <weft/core/error.hpp>
#include <weft/moe/concepts.hpp>
#include <weft/moe/types.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

namespace weft::moe {

namespace detail {

// Misprediction correction shared by the prefetchers: remembers what was predicted per layer; when
// the router's actual choice at a layer includes experts that were not predicted, the prediction
// width grows by one (up to max_extra); a fully correct layer shrinks it by one.
class width_corrector {
 public:
  void bind(const model_shape& shape, std::uint32_t max_extra) {
    shape_ = shape;
    max_extra_ = max_extra;
    extra_ = 0;
    predicted_.assign(shape.num_keys(), 0);
  }
  void note_prediction(expert_key k) { predicted_[shape_.index(k)] = 1; }
  // Returns how many of `experts` at `layer` were not predicted, and forgets that layer's predictions.
  std::uint32_t observe(std::uint32_t layer, std::span<const std::uint32_t> experts) {
    std::uint32_t missed = 0;
    bool any = false;
    const std::size_t base = std::size_t{layer} * shape_.num_experts;
    for (std::uint32_t e = 0; e < shape_.num_experts; ++e) any |= predicted_[base + e] != 0;
    for (const std::uint32_t e : experts) missed += predicted_[base + e] ? 0u : 1u;
    std::fill(predicted_.begin() + static_cast<std::ptrdiff_t>(base),
              predicted_.begin() + static_cast<std::ptrdiff_t>(base + shape_.num_experts), std::uint8_t{0});
    if (!any) return 0;  // nothing was predicted for this layer: no evidence either way
    if (missed > 0) {
      extra_ = std::min(extra_ + 1, max_extra_);
      ++mispredictions_;
    } else if (extra_ > 0) {
      --extra_;
    }
    return missed;
  }
  std::uint32_t width() const noexcept { return shape_.top_k + extra_; }
  std::uint32_t extra() const noexcept { return extra_; }
  std::uint64_t mispredictions() const noexcept { return mispredictions_; }

 private:
  model_shape shape_{};
  std::uint32_t max_extra_ = 0, extra_ = 0;
  std::uint64_t mispredictions_ = 0;
  std::vector<std::uint8_t> predicted_;
};

// Appends to `out` the `width` experts of `layer` with the highest positive scores, ties to the
// smaller id. O(E log width).
inline void top_scores(std::span<const double> scores, std::uint32_t layer, std::uint32_t width,
                       std::vector<std::uint32_t>& scratch, std::vector<expert_key>& out, width_corrector& corr) {
  scratch.resize(scores.size());
  std::iota(scratch.begin(), scratch.end(), 0u);
  const std::size_t n = std::min<std::size_t>(width, scores.size());
  std::partial_sort(
      scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(n), scratch.end(),
      [&](std::uint32_t a, std::uint32_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); });
  for (std::size_t i = 0; i < n; ++i) {
    if (!(scores[scratch[i]] > 0.0)) break;
    out.push_back({layer, scratch[i]});
    corr.note_prediction({layer, scratch[i]});
  }
}

}  // namespace detail

/// Options of eam_prefetcher. Weights mix four evidence sources into one score per expert.
struct eam_options {
  std::uint32_t history = 64;          ///< past requests' EAMs kept (oldest replaced first)
  double match_weight = 1.0;           ///< the most similar past EAM's row (MoE-Infinity)
  double request_weight = 1.0;         ///< the current request's own EAM row (temporal reuse)
  double previous_token_weight = 1.0;  ///< the previous token's choice at that layer
  double transition_weight =
      2.0;  ///< experts that followed the current layer's experts before (strongest next-layer signal)
  std::uint32_t max_extra = 1;  ///< correction: up to top_k + max_extra experts per layer
  bool wrap = true;             ///< predict the next token's first layers from the last ones
};

/// MoE-Infinity's activation-matrix prefetcher. The current request's EAM (layers x experts
/// activation counts) is compared by cosine similarity with the EAMs of up to `history` past
/// requests; the best match's rows for the coming layers, blended with the request's own rows, the
/// previous token's routing and an online layer-to-layer transition count, rank the experts to
/// prefetch. Similarities are kept incrementally, so observe is O(k * history).
/// Not thread-safe. Complexity: observe O(k * (history + E)); predict O(history + depth * E log E);
/// begin_request O(L * E). Memory O((history + E) * L * E).
class eam_prefetcher {
 public:
  explicit eam_prefetcher(eam_options options = {}) : opt_(options) {
    constexpr const char* where = "weft::moe::eam_prefetcher";
    expects(options.history >= 1, errc::invalid_argument, where, "history is 0; keep at least one past request");
    for (const double w :
         {options.match_weight, options.request_weight, options.previous_token_weight, options.transition_weight})
      expects(w >= 0.0, errc::invalid_argument, where, "weight ", w, " is negative; weights must be >= 0");
  }

  void bind(const model_shape& shape) {
    shape.validate("weft::moe::eam_prefetcher::bind");
    shape_ = shape;
    const std::size_t keys = shape.num_keys();
    current_.assign(keys, 0);
    previous_token_.assign(keys, 0);
    token_.assign(keys, 0);
    transition_.assign(keys * shape.num_experts, 0);
    past_.clear();
    past_norm2_.clear();
    dot_.clear();
    next_victim_ = 0;
    current_norm2_ = 0;
    last_layer_ = std::numeric_limits<std::uint32_t>::max();
    last_experts_.clear();
    corrector_.bind(shape, opt_.max_extra);
  }

  void begin_request(std::uint64_t request) {
    if (request == request_ && started_) return;
    started_ = true;
    request_ = request;
    commit_current();
    std::fill(previous_token_.begin(), previous_token_.end(), std::uint8_t{0});
    std::fill(token_.begin(), token_.end(), std::uint8_t{0});
    last_layer_ = std::numeric_limits<std::uint32_t>::max();
    last_experts_.clear();
  }

  void observe(std::uint32_t layer, std::span<const std::uint32_t> experts) {
    expects(layer < shape_.num_layers, errc::out_of_range, "weft::moe::eam_prefetcher::observe", "layer ", layer,
            " does not exist (", shape_.num_layers, " layers)");
    for (const std::uint32_t e : experts)
      expects(e < shape_.num_experts, errc::out_of_range, "weft::moe::eam_prefetcher::observe", "unknown expert ", e,
              " at layer ", layer);
    corrector_.observe(layer, experts);
    // A layer at or before the last one observed starts a new token.
    if (last_layer_ != std::numeric_limits<std::uint32_t>::max() && layer <= last_layer_) {
      previous_token_.swap(token_);
      std::fill(token_.begin(), token_.end(), std::uint8_t{0});
    }
    const std::size_t row = std::size_t{layer} * shape_.num_experts;
    for (const std::uint32_t e : experts) {
      const std::size_t i = row + e;
      current_norm2_ += 2 * std::uint64_t{current_[i]} + 1;
      ++current_[i];
      for (std::size_t h = 0; h < past_.size(); ++h) dot_[h] += past_[h][i];
      token_[i] = 1;
    }
    // Learn which experts of `layer` followed those of the previous layer.
    if (last_layer_ != std::numeric_limits<std::uint32_t>::max() && layer == last_layer_ + 1)
      for (const std::uint32_t from : last_experts_)
        for (const std::uint32_t to : experts)
          ++transition_[(std::size_t{last_layer_} * shape_.num_experts + from) * shape_.num_experts + to];
    last_layer_ = layer;
    last_experts_.assign(experts.begin(), experts.end());
  }

  void predict(std::uint32_t layer, std::uint32_t depth, std::vector<expert_key>& out) {
    expects(layer < shape_.num_layers, errc::out_of_range, "weft::moe::eam_prefetcher::predict", "layer ", layer,
            " does not exist (", shape_.num_layers, " layers)");
    const std::size_t match = best_match();
    const std::uint32_t E = shape_.num_experts;
    scores_.resize(E);
    for (std::uint32_t d = 1; d <= depth; ++d) {
      if (!opt_.wrap && layer + d >= shape_.num_layers) break;
      if (d > shape_.num_layers) break;
      const std::uint32_t target = (layer + d) % shape_.num_layers;
      const std::size_t row = std::size_t{target} * E;
      const double cur_total = row_total(current_, row);
      const double past_total = match < past_.size() ? row_total(past_[match], row) : 0;
      std::fill(scores_.begin(), scores_.end(), 0.0);
      for (std::uint32_t e = 0; e < E; ++e) {
        double s = 0;
        if (cur_total > 0) s += opt_.request_weight * current_[row + e] / cur_total;
        if (past_total > 0) s += opt_.match_weight * past_[match][row + e] / past_total;
        // token_ holds this token's layers seen so far; for a layer not yet run this token, the
        // previous token's choice is the reuse evidence.
        const bool seen_this_token = last_layer_ != std::numeric_limits<std::uint32_t>::max() && target <= last_layer_;
        const auto& prev = seen_this_token ? token_ : previous_token_;
        s += opt_.previous_token_weight * prev[row + e] / static_cast<double>(shape_.top_k);
        scores_[e] = s;
      }
      if (d == 1 && target == layer + 1 && !last_experts_.empty() && last_layer_ == layer) {
        double total = 0;
        for (const std::uint32_t from : last_experts_)
          for (std::uint32_t e = 0; e < E; ++e) total += transition_[(std::size_t{layer} * E + from) * E + e];
        if (total > 0)
          for (const std::uint32_t from : last_experts_)
            for (std::uint32_t e = 0; e < E; ++e)
              scores_[e] += opt_.transition_weight * transition_[(std::size_t{layer} * E + from) * E + e] / total;
      }
      detail::top_scores(scores_, target, corrector_.width(), scratch_, out, corrector_);
    }
  }

  /// Layers whose actual routing included an expert that was not predicted.
  std::uint64_t mispredictions() const noexcept { return corrector_.mispredictions(); }
  /// Current correction: experts predicted per layer beyond top_k.
  std::uint32_t extra_width() const noexcept { return corrector_.extra(); }
  std::size_t history_size() const noexcept { return past_.size(); }

 private:
  double row_total(const std::vector<std::uint32_t>& m, std::size_t row_begin) const {
    double total = 0;
    for (std::uint32_t e = 0; e < shape_.num_experts; ++e) total += m[row_begin + e];
    return total;
  }
  std::size_t best_match() const {
    std::size_t best = past_.size();
    double best_cos = 0;
    for (std::size_t h = 0; h < past_.size(); ++h) {
      if (past_norm2_[h] == 0 || current_norm2_ == 0) continue;
      const double c = static_cast<double>(dot_[h]) /
                       std::sqrt(static_cast<double>(past_norm2_[h]) * static_cast<double>(current_norm2_));
      if (c > best_cos) best_cos = c, best = h;
    }
    return best;
  }
  void commit_current() {
    if (current_norm2_ == 0) return;
    if (past_.size() < opt_.history) {
      past_.push_back(current_);
      past_norm2_.push_back(current_norm2_);
      dot_.push_back(0);
    } else {
      past_[next_victim_] = current_;
      past_norm2_[next_victim_] = current_norm2_;
      next_victim_ = (next_victim_ + 1) % opt_.history;
    }
    std::fill(current_.begin(), current_.end(), 0u);
    current_norm2_ = 0;
    std::fill(dot_.begin(), dot_.end(), std::uint64_t{0});
  }

  eam_options opt_;
  model_shape shape_{};
  std::vector<std::uint32_t> current_;            // the current request's EAM
  std::uint64_t current_norm2_ = 0;               // its squared Frobenius norm
  std::vector<std::vector<std::uint32_t>> past_;  // past requests' EAMs (ring of `history`)
  std::vector<std::uint64_t> past_norm2_;
  std::vector<std::uint64_t> dot_;  // dot_[h] == <past_[h], current_>
  std::size_t next_victim_ = 0;
  std::vector<std::uint8_t> token_, previous_token_;  // this and the previous token's routing
  std::vector<std::uint32_t> transition_;             // [layer][from][to] counts, layer -> layer+1
  std::uint32_t last_layer_ = std::numeric_limits<std::uint32_t>::max();
  std::vector<std::uint32_t> last_experts_;
  std::uint64_t request_ = 0;
  bool started_ = false;
  std::vector<double> scores_;
  std::vector<std::uint32_t> scratch_;
  detail::width_corrector corrector_;
};

/// Pre-gated prediction: the engine hands the hidden state entering layer l (set_hidden); predict
/// applies the gate (router) weights of layers l+1..l+depth to it and takes the top experts. The
/// hidden state changes little between consecutive layers (residual stream), which is why a later
/// layer's gate on an earlier hidden state predicts its routing (Pre-gated MoE §4; Fate §3).
/// Gate weights of layer l are an E x d row-major matrix. Does not wrap to the next token (its
/// hidden state does not exist yet). Not thread-safe. Complexity: set_hidden O(d); observe O(E);
/// predict O(depth * (E * d + E log E)).
class gate_prefetcher {
 public:
  /// gates: one E x hidden_dim row-major matrix per layer (L of them). Throws weft::error if sizes disagree.
  gate_prefetcher(std::vector<std::vector<float>> gates, std::uint32_t hidden_dim, std::uint32_t max_extra = 2)
      : gates_(std::move(gates)), dim_(hidden_dim), max_extra_(max_extra) {
    expects(hidden_dim >= 1, errc::invalid_argument, "weft::moe::gate_prefetcher", "hidden_dim is 0");
    expects(!gates_.empty(), errc::invalid_argument, "weft::moe::gate_prefetcher", "no gate weights given");
  }

  void bind(const model_shape& shape) {
    constexpr const char* where = "weft::moe::gate_prefetcher::bind";
    shape.validate(where);
    expects(gates_.size() == shape.num_layers, errc::mismatch, where, gates_.size(), " gate matrices for ",
            shape.num_layers, " layers");
    for (std::size_t l = 0; l < gates_.size(); ++l)
      expects(gates_[l].size() == std::size_t{shape.num_experts} * dim_, errc::mismatch, where, "gate of layer ", l,
              " has ", gates_[l].size(),
              " weights; expected num_experts * hidden_dim = ", std::size_t{shape.num_experts} * dim_);
    shape_ = shape;
    hidden_.assign(dim_, 0.0f);
    have_hidden_ = false;
    corrector_.bind(shape, max_extra_);
  }
  void begin_request(std::uint64_t) { have_hidden_ = false; }

  /// The hidden state entering `layer` (the input of its gate). Throws weft::error on a size mismatch.
  void set_hidden(std::uint32_t layer, std::span<const float> hidden) {
    expects(layer < shape_.num_layers, errc::out_of_range, "weft::moe::gate_prefetcher::set_hidden", "layer ", layer,
            " does not exist");
    expects(hidden.size() == dim_, errc::mismatch, "weft::moe::gate_prefetcher::set_hidden", "hidden state has ",
            hidden.size(), " values; hidden_dim is ", dim_);
    std::copy(hidden.begin(), hidden.end(), hidden_.begin());
    hidden_layer_ = layer;
    have_hidden_ = true;
  }

  void observe(std::uint32_t layer, std::span<const std::uint32_t> experts) {
    expects(layer < shape_.num_layers, errc::out_of_range, "weft::moe::gate_prefetcher::observe", "layer ", layer,
            " does not exist");
    for (const std::uint32_t e : experts)
      expects(e < shape_.num_experts, errc::out_of_range, "weft::moe::gate_prefetcher::observe", "unknown expert ", e,
              " at layer ", layer);
    corrector_.observe(layer, experts);
  }

  void predict(std::uint32_t layer, std::uint32_t depth, std::vector<expert_key>& out) {
    if (!have_hidden_) return;
    scores_.resize(shape_.num_experts);
    for (std::uint32_t d = 1; d <= depth && layer + d < shape_.num_layers; ++d) {
      const std::uint32_t target = layer + d;
      const float* w = gates_[target].data();
      double lo = std::numeric_limits<double>::infinity();
      for (std::uint32_t e = 0; e < shape_.num_experts; ++e) {
        double s = 0;
        for (std::uint32_t x = 0; x < dim_; ++x) s += double{w[std::size_t{e} * dim_ + x]} * hidden_[x];
        scores_[e] = s;
        lo = std::min(lo, s);
      }
      // Shift so every logit is positive: top_scores keeps only positive scores.
      for (double& s : scores_) s = s - lo + 1.0;
      detail::top_scores(scores_, target, corrector_.width(), scratch_, out, corrector_);
    }
  }

  std::uint64_t mispredictions() const noexcept { return corrector_.mispredictions(); }
  std::uint32_t extra_width() const noexcept { return corrector_.extra(); }

 private:
  std::vector<std::vector<float>> gates_;
  std::uint32_t dim_;
  std::uint32_t max_extra_;
  model_shape shape_{};
  std::vector<float> hidden_;
  std::uint32_t hidden_layer_ = 0;
  bool have_hidden_ = false;
  std::vector<double> scores_;
  std::vector<std::uint32_t> scratch_;
  detail::width_corrector corrector_;
};

static_assert(prefetcher<eam_prefetcher>);
static_assert(prefetcher<gate_prefetcher>);

}  // namespace weft::moe

// Measured time of one transformer layer's non-attention operators (norms, QKV and output
// projections, RoPE, MLP up/activation/down, residual add) as a function of the batch's token count:
// the operator profiles of Vidur (Agrawal et al., "Vidur", MLSys 2024, §4.2), interpolated between the
// measured counts with the step that GEMM tiling puts at power-of-two token counts.
#pragma once

#include <weft/core/error.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft::sched::sim {

/// The operators a layer profile times, in Vidur's names (`time_stats.<name>.median` columns).
enum class layer_op : std::size_t {
  input_layernorm,
  attn_pre_proj,  ///< the QKV projection
  attn_rope,
  attn_post_proj,  ///< the output projection
  post_attention_layernorm,
  mlp_up_proj,  ///< gate and up projections (gated MLP)
  mlp_act,
  mlp_down_proj,
  add,
};
inline constexpr std::size_t layer_op_count = 9;
inline constexpr std::array<std::string_view, layer_op_count> layer_op_names = {
    "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm", "mlp_up_proj",
    "mlp_act",         "mlp_down_proj", "add"};

/// The layer shape a profile was measured for (Vidur's n_head, n_kv_head, n_embd, n_expanded_embd).
struct layer_shape {
  int heads = 0;         ///< query heads
  int kv_heads = 0;      ///< key/value heads (GQA)
  int hidden = 0;        ///< model width
  int intermediate = 0;  ///< MLP width (gated: gate and up are each this wide)
  friend bool operator==(const layer_shape&, const layer_shape&) = default;
};

/// Per-layer operator times against token count. Immutable after construction: thread-safe.
/// layer_s and op_s are O(log points).
class layer_profile {
 public:
  /// Seconds of each operator at each token count (op_seconds[op][i] at tokens[i]).
  using op_table = std::array<std::vector<double>, layer_op_count>;

  /// Takes measured points: tokens strictly ascending and >= 1, every time finite and >= 0, at least
  /// one point. Throws weft::error(invalid_argument) naming `source` and the rule otherwise.
  layer_profile(std::string source, layer_shape shape, int tensor_parallel, std::vector<std::int64_t> tokens,
                op_table op_seconds)
      : source_(std::move(source)),
        shape_(shape),
        tp_(tensor_parallel),
        tokens_(std::move(tokens)),
        ops_(std::move(op_seconds)) {
    const char* where = "weft::sched::sim::layer_profile";
    expects(!tokens_.empty(), errc::invalid_argument, where, source_, ": no measured points");
    expects(tp_ >= 1, errc::invalid_argument, where, source_, ": tensor_parallel must be >= 1, got ", tp_);
    expects(shape_.heads >= 1 && shape_.kv_heads >= 1 && shape_.hidden >= 1 && shape_.intermediate >= 1 &&
                shape_.hidden % shape_.heads == 0 && shape_.heads % shape_.kv_heads == 0,
            errc::invalid_argument, where, source_, ": layer shape needs positive sizes, heads dividing hidden and ",
            "kv_heads dividing heads");
    for (std::size_t i = 0; i < tokens_.size(); ++i)
      expects(tokens_[i] >= 1 && tokens_[i] <= max_tokens && (i == 0 || tokens_[i - 1] < tokens_[i]),
              errc::invalid_argument, where, source_, ": token counts must be in [1, 2^40] and strictly ascending; ",
              tokens_[i], " at point ", i);
    totals_.assign(tokens_.size(), 0.0);
    for (std::size_t op = 0; op < layer_op_count; ++op) {
      expects(ops_[op].size() == tokens_.size(), errc::invalid_argument, where, source_, ": operator ",
              layer_op_names[op], " has ", ops_[op].size(), " times for ", tokens_.size(), " token counts");
      for (std::size_t i = 0; i < tokens_.size(); ++i) {
        expects(std::isfinite(ops_[op][i]) && ops_[op][i] >= 0.0, errc::invalid_argument, where, source_, ": operator ",
                layer_op_names[op], " at ", tokens_[i], " tokens has time ", ops_[op][i]);
        totals_[i] += ops_[op][i];
      }
    }
    // Where each interval's tile step sits (or linear_interval), once: position() runs per iteration.
    step_at_.assign(tokens_.size(), linear_interval);
    for (std::size_t i = 0; i + 1 < tokens_.size(); ++i)
      if (!(std::abs(totals_[i + 1] - totals_[i]) <= step_threshold * std::min(totals_[i], totals_[i + 1])))
        step_at_[i] = roundest(tokens_[i], tokens_[i + 1]);
  }

  const std::string& source() const noexcept { return source_; }
  const layer_shape& shape() const noexcept { return shape_; }
  int tensor_parallel() const noexcept { return tp_; }
  std::span<const std::int64_t> tokens() const noexcept { return tokens_; }
  /// Measured total of the operators at point i (no interpolation).
  double measured_s(std::size_t i) const { return totals_.at(i); }

  /// Seconds of all operators of one layer for a batch of `tokens` tokens (prefill and decode
  /// together: these operators see only the token count). See op_s for the interpolation.
  double layer_s(double tokens) const noexcept {
    const auto [i, w] = position(tokens);
    return blend(totals_, i, w, tokens);
  }

  /// One operator's seconds. Between two measured counts t0 < t1 the time is linear when their totals
  /// differ by at most 15%; a larger difference is a GEMM tile step, placed at the count in [t0, t1)
  /// with the most trailing zero bits (tiles are powers of two): counts up to it take t0's times, counts
  /// above take t1's. Below the smallest count: its time (launch and weight-read floor). Above the
  /// largest: that time scaled by tokens / largest (compute-bound). O(log points).
  double op_s(layer_op op, double tokens) const noexcept {
    const auto [i, w] = position(tokens);
    return blend(ops_[static_cast<std::size_t>(op)], i, w, tokens);
  }

  /// op_s(ops[0], tokens) + op_s(ops[1], tokens) + ..., added in that order (the same value), with
  /// the interpolation point found once. O(log points + ops).
  double ops_s(std::span<const layer_op> ops, double tokens) const noexcept {
    const auto [i, w] = position(tokens);
    double sum = 0.0;
    for (const layer_op op : ops) sum += blend(ops_[static_cast<std::size_t>(op)], i, w, tokens);
    return sum;
  }

  /// The same profile with each operator scaled by the ratio of its work in `to` to its work in this
  /// profile's shape (projections and MLP by their FLOPs, norms and adds by width, RoPE by heads):
  /// a profile of Llama-2-7B predicts a Llama-3-8B or Mistral-7B layer (GQA, wider MLP). O(points).
  layer_profile rescaled(const layer_shape& to, std::string source_suffix = " (rescaled)") const {
    const char* where = "weft::sched::sim::layer_profile::rescaled";
    expects(to.heads >= 1 && to.kv_heads >= 1 && to.hidden >= 1 && to.intermediate >= 1 && to.hidden % to.heads == 0,
            errc::invalid_argument, where, "target shape needs positive sizes with heads dividing hidden");
    const auto work = [](const layer_shape& s) {
      const double h = s.hidden, hd = static_cast<double>(s.hidden / s.heads), q = s.heads, kv = s.kv_heads,
                   in = s.intermediate;
      return std::array<double, layer_op_count>{h, h * (q + 2 * kv) * hd, q + kv, h * q * hd, h, h * in, in, h * in, h};
    };
    const auto from = work(shape_), target = work(to);
    op_table ops = ops_;
    for (std::size_t op = 0; op < layer_op_count; ++op)
      for (double& t : ops[op]) t *= target[op] / from[op];
    return layer_profile(source_ + source_suffix, to, tp_, tokens_, std::move(ops));
  }

  /// The profile restricted to the points with the given indices (ascending): fit on half the
  /// measurements and test on the rest, as the fidelity bench does. O(points).
  layer_profile subset(std::span<const std::size_t> indices) const {
    std::vector<std::int64_t> tokens;
    op_table ops;
    for (std::size_t k : indices) {
      expects(k < tokens_.size(), errc::out_of_range, "weft::sched::sim::layer_profile::subset", "index ", k, " of ",
              tokens_.size(), " points");
      tokens.push_back(tokens_[k]);
      for (std::size_t op = 0; op < layer_op_count; ++op) ops[op].push_back(ops_[op][k]);
    }
    return layer_profile(source_, shape_, tp_, std::move(tokens), std::move(ops));
  }

 private:
  // Where `tokens` falls: point i and the weight of point i + 1 (w in [0, 1]); beyond the ends, i is
  // the end point and w = 0 (the end rules are applied in blend).
  std::pair<std::size_t, double> position(double tokens) const noexcept {
    const std::size_t n = tokens_.size();
    if (!(tokens > static_cast<double>(tokens_.front()))) return {0, 0.0};
    if (tokens >= static_cast<double>(tokens_.back())) return {n - 1, 0.0};
    const auto it = std::upper_bound(tokens_.begin(), tokens_.end(), tokens,
                                     [](double t, std::int64_t p) { return t < static_cast<double>(p); });
    const std::size_t i = static_cast<std::size_t>(it - tokens_.begin()) - 1;
    if (step_at_[i] == linear_interval) {
      const double t0 = static_cast<double>(tokens_[i]), t1 = static_cast<double>(tokens_[i + 1]);
      return {i, (tokens - t0) / (t1 - t0)};
    }
    return {i, tokens <= static_cast<double>(step_at_[i]) ? 0.0 : 1.0};
  }

  double blend(const std::vector<double>& y, std::size_t i, double w, double tokens) const noexcept {
    if (i + 1 == tokens_.size() && tokens > static_cast<double>(tokens_.back()))
      return y.back() * tokens / static_cast<double>(tokens_.back());
    if (w == 0.0) return y[i];
    return y[i] + w * (y[i + 1] - y[i]);
  }

  // The count in [a, b) with the most trailing zero bits (ties: the smallest).
  static std::int64_t roundest(std::int64_t a, std::int64_t b) noexcept {
    std::int64_t best = a;
    for (int bit = 41; bit >= 0; --bit) {
      const std::int64_t step = std::int64_t{1} << bit;
      const std::int64_t m = (a + step - 1) / step * step;  // smallest multiple of 2^bit >= a
      if (m < b) {
        best = m;
        break;
      }
    }
    return best;
  }

  static constexpr double step_threshold = 0.15;
  static constexpr std::int64_t linear_interval = -1;
  static constexpr std::int64_t max_tokens = std::int64_t{1} << 40;

  std::string source_;
  layer_shape shape_;
  int tp_;
  // Invariants: tokens_ strictly ascending, each ops_[op] and totals_ as long as tokens_.
  std::vector<std::int64_t> tokens_;
  op_table ops_;
  std::vector<double> totals_;
  // step_at_[i]: the tile step between points i and i + 1, or linear_interval (last entry unused).
  std::vector<std::int64_t> step_at_;
};

}  // namespace weft::sched::sim

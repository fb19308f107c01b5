// What a Mixture-of-Experts layer costs an iteration: the experts the batch's tokens activate (a
// routing model — per layer, the probability that a token's top-k include each expert) are each read
// from HBM once per iteration and multiply the tokens routed to them (Fedus et al., "Switch
// Transformers", JMLR 2022, §2; Jiang et al., "Mixtral of Experts", 2024). So a prompt split into
// token chunks reads the experts again for every chunk, and one split into layer groups does not —
// the effect layered prefill removes (Lee et al., arXiv 2510.08055, 2025, §3).
#pragma once

#include <weft/core/error.hpp>
#include <weft/core/random.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

namespace weft::sched::sim {

/// The Mixture-of-Experts part of a model (model_spec::moe): every layer's MLP is `experts` routed
/// experts (gated MLPs of `expert_intermediate`), of which each token uses `top_k`, plus
/// `shared_experts` always-active ones (Qwen-MoE, DeepSeek-MoE). experts == 0: a dense model.
/// A plain value; cost_model validates it.
struct moe_spec {
  int experts = 0;              ///< routed experts per layer (0: dense model)
  int top_k = 0;                ///< experts each token is routed to, in [1, experts]
  int expert_intermediate = 0;  ///< each routed expert's width (gate and up projections each this wide)
  int shared_experts = 0;       ///< experts every token uses, >= 0
  int shared_intermediate = 0;  ///< each shared expert's width (>= 1 when shared_experts > 0)

  bool enabled() const noexcept { return experts > 0; }
};

/// Which experts the tokens of each layer activate: p(l, e), the probability that a token's top-k at
/// layer l include expert e (each layer's row sums to top_k, each entry in [0, 1]). Tokens are drawn
/// independently, so T tokens activate expert e with probability 1 - (1 - p)^T and send it T·p tokens
/// on average. That is the assumption: tokens of one prompt that prefer the same experts (routing
/// locality) activate fewer distinct experts than independent ones, so a chunk's reload is an upper
/// bound where chunks are small. Immutable after construction: thread-safe. Build one with
/// uniform, zipf or from_counts (e.g. counts of a weft::moe::routing_trace).
class routing_model {
 public:
  /// Limits that keep a model's tables small (they are built once per cost model).
  static constexpr int max_layers = 1024;
  static constexpr int max_experts = 4096;

  /// Empty: the cost model routes uniformly over its model's experts.
  routing_model() = default;

  /// Every expert equally likely at every layer: p = top_k / experts (Mixtral's routing is close to
  /// this: Jiang et al. 2024, §5, find no expert specialised by domain). O(layers * experts).
  static routing_model uniform(int layers, int experts, int top_k) {
    const char* where = "weft::sched::sim::routing_model::uniform";
    check_sizes(layers, experts, top_k, where);
    return routing_model(layers, experts, top_k,
                         std::vector<double>(static_cast<std::size_t>(layers) * static_cast<std::size_t>(experts),
                                             static_cast<double>(top_k) / experts));
  }

  /// Skewed popularity: at each layer the experts, in a seeded random order, have Zipf(s) weights
  /// 1/rank^s, turned into inclusion probabilities min(1, c·w) with c chosen so each row sums to top_k
  /// (an expert cannot be picked twice by one token). s = 0 is uniform. O(layers * experts). Throws
  /// weft::error(invalid_argument) for sizes out of range or s not finite and >= 0.
  static routing_model zipf(int layers, int experts, int top_k, double s, std::uint64_t seed = 1) {
    const char* where = "weft::sched::sim::routing_model::zipf";
    check_sizes(layers, experts, top_k, where);
    expects(std::isfinite(s) && s >= 0.0, errc::invalid_argument, where, "s must be finite and >= 0, got ", s);
    weft::rng rng(seed);
    std::vector<double> p;
    p.reserve(static_cast<std::size_t>(layers) * static_cast<std::size_t>(experts));
    std::vector<int> order(static_cast<std::size_t>(experts));
    std::vector<double> w(static_cast<std::size_t>(experts));
    for (int l = 0; l < layers; ++l) {
      std::iota(order.begin(), order.end(), 0);
      for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);  // Fisher-Yates
      for (int r = 0; r < experts; ++r)
        w[static_cast<std::size_t>(order[static_cast<std::size_t>(r)])] = 1.0 / std::pow(r + 1.0, s);
      const std::vector<double> row = inclusion(w, top_k);
      p.insert(p.end(), row.begin(), row.end());
    }
    return routing_model(layers, experts, top_k, std::move(p));
  }

  /// From observed routing: counts[l][e] = how often expert e was among a token's top_k at layer l
  /// (for a trace of T tokens, each row sums to top_k·T and p = count / T). Rows whose counts do not
  /// sum to top_k·T are normalised the same way as zipf's weights. Throws weft::error(invalid_argument)
  /// for no layers, rows of different lengths, a negative or non-finite count, or a row with fewer
  /// than top_k experts ever used. O(layers * experts).
  static routing_model from_counts(int top_k, const std::vector<std::vector<double>>& counts) {
    const char* where = "weft::sched::sim::routing_model::from_counts";
    expects(!counts.empty() && !counts.front().empty(), errc::invalid_argument, where,
            "counts has no layers or no experts");
    const int layers = static_cast<int>(std::min<std::size_t>(counts.size(), max_layers + 1));
    const int experts = static_cast<int>(std::min<std::size_t>(counts.front().size(), max_experts + 1));
    check_sizes(layers, experts, top_k, where);
    std::vector<double> p;
    p.reserve(static_cast<std::size_t>(layers) * static_cast<std::size_t>(experts));
    for (std::size_t l = 0; l < counts.size(); ++l) {
      const auto& row = counts[l];
      expects(row.size() == counts.front().size(), errc::invalid_argument, where, "layer ", l, " has ", row.size(),
              " experts, layer 0 has ", counts.front().size());
      int used = 0;
      for (std::size_t e = 0; e < row.size(); ++e) {
        expects(std::isfinite(row[e]) && row[e] >= 0.0, errc::invalid_argument, where, "layer ", l, " expert ", e,
                ": count ", row[e], " must be finite and >= 0");
        used += row[e] > 0.0 ? 1 : 0;
      }
      expects(used >= top_k, errc::invalid_argument, where, "layer ", l, " uses ", used, " experts; top_k = ", top_k,
              " distinct experts per token need at least that many");
      const std::vector<double> q = inclusion(row, top_k);
      p.insert(p.end(), q.begin(), q.end());
    }
    return routing_model(layers, experts, top_k, std::move(p));
  }

  bool empty() const noexcept { return layers_ == 0; }
  int layers() const noexcept { return layers_; }
  int experts() const noexcept { return experts_; }
  int top_k() const noexcept { return top_k_; }

  /// Layer l's inclusion probabilities (experts() of them). Throws weft::error(out_of_range). O(1).
  std::span<const double> layer(int l) const {
    expects(l >= 0 && l < layers_, errc::out_of_range, "weft::sched::sim::routing_model::layer", "layer ", l, " of ",
            layers_);
    return std::span<const double>(p_).subspan(static_cast<std::size_t>(l) * static_cast<std::size_t>(experts_),
                                               static_cast<std::size_t>(experts_));
  }

  /// Expected distinct experts that `tokens` independent tokens activate at layer l:
  /// sum over e of 1 - (1 - p)^tokens. Throws weft::error for a bad layer or negative tokens. O(experts).
  double active_experts(int l, double tokens) const {
    expects(std::isfinite(tokens) && tokens >= 0.0, errc::invalid_argument,
            "weft::sched::sim::routing_model::active_experts", "tokens must be finite and >= 0, got ", tokens);
    double n = 0.0;
    for (const double q : layer(l)) n += activation(q, tokens);
    return n;
  }

  /// Probability that `tokens` independent tokens activate an expert each picks with probability q. O(1).
  static double activation(double q, double tokens) noexcept {
    if (q <= 0.0 || tokens <= 0.0) return 0.0;
    if (q >= 1.0) return 1.0;
    return -std::expm1(tokens * std::log1p(-q));
  }

 private:
  routing_model(int layers, int experts, int top_k, std::vector<double> p)
      : layers_(layers), experts_(experts), top_k_(top_k), p_(std::move(p)) {}

  static void check_sizes(int layers, int experts, int top_k, const char* where) {
    expects(layers >= 1 && layers <= max_layers && experts >= 1 && experts <= max_experts, errc::invalid_argument,
            where, "layers must be in [1, ", max_layers, "] and experts in [1, ", max_experts, "], got ", layers,
            " and ", experts);
    expects(top_k >= 1 && top_k <= experts, errc::invalid_argument, where, "top_k must be in [1, experts = ", experts,
            "], got ", top_k);
  }

  // Inclusion probabilities proportional to w, capped at 1, summing to k (water-filling: an expert
  // whose share would exceed 1 is always picked, the rest share what is left). Needs >= k positive w.
  static std::vector<double> inclusion(const std::vector<double>& w, int k) {
    std::vector<double> p(w.size(), 0.0);
    std::vector<bool> capped(w.size(), false);
    for (;;) {
      double rest = k, weight = 0.0;
      for (std::size_t e = 0; e < w.size(); ++e) (capped[e] ? rest -= 1.0 : weight += w[e]);
      bool changed = false;
      for (std::size_t e = 0; e < w.size(); ++e) {
        if (capped[e]) continue;
        p[e] = weight > 0.0 ? rest * w[e] / weight : 0.0;
        if (p[e] >= 1.0) capped[e] = changed = true;
      }
      if (!changed) break;
    }
    for (std::size_t e = 0; e < w.size(); ++e)
      if (capped[e]) p[e] = 1.0;
    return p;
  }

  int layers_ = 0, experts_ = 0, top_k_ = 0;
  std::vector<double> p_;  // layer-major: p_[l * experts_ + e]
};

namespace detail {

/// Per-GPU sizes and rates of one model's experts, for moe_table.
struct moe_rates {
  double expert_params = 0.0;  ///< one routed expert's weights on one GPU
  double shared_params = 0.0;  ///< all shared experts' weights on one GPU
  double weight_bytes = 2.0;
  double flops_per_s = 0.0;  ///< achieved FLOP rate of the experts' GEMMs
  double bytes_per_s = 0.0;  ///< achieved HBM rate reading their weights
};

/// Every layer's expert-MLP time and expert bytes read as a function of the tokens of the iteration
/// that pass it, tabulated once (cumulative over layers) so that the simulator's per-iteration cost is
/// O(1): per expert e of layer l with T tokens, max(2·T·p·W / flops, (1 - (1-p)^T)·W·bytes / bandwidth)
/// — the grouped GEMM's roofline, each active expert read once — plus the shared experts' dense MLP.
/// Exact at T = 1..128, then on a 2 % geometric grid to 2^20 tokens, linear between points (the curve
/// is smooth: < 0.1 % error); beyond, time grows with T and bytes stay (every expert is active).
/// Immutable: thread-safe.
class moe_table {
 public:
  moe_table(const routing_model& r, const moe_rates& n) : layers_(r.layers()) {
    for (int t = 1; t <= exact; ++t) grid_.push_back(t);
    while (grid_.back() < top) grid_.push_back(std::min(top, grid_.back() * ratio));
    const std::size_t g = grid_.size(), L = static_cast<std::size_t>(layers_);
    time_.assign((L + 1) * g, 0.0);
    bytes_.assign((L + 1) * g, 0.0);
    std::vector<double> t_row(g), b_row(g);
    std::span<const double> last;
    for (int l = 0; l < layers_; ++l) {
      const std::span<const double> p = r.layer(l);
      if (l == 0 || !std::equal(p.begin(), p.end(), last.begin(), last.end())) {  // layers often share a row
        for (std::size_t i = 0; i < g; ++i) layer_at(p, n, grid_[i], t_row[i], b_row[i]);
        last = p;
      }
      const std::size_t lo = static_cast<std::size_t>(l) * g, hi = lo + g;
      for (std::size_t i = 0; i < g; ++i) {
        time_[hi + i] = time_[lo + i] + t_row[i];
        bytes_[hi + i] = bytes_[lo + i] + b_row[i];
      }
    }
  }

  int layers() const noexcept { return layers_; }
  /// Seconds of the expert MLPs of layers [first, end) (real positions: a fraction of a layer counts
  /// by its fraction) for `tokens` tokens. O(1).
  double time_s(double tokens, double first, double end) const noexcept {
    return lookup(time_, tokens, first, end, true);
  }
  /// Expected expert weight bytes those layers read (one GPU). O(1).
  double bytes(double tokens, double first, double end) const noexcept {
    return lookup(bytes_, tokens, first, end, false);
  }

 private:
  static constexpr int exact = 128;
  static constexpr double ratio = 1.02;
  static constexpr double top = 1048576.0;

  static void layer_at(std::span<const double> p, const moe_rates& n, double t, double& time, double& bytes) {
    time = 0.0;
    bytes = 0.0;
    const double read_one = n.expert_params * n.weight_bytes;
    for (const double q : p) {
      const double a = routing_model::activation(q, t);
      time += std::max(2.0 * t * q * n.expert_params / n.flops_per_s, a * read_one / n.bytes_per_s);
      bytes += a * read_one;
    }
    if (n.shared_params > 0.0) {
      time += std::max(2.0 * t * n.shared_params / n.flops_per_s, n.shared_params * n.weight_bytes / n.bytes_per_s);
      bytes += n.shared_params * n.weight_bytes;
    }
  }

  // Cumulative table c (layers + 1 rows of grid points) between real layer positions, at `tokens`.
  double lookup(const std::vector<double>& c, double tokens, double first, double end, bool scales) const noexcept {
    if (!(tokens > 0.0) || !(end > first)) return 0.0;
    const std::size_t g = grid_.size();
    double x = tokens, scale = 1.0;
    if (x < 1.0) x = 1.0;
    if (x > top) {
      if (scales) scale = x / top;
      x = top;
    }
    std::size_t i;
    if (x <= exact) {
      i = static_cast<std::size_t>(x) - 1;
    } else {
      i = static_cast<std::size_t>(exact - 1) + static_cast<std::size_t>(std::log(x / exact) / std::log(ratio));
      while (i + 1 < g && grid_[i + 1] <= x) ++i;  // guard the floating-point index
      while (i > 0 && grid_[i] > x) --i;
    }
    const double w = i + 1 < g ? (x - grid_[i]) / (grid_[i + 1] - grid_[i]) : 0.0;
    const auto at = [&](double pos) {
      pos = std::clamp(pos, 0.0, static_cast<double>(layers_));
      const std::size_t l = std::min(static_cast<std::size_t>(pos), static_cast<std::size_t>(layers_ - 1));
      const double f = pos - static_cast<double>(l);
      const auto v = [&](std::size_t row) {
        const double* r = &c[row * g];
        return i + 1 < g ? r[i] + w * (r[i + 1] - r[i]) : r[i];
      };
      const double lo = v(l);
      return f == 0.0 ? lo : lo + f * (v(l + 1) - lo);
    };
    return scale * (at(end) - at(first));
  }

  int layers_;
  std::vector<double> grid_;          // token counts, ascending
  std::vector<double> time_, bytes_;  // (layers + 1) x grid: sums over layers [0, row)
};

}  // namespace detail
}  // namespace weft::sched::sim

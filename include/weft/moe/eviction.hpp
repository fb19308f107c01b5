// Eviction policies for expert_cache, each a model of weft::moe::expert_eviction_policy:
// LRU; LFU and LFU with exponential decay (frequency-based expert caching, e.g. Eliseev & Mazur,
// "Fast Inference of MoE Language Models with Offloading", 2023, and HOBBIT, 2024); activation-aware
// scoring (MoE-Infinity, Xue et al. 2024, §5 "activation-aware expert caching"); least-stale
// (SpecMD, Hoang et al. 2026); and Belady's MIN (Belady, IBM Systems Journal 1966), offline.
#pragma once

#include <weft/core/error.hpp>
#include <weft/moe/concepts.hpp>
#include <weft/moe/detail/candidate_set.hpp>
#include <weft/moe/types.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace weft::moe {

namespace detail {

// Shared bookkeeping of the scanning policies: the candidate set and a recency stamp per key.
// Every policy breaks ties the same way: older recency stamp first, then smaller key index, so the
// brute-force references in the tests can reproduce each decision exactly.
class scan_base {
 public:
  void bind_base(const model_shape& shape) {
    shape_ = shape;
    candidates_.resize(shape.num_keys());
    recency_.assign(shape.num_keys(), 0);
    layer_.resize(shape.num_keys());
    for (std::size_t i = 0; i < layer_.size(); ++i) layer_[i] = static_cast<std::uint32_t>(i / shape.num_experts);
    seq_ = 0;
  }
  void touch(std::size_t index) noexcept { recency_[index] = ++seq_; }
  void add(std::size_t index) {
    touch(index);
    candidates_.insert(index);
  }
  void drop(std::size_t index) noexcept { candidates_.erase(index); }

  // Picks the candidate with the smallest score (a value convertible to double), ties by recency
  // then index. O(candidates).
  template <class Score>
  std::optional<expert_key> scan_min(Score&& score) const {
    if (candidates_.empty()) return std::nullopt;
    std::uint32_t best = candidates_.items().front();
    double best_score = score(best);
    for (const std::uint32_t i : candidates_.items()) {
      const double s = score(i);
      if (s < best_score ||
          (s == best_score && (recency_[i] < recency_[best] || (recency_[i] == recency_[best] && i < best)))) {
        best = i;
        best_score = s;
      }
    }
    return shape_.key(best);
  }

  model_shape shape_{};
  candidate_set candidates_;
  std::vector<std::uint64_t> recency_;  // per key: event number of its last access or insertion
  std::vector<std::uint32_t> layer_;    // per key: its layer (saves a division in every scan)
  std::uint64_t seq_ = 0;               // events seen (accesses + insertions), strictly increasing
};

}  // namespace detail

/// Least recently used: evicts the candidate whose last access (or insertion) is oldest.
/// The baseline of every expert-offloading paper. Wins when routing has short-range temporal reuse
/// (consecutive tokens of one request pick the same experts). Not thread-safe.
/// Complexity: every call O(1) (intrusive doubly linked list over dense key indices).
class lru_policy {
 public:
  void bind(const model_shape& shape) {
    shape_ = shape;
    prev_.assign(shape.num_keys(), nil);
    next_.assign(shape.num_keys(), nil);
    member_.assign(shape.num_keys(), 0);
    head_ = tail_ = nil;
  }
  void on_access(expert_key k, const access_info&) {
    const std::size_t i = shape_.index(k);
    if (!member_[i]) return;
    unlink(i);
    push_front(i);
  }
  void on_insert(expert_key k, const access_info&) {
    const std::size_t i = shape_.index(k);
    if (member_[i]) unlink(i);
    push_front(i);
  }
  void on_remove(expert_key k) {
    const std::size_t i = shape_.index(k);
    if (member_[i]) unlink(i);
  }
  std::optional<expert_key> victim(const access_info&) const {
    if (tail_ == nil) return std::nullopt;
    return shape_.key(tail_);
  }

 private:
  static constexpr std::uint32_t nil = std::numeric_limits<std::uint32_t>::max();
  void unlink(std::size_t i) noexcept {
    const std::uint32_t p = prev_[i], n = next_[i];
    (p == nil ? head_ : next_[p]) = n;
    (n == nil ? tail_ : prev_[n]) = p;
    prev_[i] = next_[i] = nil;
    member_[i] = 0;
  }
  void push_front(std::size_t i) noexcept {
    prev_[i] = nil;
    next_[i] = head_;
    (head_ == nil ? tail_ : prev_[head_]) = static_cast<std::uint32_t>(i);
    head_ = static_cast<std::uint32_t>(i);
    member_[i] = 1;
  }

  // Invariant: the list head_ -> ... -> tail_ holds exactly the candidates, most recent first.
  model_shape shape_{};
  std::vector<std::uint32_t> prev_, next_;
  std::vector<std::uint8_t> member_;
  std::uint32_t head_ = nil, tail_ = nil;
};

/// Least frequently used, with frequencies counted over the whole history (they survive
/// eviction): evicts the candidate with the fewest demand accesses, ties to the least recent.
/// Wins when expert popularity is skewed and stable (Zipf-like routing) and reuse distances are
/// long. Not thread-safe. Complexity: on_access/on_insert/on_remove O(1); victim O(candidates).
class lfu_policy {
 public:
  void bind(const model_shape& shape) {
    base_.bind_base(shape);
    count_.assign(shape.num_keys(), 0);
  }
  void on_access(expert_key k, const access_info&) {
    const std::size_t i = base_.shape_.index(k);
    ++count_[i];
    if (base_.candidates_.contains(i)) base_.touch(i);
  }
  void on_insert(expert_key k, const access_info&) { base_.add(base_.shape_.index(k)); }
  void on_remove(expert_key k) { base_.drop(base_.shape_.index(k)); }
  std::optional<expert_key> victim(const access_info&) const {
    return base_.scan_min([this](std::uint32_t i) { return static_cast<double>(count_[i]); });
  }
  /// Demand accesses of k seen so far. O(1).
  std::uint64_t frequency(expert_key k) const { return count_[base_.shape_.index(k)]; }

 private:
  detail::scan_base base_;
  std::vector<std::uint64_t> count_;
};

/// LFU with exponential decay: each access adds 1 to a score that is multiplied by `decay` for
/// every lookup tick that passes, so popularity from long ago fades (half-life = ln 0.5 / ln decay
/// ticks). Evicts the smallest decayed score, ties to the least recent. Wins over plain LFU when
/// the popular set drifts (requests of different topics follow each other). Not thread-safe.
/// Complexity: on_access/on_insert/on_remove O(1); victim O(candidates) with no transcendental
/// calls: candidates are compared by ln(score at t) - t ln(decay), which does not change with time.
class lfu_decay_policy {
 public:
  /// decay in (0, 1]: the factor applied per lookup tick; 1 is plain LFU.
  explicit lfu_decay_policy(double decay = 0.999) : decay_(decay), log_decay_(std::log(decay)) {
    expects(decay > 0.0 && decay <= 1.0, errc::invalid_argument, "weft::moe::lfu_decay_policy", "decay is ", decay,
            "; it must be in (0, 1]");
  }
  void bind(const model_shape& shape) {
    base_.bind_base(shape);
    value_.assign(shape.num_keys(), 0.0);
    stamp_.assign(shape.num_keys(), 0);
    rank_.assign(shape.num_keys(), -std::numeric_limits<double>::infinity());
  }
  void on_access(expert_key k, const access_info& info) {
    const std::size_t i = base_.shape_.index(k);
    value_[i] = value_[i] * std::exp(log_decay_ * static_cast<double>(info.tick - stamp_[i])) + 1.0;
    stamp_[i] = info.tick;
    rank_[i] = std::log(value_[i]) - log_decay_ * static_cast<double>(info.tick);
    if (base_.candidates_.contains(i)) base_.touch(i);
  }
  void on_insert(expert_key k, const access_info&) { base_.add(base_.shape_.index(k)); }
  void on_remove(expert_key k) { base_.drop(base_.shape_.index(k)); }
  std::optional<expert_key> victim(const access_info&) const {
    return base_.scan_min([this](std::uint32_t i) { return rank_[i]; });
  }
  /// The decayed score of k at tick `now` (now >= its last access). O(1).
  double score(expert_key k, std::uint64_t now) const {
    const std::size_t i = base_.shape_.index(k);
    return value_[i] * std::exp(log_decay_ * static_cast<double>(now - std::min(now, stamp_[i])));
  }
  double decay() const noexcept { return decay_; }

 private:
  double decay_, log_decay_;
  detail::scan_base base_;
  std::vector<double> value_;         // score at tick stamp_[i]
  std::vector<std::uint64_t> stamp_;  // tick of the last access
  std::vector<double> rank_;          // ln(value_) - stamp_ * ln(decay): orders keys at any tick
};

/// Forward layer distance from the executing layer to layer `to`: 0 for the next layer to run,
/// num_layers - 1 for the layer running now (it runs again only in the next token). O(1).
constexpr std::uint32_t forward_distance(std::uint32_t executing, std::uint32_t to, std::uint32_t num_layers) noexcept {
  return (to + 2 * num_layers - executing - 1) % num_layers;
}

/// Activation-aware caching after MoE-Infinity (§5): an expert's worth is its activation count in
/// the current request's expert activation matrix (EAM) times its all-time frequency, discounted
/// by how far ahead in the forward pass its layer lies:
///   score = (1 + eam_count) * (1 + frequency) / (1 + forward_distance(executing, layer)).
/// Evicts the smallest score, ties to the least recent. Wins when requests have their own expert
/// preferences (topics) that persist across the request's tokens, and under a global capacity
/// where layer distance matters. The EAM restarts when access_info::request changes.
/// Not thread-safe. Complexity: on_access/on_insert/on_remove O(1); victim O(candidates).
class activation_aware_policy {
 public:
  void bind(const model_shape& shape) {
    base_.bind_base(shape);
    frequency_.assign(shape.num_keys(), 0);
    eam_.assign(shape.num_keys(), 0);
    eam_epoch_.assign(shape.num_keys(), 0);
    epoch_ = 1;
    request_ = std::numeric_limits<std::uint64_t>::max();
  }
  void on_access(expert_key k, const access_info& info) {
    roll_request(info.request);
    const std::size_t i = base_.shape_.index(k);
    ++frequency_[i];
    if (eam_epoch_[i] != epoch_) {
      eam_epoch_[i] = epoch_;
      eam_[i] = 0;
    }
    ++eam_[i];
    if (base_.candidates_.contains(i)) base_.touch(i);
  }
  void on_insert(expert_key k, const access_info& info) {
    roll_request(info.request);
    base_.add(base_.shape_.index(k));
  }
  void on_remove(expert_key k) { base_.drop(base_.shape_.index(k)); }
  std::optional<expert_key> victim(const access_info& info) const {
    return base_.scan_min([&](std::uint32_t i) { return score(i, info); });
  }

 private:
  double score(std::uint32_t i, const access_info& info) const {
    const double eam = (eam_epoch_[i] == epoch_ && info.request == request_) ? static_cast<double>(eam_[i]) : 0.0;
    const double dist = forward_distance(info.layer, base_.layer_[i], base_.shape_.num_layers);
    return (1.0 + eam) * (1.0 + static_cast<double>(frequency_[i])) / (1.0 + dist);
  }
  // A new request starts a new EAM; epochs make the reset O(1) instead of O(keys).
  void roll_request(std::uint64_t request) noexcept {
    if (request == request_) return;
    request_ = request;
    ++epoch_;
  }
  detail::scan_base base_;
  std::vector<std::uint64_t> frequency_;
  std::vector<std::uint32_t> eam_;  // valid only where eam_epoch_[i] == epoch_
  std::vector<std::uint32_t> eam_epoch_;
  std::uint32_t epoch_ = 1;
  std::uint64_t request_ = std::numeric_limits<std::uint64_t>::max();
};

/// Least-stale after SpecMD (Hoang et al. 2026), as weft reads it: MoE access is a sweep over the
/// layers, so the expert whose layer executed most recently is the one needed furthest in the
/// future (spatial order); among experts of the same layer, the least recently used goes first
/// (temporal order). Evicts the candidate with the largest forward_distance from the executing
/// layer, ties to the least recent. Under per-layer capacity every candidate has the same layer
/// and the policy is LRU; it wins under a global capacity shared by all layers.
/// Not thread-safe. Complexity: on_access/on_insert/on_remove O(1); victim O(candidates).
class least_stale_policy {
 public:
  void bind(const model_shape& shape) { base_.bind_base(shape); }
  void on_access(expert_key k, const access_info&) {
    const std::size_t i = base_.shape_.index(k);
    if (base_.candidates_.contains(i)) base_.touch(i);
  }
  void on_insert(expert_key k, const access_info&) { base_.add(base_.shape_.index(k)); }
  void on_remove(expert_key k) { base_.drop(base_.shape_.index(k)); }
  std::optional<expert_key> victim(const access_info& info) const {
    const std::uint32_t layers = base_.shape_.num_layers;
    return base_.scan_min(
        [&](std::uint32_t i) { return -static_cast<double>(forward_distance(info.layer, base_.layer_[i], layers)); });
  }

 private:
  detail::scan_base base_;
};

/// The future a belady_policy needs: the whole sequence of demand lookups, in the order the cache
/// will see them (tick 1 is the first). Immutable once built, so it is shared by every pool's copy.
/// Thread-safe to read. Building is O(n log n) in the sequence length; next_use O(log n).
class belady_future {
 public:
  belady_future(const model_shape& shape, std::span<const expert_key> lookups) : shape_(shape) {
    shape.validate("weft::moe::belady_future");
    positions_.resize(shape.num_keys());
    sequence_.reserve(lookups.size());
    std::uint64_t tick = 0;
    for (const expert_key k : lookups) {
      shape.check(k, "weft::moe::belady_future");
      positions_[shape.index(k)].push_back(++tick);
      sequence_.push_back(k);
    }
  }
  /// The first tick strictly after `tick` at which k is looked up, or never() if none.
  std::uint64_t next_use(expert_key k, std::uint64_t tick) const {
    const auto& p = positions_[shape_.index(k)];
    const auto it = std::upper_bound(p.begin(), p.end(), tick);
    return it == p.end() ? never() : *it;
  }
  static constexpr std::uint64_t never() noexcept { return std::numeric_limits<std::uint64_t>::max(); }
  std::size_t size() const noexcept { return sequence_.size(); }
  /// The key of lookup number `tick` (1-based).
  expert_key at(std::uint64_t tick) const { return sequence_[tick - 1]; }
  const model_shape& shape() const noexcept { return shape_; }

 private:
  model_shape shape_;
  std::vector<std::vector<std::uint64_t>> positions_;  // per key: its lookup ticks, ascending
  std::vector<expert_key> sequence_;
};

/// Belady's MIN: evicts the candidate whose next use lies furthest in the future (never used
/// again first). Optimal for demand caching of equal-sized entries (Belady 1966; Mattson et al.
/// 1970), so it is the ceiling every online policy is measured against. Offline: it must be given
/// the exact lookup sequence; a lookup that differs from the promised future raises weft::error.
/// Not thread-safe. Complexity: on_access/on_insert O(log n) (n = lookups of that key);
/// on_remove O(1); victim O(candidates).
class belady_policy {
 public:
  explicit belady_policy(std::shared_ptr<const belady_future> future) : future_(std::move(future)) {
    expects(future_ != nullptr, errc::invalid_argument, "weft::moe::belady_policy", "the future is null");
  }
  void bind(const model_shape& shape) {
    expects(shape == future_->shape(), errc::mismatch, "weft::moe::belady_policy::bind",
            "the cache's model shape differs from the shape the future was built for");
    base_.bind_base(shape);
    next_.assign(shape.num_keys(), belady_future::never());
  }
  void on_access(expert_key k, const access_info& info) {
    expects(info.tick >= 1 && info.tick <= future_->size() && future_->at(info.tick) == k, errc::mismatch,
            "weft::moe::belady_policy::on_access", "lookup number ", info.tick, " is ", k,
            ", which is not what the future given to Belady says (", future_->size(), " lookups)");
    const std::size_t i = base_.shape_.index(k);
    next_[i] = future_->next_use(k, info.tick);
    if (base_.candidates_.contains(i)) base_.touch(i);
  }
  void on_insert(expert_key k, const access_info& info) {
    const std::size_t i = base_.shape_.index(k);
    next_[i] = future_->next_use(k, info.tick);
    base_.add(i);
  }
  void on_remove(expert_key k) { base_.drop(base_.shape_.index(k)); }
  std::optional<expert_key> victim(const access_info&) const {
    // Largest next use first: scan_min on the negated tick (never() maps to -inf-like minimum).
    return base_.scan_min([this](std::uint32_t i) { return -static_cast<double>(next_[i]); });
  }

 private:
  std::shared_ptr<const belady_future> future_;
  detail::scan_base base_;
  std::vector<std::uint64_t> next_;  // per key: tick of its next lookup after the last event
};

static_assert(expert_eviction_policy<lru_policy>);
static_assert(expert_eviction_policy<lfu_policy>);
static_assert(expert_eviction_policy<lfu_decay_policy>);
static_assert(expert_eviction_policy<activation_aware_policy>);
static_assert(expert_eviction_policy<least_stale_policy>);
static_assert(expert_eviction_policy<belady_policy>);

}  // namespace weft::moe

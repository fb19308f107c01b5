// Prefix-aware admission: serve first the waiting request whose prompt prefix is already in the KV
// cache (longest cached match first, as SGLang's RadixAttention scheduler does: Zheng et al.,
// "SGLang", NeurIPS 2024, §3.1), with aging: a request that has waited max_wait_s goes first, so
// cache-cold requests cannot starve.
#pragma once

#include <weft/sched/detail/service_report.hpp>
#include <weft/sched/concepts.hpp>
#include <weft/sched/request.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

namespace weft::sched {

/// Requests are grouped by prefix_id (0: no shared prefix, its own group). The probe, bound by the
/// batch scheduler to its KV manager (bind_prefix_probe), says how many prompt tokens of a request are
/// cached. peek: the oldest request if it waited >= max_wait_s; else the head of the group with the
/// most cached tokens (ties: older head). Without a probe it is FCFS.
/// Not thread-safe. push/pop O(log n); peek O(G) probes, G = distinct prefixes waiting.
class prefix_aware_queue {
 public:
  using probe = prefix_probe;
  static constexpr bool provides_prefix_probe = true;  ///< opts in to binds_prefix_probe's check
  struct options {
    double max_wait_s = 5.0;  ///< aging bound; > 0
  };

  prefix_aware_queue() : prefix_aware_queue(options{}) {}
  explicit prefix_aware_queue(options o) : opt_(o) {
    expects(o.max_wait_s > 0.0 && std::isfinite(o.max_wait_s), errc::invalid_argument,
            "weft::sched::prefix_aware_queue", "max_wait_s must be finite and > 0, got ", o.max_wait_s);
  }

  /// Called by the scheduler with its KV manager's cached_prefix_tokens.
  void bind_prefix_probe(probe p) { probe_ = std::move(p); }

  void push(const request& r, double /*now*/) {
    validate(r, "weft::sched::prefix_aware_queue::push");
    const std::uint64_t seq = seq_++;
    // A request without a shared prefix is a group of its own (key by a unique sequence number).
    const group_key g{r.prefix_id, r.prefix_id == 0 ? seq : 0};
    groups_[g].emplace(order_key{r.arrival_s, seq}, r);
    oldest_.emplace(order_key{r.arrival_s, seq}, g);
    ++size_;
  }

  const request* peek(double now) {
    if (size_ == 0) return nullptr;
    return &groups_.find(choose(now))->second.begin()->second;
  }

  request pop(double now) {
    expects(size_ != 0, errc::precondition, "weft::sched::prefix_aware_queue::pop", "queue is empty");
    const group_key g = choose(now);
    auto git = groups_.find(g);
    auto head = git->second.begin();
    request r = head->second;
    oldest_.erase(head->first);
    git->second.erase(head);
    if (git->second.empty()) groups_.erase(git);
    --size_;
    return r;
  }

  void on_admit(const request&) {}
  void on_tokens(const request& r, std::int64_t n) {
    detail::check_token_count(r, n, "weft::sched::prefix_aware_queue::on_tokens");
  }
  void on_finish(const request&, std::int64_t) {}
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

 private:
  struct order_key {
    double arrival;
    std::uint64_t seq;
    friend auto operator<=>(const order_key&, const order_key&) = default;
  };
  struct group_key {
    std::uint64_t prefix;
    std::uint64_t solo;
    friend auto operator<=>(const group_key&, const group_key&) = default;
  };

  group_key choose(double now) const {
    const auto& [age_key, age_group] = *oldest_.begin();
    if (!probe_ || now - age_key.arrival >= opt_.max_wait_s) return age_group;
    group_key best = age_group;
    std::int64_t best_cached = -1;
    order_key best_head{};
    for (const auto& [g, members] : groups_) {
      const auto& [head_key, head] = *members.begin();
      const std::int64_t cached = g.prefix == 0 ? 0 : probe_(head);
      if (cached > best_cached || (cached == best_cached && head_key < best_head)) {
        best = g;
        best_cached = cached;
        best_head = head_key;
      }
    }
    return best;
  }

  options opt_;
  probe probe_;
  std::map<group_key, std::map<order_key, request>> groups_;
  std::map<order_key, group_key> oldest_;
  std::uint64_t seq_ = 0;
  std::size_t size_ = 0;
};

}  // namespace weft::sched

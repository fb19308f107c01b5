// SLO-aware priority: requests are served by tenant priority until one has waited a set fraction of
// its TTFT SLO; from then on it is urgent and urgent requests go first, earliest deadline first.
// The priority adjustment of FastSwitch (Shen et al., "FastSwitch: Optimizing Context Switching
// Efficiency in Fairness-aware LLM Serving", 2024, §3) reduced to its queueing rule.
#pragma once

#include <weft/sched/detail/service_report.hpp>
#include <weft/sched/request.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <set>
#include <unordered_map>
#include <utility>

namespace weft::sched {

/// Two orders: normal (priority desc, arrival, id) and urgent (deadline = arrival + ttft_slo, id).
/// A request moves to urgent at arrival + urgency_fraction * ttft_slo (never, without a TTFT SLO).
/// Not thread-safe. push/pop O(log n); peek amortised O(log n) (each request is promoted once).
class slo_priority_queue {
 public:
  struct options {
    double urgency_fraction = 0.5;  ///< in [0, 1]: share of the TTFT SLO a request may wait un-boosted
  };

  slo_priority_queue() : slo_priority_queue(options{}) {}
  explicit slo_priority_queue(options o) : opt_(o) {
    expects(o.urgency_fraction >= 0.0 && o.urgency_fraction <= 1.0, errc::invalid_argument,
            "weft::sched::slo_priority_queue", "urgency_fraction must be in [0, 1], got ", o.urgency_fraction);
  }

  void push(const request& r, double /*now*/) {
    validate(r, "weft::sched::slo_priority_queue::push");
    normal_.insert(key(r));
    if (r.ttft_slo_s > 0.0) promote_at_.emplace(r.arrival_s + opt_.urgency_fraction * r.ttft_slo_s, r.id);
    reqs_.emplace(r.id, r);
  }

  const request* peek(double now) {
    promote(now);
    if (!urgent_.empty()) return &reqs_.find(urgent_.begin()->second)->second;
    if (!normal_.empty()) return &reqs_.find(normal_.begin()->id)->second;
    return nullptr;
  }

  request pop(double now) {
    const request* head = peek(now);
    expects(head != nullptr, errc::precondition, "weft::sched::slo_priority_queue::pop", "queue is empty");
    request r = *head;
    if (!urgent_.empty() && urgent_.begin()->second == r.id)
      urgent_.erase(urgent_.begin());
    else
      normal_.erase(key(r));
    if (r.ttft_slo_s > 0.0) promote_at_.erase({r.arrival_s + opt_.urgency_fraction * r.ttft_slo_s, r.id});
    reqs_.erase(r.id);
    return r;
  }

  /// Requests now in the urgent class (after promotion at the last peek/pop time).
  std::size_t urgent() const noexcept { return urgent_.size(); }
  void on_admit(const request&) {}
  void on_tokens(const request& r, std::int64_t n) {
    detail::check_token_count(r, n, "weft::sched::slo_priority_queue::on_tokens");
  }
  void on_finish(const request&, std::int64_t) {}
  std::size_t size() const noexcept { return reqs_.size(); }
  bool empty() const noexcept { return reqs_.empty(); }

 private:
  struct normal_key {
    int priority;
    double arrival;
    request_id id;
    friend bool operator<(const normal_key& a, const normal_key& b) {
      if (a.priority != b.priority) return a.priority > b.priority;
      if (a.arrival != b.arrival) return a.arrival < b.arrival;
      return a.id < b.id;
    }
  };
  static normal_key key(const request& r) { return {r.priority, r.arrival_s, r.id}; }

  void promote(double now) {
    while (!promote_at_.empty() && promote_at_.begin()->first <= now) {
      const request& r = reqs_.find(promote_at_.begin()->second)->second;
      normal_.erase(key(r));
      urgent_.emplace(r.arrival_s + r.ttft_slo_s, r.id);
      promote_at_.erase(promote_at_.begin());
    }
  }

  options opt_;
  std::unordered_map<request_id, request> reqs_;
  std::set<normal_key> normal_;
  std::set<std::pair<double, request_id>> urgent_;      // (deadline, id)
  std::set<std::pair<double, request_id>> promote_at_;  // (promotion time, id), for not-yet-urgent ones
};

}  // namespace weft::sched

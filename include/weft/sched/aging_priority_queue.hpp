// Strict priority with linear aging: a request's effective priority is its priority plus
// aging_per_s times its wait, so low-priority requests cannot starve (the classic aging remedy,
// e.g. Silberschatz et al., Operating System Concepts, §5.3.3). aging_per_s = 0 is strict priority.
#pragma once

#include <weft/sched/detail/service_report.hpp>
#include <weft/sched/request.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <set>

namespace weft::sched {

/// Highest effective priority first (ties: earlier arrival, then smaller id). Because every request
/// ages at the same rate, priority + a * (now - arrival) orders requests exactly as the time-free key
/// priority - a * arrival does, so the order is kept in a balanced tree and never re-sorted.
/// A request of priority p waits at most (p_max - p) / aging_per_s longer than one of p_max that
/// arrived at the same time. Not thread-safe. push/pop O(log n), peek O(1).
class aging_priority_queue {
 public:
  struct options {
    double aging_per_s = 1.0;  ///< priority units gained per second of waiting; >= 0
  };

  aging_priority_queue() : aging_priority_queue(options{}) {}
  explicit aging_priority_queue(options o) : opt_(o) {
    expects(std::isfinite(o.aging_per_s) && o.aging_per_s >= 0.0, errc::invalid_argument,
            "weft::sched::aging_priority_queue", "aging_per_s must be finite and >= 0, got ", o.aging_per_s);
  }

  void push(const request& r, double /*now*/) {
    validate(r, "weft::sched::aging_priority_queue::push");
    q_.insert({static_cast<double>(r.priority) - opt_.aging_per_s * r.arrival_s, r});
  }
  const request* peek(double /*now*/) const { return q_.empty() ? nullptr : &q_.begin()->r; }
  request pop(double /*now*/) {
    expects(!q_.empty(), errc::precondition, "weft::sched::aging_priority_queue::pop", "queue is empty");
    request r = q_.begin()->r;
    q_.erase(q_.begin());
    return r;
  }
  /// The effective priority of r at time now.
  double effective_priority(const request& r, double now) const noexcept {
    return static_cast<double>(r.priority) + opt_.aging_per_s * (now - r.arrival_s);
  }
  void on_admit(const request&) {}
  void on_tokens(const request& r, std::int64_t n) {
    detail::check_token_count(r, n, "weft::sched::aging_priority_queue::on_tokens");
  }
  void on_finish(const request&, std::int64_t) {}
  std::size_t size() const noexcept { return q_.size(); }
  bool empty() const noexcept { return q_.empty(); }

 private:
  struct entry {
    double key;
    request r;
    friend bool operator<(const entry& a, const entry& b) {
      if (a.key != b.key) return a.key > b.key;
      if (a.r.arrival_s != b.r.arrival_s) return a.r.arrival_s < b.r.arrival_s;
      return a.r.id < b.r.id;
    }
  };
  options opt_;
  std::set<entry> q_;
};

}  // namespace weft::sched

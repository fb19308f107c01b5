// First come, first served: the baseline every serving engine ships (vLLM, TGI). It ignores
// clients, so one tenant's burst delays everyone behind it — the unfairness VTC removes.
#pragma once

#include <weft/sched/request.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>

namespace weft::sched {

/// FCFS in push order. Not thread-safe. All operations O(1).
class fcfs_queue {
 public:
  void push(const request& r, double /*now*/) {
    validate(r, "weft::sched::fcfs_queue::push");
    q_.push_back(r);
  }
  const request* peek(double /*now*/) const { return q_.empty() ? nullptr : &q_.front(); }
  request pop(double /*now*/) {
    expects(!q_.empty(), errc::precondition, "weft::sched::fcfs_queue::pop", "queue is empty");
    request r = q_.front();
    q_.pop_front();
    return r;
  }
  // FCFS keeps no service accounts; the hooks only check their arguments.
  void on_admit(const request&) {}
  void on_tokens(const request& r, std::int64_t n) {
    expects(n >= 0, errc::invalid_argument, "weft::sched::fcfs_queue::on_tokens", "request ", r.id,
            ": token count must be >= 0, got ", n);
  }
  void on_finish(const request&, std::int64_t) {}
  std::size_t size() const noexcept { return q_.size(); }
  bool empty() const noexcept { return q_.empty(); }

 private:
  std::deque<request> q_;
};

}  // namespace weft::sched

// Non-blocking collectives: start one, overlap compute, wait. Each started collective runs on a
// thread of its own over a concurrent_transport, so several may be in flight at once on distinct
// channels (the MPI-3 non-blocking collectives' model, MPI-4 §6.12, with a thread as progress engine).
#pragma once

#include <weft/comm/allreduce.hpp>
#include <weft/comm/collectives.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/core/error.hpp>

#include <chrono>
#include <future>
#include <span>
#include <utility>

namespace weft::comm {

/// The handle of a started collective. wait() blocks until it finishes and rethrows its error;
/// the buffers passed to the start call must stay alive and untouched until then. Destroying a
/// handle that was not waited for waits (so buffers are never written after their owner is gone).
/// Not thread-safe: one owner calls wait()/ready(). Move-only.
class pending {
 public:
  pending() = default;
  explicit pending(std::future<void> f) : f_(std::move(f)) {}
  pending(pending&&) noexcept = default;
  pending& operator=(pending&& other) noexcept {
    if (this != &other) {
      finish_quietly();
      f_ = std::move(other.f_);
    }
    return *this;
  }
  pending(const pending&) = delete;
  pending& operator=(const pending&) = delete;
  ~pending() { finish_quietly(); }

  /// True once the collective has finished (successfully or not). O(1).
  bool ready() const { return !f_.valid() || f_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }
  /// Blocks until finished; rethrows the collective's weft::error. Throws errc::precondition when
  /// called on an empty or already-waited handle.
  void wait() {
    expects(f_.valid(), errc::precondition, "weft::comm::pending::wait", "no collective in flight on this handle");
    f_.get();
  }

 private:
  void finish_quietly() noexcept {
    if (f_.valid()) {
      try {
        f_.get();
      } catch (...) {  // the owner chose not to look at the outcome
      }
    }
  }
  std::future<void> f_;
};

/// Starts fn() (a collective over a concurrent transport) on its own thread. O(thread start).
template <class Fn>
pending start(Fn&& fn) {
  return pending(std::async(std::launch::async, std::forward<Fn>(fn)));
}

/// Non-blocking allreduce; see allreduce(). opt.channel must differ from every other collective
/// in flight on this transport.
template <concurrent_transport Tr, element_type T, class Op = op::sum>
requires reduce_op<Op, T> pending start_allreduce(Tr& t, std::span<T> data, Op op = {}, options opt = {}) {
  return start([&t, data, op, opt] { allreduce(t, data, op, opt); });
}

/// Non-blocking alltoall; see alltoall().
template <concurrent_transport Tr, element_type T>
pending start_alltoall(Tr& t, std::span<const T> in, std::span<T> out, options opt = {}) {
  return start([&t, in, out, opt] { alltoall(t, in, out, opt); });
}

/// Non-blocking allgather; see allgather().
template <concurrent_transport Tr, element_type T>
pending start_allgather(Tr& t, std::span<const T> in, std::span<T> out, options opt = {}) {
  return start([&t, in, out, opt] { allgather(t, in, out, opt); });
}

}  // namespace weft::comm

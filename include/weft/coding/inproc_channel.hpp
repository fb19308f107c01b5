// An in-process channel of coded messages between worker threads and the aggregating thread: a
// mutex-protected queue with a condition variable, plus per-worker cancellation flags. It is the
// test double for a transport such as weft::comm (anything satisfying coded_channel).
#pragma once

#include <weft/coding/concepts.hpp>
#include <weft/core/error.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace weft::coding {

/// Many senders, one receiver. Thread-safe: send(), cancelled() and receive()/cancel() may run
/// concurrently from any threads. send O(1) amortised, receive O(1) plus the wait, cancel O(1).
class inproc_channel {
 public:
  explicit inproc_channel(std::size_t n_workers) : cancelled_step_(n_workers) {
    for (auto& c : cancelled_step_) c.store(no_step, std::memory_order_relaxed);
  }

  std::size_t num_workers() const noexcept { return cancelled_step_.size(); }
  [[deprecated("use num_workers()")]] std::size_t n_workers() const noexcept { return num_workers(); }

  /// Called by a worker. Throws weft::error(out_of_range) naming the worker when it is >= n.
  void send(coded_message message) {
    expects(message.worker < num_workers(), errc::out_of_range, "weft::coding::inproc_channel::send", "worker ",
            message.worker, " is out of range for ", num_workers(), " workers");
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(message));
    }
    ready_.notify_one();
  }

  /// Blocks until a message is queued or the deadline passes (then std::nullopt).
  std::optional<coded_message> receive(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    if (!ready_.wait_until(lock, deadline, [&] { return !queue_.empty(); })) return std::nullopt;
    coded_message m = std::move(queue_.front());
    queue_.pop_front();
    return m;
  }

  /// Marks worker's message for step as no longer needed; the worker polls cancelled().
  void cancel(std::size_t worker, std::uint64_t step) {
    expects(worker < num_workers(), errc::out_of_range, "weft::coding::inproc_channel::cancel", "worker ", worker,
            " is out of range for ", num_workers(), " workers");
    cancelled_step_[worker].store(step, std::memory_order_release);
  }

  /// Whether the aggregator has cancelled worker's work for step. Lock-free.
  bool cancelled(std::size_t worker, std::uint64_t step) const {
    return cancelled_step_.at(worker).load(std::memory_order_acquire) == step;
  }

 private:
  static constexpr std::uint64_t no_step = ~std::uint64_t{0};
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<coded_message> queue_;                         // guarded by mutex_
  std::vector<std::atomic<std::uint64_t>> cancelled_step_;  // per worker: last cancelled step
};

static_assert(coded_channel<inproc_channel>);

}  // namespace weft::coding

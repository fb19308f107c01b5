// Coded messages over a weft::comm transport: comm_master_channel satisfies coded_channel at the
// aggregating rank (one receiving thread per worker rank feeds a queue, so the master sees
// whichever coded message arrives first), and comm_worker_channel is the worker side (send a coded
// message, poll for cancellation). Gradient coding's master/worker pattern (Tandon et al., ICML
// 2017, Sec. 2) on the point-to-point transport model of weft::comm.
#pragma once

#include <weft/coding/concepts.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace weft::coding {

/// Wire format of one coded message on channel `base`: the step (8 bytes) then dim floats.
/// Cancellations travel master -> worker on channel base + 1 as the 8-byte step.
inline constexpr std::uint32_t default_coding_channel = 0x47430000u;

namespace detail {
inline std::size_t wire_bytes(std::size_t dim) { return sizeof(std::uint64_t) + dim * sizeof(float); }
inline bool is_timeout(const weft::error& e) { return e.code() == errc::timeout; }
}  // namespace detail

/// The master's side. Worker index i is the i-th rank other than the master's, in rank order.
/// Thread-safe as coded_channel requires (receive from one thread; the receiving threads are
/// internal). Construction starts size() - 1 threads; destruction stops them within `poll`.
/// receive O(1) plus the wait; cancel O(1) plus one send.
template <weft::comm::concurrent_transport T>
class comm_master_channel {
 public:
  comm_master_channel(T& transport, std::size_t dim, std::uint32_t base_channel = default_coding_channel,
                      std::chrono::milliseconds poll = std::chrono::milliseconds(20))
      : t_(transport), dim_(dim), base_(base_channel), poll_(poll) {
    expects(dim > 0, errc::invalid_argument, "weft::coding::comm_master_channel", "dim must be positive");
    for (int r = 0; r < t_.size(); ++r)
      if (r != t_.rank()) ranks_.push_back(r);
    for (std::size_t w = 0; w < ranks_.size(); ++w) threads_.emplace_back([this, w] { pump(w); });
  }
  comm_master_channel(const comm_master_channel&) = delete;
  comm_master_channel& operator=(const comm_master_channel&) = delete;
  ~comm_master_channel() {
    stop_.store(true);
    for (auto& th : threads_) th.join();
  }

  std::size_t num_workers() const noexcept { return ranks_.size(); }
  [[deprecated("use num_workers()")]] std::size_t n_workers() const noexcept { return num_workers(); }
  int rank_of(std::size_t worker) const { return ranks_.at(worker); }

  /// The next coded message from any worker, or std::nullopt at the deadline. A worker whose link
  /// failed is reported as weft::error(peer_failure) naming its rank, once.
  std::optional<coded_message> receive(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    if (!ready_.wait_until(lock, deadline, [&] { return !queue_.empty() || !errors_.empty(); })) return std::nullopt;
    if (!errors_.empty()) {
      const std::string why = errors_.front();
      errors_.pop_front();
      throw weft::error(errc::peer_failure, "weft::coding::comm_master_channel::receive", why);
    }
    coded_message m = std::move(queue_.front());
    queue_.pop_front();
    return m;
  }

  /// Tells worker its message for step is no longer needed (one 8-byte message; best effort).
  void cancel(std::size_t worker, std::uint64_t step) {
    std::array<std::byte, sizeof step> bytes;
    std::memcpy(bytes.data(), &step, sizeof step);
    t_.send(rank_of(worker), weft::comm::msg_tag{base_ + 1, 0}, bytes,
            std::chrono::steady_clock::now() + std::chrono::seconds(5));
  }

 private:
  void pump(std::size_t w) {
    std::vector<std::byte> buf(detail::wire_bytes(dim_));
    while (!stop_.load()) {
      try {
        t_.recv(ranks_[w], weft::comm::msg_tag{base_, 0}, buf, std::chrono::steady_clock::now() + poll_);
      } catch (const weft::error& e) {
        if (detail::is_timeout(e)) continue;
        std::lock_guard lock(mutex_);
        errors_.push_back(e.what());
        ready_.notify_one();
        return;
      }
      coded_message m;
      m.worker = w;
      std::memcpy(&m.step, buf.data(), sizeof m.step);
      m.payload.resize(dim_);
      std::memcpy(m.payload.data(), buf.data() + sizeof m.step, dim_ * sizeof(float));
      {
        std::lock_guard lock(mutex_);
        queue_.push_back(std::move(m));
      }
      ready_.notify_one();
    }
  }

  T& t_;
  std::size_t dim_;
  std::uint32_t base_;
  std::chrono::milliseconds poll_;
  std::vector<int> ranks_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<coded_message> queue_;  // guarded by mutex_
  std::deque<std::string> errors_;   // guarded by mutex_
  std::vector<std::thread> threads_;
};

/// The worker's side: send a coded message to the master, and poll whether the master cancelled
/// a step. Not thread-safe (one per worker thread). send O(dim); cancelled O(pending cancels).
template <weft::comm::transport T>
class comm_worker_channel {
 public:
  comm_worker_channel(T& transport, int master_rank, std::size_t dim,
                      std::uint32_t base_channel = default_coding_channel)
      : t_(transport), master_(master_rank), dim_(dim), base_(base_channel) {}

  /// Sends payload (dim floats) for step. Throws weft::error(invalid_argument) on a size mismatch
  /// and whatever the transport throws (timeout, peer_failure) naming the peer.
  void send(std::uint64_t step, std::span<const float> payload,
            std::chrono::steady_clock::time_point until = std::chrono::steady_clock::now() + std::chrono::seconds(30)) {
    expects(payload.size() == dim_, errc::invalid_argument, "weft::coding::comm_worker_channel::send", "payload has ",
            payload.size(), " floats, channel carries ", dim_);
    std::vector<std::byte> buf(detail::wire_bytes(dim_));
    std::memcpy(buf.data(), &step, sizeof step);
    std::memcpy(buf.data() + sizeof step, payload.data(), dim_ * sizeof(float));
    t_.send(master_, weft::comm::msg_tag{base_, 0}, buf, until);
  }

  /// Whether the master cancelled step (or a later one). Drains pending cancellations without
  /// blocking (a receive whose deadline has passed).
  bool cancelled(std::uint64_t step) {
    std::array<std::byte, sizeof(std::uint64_t)> bytes;
    for (;;) {
      try {
        t_.recv(master_, weft::comm::msg_tag{base_ + 1, 0}, bytes, std::chrono::steady_clock::now());
      } catch (const weft::error& e) {
        if (detail::is_timeout(e)) break;
        throw;
      }
      std::uint64_t s = 0;
      std::memcpy(&s, bytes.data(), sizeof s);
      if (!any_cancelled_ || s > latest_) latest_ = s;
      any_cancelled_ = true;
    }
    return any_cancelled_ && latest_ >= step;
  }

 private:
  T& t_;
  int master_;
  std::size_t dim_;
  std::uint32_t base_;
  // The latest cancelled step, valid once any_cancelled_ (a plain pair, not std::optional: g++ 12
  // reports a false -Wmaybe-uninitialized on an inlined optional here at -O3).
  std::uint64_t latest_ = 0;
  bool any_cancelled_ = false;
};

}  // namespace weft::coding

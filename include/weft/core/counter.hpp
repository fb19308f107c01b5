// weft::counter: a monotonically increasing event count (bytes sent, preemptions, cache hits) that
// any thread may bump without a lock.
#pragma once

#include <atomic>
#include <cstdint>

namespace weft {

/// A 64-bit event counter. Thread-safe: add() and value() may be called from any thread
/// (relaxed atomics: totals are exact, ordering with other memory is not implied). O(1).
class counter {
 public:
  counter() = default;
  counter(const counter&) = delete;
  counter& operator=(const counter&) = delete;

  void add(std::uint64_t n = 1) noexcept { value_.fetch_add(n, std::memory_order_relaxed); }
  counter& operator++() noexcept {
    add(1);
    return *this;
  }
  counter& operator+=(std::uint64_t n) noexcept {
    add(n);
    return *this;
  }
  std::uint64_t value() const noexcept { return value_.load(std::memory_order_relaxed); }
  /// Returns the value and sets it to zero in one atomic step.
  std::uint64_t exchange_reset() noexcept { return value_.exchange(0, std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> value_{0};
};

}  // namespace weft

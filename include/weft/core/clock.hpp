// Clocks: the weft::clock concept every time-aware component takes as a policy, the real steady
// clock, and weft::manual_clock, which simulations and tests advance by hand so runs reproduce.
#pragma once

#include <weft/core/error.hpp>

#include <atomic>
#include <chrono>
#include <concepts>

namespace weft {

/// C tells time: it has duration and time_point types and now(), callable on an instance (so a
/// manual clock can be shared by reference) — std::chrono::steady_clock qualifies.
template <class C>
concept clock = requires(C& c) {
  typename C::duration;
  typename C::time_point;
  { c.now() } -> std::convertible_to<typename C::time_point>;
};

using steady_clock = std::chrono::steady_clock;

/// A clock that moves only when told to: discrete-event simulations and deterministic tests.
/// Thread-safe: now() and advance() may race; time never goes backwards. All operations O(1).
class manual_clock {
 public:
  using rep = std::int64_t;
  using period = std::nano;
  using duration = std::chrono::duration<rep, period>;
  using time_point = std::chrono::time_point<manual_clock, duration>;
  static constexpr bool is_steady = true;

  manual_clock() = default;
  explicit manual_clock(time_point start) noexcept : now_ns_(start.time_since_epoch().count()) {}

  time_point now() const noexcept { return time_point(duration(now_ns_.load(std::memory_order_acquire))); }

  /// Moves time forward by d. Throws weft::error(invalid_argument) when d is negative.
  void advance(duration d) {
    expects(d.count() >= 0, errc::invalid_argument, "weft::manual_clock::advance",
            "duration must be non-negative, got ", d.count(), " ns");
    now_ns_.fetch_add(d.count(), std::memory_order_acq_rel);
  }

  /// Sets the time to t, which must not be earlier than now(); returns the time that elapsed.
  duration advance_to(time_point t) {
    rep current = now_ns_.load(std::memory_order_acquire);
    const rep target = t.time_since_epoch().count();
    do {
      expects(target >= current, errc::invalid_argument, "weft::manual_clock::advance_to",
              "time would go backwards: now ", current, " ns, requested ", target, " ns");
    } while (!now_ns_.compare_exchange_weak(current, target, std::memory_order_acq_rel));
    return duration(target - current);
  }

 private:
  std::atomic<rep> now_ns_{0};
};

static_assert(clock<steady_clock>);
static_assert(clock<manual_clock>);

}  // namespace weft

#include <weft/core/clock.hpp>

#include <catch2/catch.hpp>

#include <chrono>

using namespace std::chrono_literals;

namespace {
// Archetype: the weakest clock the concept accepts.
struct tick_clock {
  using duration = std::chrono::milliseconds;
  using time_point = std::chrono::time_point<tick_clock, duration>;
  time_point now() { return time_point(duration(++ticks)); }
  long ticks = 0;
};

template <weft::clock C>
typename C::duration elapsed_between_two_reads(C& c) {
  const auto a = c.now();
  return c.now() - a;
}
}  // namespace

TEST_CASE("clock concept accepts steady, manual and user clocks", "[core][clock]") {
  STATIC_REQUIRE(weft::clock<tick_clock>);
  STATIC_REQUIRE(!weft::clock<int>);
  tick_clock t;
  CHECK(elapsed_between_two_reads(t) == 1ms);
  weft::steady_clock s;
  CHECK(elapsed_between_two_reads(s) >= 0ns);
}

TEST_CASE("manual clock moves only when told and never backwards", "[core][clock]") {
  weft::manual_clock c;
  CHECK(c.now().time_since_epoch() == 0ns);
  c.advance(5ms);
  CHECK(c.now().time_since_epoch() == 5ms);
  CHECK(c.advance_to(weft::manual_clock::time_point(7ms)) == 2ms);
  CHECK_THROWS_WITH(c.advance(-1ns), "weft::manual_clock::advance: duration must be non-negative, got -1 ns");
  CHECK_THROWS_AS(c.advance_to(weft::manual_clock::time_point(1ms)), weft::error);
  CHECK(c.now().time_since_epoch() == 7ms);  // failed calls changed nothing
}

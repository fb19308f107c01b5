#include <weft/core/counter.hpp>

#include <catch2/catch.hpp>

#include <thread>
#include <vector>

TEST_CASE("counter totals are exact under concurrent increments", "[core][counter]") {
  weft::counter c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&c] {
      for (int i = 0; i < 10000; ++i) ++c;
      c += 5;
    });
  for (auto& t : threads) t.join();
  CHECK(c.value() == 4 * 10005);
  CHECK(c.exchange_reset() == 4 * 10005);
  CHECK(c.value() == 0);
}

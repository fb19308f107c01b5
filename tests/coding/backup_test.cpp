#include <weft/coding/backup_workers.hpp>
#include <weft/coding/detail/random.hpp>

#include <catch2/catch.hpp>

#include <limits>
#include <vector>

using namespace weft::coding;

TEST_CASE("adaptive_backup drops the persistently slow workers", "[coding][backup]") {
  adaptive_backup policy(10);
  CHECK(policy.backups(8) == 0);  // nothing observed yet
  detail::rng gen(3);
  for (int step = 0; step < 10; ++step) {
    std::vector<double> lat(8);
    for (std::size_t w = 0; w < 8; ++w) lat[w] = 1.0 + 0.01 * gen.uniform();
    lat[2] = 5.0;  // two workers are five times slower
    lat[6] = 6.0;
    policy.observe(lat);
  }
  CHECK(policy.backups(8) == 2);
  CHECK(policy.observed_steps() == 10);
}

TEST_CASE("adaptive_backup keeps everyone when all are equally fast", "[coding][backup]") {
  adaptive_backup policy(5);
  const std::vector<double> lat(6, 1.0);
  for (int i = 0; i < 5; ++i) policy.observe(lat);
  CHECK(policy.backups(6) == 0);
}

TEST_CASE("adaptive_backup respects max_backups and validates input", "[coding][backup]") {
  adaptive_backup policy(4, 1);
  const std::vector<double> lat{1, 1, 1, 1, 2, 70};  // unconstrained best: drop 2
  policy.observe(lat);
  CHECK(policy.backups(6) == 1);
  const std::vector<double> wrong{1, 2};
  CHECK_THROWS_WITH(policy.observe(wrong), Catch::Matchers::Contains("got 2 latencies"));
  const std::vector<double> negative{1, 1, 1, -1, 1, 1};
  CHECK_THROWS_WITH(policy.observe(negative), Catch::Matchers::Contains("worker 3"));
  CHECK(policy.observed_steps() == 1);  // failed calls left it unchanged
  CHECK_THROWS(adaptive_backup(0));
  CHECK(fixed_backup(9).backups(4) == 3);
}

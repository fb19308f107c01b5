#include <weft/coding/approximate.hpp>
#include <weft/coding/cyclic_repetition.hpp>
#include <weft/coding/fractional_repetition.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace weft::coding;
using Catch::Matchers::Contains;

TEST_CASE("s >= n is an error naming both", "[coding][errors]") {
  CHECK_THROWS_WITH(cyclic_repetition(4, 4), Contains("s = 4") && Contains("n = 4"));
  CHECK_THROWS_WITH(fractional_repetition(3, 5), Contains("s = 5") && Contains("n = 3"));
  CHECK_THROWS_WITH(hybrid_repetition(2, 7), Contains("s = 7") && Contains("n = 2"));
  try {
    (void)cyclic_repetition(4, 9);
    FAIL("must throw");
  } catch (const weft::error& e) {
    CHECK(e.code() == weft::errc::invalid_argument);
  }
}

TEST_CASE("fractional repetition needs (s+1) | n", "[coding][errors]") {
  CHECK_THROWS_WITH(fractional_repetition(7, 2), Contains("s+1 = 3") && Contains("n = 7"));
  CHECK_NOTHROW(fractional_repetition(9, 2));
}

TEST_CASE("a survivor set smaller than n - s is an error naming the sizes", "[coding][errors]") {
  const auto code = cyclic_repetition(6, 2);
  const std::vector<std::size_t> f{0, 1, 2};
  CHECK_THROWS_WITH(code.decoder_for(f), Contains("3 workers") && Contains("n - s = 4"));
  CHECK(code.cached_decoders() == 0);  // nothing was cached by the failed call
}

TEST_CASE("bad worker indices in a survivor set are errors", "[coding][errors]") {
  const auto code = cyclic_repetition(5, 1);
  const std::vector<std::size_t> out_of_range{0, 1, 2, 9};
  CHECK_THROWS_WITH(code.decoder_for(out_of_range), Contains("worker index 9"));
  const std::vector<std::size_t> dup{0, 1, 1, 2};
  CHECK_THROWS_WITH(code.try_decoder(dup), Contains("appears twice"));
  CHECK_THROWS_WITH(code.assignment(5), Contains("worker 5"));
}

TEST_CASE("a matrix that breaks the gradient-coding condition is reported", "[coding][errors]") {
  const coefficient_matrix b{{1, 1, 0}, {0, 1, 1}, {1, 0, 1}};  // plain sums of cyclic pairs: {0,1} cannot decode
  const auto code = from_matrix(b, 1);
  const std::vector<std::size_t> f{0, 1};
  CHECK_THROWS_WITH(code.decoder_for(f), Contains("cannot decode") && Contains("residual"));
}

TEST_CASE("linear_code validates B against the assignment", "[coding][errors]") {
  const coefficient_matrix b{{1, 1}, {1, 1}};
  std::vector<std::vector<std::size_t>> a{{0}, {0, 1}};
  CHECK_THROWS_WITH(linear_code("x", b, a, 1), Contains("B(0, 1)") && Contains("does not hold partition 1"));
  std::vector<std::vector<std::size_t>> bad{{0, 7}, {0, 1}};
  CHECK_THROWS_WITH(linear_code("x", b, bad, 1), Contains("partition 7"));
  CHECK_THROWS_WITH(approximate_code(5, 6), Contains("d = 6"));
}

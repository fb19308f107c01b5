#include <weft/coding/approximate.hpp>
#include <weft/coding/cyclic_repetition.hpp>
#include <weft/coding/fractional_repetition.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

using namespace weft::coding;

TEST_CASE("fractional repetition: groups of s+1 hold the same partitions", "[coding][fr]") {
  const auto code = fractional_repetition(6, 2);
  CHECK(code.load() == 3);
  CHECK(code.assignment(0)[0] == 0);
  CHECK(code.assignment(4)[0] == 3);
  // One worker per group decodes, with weights 1.
  const std::vector<std::size_t> f{2, 5};
  const auto d = code.try_decoder(f);
  REQUIRE(d != nullptr);
  CHECK(d->weights[0] == Approx(1.0));
  CHECK(d->weights[1] == Approx(1.0));
  // Two workers from the same group do not.
  const std::vector<std::size_t> g{0, 1};
  CHECK(code.try_decoder(g) == nullptr);
}

TEST_CASE("cyclic repetition: worker i holds i..i+s mod n and B is zero elsewhere", "[coding][cyclic]") {
  for (auto construction : {cyclic_construction::mds, cyclic_construction::random}) {
    const auto code = cyclic_repetition(7, 2, construction);
    for (std::size_t i = 0; i < 7; ++i) {
      const auto held = code.assignment(i);
      REQUIRE(held.size() == 3);
      for (std::size_t c = 0; c < 3; ++c) CHECK(held[c] == (i + c) % 7);
      for (std::size_t j = 0; j < 7; ++j) {
        const bool in = (j + 7 - i) % 7 <= 2;
        if (!in) CHECK(code.coefficient(i, j) == 0.0);
      }
    }
  }
}

namespace {
// Worst condition number of B_F over the n sets that drop s consecutive workers.
double worst_burst_condition(const linear_code& code) {
  const std::size_t n = code.num_workers(), s = code.stragglers();
  double worst = 0;
  for (std::size_t first = 0; first < n; ++first) {
    std::vector<std::size_t> f;
    for (std::size_t w = 0; w < n; ++w)
      if ((w + n - first) % n >= s) f.push_back(w);
    worst = std::max(worst, code.decoder_for(f)->condition);
  }
  return worst;
}
}  // namespace

TEST_CASE("conditioning: cyclic MDS beats the random construction at n=10, s=4; hybrid beats both at n=40, s=10",
          "[coding][cyclic]") {
  // The random construction's conditioning depends on its draw, so compare against twelve seeds: the
  // deterministic codes must beat the typical draw (median) and the random family must contain
  // badly conditioned members (its worst), which is why the paper replaces it.
  std::vector<double> rnd10, rnd40;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    rnd10.push_back(worst_burst_condition(cyclic_repetition(10, 4, cyclic_construction::random, seed)));
    rnd40.push_back(worst_burst_condition(cyclic_repetition(40, 10, cyclic_construction::random, seed)));
  }
  std::sort(rnd10.begin(), rnd10.end());
  std::sort(rnd40.begin(), rnd40.end());
  const double mds10 = worst_burst_condition(cyclic_repetition(10, 4, cyclic_construction::mds));
  CHECK(mds10 < 200);
  CHECK(mds10 < rnd10[6]);
  CHECK(rnd10.back() > 10 * mds10);
  const double mds40 = worst_burst_condition(cyclic_repetition(40, 10, cyclic_construction::mds));
  const double hyb40 = worst_burst_condition(hybrid_repetition(40, 10));
  CHECK(hyb40 < 1e3);
  CHECK(mds40 > 100 * hyb40);  // the length-40 real cyclic code is ill-conditioned for bursts
  CHECK(hyb40 < rnd40.front());
  CHECK(rnd40.back() > 100 * hyb40);
}

TEST_CASE("hybrid repetition equals FR's structure when (s+1) | n and stays conditioned at n=40, s=10",
          "[coding][hybrid]") {
  const auto h = hybrid_repetition(40, 10);
  CHECK(h.load() == 11);
  std::vector<std::size_t> f;
  for (std::size_t w = 10; w < 40; ++w) f.push_back(w);
  const auto d = h.decoder_for(f);
  CHECK(d->exact);
  CHECK(d->condition < 1e3);
  const auto fr_like = hybrid_repetition(6, 2);
  const std::vector<std::size_t> one_per_group{1, 4};
  CHECK(fr_like.try_decoder(one_per_group) != nullptr);
}

TEST_CASE("decoders are computed once per survivor set and cached", "[coding][cache]") {
  const auto code = cyclic_repetition(6, 2);
  const std::vector<std::size_t> f{0, 2, 3, 5};
  const auto a = code.decoder_for(f);
  const std::vector<std::size_t> shuffled{5, 3, 0, 2};
  const auto b = code.decoder_for(shuffled);
  CHECK(a.get() == b.get());
  CHECK(code.cached_decoders() == 1);
  CHECK(code.cache_stats().first == 1);
  CHECK(code.cache_stats().second == 1);
}

TEST_CASE("approximate code: d-regular assignment, best approximation with the error reported", "[coding][approx]") {
  const auto code = approximate_code(12, 3, 42);
  std::vector<int> per_partition(12, 0);
  for (std::size_t i = 0; i < 12; ++i) {
    REQUIRE(code.assignment(i).size() == 3);
    for (std::size_t j : code.assignment(i)) ++per_partition[j];
  }
  for (int c : per_partition) CHECK(c == 3);
  std::vector<std::size_t> all(12);
  for (std::size_t i = 0; i < 12; ++i) all[i] = i;
  CHECK(code.try_decoder(all)->residual < 1e-9);  // everyone: exact (weights 1/3)
  const std::vector<std::size_t> half{0, 1, 2, 3, 4, 5};
  const auto d = code.try_decoder(half);
  REQUIRE(d != nullptr);
  CHECK(d->residual > 0.0);
  CHECK(d->residual < 1.0);
  CHECK_FALSE(d->exact);
  // Same seed, same graph.
  const auto again = approximate_code(12, 3, 42);
  CHECK(again.coefficients() == code.coefficients());
}

TEST_CASE("ignore-stragglers decodes the sum of what arrived and reports what is missing", "[coding][baseline]") {
  const auto code = ignore_stragglers(4);
  const std::vector<std::size_t> f{0, 3};
  const auto d = code.try_decoder(f);
  REQUIRE(d != nullptr);
  CHECK(d->weights[0] == Approx(1.0));
  CHECK(d->residual == Approx(std::sqrt(0.5)));
  const auto u = uncoded(4);
  CHECK(u.try_decoder(f) == nullptr);
}

// The n = 3, s = 1 example of Tandon et al. (ICML 2017, Sec. 1), exactly.
#include <weft/coding/approximate.hpp>
#include <weft/coding/codec.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <vector>

TEST_CASE("paper example n=3, s=1: B and the three decoders", "[coding][paper]") {
  const weft::coding::coefficient_matrix b{{0.5, 1, 0}, {0, 1, -1}, {0.5, 0, 1}};
  const auto code = weft::coding::from_matrix(b, 1, "tandon n=3 s=1");
  CHECK(code.assignment(0).size() == 2);
  CHECK(code.assignment(1)[0] == 1);
  CHECK(code.assignment(1)[1] == 2);

  struct expected {
    std::array<std::size_t, 2> survivors;
    std::array<double, 2> weights;
  };
  const std::array<expected, 3> cases{{{{0, 1}, {2, -1}}, {{0, 2}, {1, 1}}, {{1, 2}, {1, 2}}}};
  for (const auto& c : cases) {
    const auto d = code.decoder_for(c.survivors);
    REQUIRE(d->weights.size() == 2);
    CHECK(d->weights[0] == Approx(c.weights[0]).margin(1e-12));
    CHECK(d->weights[1] == Approx(c.weights[1]).margin(1e-12));
    CHECK(d->residual < 1e-12);
    CHECK(d->exact);
  }
  // Any single worker cannot decode, and asking decoder_for with one survivor is an error.
  const std::array<std::size_t, 1> one{0};
  CHECK(code.try_decoder(one) == nullptr);
  CHECK_THROWS_AS(code.decoder_for(one), weft::error);

  // End to end in float32: g1 + g2 + g3 from workers 1 and 3 (indices 0 and 2).
  const std::vector<float> g1{1, 2}, g2{3, -4}, g3{0.5f, 8};
  std::vector<float> m0(2), m2(2), out(2);
  const std::array<std::span<const float>, 2> p0{g1, g2};
  const std::array<std::span<const float>, 2> p2{g1, g3};  // worker 2 holds partitions 0 and 2, in that order
  weft::coding::encode(code, 0, p0, m0);
  weft::coding::encode(code, 2, p2, m2);
  const std::array<std::size_t, 2> f{0, 2};
  const auto d = code.decoder_for(f);
  const std::array<std::span<const float>, 2> msgs{m0, m2};
  weft::coding::decode(*d, msgs, out);
  CHECK(out[0] == 4.5f);
  CHECK(out[1] == 6.0f);
}

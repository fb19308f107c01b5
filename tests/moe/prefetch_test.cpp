#include <weft/moe/prefetch.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

using namespace weft::moe;

namespace {
std::set<expert_key> as_set(const std::vector<expert_key>& v) { return {v.begin(), v.end()}; }
}  // namespace

TEST_CASE("EAM prefetcher recalls the matching past request", "[moe][prefetch][eam]") {
  const model_shape s{4, 8, 1};
  eam_options o;
  o.previous_token_weight = 0;
  o.transition_weight = 0;
  o.request_weight = 0;  // only the matched past EAM speaks
  o.max_extra = 0;
  eam_prefetcher p(o);
  p.bind(s);
  // Request 1 routes layer l to expert l; request 2 routes layer l to expert 7 - l.
  auto run = [&](std::uint64_t id, auto expert_of) {
    p.begin_request(id);
    for (int token = 0; token < 3; ++token)
      for (std::uint32_t l = 0; l < 4; ++l) {
        const std::uint32_t e = expert_of(l);
        p.observe(l, std::span<const std::uint32_t>(&e, 1));
      }
  };
  run(1, [](std::uint32_t l) { return l; });
  run(2, [](std::uint32_t l) { return 7 - l; });
  CHECK(p.history_size() == 1);  // request 2 is still current
  // A new request starts like request 1: layer 0 -> expert 0.
  p.begin_request(3);
  CHECK(p.history_size() == 2);
  const std::uint32_t e0 = 0;
  p.observe(0, std::span<const std::uint32_t>(&e0, 1));
  std::vector<expert_key> out;
  p.predict(0, 2, out);
  CHECK(as_set(out) == std::set<expert_key>{{1, 1}, {2, 2}});
  // Then it diverges towards request 2's pattern: the match follows (correction by re-matching).
  for (const std::uint32_t e : {6u, 5u, 4u}) {
    const std::uint32_t layer = 7 - e;
    p.observe(layer, std::span<const std::uint32_t>(&e, 1));
  }
  const std::uint32_t again = 7;
  p.observe(0, std::span<const std::uint32_t>(&again, 1));
  out.clear();
  p.predict(0, 1, out);
  CHECK(as_set(out) == std::set<expert_key>{{1, 6}});
}

TEST_CASE("misprediction widens the next predictions, accuracy narrows them", "[moe][prefetch][correction]") {
  const model_shape s{3, 8, 2};
  eam_prefetcher p;  // max_extra 2
  p.bind(s);
  p.begin_request(1);
  const std::vector<std::uint32_t> a{0, 1}, b{2, 3}, c{4, 5}, c2{6, 7};
  p.observe(0, a);
  p.observe(1, b);
  p.observe(2, c2);  // layer 2 has seen four experts in this request
  p.observe(0, a);
  p.observe(1, b);
  p.observe(2, c);
  p.observe(0, a);
  std::vector<expert_key> out;
  p.predict(0, 1, out);  // layer 1 predicted from the previous token: {2, 3}
  CHECK(p.extra_width() == 0);
  CHECK(as_set(out) == std::set<expert_key>{{1, 2}, {1, 3}});
  const std::vector<std::uint32_t> wrong{6, 7};
  p.observe(1, wrong);  // predicted {2,3}, got {6,7}
  CHECK(p.mispredictions() == 1);
  CHECK(p.extra_width() == 1);
  out.clear();
  p.predict(1, 1, out);
  CHECK(out.size() == 3);  // top_k + 1
  p.observe(2, c);         // c was among the predictions
  CHECK(p.extra_width() == 0);
  CHECK_THROWS_AS(p.observe(3, a), weft::error);
  const std::vector<std::uint32_t> unknown{9};
  CHECK_THROWS_AS(p.observe(0, unknown), weft::error);
  eam_options bad;
  bad.history = 0;
  CHECK_THROWS_AS(eam_prefetcher(bad), weft::error);
}

TEST_CASE("gate prefetcher applies the next layers' gates to the hidden state", "[moe][prefetch][gate]") {
  const model_shape s{3, 6, 2};
  const std::uint32_t d = 4;
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0, 1);
  std::vector<std::vector<float>> gates(3, std::vector<float>(6 * d));
  for (auto& g : gates)
    for (float& w : g) w = n(rng);
  gate_prefetcher p(gates, d);
  p.bind(s);
  p.begin_request(1);
  std::vector<expert_key> out;
  p.predict(0, 1, out);
  CHECK(out.empty());  // no hidden state yet
  const std::vector<float> h{0.5f, -1.0f, 2.0f, 0.25f};
  p.set_hidden(0, h);
  p.predict(0, 2, out);
  REQUIRE(out.size() == 4);
  for (std::uint32_t layer : {1u, 2u}) {
    std::vector<std::pair<double, std::uint32_t>> logits;
    for (std::uint32_t e = 0; e < 6; ++e) {
      double z = 0;
      for (std::uint32_t x = 0; x < d; ++x) z += gates[layer][e * d + x] * h[x];
      logits.push_back({-z, e});
    }
    std::sort(logits.begin(), logits.end());
    const std::set<expert_key> want{{layer, logits[0].second}, {layer, logits[1].second}};
    std::set<expert_key> got;
    for (const auto& k : out)
      if (k.layer == layer) got.insert(k);
    CHECK(got == want);
  }
  out.clear();
  p.predict(2, 3, out);
  CHECK(out.empty());  // never wraps past the last layer
  CHECK_THROWS_AS(p.set_hidden(0, std::vector<float>{1, 2}), weft::error);
  CHECK_THROWS_AS(p.observe(1, std::vector<std::uint32_t>{6}), weft::error);
  CHECK_THROWS_AS(p.observe(3, std::vector<std::uint32_t>{0}), weft::error);
  // The correction widens after a miss: the router chose experts the gate did not predict.
  out.clear();
  p.predict(0, 1, out);
  std::vector<std::uint32_t> unpredicted;
  for (std::uint32_t e = 0; e < 6 && unpredicted.size() < 2; ++e)
    if (std::none_of(out.begin(), out.end(), [&](const expert_key& k) { return k.expert == e; }))
      unpredicted.push_back(e);
  p.observe(1, unpredicted);
  CHECK(p.mispredictions() == 1);
  CHECK(p.extra_width() == 1);
  gate_prefetcher wrong(std::vector<std::vector<float>>(2, std::vector<float>(6 * d)), d);
  CHECK_THROWS_AS(wrong.bind(s), weft::error);
  CHECK_THROWS_AS(gate_prefetcher({}, d), weft::error);
}

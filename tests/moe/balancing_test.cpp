#include <weft/moe/aux_free_balancer.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

using namespace weft::moe;

namespace {
// A skewed synthetic router: expert e's affinity has a fixed popularity offset (some experts are
// favoured for every token) plus per-token noise.
struct skewed_router {
  std::uint32_t experts;
  std::mt19937 rng;
  std::normal_distribution<float> noise{0.0f, 1.0f};
  std::vector<float> offset;
  explicit skewed_router(std::uint32_t e, std::uint32_t seed) : experts(e), rng(seed), offset(e) {
    for (std::uint32_t i = 0; i < e; ++i) offset[i] = 2.0f * std::exp(-static_cast<float>(i) / 4.0f);
  }
  std::vector<float> scores() {
    std::vector<float> s(experts);
    for (std::uint32_t i = 0; i < experts; ++i) s[i] = offset[i] + noise(rng);
    return s;
  }
};

double run_steps(aux_free_balancer& b, skewed_router& router, int steps, int tokens, bool update) {
  std::vector<std::uint32_t> out(2);
  std::vector<std::uint64_t> load(router.experts, 0);
  for (int s = 0; s < steps; ++s) {
    std::fill(load.begin(), load.end(), 0);
    for (int t = 0; t < tokens; ++t) {
      const auto scores = router.scores();
      b.route(scores, out);
      for (auto e : out) ++load[e];
    }
    if (update) b.update();
  }
  return max_over_mean(load);  // of the last step
}
}  // namespace

TEST_CASE("aux-loss-free balancing reduces max/mean load on a skewed router", "[moe][balance]") {
  for (const bias_rule rule : {bias_rule::sign, bias_rule::proportional}) {
    skewed_router router(16, 3);
    balancer_options o;
    o.step = rule == bias_rule::sign ? 0.01 : 0.05;
    o.rule = rule;
    aux_free_balancer b(16, 2, o);
    const double before = run_steps(b, router, 1, 512, false);
    CHECK(before > 2.5);  // the router really is skewed
    run_steps(b, router, 300, 512, true);
    const double after = run_steps(b, router, 1, 512, false);
    INFO("rule " << static_cast<int>(rule) << " before " << before << " after " << after);
    CHECK(after < 1.4);
    CHECK(after < before / 2);
    // The most popular expert ends with the lowest bias.
    CHECK(b.bias()[0] < b.bias()[15]);
  }
}

TEST_CASE("the sign rule moves each bias by exactly the step", "[moe][balance]") {
  balancer_options o;
  o.step = 0.25;
  aux_free_balancer b(4, 1, o);
  const std::vector<std::uint64_t> loads{10, 0, 5, 5};  // mean 5
  b.update(loads);
  CHECK(b.bias()[0] == -0.25);
  CHECK(b.bias()[1] == 0.25);
  CHECK(b.bias()[2] == 0.0);
  CHECK(b.bias()[3] == 0.0);
  o.rule = bias_rule::proportional;
  b.set_options(o);
  b.update(loads);
  CHECK(b.bias()[0] == Approx(-0.25 - 0.25));
  CHECK(b.bias()[1] == Approx(0.25 + 0.25));
  // Bias changes selection but route() reports loads that update() consumes.
  std::vector<std::uint32_t> out(1);
  const std::vector<float> scores{0.6f, 0.0f, 0.0f, 0.0f};
  b.route(scores, out);
  CHECK(out[0] == 1);  // 0.6 - 0.5 = 0.1 < 0 + 0.5
  CHECK(b.pending_load()[1] == 1);
  b.update();
  CHECK(b.pending_load()[1] == 0);
}

TEST_CASE("balancer bad input", "[moe][balance][errors]") {
  CHECK_THROWS_AS(aux_free_balancer(0, 1), weft::error);
  CHECK_THROWS_AS(aux_free_balancer(4, 5), weft::error);
  CHECK_THROWS_AS(aux_free_balancer(4, 0), weft::error);
  CHECK_THROWS_AS(aux_free_balancer(4, 1, balancer_options{-1.0, bias_rule::sign}), weft::error);
  aux_free_balancer b(4, 2);
  std::vector<std::uint32_t> out(2), wrong(3);
  CHECK_THROWS_AS(b.route(std::vector<float>(3), out), weft::error);
  CHECK_THROWS_AS(b.route(std::vector<float>(4), wrong), weft::error);
  CHECK_THROWS_AS(b.update(std::vector<std::uint64_t>(5)), weft::error);
  CHECK(b.pending_load()[0] == 0);  // nothing was counted by the refused calls
  CHECK(max_over_mean(std::vector<std::uint64_t>{}) == 0);
}

// KVShare-style reuse on the mini_engine model (examples/mini_engine/kvshare.hpp): the plans that must be
// exact are exact, and the partial-recompute knobs move the result toward the full prefill.
#include "kvshare.hpp"

#include <weft/core/random.hpp>
#include <weft/kv/similar_prompt_index.hpp>

#include <catch2/catch.hpp>

#include <vector>

using namespace mini_engine;

namespace {
model small_model() {
  model_config c;
  c.layers = 4;
  c.width = 64;
  c.heads = 2;
  c.ffn = 128;
  c.vocab = 512;
  c.seed = 7;
  return model(c);
}
std::vector<token_id> random_prompt(weft::rng& g, std::size_t n, token_id lo = 0) {
  std::vector<token_id> t(n);
  for (auto& x : t) x = lo + static_cast<token_id>(g.below(200));
  return t;
}
}  // namespace

TEST_CASE("kvshare reuse: the full prefill equals the dense model", "[kv][kvshare]") {
  const model m = small_model();
  weft::rng g(1);
  const auto p = random_prompt(g, 40);
  reuse_options o;
  o.max_new = 6;
  const auto full = prefill_with_reuse(m, p, nullptr, {}, o);
  request_spec spec;
  spec.prompt = p;
  spec.max_new = 6;
  CHECK(full.generated == generate_dense(m, spec));
  CHECK(full.token_layers == full.token_layers_full);
}

TEST_CASE("kvshare reuse: a shared prefix or an identical prompt is reused exactly", "[kv][kvshare]") {
  const model m = small_model();
  weft::rng g(2);
  auto cached = random_prompt(g, 30, 0);
  auto fresh = cached;
  const auto tail_a = random_prompt(g, 20, 200), tail_b = random_prompt(g, 25, 400);  // disjoint ids
  cached.insert(cached.end(), tail_a.begin(), tail_a.end());
  fresh.insert(fresh.end(), tail_b.begin(), tail_b.end());
  reuse_options o;
  o.max_new = 6;
  const auto src = prefill_with_reuse(m, cached, nullptr, {}, o);
  const auto full = prefill_with_reuse(m, fresh, nullptr, {}, o);
  const auto plan = weft::kv::similar_prompt_index::align(fresh, cached, 32);
  REQUIRE(plan);
  CHECK(plan->reused == 30);
  CHECK(plan->same_position == 30);
  const auto reuse = prefill_with_reuse(m, fresh, &src.kv, plan->source_position, o);
  CHECK(reuse.first_logits == full.first_logits);  // bit for bit: prefix caching is exact
  CHECK(reuse.generated == full.generated);
  CHECK(reuse.token_layers == (fresh.size() - 30) * 4);

  const auto same = weft::kv::similar_prompt_index::align(cached, cached, 1);
  const auto again = prefill_with_reuse(m, cached, &src.kv, same->source_position, o);
  CHECK(again.first_logits == src.first_logits);
  CHECK(again.token_layers == 4);  // only the last token runs
}

TEST_CASE("kvshare reuse: recomputing every deviating token is exact; fewer trade accuracy for work", "[kv][kvshare]") {
  const model m = small_model();
  weft::rng g(3);
  double naive = 0.0, blended = 0.0;
  const int pairs = 10;
  for (int p = 0; p < pairs; ++p) {
    const auto cached = random_prompt(g, 60);
    auto q = cached;
    for (int s = 0; s < 2; ++s) {
      const std::size_t at = 8 + g.below(45);
      for (std::size_t j = 0; j < 4; ++j) q[at + j] = static_cast<token_id>(g.below(200));
    }
    q.insert(q.begin() + 3, 201);  // shifts every later token by one position
    reuse_options o;
    o.max_new = 4;
    const auto src = prefill_with_reuse(m, cached, nullptr, {}, o);
    const auto full = prefill_with_reuse(m, q, nullptr, {}, o);
    const auto plan = weft::kv::similar_prompt_index::align(q, cached, 32);
    REQUIRE(plan);
    o.deviation_recompute = 1.0;
    const auto all = prefill_with_reuse(m, q, &src.kv, plan->source_position, o);
    CHECK(all.first_logits == full.first_logits);
    o.deviation_recompute = 0.0;
    o.rerotate = false;
    const auto a = prefill_with_reuse(m, q, &src.kv, plan->source_position, o);
    o.deviation_recompute = 0.3;
    o.rerotate = true;
    const auto b = prefill_with_reuse(m, q, &src.kv, plan->source_position, o);
    CHECK(a.token_layers < b.token_layers);
    CHECK(b.token_layers < b.token_layers_full);
    naive += compare(full, a).logits_rel_l2;
    blended += compare(full, b).logits_rel_l2;
  }
  // Reused KV is not exact: both deviate; re-rotation plus deviation-selected recompute deviates less.
  CHECK(naive > 0.0);
  CHECK(blended < naive);
}

TEST_CASE("kvshare reuse: bad arguments are rejected", "[kv][kvshare]") {
  const model m = small_model();
  const std::vector<token_id> p{1, 2, 3};
  reuse_options o;
  const auto src = prefill_with_reuse(m, p, nullptr, {}, o);
  const std::vector<std::int64_t> short_plan{0}, outside{0, 7, -1};
  CHECK_THROWS(prefill_with_reuse(m, {}, nullptr, {}, o));
  CHECK_THROWS(prefill_with_reuse(m, p, &src.kv, short_plan, o));
  CHECK_THROWS(prefill_with_reuse(m, p, &src.kv, outside, o));
  o.deviation_recompute = 2.0;
  CHECK_THROWS(prefill_with_reuse(m, p, &src.kv, std::vector<std::int64_t>{0, 1, 2}, o));
}

// The CUDA MoE dispatch's algorithm on the CPU: its three passes (quant/cuda/moe_dispatch.cuh) run
// block by block and warp by warp with the tiling functions the kernels call (moe_dispatch_tiles.hpp)
// and a host form of __match_any_sync, against a stable sort of the slots by expert: the same order,
// tokens, inverse, counts and offsets for every size (whole and partial tiles, warps and rounds),
// expert count up to the kernel's limit, top_k and skew; ids out of range are counted and nothing
// is written.
#include <weft/core/random.hpp>
#include <weft/quant/moe_dispatch_tiles.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace dp = weft::quant::dispatch;

namespace {

struct plan {
  std::vector<std::int32_t> order, tokens, inverse, counts, offsets;
  int invalid = 0;
};

plan sized(std::size_t slots, int experts) {
  plan p;
  p.order.assign(slots, -7);
  p.tokens.assign(slots, -7);
  p.inverse.assign(slots, -7);
  p.counts.assign(static_cast<std::size_t>(experts), -7);
  p.offsets.assign(static_cast<std::size_t>(experts) + 1, -7);
  return p;
}

// The kernels' passes on the host. Pass 3's warps run one after another, each round's lanes "at
// once": every lane reads its expert's counter before the round's leaders update it.
plan emulate(const std::vector<std::int32_t>& ids, int top_k, int experts) {
  const auto n = static_cast<std::int64_t>(ids.size());
  const std::int64_t tiles = dp::tiles_for(n);
  plan p = sized(ids.size(), experts);
  std::vector<std::int32_t> counts(static_cast<std::size_t>(experts * tiles)), bases(counts.size());
  for (std::int64_t tile = 0; tile < tiles; ++tile) {  // pass 1
    std::vector<std::int32_t> hist(static_cast<std::size_t>(experts));
    for (int j = 0; j < dp::tile_items && tile * dp::tile_items + j < n; ++j) {
      const std::int32_t e = ids[static_cast<std::size_t>(tile * dp::tile_items + j)];
      if (e < 0 || e >= experts)
        ++p.invalid;
      else
        ++hist[static_cast<std::size_t>(e)];
    }
    for (int e = 0; e < experts; ++e)
      counts[static_cast<std::size_t>(dp::count_index(e, tile, tiles))] = hist[static_cast<std::size_t>(e)];
  }
  if (p.invalid != 0) return p;
  std::exclusive_scan(counts.begin(), counts.end(), bases.begin(), 0);  // pass 2 (CUB's scan)
  for (std::int64_t tile = 0; tile < tiles; ++tile) {                   // pass 3
    const std::int64_t first = tile * dp::tile_items;
    std::vector<std::int32_t> tile_ids(dp::tile_items), rank(dp::tile_items);
    std::vector<std::int32_t> per_warp(static_cast<std::size_t>(dp::block_warps * experts));
    for (int j = 0; j < dp::tile_items; ++j)
      tile_ids[static_cast<std::size_t>(j)] = first + j < n ? ids[static_cast<std::size_t>(first + j)] : -1;
    for (int warp = 0; warp < dp::block_warps; ++warp)
      for (int r = 0; r < dp::rounds; ++r) {
        std::int32_t before[dp::lanes] = {};
        std::uint32_t peers[dp::lanes] = {};
        for (int lane = 0; lane < dp::lanes; ++lane) {
          const int j = dp::slot_in_tile(warp, r, lane);
          const std::int32_t e = tile_ids[static_cast<std::size_t>(j)];
          if (e < 0) continue;
          for (int other = 0; other < dp::lanes; ++other)  // __match_any_sync
            if (tile_ids[static_cast<std::size_t>(dp::slot_in_tile(warp, r, other))] == e) peers[lane] |= 1u << other;
          before[lane] = per_warp[static_cast<std::size_t>(warp * experts + e)];
          rank[static_cast<std::size_t>(j)] = before[lane] + std::popcount(peers[lane] & dp::lanes_below(lane));
        }
        for (int lane = 0; lane < dp::lanes; ++lane) {
          const std::int32_t e = tile_ids[static_cast<std::size_t>(dp::slot_in_tile(warp, r, lane))];
          if (e >= 0 && std::countr_zero(peers[lane]) == lane)
            per_warp[static_cast<std::size_t>(warp * experts + e)] = before[lane] + std::popcount(peers[lane]);
        }
      }
    for (int e = 0; e < experts; ++e)
      dp::warp_bases(per_warp.data() + e, experts, bases[static_cast<std::size_t>(dp::count_index(e, tile, tiles))]);
    for (int j = 0; j < dp::tile_items; ++j) {
      const std::int32_t e = tile_ids[static_cast<std::size_t>(j)];
      if (e < 0) continue;
      dp::place(static_cast<std::int32_t>(first + j),
                per_warp[static_cast<std::size_t>(dp::warp_of(j) * experts + e)] + rank[static_cast<std::size_t>(j)],
                top_k, p.order.data(), p.tokens.data(), p.inverse.data());
    }
  }
  for (int e = 0; e <= experts; ++e) {
    const auto at = [&](int x) {
      return x < experts ? bases[static_cast<std::size_t>(dp::count_index(x, 0, tiles))] : static_cast<std::int32_t>(n);
    };
    p.offsets[static_cast<std::size_t>(e)] = at(e);
    if (e < experts) p.counts[static_cast<std::size_t>(e)] = at(e + 1) - at(e);
  }
  return p;
}

// The definition: a stable sort of the slots by expert.
plan reference(const std::vector<std::int32_t>& ids, int top_k, int experts) {
  plan p = sized(ids.size(), experts);
  std::iota(p.order.begin(), p.order.end(), 0);
  std::stable_sort(p.order.begin(), p.order.end(), [&](std::int32_t a, std::int32_t b) {
    return ids[static_cast<std::size_t>(a)] < ids[static_cast<std::size_t>(b)];
  });
  std::fill(p.counts.begin(), p.counts.end(), 0);
  for (std::size_t pos = 0; pos < p.order.size(); ++pos) {
    const std::int32_t slot = p.order[pos];
    p.tokens[pos] = slot / top_k;
    p.inverse[static_cast<std::size_t>(slot)] = static_cast<std::int32_t>(pos);
    ++p.counts[static_cast<std::size_t>(ids[static_cast<std::size_t>(slot)])];
  }
  p.offsets[0] = 0;
  for (int e = 0; e < experts; ++e)
    p.offsets[static_cast<std::size_t>(e) + 1] =
        p.offsets[static_cast<std::size_t>(e)] + p.counts[static_cast<std::size_t>(e)];
  return p;
}

enum class skew { uniform, one_expert, zipf, descending };

std::vector<std::int32_t> make_ids(std::size_t slots, int experts, skew s, std::uint64_t seed) {
  weft::rng g(seed);
  std::vector<std::int32_t> ids(slots);
  for (std::size_t i = 0; i < slots; ++i) {
    switch (s) {
      case skew::uniform:
        ids[i] = static_cast<std::int32_t>(g.below(static_cast<std::uint64_t>(experts)));
        break;
      case skew::one_expert:
        ids[i] = experts - 1;
        break;
      case skew::zipf: {  // expert e with weight ~ 1/(e+1): a few hot experts, a long cold tail
        const double u = g.uniform();
        ids[i] = std::min(experts - 1, static_cast<std::int32_t>(std::pow(static_cast<double>(experts) + 1.0, u)) - 1);
        break;
      }
      case skew::descending:
        ids[i] = static_cast<std::int32_t>((slots - 1 - i) * static_cast<std::size_t>(experts) / slots);
        break;
    }
  }
  return ids;
}

void require_equal(const plan& got, const plan& want) {
  CHECK(got.invalid == 0);
  REQUIRE(got.order == want.order);
  REQUIRE(got.tokens == want.tokens);
  REQUIRE(got.inverse == want.inverse);
  REQUIRE(got.counts == want.counts);
  REQUIRE(got.offsets == want.offsets);
}

}  // namespace

TEST_CASE("quant.moe_dispatch: the GPU passes equal a stable sort by expert", "[quant][dispatch]") {
  const std::size_t tile = dp::tile_items, warp = dp::warp_items;
  const std::size_t sizes[] = {8, 31, 32, 33, warp - 1, warp, warp + 7, tile - 1, tile, tile + 1, 3 * tile + 517};
  std::uint64_t seed = 1;
  for (const int experts : {1, 2, 8, 64, 256, dp::max_experts})
    for (const int top_k : {1, 2, 8})
      for (const std::size_t size : sizes) {
        const std::size_t slots = size / static_cast<std::size_t>(top_k) * static_cast<std::size_t>(top_k);
        if (slots == 0) continue;
        for (const skew s : {skew::uniform, skew::one_expert, skew::zipf, skew::descending}) {
          INFO("experts " << experts << ", top_k " << top_k << ", slots " << slots << ", skew " << static_cast<int>(s));
          const auto ids = make_ids(slots, experts, s, seed++);
          require_equal(emulate(ids, top_k, experts), reference(ids, top_k, experts));
        }
      }
}

TEST_CASE("quant.moe_dispatch: the issue's size, 16384 tokens x top-8 of 256 experts", "[quant][dispatch]") {
  const auto ids = make_ids(16384 * 8, 256, skew::zipf, 77);
  require_equal(emulate(ids, 8, 256), reference(ids, 8, 256));
}

TEST_CASE("quant.moe_dispatch: ids out of range are counted and nothing is written", "[quant][dispatch]") {
  for (const std::int32_t bad : {-1, 8, 1 << 30}) {
    auto ids = make_ids(3 * dp::tile_items + 5, 8, skew::uniform, 5);
    ids[2 * dp::tile_items + 3] = bad;
    ids.back() = bad;
    const plan p = emulate(ids, 1, 8);
    CHECK(p.invalid == 2);
    CHECK(std::all_of(p.order.begin(), p.order.end(), [](std::int32_t v) { return v == -7; }));
    CHECK(std::all_of(p.offsets.begin(), p.offsets.end(), [](std::int32_t v) { return v == -7; }));
  }
}

TEST_CASE("quant.moe_dispatch: tiling arithmetic", "[quant][dispatch]") {
  CHECK(dp::tiles_for(1) == 1);
  CHECK(dp::tiles_for(dp::tile_items) == 1);
  CHECK(dp::tiles_for(dp::tile_items + 1) == 2);
  // Every position of a tile belongs to exactly one (warp, round, lane), in input order within a warp.
  std::vector<int> seen(dp::tile_items, 0);
  for (int w = 0; w < dp::block_warps; ++w)
    for (int r = 0; r < dp::rounds; ++r)
      for (int l = 0; l < dp::lanes; ++l) {
        const int j = dp::slot_in_tile(w, r, l);
        ++seen[static_cast<std::size_t>(j)];
        CHECK(dp::warp_of(j) == w);
      }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  std::int32_t per_warp[dp::block_warps] = {3, 0, 5, 1, 0, 0, 2, 4};
  dp::warp_bases(per_warp, 1, 100);
  const std::int32_t want[dp::block_warps] = {100, 103, 103, 108, 109, 109, 109, 111};
  CHECK(std::equal(per_warp, per_warp + dp::block_warps, want));
}

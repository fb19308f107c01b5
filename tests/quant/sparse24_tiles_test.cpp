// The CUDA 2:4 sparse W4A16 kernel's building blocks on the CPU: the device-side weight decode
// equals sparse24_matrix::value everywhere, and whole grids (mma fragments through mma16_emulate,
// and the sm < 80 fallback) equal the element-wise reference bit for bit.
#include <weft/quant/reference.hpp>
#include <weft/quant/sparse24_tiles.hpp>

#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <cmath>
#include <cstring>
#include <array>
#include <memory>
#include <vector>

using namespace weft::quant;

namespace {

template <class Tile, class Act, class Scale>
std::vector<float> emulate_sparse24_gemm(sparse24_params<Act, Scale> p, bool fallback) {
  std::vector<float> y(static_cast<std::size_t>(p.m * p.n), -1.0f);
  auto s = std::make_unique<w4_smem<Tile>>();
  constexpr int warps = Tile::warps_m * Tile::warps_n;
  for (std::int64_t by = 0; by < ceil_div(p.m, Tile::block_m); ++by)
    for (std::int64_t bx = 0; bx < ceil_div(p.n, Tile::block_n); ++bx) {
      const std::int64_t m0 = by * Tile::block_m, n0 = bx * Tile::block_n;
      std::vector<std::array<float, 4>> acc(static_cast<std::size_t>(warps * Tile::mma_m * Tile::mma_n * 32),
                                            {0, 0, 0, 0});
      const auto at = [&](int w, int i, int j, int lane) {
        return static_cast<std::size_t>(((w * Tile::mma_m + i) * Tile::mma_n + j) * 32 + lane);
      };
      for (std::int64_t k0 = 0; k0 < p.k; k0 += Tile::block_k) {
        for (int tid = 0; tid < Tile::threads; ++tid) sparse24_load_tiles<Tile>(p, m0, n0, k0, *s, tid, Tile::threads);
        for (int w = 0; w < warps; ++w) {
          const int wm0 = (w / Tile::warps_n) * Tile::warp_m, wn0 = (w % Tile::warps_n) * Tile::warp_n;
          for (int ks = 0; ks < Tile::block_k; ks += 16)
            for (int i = 0; i < Tile::mma_m; ++i)
              for (int j = 0; j < Tile::mma_n; ++j) {
                if (fallback) {
                  for (int lane = 0; lane < 32; ++lane)
                    w4_lane_step<Tile, Act>(*s, wm0 + 16 * i, wn0 + 8 * j, ks, lane,
                                            *reinterpret_cast<float(*)[4]>(acc[at(w, i, j, lane)].data()));
                  continue;
                }
                std::uint32_t a[32][4], b[32][2];
                float c[32][4];
                for (int lane = 0; lane < 32; ++lane) {
                  w4_fragments<Tile>(*s, wm0 + 16 * i, wn0 + 8 * j, ks, lane, a[lane], b[lane]);
                  std::memcpy(c[lane], acc[at(w, i, j, lane)].data(), sizeof(c[lane]));
                }
                mma16_emulate<Act>(a, b, c);
                for (int lane = 0; lane < 32; ++lane)
                  std::memcpy(acc[at(w, i, j, lane)].data(), c[lane], sizeof(c[lane]));
              }
        }
      }
      for (int w = 0; w < warps; ++w) {
        const int wm0 = (w / Tile::warps_n) * Tile::warp_m, wn0 = (w % Tile::warps_n) * Tile::warp_n;
        for (int i = 0; i < Tile::mma_m; ++i)
          for (int j = 0; j < Tile::mma_n; ++j)
            for (int lane = 0; lane < 32; ++lane)
              store_c_fragment(y.data(), p.m, p.n, m0 + wm0 + 16 * i, n0 + wn0 + 8 * j, lane,
                               *reinterpret_cast<const float(*)[4]>(acc[at(w, i, j, lane)].data()));
      }
    }
  return y;
}

}  // namespace

TEMPLATE_TEST_CASE("sparse24 tiles: emulated GEMM grids equal the reference bit for bit", "[quant][device][sparse24]",
                   weft::half, weft::bfloat16) {
  using Act = TestType;
  for (auto [m, n, k, gs] : {std::tuple{1, 8, 64, 64}, {19, 24, 192, 64}, {16, 16, 256, 128}, {3, 5, 128, 0}}) {
    INFO("M " << m << " N " << n << " K " << k << " group " << gs);
    const std::int64_t g_size = gs == 0 ? k : gs, groups = (k + g_size - 1) / g_size;
    const auto codes = quant_test::random_ints(static_cast<std::size_t>(n * k / 2), 1, 0, 15);
    std::vector<std::uint8_t> positions;
    for (int c : quant_test::random_ints(static_cast<std::size_t>(n * k / 4), 2, 0, 2)) {
      positions.push_back(static_cast<std::uint8_t>(c));
      positions.push_back(static_cast<std::uint8_t>(c + 1));
    }
    std::vector<weft::half> scales;
    for (int e : quant_test::random_ints(static_cast<std::size_t>(n * groups), 3, -2, 1))
      scales.push_back(weft::half(std::ldexp(1.0f, e)));
    std::vector<std::int16_t> zeros;
    for (int z : quant_test::random_ints(static_cast<std::size_t>(n * groups), 4, 0, 15))
      zeros.push_back(static_cast<std::int16_t>(z));
    const auto w = sparse24_matrix<weft::half>::from_parts(n, k, {4, gs, false}, codes, positions, scales, zeros);
    std::vector<Act> x;
    for (int v : quant_test::random_ints(static_cast<std::size_t>(m * k), 5, -4, 4))
      x.push_back(Act(static_cast<float>(v)));
    const auto ref = reference_gemm(w, std::span<const Act>(x), m);
    const sparse24_params<Act, weft::half> p{x.data(),
                                             w.values().packed().data(),
                                             w.meta().data(),
                                             w.values().scales().data(),
                                             w.values().zeros().data(),
                                             nullptr,
                                             m,
                                             n,
                                             k,
                                             w.group_size(),
                                             w.groups()};
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t i = 0; i < k; ++i) REQUIRE(sparse24_weight(p, r, i) == w.value(r, i));
    for (bool fallback : {false, true}) {
      INFO("fallback " << fallback);
      CHECK(emulate_sparse24_gemm<gemm_tile<32, 16, 2, 1>>(p, fallback) == ref);
      CHECK(emulate_sparse24_gemm<gemm_tile<16, 32, 1, 2>>(p, fallback) == ref);
    }
  }
}

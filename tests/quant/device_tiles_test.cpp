// The CUDA kernels' building blocks run on the CPU: fragment layouts cover their tiles exactly
// once, and whole grids of the W4A16 GEMM and W8A8 GEMM, emulated thread by thread
// and warp by warp with the same functions the kernels call, match the reference bit for bit.
#include <weft/quant/device_tiles.hpp>
#include <weft/quant/reference.hpp>

#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <cstring>
#include <memory>
#include <vector>

using namespace weft::quant;

namespace {

template <class F>
void check_cover(int rows, int cols, int per_lane, F pos) {
  std::vector<int> hits(static_cast<std::size_t>(rows * cols), 0);
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < per_lane; ++i) {
      const frag_pos p = pos(lane, i);
      REQUIRE((p.row >= 0 && p.row < rows && p.col >= 0 && p.col < cols));
      ++hits[static_cast<std::size_t>(p.row * cols + p.col)];
    }
  for (int h : hits) REQUIRE(h == 1);
}

// Emulates launch_w4a16_gemm's grid: every thread's loads, then every warp's mma steps, both as
// fragments through mma16_emulate and in the sm < 80 fallback form; returns (mma result, fallback).
template <class Tile, class Act, class Scale>
std::pair<std::vector<float>, std::vector<float>> emulate_w4_gemm(const w4a16_params<Act, Scale>& p0) {
  std::vector<float> y_mma(static_cast<std::size_t>(p0.m * p0.n), -1.0f), y_fb = y_mma;
  auto s = std::make_unique<w4_smem<Tile>>();
  for (std::int64_t by = 0; by < ceil_div(p0.m, Tile::block_m); ++by)
    for (std::int64_t bx = 0; bx < ceil_div(p0.n, Tile::block_n); ++bx) {
      const std::int64_t m0 = by * Tile::block_m, n0 = bx * Tile::block_n;
      constexpr int warps = Tile::warps_m * Tile::warps_n;
      std::vector<float> acc(static_cast<std::size_t>(warps * Tile::mma_m * Tile::mma_n * 32 * 4), 0.0f), fb = acc;
      const auto at = [&](std::vector<float>& v, int w, int i, int j, int lane) {
        return &v[static_cast<std::size_t>((((w * Tile::mma_m + i) * Tile::mma_n + j) * 32 + lane) * 4)];
      };
      for (std::int64_t k0 = 0; k0 < p0.k_padded; k0 += Tile::block_k) {
        for (int tid = 0; tid < Tile::threads; ++tid) w4_load_tiles<Tile>(p0, m0, n0, k0, *s, tid, Tile::threads);
        for (int w = 0; w < warps; ++w) {
          const int wm0 = (w / Tile::warps_n) * Tile::warp_m, wn0 = (w % Tile::warps_n) * Tile::warp_n;
          for (int ks = 0; ks < Tile::block_k; ks += 16)
            for (int i = 0; i < Tile::mma_m; ++i)
              for (int j = 0; j < Tile::mma_n; ++j) {
                std::uint32_t a[32][4], b[32][2];
                float c[32][4];
                for (int lane = 0; lane < 32; ++lane) {
                  w4_fragments<Tile>(*s, wm0 + 16 * i, wn0 + 8 * j, ks, lane, a[lane], b[lane]);
                  std::memcpy(c[lane], at(acc, w, i, j, lane), sizeof(c[lane]));
                }
                mma16_emulate<Act>(a, b, c);
                for (int lane = 0; lane < 32; ++lane) {
                  std::memcpy(at(acc, w, i, j, lane), c[lane], sizeof(c[lane]));
                  float(&f)[4] = *reinterpret_cast<float(*)[4]>(at(fb, w, i, j, lane));
                  w4_lane_step<Tile, Act>(*s, wm0 + 16 * i, wn0 + 8 * j, ks, lane, f);
                }
              }
        }
      }
      for (int w = 0; w < warps; ++w) {
        const int wm0 = (w / Tile::warps_n) * Tile::warp_m, wn0 = (w % Tile::warps_n) * Tile::warp_n;
        for (int i = 0; i < Tile::mma_m; ++i)
          for (int j = 0; j < Tile::mma_n; ++j)
            for (int lane = 0; lane < 32; ++lane) {
              store_c_fragment(y_mma.data(), p0.m, p0.n, m0 + wm0 + 16 * i, n0 + wn0 + 8 * j, lane,
                               *reinterpret_cast<const float(*)[4]>(at(acc, w, i, j, lane)));
              store_c_fragment(y_fb.data(), p0.m, p0.n, m0 + wm0 + 16 * i, n0 + wn0 + 8 * j, lane,
                               *reinterpret_cast<const float(*)[4]>(at(fb, w, i, j, lane)));
            }
      }
    }
  return {y_mma, y_fb};
}

template <class Tile>
std::vector<std::int32_t> emulate_w8_gemm(const w8a8_params& p) {
  std::vector<std::int32_t> c_out(static_cast<std::size_t>(p.m * p.n), -1);
  auto s = std::make_unique<w8_smem<Tile>>();
  constexpr int warps = Tile::warps_m * Tile::warps_n;
  for (std::int64_t by = 0; by < ceil_div(p.m, Tile::block_m); ++by)
    for (std::int64_t bx = 0; bx < ceil_div(p.n, Tile::block_n); ++bx) {
      const std::int64_t m0 = by * Tile::block_m, n0 = bx * Tile::block_n;
      std::vector<std::int32_t> acc(static_cast<std::size_t>(warps * Tile::mma_m * Tile::mma_n * 32 * 4), 0), fb = acc;
      const auto at = [&](std::vector<std::int32_t>& v, int w, int i, int j, int lane) {
        return &v[static_cast<std::size_t>((((w * Tile::mma_m + i) * Tile::mma_n + j) * 32 + lane) * 4)];
      };
      for (std::int64_t k0 = 0; k0 < p.k_padded; k0 += Tile::block_k) {
        for (int tid = 0; tid < Tile::threads; ++tid) w8_load_tiles<Tile>(p, m0, n0, k0, *s, tid, Tile::threads);
        for (int w = 0; w < warps; ++w) {
          const int wm0 = (w / Tile::warps_n) * Tile::warp_m, wn0 = (w % Tile::warps_n) * Tile::warp_n;
          for (int i = 0; i < Tile::mma_m; ++i)
            for (int j = 0; j < Tile::mma_n; ++j) {
              std::uint32_t a[32][4], b[32][2];
              std::int32_t c[32][4];
              for (int lane = 0; lane < 32; ++lane) {
                w8_fragments<Tile>(*s, wm0 + 16 * i, wn0 + 8 * j, lane, a[lane], b[lane]);
                std::memcpy(c[lane], at(acc, w, i, j, lane), sizeof(c[lane]));
              }
              mma32_emulate(a, b, c);
              for (int lane = 0; lane < 32; ++lane) {
                std::memcpy(at(acc, w, i, j, lane), c[lane], sizeof(c[lane]));
                w8_lane_step<Tile>(*s, wm0 + 16 * i, wn0 + 8 * j, lane,
                                   *reinterpret_cast<std::int32_t(*)[4]>(at(fb, w, i, j, lane)));
              }
            }
        }
      }
      for (int w = 0; w < warps; ++w) {
        const int wm0 = (w / Tile::warps_n) * Tile::warp_m, wn0 = (w % Tile::warps_n) * Tile::warp_n;
        for (int i = 0; i < Tile::mma_m; ++i)
          for (int j = 0; j < Tile::mma_n; ++j)
            for (int lane = 0; lane < 32; ++lane) {
              REQUIRE(std::memcmp(at(acc, w, i, j, lane), at(fb, w, i, j, lane), 16) == 0);
              store_c_fragment(c_out.data(), p.m, p.n, m0 + wm0 + 16 * i, n0 + wn0 + 8 * j, lane,
                               *reinterpret_cast<const std::int32_t(*)[4]>(at(acc, w, i, j, lane)));
            }
      }
    }
  return c_out;
}

}  // namespace

TEST_CASE("device tiles: mma fragment layouts cover each tile exactly once", "[quant][device]") {
  check_cover(16, 16, 8, mma16_a);
  check_cover(16, 8, 4, mma16_b);
  check_cover(16, 8, 4, mma_c);
  check_cover(16, 32, 16, mma32_a);
  check_cover(32, 8, 8, mma32_b);
  static_assert(gemm_tile_shape<default_w4_tile> && gemm_tile_shape<small_batch_w4_tile>);
  static_assert(!gemm_tile_shape<gemm_tile<24, 64, 2, 2>>);  // 12-row warp tiles are not whole mma tiles
}

namespace {
// The weakest type satisfying gemm_tile_shape: the four constants, nothing else.
struct archetype_tile {
  static constexpr int block_m = 16, block_n = 8, warps_m = 1, warps_n = 1;
};
static_assert(gemm_tile_shape<archetype_tile>);
}  // namespace

TEST_CASE("device tiles: the archetype tile drives the emulated grid", "[quant][device]") {
  const auto w = weft_test::exact_matrix<weft::half>(9, 70, {4, 64, false}, 5);
  std::vector<weft::half> x;
  for (int v : weft_test::random_ints(3 * 70, 6, -8, 8)) x.push_back(weft::half(static_cast<float>(v)));
  const auto ref = reference_gemm(w, std::span<const weft::half>(x), 3);
  std::vector<float> unused(1);
  const w4a16_params<weft::half, weft::half> p{
      x.data(), w.packed().data(), w.scales().data(), w.zeros().data(), unused.data(), 3, 9,
      70,       w.k_padded(),      w.group_size(),    w.groups()};
  const auto [y, y_fb] = emulate_w4_gemm<as_gemm_tile<archetype_tile>>(p);
  CHECK(std::memcmp(y.data(), ref.data(), ref.size() * 4) == 0);
}

TEMPLATE_TEST_CASE("device tiles: emulated W4A16 GEMM grid matches the reference bit for bit", "[quant][device]",
                   weft::half, weft::bfloat16) {
  using Act = TestType;
  for (auto [m, n, k, gs, sym] :
       {std::tuple{1, 8, 32, 32, true}, {33, 40, 100, 32, false}, {5, 17, 160, 64, true}, {16, 9, 45, 0, false}}) {
    INFO("M " << m << " N " << n << " K " << k << " group " << gs);
    const auto w = weft_test::exact_matrix<weft::half>(n, k, {4, gs, sym}, static_cast<std::uint64_t>(m + n + k));
    std::vector<Act> x;
    for (int v : weft_test::random_ints(static_cast<std::size_t>(m * k), 3, -8, 8))
      x.push_back(Act(static_cast<float>(v)));
    const auto ref = reference_gemm(w, std::span<const Act>(x), m);
    std::vector<float> unused(1);
    const w4a16_params<Act, weft::half> p{
        x.data(), w.packed().data(), w.scales().data(), w.zeros().data(), unused.data(), m, n,
        k,        w.k_padded(),      w.group_size(),    w.groups()};
    const auto [y_mma, y_fb] = emulate_w4_gemm<gemm_tile<32, 16, 2, 1>>(p);
    CHECK(std::memcmp(y_mma.data(), ref.data(), ref.size() * 4) == 0);
    CHECK(std::memcmp(y_fb.data(), ref.data(), ref.size() * 4) == 0);
    const auto [y2, y2_fb] = emulate_w4_gemm<gemm_tile<16, 32, 1, 2>>(p);
    CHECK(std::memcmp(y2.data(), ref.data(), ref.size() * 4) == 0);
  }
}

TEST_CASE("device tiles: emulated W8A8 GEMM grid matches the int32 reference", "[quant][device]") {
  for (auto [m, n, k] : {std::tuple{1, 8, 64}, {33, 40, 100}, {17, 16, 200}}) {
    INFO("M " << m << " N " << n << " K " << k);
    const auto w = weft_test::exact_matrix<float>(n, k, {8, 0, true}, static_cast<std::uint64_t>(n * k));
    std::vector<std::int8_t> a;
    for (int v : weft_test::random_ints(static_cast<std::size_t>(m * k), 4, -128, 127))
      a.push_back(static_cast<std::int8_t>(v));
    const auto ref = reference_gemm_w8a8_i32(w, std::span<const std::int8_t>(a), m);
    const w8a8_params p{a.data(),    reinterpret_cast<const std::int8_t*>(w.packed().data()), nullptr, m, n, k,
                        w.k_padded()};
    CHECK(emulate_w8_gemm<gemm_tile<32, 16, 2, 1>>(p) == ref);
    CHECK(emulate_w8_gemm<gemm_tile<16, 32, 1, 2>>(p) == ref);
  }
}

// The CUDA W4A8 kernels' building blocks on the CPU: whole grids of the tensor-core GEMM (through
// mma32_emulate and through the sm < 80 fallback), emulated thread by thread and warp by warp with the functions the
// kernels call, equal reference_gemm_w4a8 bit for bit.
#include <weft/quant/reference.hpp>
#include <weft/quant/w4a8_tiles.hpp>

#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <cmath>
#include <cstring>
#include <array>
#include <memory>
#include <vector>

using namespace weft::quant;

namespace {

quantized_activations small_activations(std::int64_t m, std::int64_t k, std::uint64_t seed, int lo, int hi) {
  quantized_activations a{m, k, {}, {}};
  for (int v : weft_test::random_ints(static_cast<std::size_t>(m * k), seed, lo, hi))
    a.values.push_back(static_cast<std::int8_t>(v));
  for (int e : weft_test::random_ints(static_cast<std::size_t>(m), seed + 1, -3, 1))
    a.scales.push_back(std::ldexp(1.0f, e));
  return a;
}

// Emulates launch_w4a8_gemm's grid; `fallback` selects the sm < 80 form of each mma step.
template <class Tile, class Scale>
std::vector<float> emulate_w4a8_gemm(w4a8_params<Scale> p, bool fallback) {
  std::vector<float> y(static_cast<std::size_t>(p.m * p.n), -1.0f);
  p.y = y.data();
  auto s = std::make_unique<w8_smem<Tile>>();
  constexpr int warps = Tile::warps_m * Tile::warps_n;
  for (std::int64_t by = 0; by < ceil_div(p.m, Tile::block_m); ++by)
    for (std::int64_t bx = 0; bx < ceil_div(p.n, Tile::block_n); ++bx) {
      const std::int64_t m0 = by * Tile::block_m, n0 = bx * Tile::block_n;
      const std::size_t frags = static_cast<std::size_t>(warps * Tile::mma_m * Tile::mma_n * 32);
      std::vector<std::array<std::int32_t, 4>> acc(frags, {0, 0, 0, 0});
      std::vector<std::array<float, 4>> total(frags, {0, 0, 0, 0});
      const auto at = [&](int w, int i, int j, int lane) {
        return static_cast<std::size_t>(((w * Tile::mma_m + i) * Tile::mma_n + j) * 32 + lane);
      };
      for (std::int64_t k0 = 0; k0 < p.k_padded; k0 += Tile::block_k) {
        for (int tid = 0; tid < Tile::threads; ++tid) w4a8_load_tiles<Tile>(p, m0, n0, k0, *s, tid, Tile::threads);
        for (int w = 0; w < warps; ++w) {
          const int wm0 = (w / Tile::warps_n) * Tile::warp_m, wn0 = (w % Tile::warps_n) * Tile::warp_n;
          for (int i = 0; i < Tile::mma_m; ++i)
            for (int j = 0; j < Tile::mma_n; ++j) {
              if (fallback) {
                for (int lane = 0; lane < 32; ++lane)
                  w8_lane_step<Tile>(*s, wm0 + 16 * i, wn0 + 8 * j, lane,
                                     *reinterpret_cast<std::int32_t(*)[4]>(acc[at(w, i, j, lane)].data()));
                continue;
              }
              std::uint32_t a[32][4], b[32][2];
              std::int32_t c[32][4];
              for (int lane = 0; lane < 32; ++lane) {
                w8_fragments<Tile>(*s, wm0 + 16 * i, wn0 + 8 * j, lane, a[lane], b[lane]);
                std::memcpy(c[lane], acc[at(w, i, j, lane)].data(), sizeof(c[lane]));
              }
              mma32_emulate(a, b, c);
              for (int lane = 0; lane < 32; ++lane)
                std::memcpy(acc[at(w, i, j, lane)].data(), c[lane], sizeof(c[lane]));
            }
        }
        const std::int64_t next = k0 + Tile::block_k;
        if (next % p.group_size == 0 || next >= p.k_padded)
          for (int w = 0; w < warps; ++w)
            for (int i = 0; i < Tile::mma_m; ++i)
              for (int j = 0; j < Tile::mma_n; ++j)
                for (int lane = 0; lane < 32; ++lane)
                  w4a8_fold_group(p, n0 + (w % Tile::warps_n) * Tile::warp_n + 8 * j, k0 / p.group_size, lane,
                                  *reinterpret_cast<std::int32_t(*)[4]>(acc[at(w, i, j, lane)].data()),
                                  *reinterpret_cast<float(*)[4]>(total[at(w, i, j, lane)].data()));
      }
      for (int w = 0; w < warps; ++w) {
        const int wm0 = (w / Tile::warps_n) * Tile::warp_m, wn0 = (w % Tile::warps_n) * Tile::warp_n;
        for (int i = 0; i < Tile::mma_m; ++i)
          for (int j = 0; j < Tile::mma_n; ++j)
            for (int lane = 0; lane < 32; ++lane)
              w4a8_store(p, m0 + wm0 + 16 * i, n0 + wn0 + 8 * j, lane,
                         *reinterpret_cast<const float(*)[4]>(total[at(w, i, j, lane)].data()));
      }
    }
  return y;
}

}  // namespace

TEST_CASE("w4a8 tiles: emulated GEMM grids equal the integer reference bit for bit", "[quant][device][w4a8]") {
  for (bool sym : {true, false})
    for (auto [m, n, k, gs] : {std::tuple{1, 8, 64, 32}, {33, 40, 100, 32}, {17, 16, 256, 128}, {5, 24, 200, 0}}) {
      INFO("M " << m << " N " << n << " K " << k << " group " << gs << " sym " << sym);
      const auto w = weft_test::exact_matrix<weft::half>(n, k, {4, gs, sym}, static_cast<std::uint64_t>(n * k + gs));
      const auto a = small_activations(m, k, static_cast<std::uint64_t>(m + k), -8, 8);
      const auto ref = reference_gemm_w4a8(w, a);
      const w4a8_params<weft::half> p{
          a.values.data(), a.scales.data(), w.packed().data(), w.scales().data(), w.zeros().data(), nullptr, m, n, k,
          w.k_padded(),    w.group_size(),  w.groups()};
      for (bool fallback : {false, true}) {
        INFO("fallback " << fallback);
        CHECK(emulate_w4a8_gemm<gemm_tile<32, 16, 2, 1>>(p, fallback) == ref);
        CHECK(emulate_w4a8_gemm<gemm_tile<16, 32, 1, 2>>(p, fallback) == ref);
      }
    }
}

// The decode GEMV's GPU layout and register math on the CPU: gpu_w4_matrix holds every code, scale
// and zero of the matrix it came from, its positions are a bijection, and whole GEMVs emulated lane
// by lane with the functions the kernel calls (decode, B fragments, mma emulation, the per-group
// fold, the output map) match the reference bit for bit on exact inputs, for W4A16 (fp16, bf16)
// and W4A8, every group size, symmetric and not, ragged N and K, 1 to 32 tokens.
#include <weft/quant/device_tiles.hpp>
#include <weft/quant/gemv_fragments.hpp>
#include <weft/quant/gpu_sparse24_matrix.hpp>
#include <weft/quant/gpu_w4_matrix.hpp>
#include <weft/quant/quantized_activations.hpp>
#include <weft/quant/reference.hpp>

#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

using namespace weft::quant;
using weft::bfloat16;
using weft::half;

namespace {

/// An int4 matrix with exact values whose zeros span 0..16 (16: GPTQ v1's zero + 1).
template <class Scale>
quantized_matrix<Scale> exact_w4(std::int64_t n, std::int64_t k, int group, bool symmetric, std::uint64_t seed) {
  const quant_scheme s{4, group, symmetric};
  if (symmetric) return weft_test::exact_matrix<Scale>(n, k, s, seed);
  const auto base = weft_test::exact_matrix<Scale>(n, k, s, seed);
  std::vector<std::int16_t> zeros;
  for (int z : weft_test::random_ints(base.zeros().size(), seed + 7, 0, 16))
    zeros.push_back(static_cast<std::int16_t>(z));
  const auto codes = base.codes();
  return quantized_matrix<Scale>::from_codes(n, k, s, codes, base.scales(), zeros);
}

/// The scales pair and zero terms a lane loads for (tile, group), as the kernel reads them.
template <class Scale>
void lane_group(const gpu_w4_matrix<Scale>& g, std::int64_t tile, std::int64_t group, int lane, float& s0, float& s1,
                int& z0, int& z1) {
  const std::int64_t cell = (tile * g.groups() + group) * gpu_w4_tile_rows + 2 * (lane / 4);
  s0 = static_cast<float>(g.scales()[static_cast<std::size_t>(cell)]);
  s1 = static_cast<float>(g.scales()[static_cast<std::size_t>(cell + 1)]);
  z0 = g.symmetric() ? 8 : g.zeros()[static_cast<std::size_t>(cell)];
  z1 = g.symmetric() ? 8 : g.zeros()[static_cast<std::size_t>(cell + 1)];
}

/// Folds one warp's partial sums into its accumulators (acc: 32 lanes x 4) by each lane's row
/// scales, as every kernel does after a group: scales_of(lane) gives (scale of row g, of g + 8).
template <class Partial, class ScalesOf>
void fold_warp(const Partial (&part)[32][4], ScalesOf scales_of, float* acc) {
  for (int lane = 0; lane < 32; ++lane) {
    const auto [s0, s1] = scales_of(lane);
    float folded[4];
    std::memcpy(folded, acc + 4 * lane, sizeof(folded));
    gemv_fold(part[lane], s0, s1, folded);
    std::memcpy(acc + 4 * lane, folded, sizeof(folded));
  }
}

/// Writes one tile's accumulators (mb_count x 32 lanes x 4) into Y through the kernel's output map,
/// times token_scale(m).
template <class TokenScale>
void store_tile(const std::vector<float>& acc, std::int64_t tile, std::int64_t mb_count, std::int64_t m, std::int64_t n,
                std::vector<float>& y, TokenScale token_scale) {
  for (std::int64_t mb = 0; mb < mb_count; ++mb)
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const gemv_out_pos pos = gemv_out_of(tile * gpu_w4_tile_rows, 8 * mb, lane, i);
        if (pos.n < n && pos.m < m)
          y[static_cast<std::size_t>(pos.m * n + pos.n)] =
              acc[static_cast<std::size_t>((mb * 32 + lane) * 4 + i)] * token_scale(pos.m);
      }
}

/// Y = X W^T the way the W4A16 kernel computes it: per tile, chunk and k16 step, 32 lanes' A
/// fragments (w4a16_decode) and B fragments, one emulated mma per 8 tokens, folded by group.
template <class Act, class Scale>
std::vector<float> emulate_w4a16(const gpu_w4_matrix<Scale>& g, const std::vector<Act>& x, std::int64_t m,
                                 bool vector) {
  std::vector<float> y(static_cast<std::size_t>(m * g.rows()), -1.0f);
  const std::int64_t mb_count = ceil_div(m, 8);
  for (std::int64_t tile = 0; tile < g.tiles(); ++tile) {
    std::vector<float> acc(static_cast<std::size_t>(mb_count * 32 * 4), 0.0f);
    for (std::int64_t c = 0; c < g.chunks(); ++c) {
      // Every lane's activation fragments of the chunk, per 8 tokens.
      std::vector<std::array<std::array<std::uint32_t, 2>, 4>> bchunk(static_cast<std::size_t>(mb_count * 32));
      for (std::int64_t mb = 0; mb < mb_count; ++mb)
        for (int lane = 0; lane < 32; ++lane) {
          const std::int64_t row = 8 * mb + lane / 4;
          std::uint32_t b[4][2];
          w4a16_b_chunk(x.data() + std::min(row, m - 1) * g.cols(), row < m, g.cols(), c * gpu_w4_chunk_k, lane,
                        vector && (c + 1) * gpu_w4_chunk_k <= g.cols(), b);
          for (int s = 0; s < 4; ++s)
            for (int r = 0; r < 2; ++r) bchunk[static_cast<std::size_t>(mb * 32 + lane)][s][r] = b[s][r];
        }
      for (int s = 0; s < 4; ++s) {
        const std::int64_t k0 = c * gpu_w4_chunk_k + 16 * s;
        const std::int64_t group = std::min(k0 / g.group_size(), g.groups() - 1);
        std::uint32_t a[32][4];
        for (int lane = 0; lane < 32; ++lane) {
          float s0, s1;
          int z0, z1;
          lane_group(g, tile, group, lane, s0, s1, z0, z1);
          const std::uint32_t word = g.words()[static_cast<std::size_t>(((tile * g.chunks() + c) * 32 + lane) * 4 + s)];
          w4a16_decode<Act>(word, w4a16_zero_terms_for<Act>(z0, z1), a[lane]);
        }
        for (std::int64_t mb = 0; mb < mb_count; ++mb) {
          std::uint32_t b[32][2];
          float part[32][4] = {};
          for (int lane = 0; lane < 32; ++lane)
            for (int r = 0; r < 2; ++r) b[lane][r] = bchunk[static_cast<std::size_t>(mb * 32 + lane)][s][r];
          mma16_emulate<Act>(a, b, part);
          fold_warp(
              part,
              [&](int lane) {
                float s0, s1;
                int z0, z1;
                lane_group(g, tile, group, lane, s0, s1, z0, z1);
                return std::pair{s0, s1};
              },
              &acc[static_cast<std::size_t>(mb * 32 * 4)]);
        }
      }
    }
    store_tile(acc, tile, mb_count, m, g.rows(), y, [](std::int64_t) { return 1.0f; });
  }
  return y;
}

/// The W4A8 kernel's arithmetic: k32 steps over two words, exact int32 per group, then the token scale.
template <class Scale>
std::vector<float> emulate_w4a8(const gpu_w4_matrix<Scale>& g, const quantized_activations& x, bool vector) {
  const std::int64_t m = x.rows;
  std::vector<float> y(static_cast<std::size_t>(m * g.rows()), -1.0f);
  const std::int64_t mb_count = ceil_div(m, 8);
  for (std::int64_t tile = 0; tile < g.tiles(); ++tile) {
    std::vector<float> acc(static_cast<std::size_t>(mb_count * 32 * 4), 0.0f);
    for (std::int64_t c = 0; c < g.chunks(); ++c) {
      std::vector<std::array<std::array<std::uint32_t, 2>, 2>> bchunk(static_cast<std::size_t>(mb_count * 32));
      for (std::int64_t mb = 0; mb < mb_count; ++mb)
        for (int lane = 0; lane < 32; ++lane) {
          const std::int64_t row = 8 * mb + lane / 4;
          std::uint32_t b[2][2];
          w4a8_b_chunk(x.values.data() + std::min(row, m - 1) * g.cols(), row < m, g.cols(), c * gpu_w4_chunk_k, lane,
                       vector && (c + 1) * gpu_w4_chunk_k <= g.cols(), b);
          for (int s = 0; s < 2; ++s)
            for (int r = 0; r < 2; ++r) bchunk[static_cast<std::size_t>(mb * 32 + lane)][s][r] = b[s][r];
        }
      for (int s = 0; s < 2; ++s) {
        const std::int64_t k0 = c * gpu_w4_chunk_k + 32 * s;
        const std::int64_t group = std::min(k0 / g.group_size(), g.groups() - 1);
        std::uint32_t a[32][4];
        for (int lane = 0; lane < 32; ++lane) {
          float s0, s1;
          int z0, z1;
          lane_group(g, tile, group, lane, s0, s1, z0, z1);
          const std::size_t base = static_cast<std::size_t>(((tile * g.chunks() + c) * 32 + lane) * 4 + 2 * s);
          std::uint32_t lo[2], hi[2];
          w4a8_decode(g.words()[base], static_cast<std::uint32_t>(z0) * 0x01010101u,
                      static_cast<std::uint32_t>(z1) * 0x01010101u, lo);
          w4a8_decode(g.words()[base + 1], static_cast<std::uint32_t>(z0) * 0x01010101u,
                      static_cast<std::uint32_t>(z1) * 0x01010101u, hi);
          const std::uint32_t frag[4] = {lo[0], lo[1], hi[0], hi[1]};
          std::memcpy(a[lane], frag, sizeof(frag));
        }
        for (std::int64_t mb = 0; mb < mb_count; ++mb) {
          std::uint32_t b[32][2];
          std::int32_t part[32][4] = {};
          for (int lane = 0; lane < 32; ++lane)
            for (int r = 0; r < 2; ++r) b[lane][r] = bchunk[static_cast<std::size_t>(mb * 32 + lane)][s][r];
          mma32_emulate(a, b, part);
          fold_warp(
              part,
              [&](int lane) {
                float s0, s1;
                int z0, z1;
                lane_group(g, tile, group, lane, s0, s1, z0, z1);
                return std::pair{s0, s1};
              },
              &acc[static_cast<std::size_t>(mb * 32 * 4)]);
        }
      }
    }
    store_tile(acc, tile, mb_count, m, g.rows(), y,
               [&](std::int64_t r) { return x.scales[static_cast<std::size_t>(r)]; });
  }
  return y;
}

template <class Act>
std::vector<Act> exact_activations(std::int64_t m, std::int64_t k, std::uint64_t seed) {
  std::vector<Act> x;
  for (int v : weft_test::random_ints(static_cast<std::size_t>(m * k), seed, -8, 8))
    x.push_back(Act(static_cast<float>(v)));
  return x;
}

struct gemv_case {
  std::int64_t n, k;
  int group;
  bool symmetric;
};
const gemv_case cases[] = {{16, 64, 0, true},    {37, 200, 128, false}, {64, 256, 64, false}, {33, 96, 96, true},
                           {20, 130, 64, false}, {48, 384, 128, true},  {5, 31, 0, false}};

}  // namespace

TEST_CASE("quant.gemv: GPU layout positions are a bijection onto the padded matrix", "[quant][gemv]") {
  const std::int64_t tiles = 2, chunks = 3;
  std::set<std::pair<std::int64_t, int>> seen;
  for (std::int64_t n = 0; n < tiles * gpu_w4_tile_rows; ++n)
    for (std::int64_t k = 0; k < chunks * gpu_w4_chunk_k; ++k) {
      const auto p = gpu_w4_position_of(n, k, chunks);
      REQUIRE(p.word >= 0);
      REQUIRE(p.word < tiles * chunks * 128);
      REQUIRE((p.nibble >= 0 && p.nibble < 8));
      REQUIRE(seen.insert({p.word, p.nibble}).second);
    }
  REQUIRE(seen.size() == static_cast<std::size_t>(tiles * chunks * 128 * 8));
}

TEST_CASE("quant.gemv: gpu_w4_matrix keeps every code, scale and zero", "[quant][gemv]") {
  for (const auto& c : cases) {
    const auto w = exact_w4<half>(c.n, c.k, c.group, c.symmetric, static_cast<std::uint64_t>(c.n * c.k));
    const auto g = gpu_w4_matrix<half>::from(w);
    REQUIRE(g.rows() == c.n);
    REQUIRE(g.cols() == c.k);
    REQUIRE(g.tiles() == ceil_div(c.n, 16));
    REQUIRE(g.chunks() == ceil_div(c.k, 64));
    REQUIRE(g.layout_version() == 1);
    REQUIRE(g.symmetric() == c.symmetric);
    REQUIRE(g.zeros().size() == (c.symmetric ? 0u : g.scales().size()));
    REQUIRE(g.weight_bytes() == g.words().size() * 4 + g.scales().size() * 2 + g.zeros().size());
    for (std::int64_t n = 0; n < c.n; ++n) {
      for (std::int64_t k = 0; k < c.k; ++k) REQUIRE(g.code(n, k) == w.code(n, k));
      for (std::int64_t grp = 0; grp < w.groups(); ++grp) {
        REQUIRE(g.scale(n, grp).bits == half(w.scale(n, grp)).bits);
        REQUIRE(g.zero(n, grp) == w.zero(n, grp));
      }
    }
    // Padding inputs hold the row's zero point (clamped to a code), padded rows code 8.
    for (std::int64_t n = 0; n < g.tiles() * 16; ++n)
      for (std::int64_t k = (n < c.n ? c.k : 0); k < g.chunks() * 64; ++k) {
        const auto p = gpu_w4_position_of(n, k, g.chunks());
        const int code = static_cast<int>((g.words()[static_cast<std::size_t>(p.word)] >> (4 * p.nibble)) & 0xF);
        REQUIRE(code == (n < c.n ? std::clamp(w.zero(n, w.groups() - 1), 0, 15) : 8));
      }
  }
}

TEST_CASE("quant.gemv: gpu_w4_matrix refuses int8 and empty matrices", "[quant][gemv]") {
  const auto w8 = weft_test::exact_matrix<half>(4, 64, {8, 0, true}, 3);
  REQUIRE_THROWS_WITH(gpu_w4_matrix<half>::from(w8), Catch::Contains("8-bit"));
  REQUIRE_THROWS_WITH(gpu_w4_matrix<half>::from(quantized_matrix<half>{}), Catch::Contains("empty"));
  // Groups of 32 or 96 inputs cross a lane's 64-input chunk; one group per row is fine at any K.
  const auto g32 = weft_test::exact_matrix<half>(4, 128, {4, 32, true}, 3);
  REQUIRE_THROWS_WITH(gpu_w4_matrix<half>::from(g32), Catch::Contains("multiple of 64"));
  const auto g96 = weft_test::exact_matrix<half>(4, 192, {4, 96, false}, 3);
  REQUIRE_THROWS_WITH(gpu_w4_matrix<half>::from(g96), Catch::Contains("group_size = 96"));
  REQUIRE_NOTHROW(gpu_w4_matrix<half>::from(weft_test::exact_matrix<half>(4, 96, {4, 96, false}, 3)));
  REQUIRE_NOTHROW(gpu_w4_matrix<half>::from(weft_test::exact_matrix<half>(4, 100, {4, 0, false}, 3)));
  const auto g = gpu_w4_matrix<half>::from(weft_test::exact_matrix<half>(4, 64, {4, 64, true}, 3));
  REQUIRE_THROWS_WITH(g.code(4, 0), Catch::Contains("outside"));
  REQUIRE_THROWS_WITH(g.code(0, -1), Catch::Contains("outside"));
}

TEST_CASE("quant.gemv: decode gives code - zero for every code and zero point", "[quant][gemv]") {
  for (int z0 = 0; z0 <= 16; ++z0)
    for (int q = 0; q < 16; ++q) {
      const int z1 = 16 - z0, q1 = 15 - q;
      // Every nibble j of the word holds q (row g) or q1 (row g + 8) per the layout.
      std::uint32_t word = 0;
      for (int j = 0; j < 8; ++j) word |= static_cast<std::uint32_t>(j % 2 == 0 ? q : q1) << (4 * j);
      std::uint32_t h[4], b[4];
      w4a16_decode<half>(word, w4a16_zero_terms_for<half>(z0, z1), h);
      w4a16_decode<bfloat16>(word, w4a16_zero_terms_for<bfloat16>(z0, z1), b);
      for (int r = 0; r < 4; ++r)
        for (int lanepart = 0; lanepart < 2; ++lanepart) {
          const float want = static_cast<float>(r % 2 == 0 ? q - z0 : q1 - z1);
          REQUIRE(static_cast<float>(half::from_bits(static_cast<std::uint16_t>(h[r] >> (16 * lanepart)))) == want);
          REQUIRE(static_cast<float>(bfloat16::from_bits(static_cast<std::uint16_t>(b[r] >> (16 * lanepart)))) == want);
        }
      std::uint32_t s8[2];
      w4a8_decode(word, static_cast<std::uint32_t>(z0) * 0x01010101u, static_cast<std::uint32_t>(z1) * 0x01010101u, s8);
      for (int byte = 0; byte < 4; ++byte) {
        REQUIRE(static_cast<std::int8_t>(s8[0] >> (8 * byte)) == q - z0);
        REQUIRE(static_cast<std::int8_t>(s8[1] >> (8 * byte)) == q1 - z1);
      }
    }
}

TEMPLATE_TEST_CASE("quant.gemv: emulated W4A16 GEMV equals the reference bit for bit", "[quant][gemv]", half,
                   bfloat16) {
  using Act = TestType;
  for (const auto& c : cases)
    for (std::int64_t m : {1, 3, 8, 16, 17, 32}) {
      const auto seed = static_cast<std::uint64_t>(c.n * 1000 + c.k * 10 + m);
      const auto w = exact_w4<half>(c.n, c.k, c.group, c.symmetric, seed);
      const auto x = exact_activations<Act>(m, c.k, seed + 1);
      const auto ref = reference_gemm(w, std::span<const Act>(x), m);
      const auto g = gpu_w4_matrix<half>::from(w);
      INFO("N " << c.n << " K " << c.k << " group " << c.group << " M " << m);
      REQUIRE(weft_test::same_bits(emulate_w4a16(g, x, m, c.k % 8 == 0), ref));
      REQUIRE(weft_test::same_bits(emulate_w4a16(g, x, m, false), ref));
    }
}

TEST_CASE("quant.gemv: emulated W4A16 GEMV with fp32 and bf16 scales", "[quant][gemv]") {
  const auto wf = exact_w4<float>(37, 200, 128, false, 11);
  const auto wb = exact_w4<bfloat16>(37, 200, 64, true, 12);
  const auto x = exact_activations<half>(5, 200, 13);
  REQUIRE(weft_test::same_bits(emulate_w4a16(gpu_w4_matrix<float>::from(wf), x, 5, true),
                               reference_gemm(wf, std::span<const half>(x), 5)));
  REQUIRE(weft_test::same_bits(emulate_w4a16(gpu_w4_matrix<bfloat16>::from(wb), x, 5, true),
                               reference_gemm(wb, std::span<const half>(x), 5)));
}

TEST_CASE("quant.gemv: emulated W4A8 GEMV equals the reference bit for bit", "[quant][gemv]") {
  for (const auto& c : cases)
    for (std::int64_t m : {1, 3, 16, 32}) {
      const auto seed = static_cast<std::uint64_t>(c.n * 999 + c.k * 7 + m);
      const auto w = exact_w4<half>(c.n, c.k, c.group, c.symmetric, seed);
      quantized_activations x{m, c.k, {}, {}};
      for (int v : weft_test::random_ints(static_cast<std::size_t>(m * c.k), seed + 1, -127, 127))
        x.values.push_back(static_cast<std::int8_t>(v));
      for (std::int64_t r = 0; r < m; ++r) x.scales.push_back(r % 2 == 0 ? 0.5f : 2.0f);
      const auto ref = reference_gemm_w4a8(w, x);
      const auto g = gpu_w4_matrix<half>::from(w);
      INFO("N " << c.n << " K " << c.k << " group " << c.group << " M " << m);
      REQUIRE(weft_test::same_bits(emulate_w4a8(g, x, c.k % 16 == 0), ref));
      REQUIRE(weft_test::same_bits(emulate_w4a8(g, x, false), ref));
    }
}

namespace {

/// A 2:4 matrix with exact values: random kept codes and positions, power-of-two scales, zeros
/// 0..16 when asymmetric.
sparse24_matrix<half> exact_sparse24(std::int64_t n, std::int64_t k, int group, bool symmetric, std::uint64_t seed) {
  const auto codes = weft_test::random_ints(static_cast<std::size_t>(n * k / 2), seed, 0, 15);
  const auto firsts = weft_test::random_ints(static_cast<std::size_t>(n * k / 4), seed + 1, 0, 2);
  const auto seconds = weft_test::random_ints(static_cast<std::size_t>(n * k / 4), seed + 2, 0, 2);
  std::vector<std::uint8_t> positions;
  for (std::size_t i = 0; i < firsts.size(); ++i) {
    const int p0 = firsts[i], p1 = p0 + 1 + seconds[i] % (3 - p0);
    positions.push_back(static_cast<std::uint8_t>(p0));
    positions.push_back(static_cast<std::uint8_t>(p1));
  }
  const std::int64_t gs = group == 0 ? k : group, groups = ceil_div(k, gs);
  std::vector<half> scales;
  for (int e : weft_test::random_ints(static_cast<std::size_t>(n * groups), seed + 3, -3, 2))
    scales.push_back(half(e >= 0 ? static_cast<float>(1 << e) : 1.0f / static_cast<float>(1 << -e)));
  std::vector<std::int16_t> zeros;
  if (!symmetric)
    for (int z : weft_test::random_ints(scales.size(), seed + 4, 0, 16)) zeros.push_back(static_cast<std::int16_t>(z));
  return sparse24_matrix<half>::from_parts(n, k, {4, group, symmetric}, codes, positions, scales, zeros);
}

/// The 2:4 kernel's arithmetic: per tile, 128-input chunk and k32 step, 32 lanes' A fragments
/// (w4a16_decode of the kept codes), metadata words and B fragments through mma_sp16832_emulate.
template <class Act>
std::vector<float> emulate_sparse24(const gpu_sparse24_matrix<half>& g, const std::vector<Act>& x, std::int64_t m) {
  std::vector<float> y(static_cast<std::size_t>(m * g.rows()), -1.0f);
  const std::int64_t mb_count = ceil_div(m, 8);
  for (std::int64_t tile = 0; tile < g.tiles(); ++tile) {
    std::vector<float> acc(static_cast<std::size_t>(mb_count * 32 * 4), 0.0f);
    for (std::int64_t c = 0; c < g.chunks(); ++c) {
      const std::int64_t group = std::min(c * gpu_sparse24_chunk_k / g.group_size(), g.groups() - 1);
      for (int s = 0; s < 4; ++s) {
        std::uint32_t a[32][4], meta[32];
        for (int lane = 0; lane < 32; ++lane) {
          const std::int64_t cell = (tile * g.groups() + group) * 16 + 2 * (lane / 4);
          const int z0 = g.symmetric() ? 8 : g.zeros()[static_cast<std::size_t>(cell)];
          const int z1 = g.symmetric() ? 8 : g.zeros()[static_cast<std::size_t>(cell + 1)];
          const auto base = static_cast<std::size_t>((tile * g.chunks() + c) * 32 + lane) * 4;
          w4a16_decode<Act>(g.words()[base + static_cast<std::size_t>(s)], w4a16_zero_terms_for<Act>(z0, z1), a[lane]);
          const auto mbase = static_cast<std::size_t>((tile * g.chunks() + c) * 16 + 2 * (lane / 4) + lane % 4) * 4;
          meta[lane] = lane % 4 < 2 ? g.meta()[mbase + static_cast<std::size_t>(s)] : 0u;
        }
        for (std::int64_t mb = 0; mb < mb_count; ++mb) {
          std::uint32_t b[32][4];
          float part[32][4] = {};
          for (int lane = 0; lane < 32; ++lane) {
            const std::int64_t row = 8 * mb + lane / 4;
            sparse24_b_step(x.data() + std::min(row, m - 1) * g.cols(), row < m, g.cols(),
                            c * gpu_sparse24_chunk_k + 32 * s, lane, (c + 1) * gpu_sparse24_chunk_k <= g.cols(),
                            b[lane]);
          }
          mma_sp16832_emulate<Act>(a, b, meta, part);
          fold_warp(
              part,
              [&](int lane) {
                const std::int64_t cell = (tile * g.groups() + group) * 16 + 2 * (lane / 4);
                return std::pair{static_cast<float>(g.scales()[static_cast<std::size_t>(cell)]),
                                 static_cast<float>(g.scales()[static_cast<std::size_t>(cell + 1)])};
              },
              &acc[static_cast<std::size_t>(mb * 32 * 4)]);
        }
      }
    }
    store_tile(acc, tile, mb_count, m, g.rows(), y, [](std::int64_t) { return 1.0f; });
  }
  return y;
}

}  // namespace

TEST_CASE("quant.gemv: 2:4 GPU layout keeps every kept code, position, scale and zero", "[quant][gemv]") {
  std::set<std::pair<std::int64_t, int>> seen, seen_meta;
  for (std::int64_t n = 0; n < 32; ++n) {
    for (std::int64_t j = 0; j < 2 * gpu_sparse24_chunk_k / 2; ++j) {
      const auto p = gpu_sparse24_position_of(n, j, 2);
      REQUIRE(seen.insert({p.word, p.nibble}).second);
    }
    for (std::int64_t q = 0; q < 2 * gpu_sparse24_chunk_k / 4; ++q) {
      const auto p = gpu_sparse24_meta_of(n, q, 2);
      REQUIRE((p.nibble % 4 == 0 && p.nibble < 32));
      REQUIRE(seen_meta.insert({p.word, p.nibble}).second);
    }
  }
  REQUIRE(seen.size() == 2u * 2 * 128 * 8);  // 2 tiles x 2 chunks x 128 words x 8 nibbles
  REQUIRE(seen_meta.size() == 2u * 2 * 64 * 8);
  for (auto [n, k, group, sym] : {std::tuple{37, 192, 0, false}, {16, 256, 128, true}, {20, 512, 256, false}}) {
    const auto w = exact_sparse24(n, k, group, sym, static_cast<std::uint64_t>(n + k));
    const auto g = gpu_sparse24_matrix<half>::from(w);
    REQUIRE(g.chunks() == ceil_div(k, 128));
    REQUIRE(g.weight_bytes() == (g.words().size() + g.meta().size()) * 4 + g.scales().size() * 2 + g.zeros().size());
    for (std::int64_t r = 0; r < n; ++r) {
      for (std::int64_t j = 0; j < k / 2; ++j) REQUIRE(g.code(r, j) == w.values().code(r, j));
      for (std::int64_t q = 0; q < k / 4; ++q) REQUIRE(g.nibble(r, q) == w.nibble(r, q));
      for (std::int64_t grp = 0; grp < w.groups(); ++grp) {
        REQUIRE(g.scale(r, grp).bits == w.values().scales()[static_cast<std::size_t>(r * w.groups() + grp)].bits);
        REQUIRE(g.zero(r, grp) == w.values().zero(r, grp));
      }
    }
  }
  REQUIRE_THROWS_WITH(gpu_sparse24_matrix<half>::from(exact_sparse24(4, 256, 64, true, 1)),
                      Catch::Contains("multiple of 128"));
  REQUIRE_THROWS_WITH(gpu_sparse24_matrix<half>::from(sparse24_matrix<half>{}), Catch::Contains("empty"));
  const auto g = gpu_sparse24_matrix<half>::from(exact_sparse24(4, 128, 0, true, 1));
  REQUIRE_THROWS_WITH(g.code(0, 64), Catch::Contains("outside"));
  REQUIRE_THROWS_WITH(g.nibble(4, 0), Catch::Contains("outside"));
}

TEMPLATE_TEST_CASE("quant.gemv: emulated 2:4 sparse GEMV equals the reference bit for bit", "[quant][gemv]", half,
                   bfloat16) {
  using Act = TestType;
  for (auto [n, k, group, sym] :
       {std::tuple{37, 192, 0, false}, {16, 256, 128, true}, {20, 512, 256, false}, {33, 384, 128, false}})
    for (std::int64_t m : {1, 3, 9, 16}) {
      const auto seed = static_cast<std::uint64_t>(n * 31 + k + m);
      const auto w = exact_sparse24(n, k, group, sym, seed);
      const auto x = exact_activations<Act>(m, k, seed + 5);
      INFO("N " << n << " K " << k << " group " << group << " M " << m);
      REQUIRE(weft_test::same_bits(emulate_sparse24(gpu_sparse24_matrix<half>::from(w), x, m),
                                   reference_gemm(w, std::span<const Act>(x), m)));
    }
}

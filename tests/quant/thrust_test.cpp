// Thrust primitives on a CPU back end (CPP, OMP or TBB, chosen by THRUST_DEVICE_SYSTEM at compile
// time): group quantization equals the CPU quantizer code for code, dequantization inverts it, and
// the MoE dispatch plan equals a std::stable_sort reference; bad input is rejected.
#include <weft/quant/moe_dispatch_thrust.hpp>
#include <weft/quant/quantize_thrust.hpp>
#include <weft/quant/quantizers.hpp>

#include <catch2/catch.hpp>

#include "test_util.hpp"

#include <thrust/copy.h>
#include <thrust/host_vector.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

using namespace weft::quant;

namespace {
// Device vectors are read through thrust::copy into host memory: element access through a
// device_reference upcasts a null system pointer inside Thrust, which UBSan reports.
template <class T>
std::vector<T> to_host(const thrust::device_vector<T>& d) {
  thrust::host_vector<T> h(d.size());
  thrust::copy(d.begin(), d.end(), h.begin());
  return std::vector<T>(h.begin(), h.end());
}
}  // namespace

TEST_CASE("thrust: quantize_groups equals the CPU absmax quantizer, dequantize_groups inverts it", "[quant][thrust]") {
  for (int bits : {4, 8})
    for (auto [rows, cols, gs] : {std::tuple{1, 32, 32}, {7, 100, 32}, {3, 300, 128}, {5, 45, 0}}) {
      INFO("bits " << bits << " rows " << rows << " cols " << cols << " group " << gs);
      const auto host = weft_test::random_floats(static_cast<std::size_t>(rows * cols), 17);
      const auto cpu = quantize<float>(host, rows, cols, {bits, gs, true}).weights;
      const thrust::device_vector<float> x(host.begin(), host.end());
      thrust::device_vector<std::int8_t> codes;
      thrust::device_vector<float> scales;
      quantize_groups(x, rows, cols, gs, bits, codes, scales);
      const std::vector<std::int8_t> got = to_host(codes);
      const auto want = cpu.codes();
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == want[i]);
      const std::vector<float> got_scales = to_host(scales);
      REQUIRE(got_scales.size() == static_cast<std::size_t>(rows * cpu.groups()));
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t g = 0; g < cpu.groups(); ++g)
          REQUIRE(got_scales[static_cast<std::size_t>(r * cpu.groups() + g)] == cpu.scale(r, g));
      thrust::device_vector<float> back;
      dequantize_groups(codes, scales, rows, cols, gs, bits, back);
      CHECK(to_host(back) == cpu.dequantize());
    }
}

TEST_CASE("thrust: quantize_groups rejects bad shapes", "[quant][thrust]") {
  const thrust::device_vector<float> x(64, 1.0f);
  thrust::device_vector<std::int8_t> codes;
  thrust::device_vector<float> scales;
  CHECK_THROWS_WITH(quantize_groups(x, 2, 30, 32, 4, codes, scales),
                    Catch::Contains("input has 64 elements but rows x cols = 2 x 30"));
  CHECK_THROWS_WITH(quantize_groups(x, 2, 32, 48, 4, codes, scales), Catch::Contains("group_size = 48"));
  CHECK_THROWS_WITH(quantize_groups(x, 2, 32, 32, 2, codes, scales), Catch::Contains("bits = 2"));
  quantize_groups(x, 2, 32, 32, 8, codes, scales);
  thrust::device_vector<float> out;
  scales.resize(3);
  CHECK_THROWS_WITH(dequantize_groups(codes, scales, 2, 32, 32, 8, out), Catch::Contains("scales has 3 elements"));
}

TEST_CASE("thrust: moe_dispatch equals a stable-sort reference", "[quant][thrust][moe]") {
  for (auto [tokens, top_k, experts] : {std::tuple{1, 1, 1}, {37, 2, 8}, {100, 4, 16}, {5, 2, 64}}) {
    INFO("tokens " << tokens << " top_k " << top_k << " experts " << experts);
    const auto ids = weft_test::random_ints(static_cast<std::size_t>(tokens * top_k), 23, 0, experts - 1);
    const thrust::device_vector<std::int32_t> d_ids(ids.begin(), ids.end());
    const auto plan = moe_dispatch(d_ids, top_k, experts);
    std::vector<std::int32_t> order(ids.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return ids[static_cast<std::size_t>(a)] < ids[static_cast<std::size_t>(b)]; });
    CHECK(to_host(plan.order) == order);
    std::vector<std::int32_t> counts(static_cast<std::size_t>(experts), 0),
        offsets(static_cast<std::size_t>(experts) + 1, 0);
    for (int e : ids) ++counts[static_cast<std::size_t>(e)];
    std::partial_sum(counts.begin(), counts.end(), offsets.begin() + 1);
    CHECK(to_host(plan.counts) == counts);
    CHECK(to_host(plan.offsets) == offsets);
    const auto inverse = to_host(plan.inverse), token_of = to_host(plan.tokens);
    for (std::size_t j = 0; j < order.size(); ++j) {
      REQUIRE(inverse[static_cast<std::size_t>(order[j])] == static_cast<std::int32_t>(j));
      REQUIRE(token_of[j] == order[j] / top_k);
    }
  }
}

TEST_CASE("thrust: moe_dispatch rejects bad input", "[quant][thrust][moe]") {
  const thrust::device_vector<std::int32_t> ids(std::vector<std::int32_t>{0, 1, 2, 9, 1, 0});
  CHECK_THROWS_WITH(moe_dispatch(ids, 2, 4), Catch::Contains("1 expert ids are outside [0, 4)"));
  CHECK_THROWS_WITH(moe_dispatch(ids, 4, 16), Catch::Contains("not a multiple of top_k = 4"));
  CHECK_THROWS_WITH(moe_dispatch(ids, 0, 16), Catch::Contains("top_k = 0"));
  CHECK_NOTHROW(moe_dispatch(ids, 3, 10));
}

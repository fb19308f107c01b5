// The GPU MoE dispatch (quant/cuda/moe_dispatch.cuh) and one-pass quantizer
// (quant/cuda/quantize_groups.cuh) on a GPU: the dispatch equals a stable sort of the slots by expert
// (order, tokens, inverse, counts, offsets) for whole and partial tiles, 1 to 1024 experts and
// skewed routing, and writes nothing when an id is out of range; the quantizer's codes and scales
// equal weft::quant::quantize's bit for bit, for int4 and int8, every group size, aligned and not.
// Bad arguments are refused before any launch. Needs only the CUDA runtime (no Catch2, Boost or
// TBB); without a GPU it checks the argument validation and exits 77 (skipped).
#include <weft/quant/cuda/moe_dispatch.cuh>
#include <weft/quant/cuda/quantize_groups.cuh>
#include <weft/quant/quantizers.hpp>

#include "cuda_test_util.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace wq = weft::quant;
namespace wc = weft::quant::cuda;

namespace {

using weft_cuda_test::check;
using weft_cuda_test::checks;
using weft_cuda_test::cuda_ok;
using weft_cuda_test::device_buffer;
using weft_cuda_test::failures;

bool threw(const auto& f) {
  try {
    f();
  } catch (const weft::error&) {
    return true;
  }
  return false;
}

std::vector<std::int32_t> routing(std::size_t slots, int experts, int skew, unsigned seed) {
  std::mt19937 g(seed);
  std::vector<std::int32_t> ids(slots);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (std::size_t i = 0; i < slots; ++i)
    ids[i] = skew == 0   ? static_cast<std::int32_t>(g() % static_cast<unsigned>(experts))
             : skew == 1 ? experts - 1
                         : std::min(experts - 1, static_cast<std::int32_t>(std::pow(experts + 1.0, u(g))) - 1);
  return ids;
}

void run_dispatch(std::size_t slots, int top_k, int experts, int skew, unsigned seed) {
  const std::string tag = "dispatch slots " + std::to_string(slots) + " top_k " + std::to_string(top_k) + " experts " +
                          std::to_string(experts) + " skew " + std::to_string(skew);
  const auto ids = routing(slots, experts, skew, seed);
  std::vector<std::int32_t> order(slots);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return ids[a] < ids[b]; });
  std::vector<std::int32_t> tokens(slots), inverse(slots), counts(experts, 0), offsets(experts + 1, 0);
  for (std::size_t pos = 0; pos < slots; ++pos) {
    tokens[pos] = order[pos] / top_k;
    inverse[order[pos]] = static_cast<std::int32_t>(pos);
    ++counts[ids[order[pos]]];
  }
  std::partial_sum(counts.begin(), counts.end(), offsets.begin() + 1);
  device_buffer<std::int32_t> d_ids(ids), d_order(slots, 0xFF), d_tokens(slots, 0xFF), d_inverse(slots, 0xFF),
      d_counts(experts, 0xFF), d_offsets(experts + 1, 0xFF), d_invalid(1, 0xFF);
  const std::size_t bytes = wc::moe_dispatch_workspace_bytes(static_cast<std::int64_t>(slots), top_k, experts);
  device_buffer<unsigned char> ws(bytes, 0xFF);
  wc::moe_dispatch_args a{d_ids.p,     static_cast<std::int64_t>(slots),
                          top_k,       experts,
                          d_order.p,   d_tokens.p,
                          d_inverse.p, d_counts.p,
                          d_offsets.p, d_invalid.p,
                          ws.p,        bytes};
  cuda_ok(wc::launch_moe_dispatch(a), tag + ": launch");
  cuda_ok(cudaDeviceSynchronize(), tag + ": run");
  check(d_invalid.get()[0] == 0, tag + ": no invalid ids");
  check(d_order.get() == order, tag + ": order");
  check(d_tokens.get() == tokens, tag + ": tokens");
  check(d_inverse.get() == inverse, tag + ": inverse");
  check(d_counts.get() == counts, tag + ": counts");
  check(d_offsets.get() == offsets, tag + ": offsets");
  // The same call again gives the same bits (determinism, and the work space is reusable).
  cuda_ok(wc::launch_moe_dispatch(a), tag + ": launch again");
  cuda_ok(cudaDeviceSynchronize(), tag + ": run again");
  check(d_order.get() == order, tag + ": order again");
}

void run_invalid(std::int32_t bad) {
  const std::size_t slots = 5000;
  auto ids = routing(slots, 8, 0, 3);
  ids[4097] = bad;
  ids[17] = bad;
  device_buffer<std::int32_t> d_ids(ids), d_order(slots, 0x11), d_tokens(slots, 0x11), d_inverse(slots, 0x11),
      d_counts(8, 0x11), d_offsets(9, 0x11), d_invalid(1, 0);
  const std::size_t bytes = wc::moe_dispatch_workspace_bytes(slots, 1, 8);
  device_buffer<unsigned char> ws(bytes);
  const wc::moe_dispatch_args a{d_ids.p,     static_cast<std::int64_t>(slots),
                                1,           8,
                                d_order.p,   d_tokens.p,
                                d_inverse.p, d_counts.p,
                                d_offsets.p, d_invalid.p,
                                ws.p,        bytes};
  cuda_ok(wc::launch_moe_dispatch(a), "invalid ids: launch");
  cuda_ok(cudaDeviceSynchronize(), "invalid ids: run");
  check(d_invalid.get()[0] == 2, "invalid id " + std::to_string(bad) + " counted twice");
  const auto untouched = [](const std::vector<std::int32_t>& v) {
    return std::all_of(v.begin(), v.end(), [](std::int32_t x) { return x == 0x11111111; });
  };
  check(
      untouched(d_order.get()) && untouched(d_inverse.get()) && untouched(d_counts.get()) && untouched(d_offsets.get()),
      "invalid id " + std::to_string(bad) + ": nothing written");
}

void run_quantize(std::int64_t rows, std::int64_t cols, int group, int bits, bool misalign, unsigned seed) {
  const std::string tag = "quantize " + std::to_string(rows) + "x" + std::to_string(cols) + " group " +
                          std::to_string(group) + " bits " + std::to_string(bits) + (misalign ? " misaligned" : "");
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(rows * cols));
  for (auto& v : x) v = d(g);
  if (rows > 1)  // an all-zero group takes scale 1
    std::fill(x.begin() + cols, x.begin() + cols + std::min<std::int64_t>(cols, group == 0 ? cols : group), 0.0f);
  const wq::quant_scheme scheme{bits, group, true};
  const auto want = wq::quantize<float>(x, rows, cols, scheme).weights;
  const std::int64_t gs = group == 0 ? wq::round_up(cols, 32) : group, groups = wq::ceil_div(cols, gs);
  device_buffer<float> d_x(x.size() + 1);  // one float of slack for the misaligned view
  cuda_ok(cudaMemcpy(d_x.p + (misalign ? 1 : 0), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice), "x");
  device_buffer<std::int8_t> d_codes(x.size(), 0x5A);
  device_buffer<float> d_scales(static_cast<std::size_t>(rows * groups), 0x5A);
  cuda_ok(wc::launch_quantize_groups(d_x.p + (misalign ? 1 : 0), rows, cols, group, bits, d_codes.p, d_scales.p),
          tag + ": launch");
  cuda_ok(cudaDeviceSynchronize(), tag + ": run");
  const auto codes = d_codes.get();
  const auto scales = d_scales.get();
  bool same = scales.size() == want.scales().size();
  for (std::size_t i = 0; same && i < scales.size(); ++i) same = scales[i] == want.scales()[i];
  check(same, tag + ": scales equal the CPU quantizer's");
  same = true;
  for (std::int64_t r = 0; same && r < rows; ++r)
    for (std::int64_t c = 0; same && c < cols; ++c)
      same = codes[static_cast<std::size_t>(r * cols + c)] == want.code(r, c);
  check(same, tag + ": codes equal the CPU quantizer's");
}

void bad_arguments(bool gpu) {
  check(threw([] { (void)wc::moe_dispatch_workspace_bytes(0, 1, 8); }), "dispatch: zero slots refused");
  check(threw([] { (void)wc::moe_dispatch_workspace_bytes(10, 3, 8); }), "dispatch: slots not a multiple of top_k");
  check(threw([] { (void)wc::moe_dispatch_workspace_bytes(10, 1, 0); }), "dispatch: zero experts refused");
  check(threw([] { (void)wc::moe_dispatch_workspace_bytes(10, 1, 1025); }), "dispatch: over 1024 experts refused");
  check(threw([] { (void)wc::launch_moe_dispatch({}); }), "dispatch: empty arguments refused");
  check(threw([] { (void)wc::launch_quantize_groups(nullptr, 4, 64, 32, 4, nullptr, nullptr); }),
        "quantize: null pointers refused");
  if (!gpu) return;
  device_buffer<float> x(64 * 4);
  device_buffer<std::int8_t> codes(64 * 4);
  device_buffer<float> scales(8);
  check(threw([&] { (void)wc::launch_quantize_groups(x.p, 4, 64, 48, 4, codes.p, scales.p); }),
        "quantize: group 48 refused");
  check(threw([&] { (void)wc::launch_quantize_groups(x.p, 4, 64, 32, 5, codes.p, scales.p); }),
        "quantize: 5 bits refused");
  std::vector<float> host(4);
  check(threw([&] { (void)wc::launch_quantize_groups(host.data(), 1, 4, 0, 4, codes.p, scales.p); }),
        "quantize: host memory refused");
  device_buffer<std::int32_t> ids(64), out(64), small(8);
  const std::size_t bytes = wc::moe_dispatch_workspace_bytes(64, 1, 8);
  device_buffer<unsigned char> ws(bytes);
  const wc::moe_dispatch_args short_ws{ids.p, 64,      1,       8,       out.p, out.p,
                                       out.p, small.p, small.p, small.p, ws.p,  bytes - 1};
  check(threw([&] { (void)wc::launch_moe_dispatch(short_ws); }), "dispatch: short work space refused");
}

}  // namespace

int main() {
  const bool gpu = weft_cuda_test::gpu_present();
  bad_arguments(gpu);
  if (!gpu) return weft_cuda_test::skipped_without_gpu("quant.cuda_dispatch");
  unsigned seed = 1;
  for (int experts : {1, 8, 64, 256, 1024})
    for (int top_k : {1, 2, 8})
      for (std::size_t slots : {8u, 255u, 2048u, 2049u, 10000u})
        for (int skew : {0, 1, 2}) {
          const std::size_t s = slots / top_k * top_k;
          if (s > 0) run_dispatch(s, top_k, experts, skew, seed++);
        }
  run_dispatch(16384 * 8, 8, 256, 2, 99);  // the issue's size
  for (std::int32_t bad : {-1, 8, 1 << 30}) run_invalid(bad);
  for (int bits : {4, 8})
    for (int group : {0, 32, 128, 256})
      for (bool misalign : {false, true}) {
        run_quantize(37, 1000, group, bits, misalign, seed++);
        run_quantize(64, 4096, group, bits, misalign, seed++);
        run_quantize(3, 100, group, bits, misalign, seed++);
      }
  std::printf("quant.cuda_dispatch: %d of %d checks failed\n", failures, checks);
  return failures == 0 ? 0 : 1;
}

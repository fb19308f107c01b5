// The MoE dispatch and the group quantizer on a GPU: weft's CUDA kernels (cuda/moe_dispatch.cuh,
// cuda/quantize_groups.cuh) against weft's Thrust versions (moe_dispatch_thrust.hpp: a stable sort;
// quantize_thrust.hpp: reduce_by_key + transform) in the same run, timed with CUDA events; median and
// min-max of 20 timed calls after 3 warm-up calls. The quantizer's bandwidth counts the fp32 read and
// the int8 codes and fp32 scales written. CSV to argv[1]/dispatch.csv.
//   bench_dispatch [output folder]
#include <weft/quant/cuda/moe_dispatch.cuh>
#include <weft/quant/cuda/quantize_groups.cuh>
#include <weft/quant/moe_dispatch_thrust.hpp>
#include <weft/quant/quantize_thrust.hpp>

#include <thrust/device_vector.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace wq = weft::quant;
namespace wc = weft::quant::cuda;

namespace {

struct stats {
  double median_us, min_us, max_us;
};

stats time_us(const std::function<void()>& call) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) call();
  std::vector<double> t;
  for (int i = 0; i < 20; ++i) {
    cudaEventRecord(a);
    call();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(1e3 * ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return {0.5 * (t[9] + t[10]), t.front(), t.back()};
}

void must(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "bench_dispatch: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string out = argc > 1 ? argv[1] : ".";
  std::ofstream csv(out + "/dispatch.csv");
  csv << "kernel,shape,impl,median_us,min_us,max_us,gb_s\n";
  cudaDeviceProp prop{};
  must(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("%s; median [min-max] of 20 calls, microseconds\n\nMoE dispatch (stable, by expert):\n", prop.name);
  struct dispatch_shape {
    int tokens, top_k, experts;
  };
  for (const dispatch_shape s : {dispatch_shape{16384, 8, 256}, {4096, 2, 8}, {16384, 8, 128}, {512, 8, 256}}) {
    const std::size_t slots = static_cast<std::size_t>(s.tokens) * s.top_k;
    std::mt19937 g(7);
    std::vector<std::int32_t> ids(slots);
    for (auto& e : ids) e = static_cast<std::int32_t>(g() % static_cast<unsigned>(s.experts));
    thrust::device_vector<std::int32_t> d_ids(ids.begin(), ids.end());
    thrust::device_vector<std::int32_t> order(slots), tokens(slots), inverse(slots), counts(s.experts),
        offsets(s.experts + 1), invalid(1);
    const std::size_t bytes = wc::moe_dispatch_workspace_bytes(static_cast<std::int64_t>(slots), s.top_k, s.experts);
    thrust::device_vector<unsigned char> ws(bytes);
    const wc::moe_dispatch_args a{thrust::raw_pointer_cast(d_ids.data()),
                                  static_cast<std::int64_t>(slots),
                                  s.top_k,
                                  s.experts,
                                  thrust::raw_pointer_cast(order.data()),
                                  thrust::raw_pointer_cast(tokens.data()),
                                  thrust::raw_pointer_cast(inverse.data()),
                                  thrust::raw_pointer_cast(counts.data()),
                                  thrust::raw_pointer_cast(offsets.data()),
                                  thrust::raw_pointer_cast(invalid.data()),
                                  thrust::raw_pointer_cast(ws.data()),
                                  bytes};
    const stats mine = time_us([&] { must(wc::launch_moe_dispatch(a), "launch_moe_dispatch"); });
    wq::moe_dispatch_plan plan;
    const stats peer = time_us([&] { plan = wq::moe_dispatch(d_ids, s.top_k, s.experts); });
    const bool same = plan.order == order && plan.inverse == inverse && plan.offsets == offsets;
    char shape[64];
    std::snprintf(shape, sizeof shape, "%d tokens x top-%d of %d", s.tokens, s.top_k, s.experts);
    std::printf("  %-28s weft CUDA %8.1f [%.1f-%.1f]  Thrust stable sort %8.1f [%.1f-%.1f]  %.1fx faster  %s\n", shape,
                mine.median_us, mine.min_us, mine.max_us, peer.median_us, peer.min_us, peer.max_us,
                peer.median_us / mine.median_us, same ? "same plan" : "PLANS DIFFER");
    csv << "moe_dispatch,\"" << shape << "\",cuda," << mine.median_us << ',' << mine.min_us << ',' << mine.max_us
        << ",\nmoe_dispatch,\"" << shape << "\",thrust," << peer.median_us << ',' << peer.min_us << ',' << peer.max_us
        << ",\n";
    if (!same) return 1;
  }
  std::printf("\nGroup quantization, fp32 -> int4 codes (int8 each) + fp32 scales, group 128:\n");
  int mem_khz = 0, bus_bits = 0;  // the theoretical HBM bandwidth: 2 transfers a clock over the bus
  must(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0), "memory clock");
  must(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0), "bus width");
  const double peak_gb_s = 2.0 * bus_bits / 8.0 * mem_khz * 1e3 / 1e9;
  for (const auto [rows, cols] : {std::pair{14336, 4096}, {4096, 14336}, {28672, 8192}}) {
    const std::size_t n = static_cast<std::size_t>(rows) * cols;
    thrust::device_vector<float> x(n);
    std::mt19937 g(3);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> h(n);
    for (auto& v : h) v = d(g);
    thrust::copy(h.begin(), h.end(), x.begin());
    thrust::device_vector<std::int8_t> codes(n), peer_codes;
    thrust::device_vector<float> scales(static_cast<std::size_t>(rows) * (cols / 128)), peer_scales;
    const stats mine = time_us([&] {
      must(wc::launch_quantize_groups(thrust::raw_pointer_cast(x.data()), rows, cols, 128, 4,
                                      thrust::raw_pointer_cast(codes.data()), thrust::raw_pointer_cast(scales.data())),
           "launch_quantize_groups");
    });
    const stats peer = time_us([&] { wq::quantize_groups(x, rows, cols, 128, 4, peer_codes, peer_scales); });
    const double moved = n * (4.0 + 1.0) + 4.0 * static_cast<double>(scales.size());
    const bool same = codes == peer_codes && scales == peer_scales;
    char shape[64];
    std::snprintf(shape, sizeof shape, "%d x %d", rows, cols);
    std::printf(
        "  %-12s weft one pass %8.1f [%.1f-%.1f] us = %6.0f GB/s (%2.0f%% of %.0f)  Thrust %8.1f [%.1f-%.1f] us = "
        "%6.0f "
        "GB/s  %.1fx faster  %s\n",
        shape, mine.median_us, mine.min_us, mine.max_us, moved / mine.median_us / 1e3,
        100 * moved / mine.median_us / 1e3 / peak_gb_s, peak_gb_s, peer.median_us, peer.min_us, peer.max_us,
        moved / peer.median_us / 1e3, peer.median_us / mine.median_us, same ? "same codes" : "CODES DIFFER");
    csv << "quantize_groups," << shape << ",cuda," << mine.median_us << ',' << mine.min_us << ',' << mine.max_us << ','
        << moved / mine.median_us / 1e3 << "\nquantize_groups," << shape << ",thrust," << peer.median_us << ','
        << peer.min_us << ',' << peer.max_us << ',' << moved / peer.median_us / 1e3 << '\n';
    if (!same) return 1;
  }
  std::printf("\nwrote %s/dispatch.csv\n", out.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_dispatch: %s\n", e.what());
  return 1;
}

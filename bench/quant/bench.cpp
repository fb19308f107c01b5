// weft::quant benchmark, one run: the machine's memory bandwidth (STREAM triad, McCalpin 1995),
// Eigen fp32 GEMV/GEMM, oneDNN int8 matmul, and weft's W4 GEMV/GEMM and W8A8 GEMM. Prints the
// ratios against the targets and writes CSV to WEFT_BENCH_OUT/quant.csv.
//   bench_quant_gemm [--quick]
// The weights of the GEMV runs are cycled over several matrices whose total exceeds the L3 cache,
// so they stream from DRAM as a model's layers do; the same is done for Eigen.
#include <weft/quant.hpp>

#include <Eigen/Dense>
#include <dnnl.hpp>
#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace wq = weft::quant;

namespace {

using clock_type = std::chrono::steady_clock;

// Median of `reps` timed runs (after one warm-up), in seconds.
double time_median(int reps, const std::function<void()>& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto start = clock_type::now();
    f();
    t.push_back(std::chrono::duration<double>(clock_type::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct row {
  std::string bench, impl, shape;
  double seconds, gbps, gops;
};
std::vector<row> rows;

void record(const std::string& bench, const std::string& impl, const std::string& shape, double s, double bytes,
            double ops) {
  rows.push_back({bench, impl, shape, s, bytes / s / 1e9, ops / s / 1e9});
  std::printf("%-10s %-26s %-18s %10.3f ms %9.2f GB/s %9.1f GOP/s\n", bench.c_str(), impl.c_str(), shape.c_str(),
              s * 1e3, bytes / s / 1e9, ops / s / 1e9);
}

std::vector<float> randoms(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const int threads = tbb::info::default_concurrency();
  const int reps = quick ? 3 : 7;
  std::printf("weft::quant benchmark: %d threads, paths w4=%s w8a8=%s%s\n", threads,
              wq::to_string(wq::w4_path()).data(), wq::to_string(wq::w8a8_path()).data(), quick ? " (quick)" : "");

  // 1. STREAM triad a = b + s c over 3 x 128 MiB, split over the same threads as the kernels.
  double bandwidth = 0;
  {
    const std::size_t n = std::size_t{32} << 20;
    std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
    const double s = time_median(reps, [&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 1 << 16), [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) a[i] = b[i] + 3.0f * c[i];
      });
    });
    record("triad", "stream", "3x128MiB", s, 3.0 * n * sizeof(float), 2.0 * n);
    bandwidth = rows.back().gbps;
  }

  // 2. GEMV batch 1: weft W4 (fp32 and fp16 activations) against Eigen fp32, weights cycled.
  double w4_gemv_gbps = 0, w4_gemv_s = 0, eigen_gemv_s = 0;
  for (auto [n, k] : {std::pair<std::int64_t, std::int64_t>{4096, 4096}, {11008, 4096}, {4096, 11008}}) {
    const std::string shape = std::to_string(n) + "x" + std::to_string(k);
    const int layers = static_cast<int>(std::max<std::int64_t>(2, (std::int64_t{256} << 20) / (n * k / 2)));
    std::vector<wq::quantized_matrix<weft::half>> ws;
    for (int l = 0; l < layers; ++l)
      ws.push_back(
          wq::quantize<weft::half>(randoms(static_cast<std::size_t>(n * k), 1u + l), n, k, {4, 128, true}).weights);
    const auto x = randoms(static_cast<std::size_t>(k), 99);
    std::vector<weft::half> xh;
    for (float v : x) xh.push_back(weft::half(v));
    std::vector<float> y(static_cast<std::size_t>(n));
    int next = 0;
    const double s32 = time_median(reps * 4, [&] {
      wq::gemv_w4(ws[static_cast<std::size_t>(next++ % layers)], std::span<const float>(x), std::span<float>(y));
    });
    const double bytes = static_cast<double>(ws[0].weight_bytes());
    record("gemv", "weft_w4a32", shape, s32, bytes, 2.0 * n * k);
    const double s16 = time_median(reps * 4, [&] {
      wq::gemv_w4(ws[static_cast<std::size_t>(next++ % layers)], std::span<const weft::half>(xh), std::span<float>(y));
    });
    record("gemv", "weft_w4a16_fp16", shape, s16, bytes, 2.0 * n * k);
    std::vector<weft::bfloat16> xb;
    for (float v : x) xb.push_back(weft::bfloat16(v));
    const double sb = time_median(reps * 4, [&] {
      wq::gemv_w4(ws[static_cast<std::size_t>(next++ % layers)], std::span<const weft::bfloat16>(xb),
                  std::span<float>(y));
    });
    record("gemv", "weft_w4a16_bf16", shape, sb, bytes, 2.0 * n * k);
    ws.clear();
    // Eigen fp32, row blocks split over the same threads (Eigen's GEMV itself is single-threaded).
    const int e_layers = static_cast<int>(std::max<std::int64_t>(2, (std::int64_t{256} << 20) / (n * k * 4)));
    std::vector<Eigen::MatrixXf> em;
    for (int l = 0; l < e_layers; ++l) em.push_back(Eigen::MatrixXf::Random(n, k));
    const Eigen::Map<const Eigen::VectorXf> ex(x.data(), k);
    Eigen::VectorXf ey(n);
    const double se = time_median(reps * 4, [&] {
      const auto& m = em[static_cast<std::size_t>(next++ % e_layers)];
      tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, 256), [&](const tbb::blocked_range<std::int64_t>& r) {
        ey.segment(r.begin(), r.size()).noalias() = m.middleRows(r.begin(), r.size()) * ex;
      });
    });
    record("gemv", "eigen_fp32", shape, se, 4.0 * n * k, 2.0 * n * k);
    const double se1 =
        time_median(reps * 2, [&] { ey.noalias() = em[static_cast<std::size_t>(next++ % e_layers)] * ex; });
    record("gemv", "eigen_fp32_1thread", shape, se1, 4.0 * n * k, 2.0 * n * k);
    if (n == 4096 && k == 4096) {
      // The fastest weft variant against the faster Eigen variant (1 or all threads).
      w4_gemv_s = std::min({s32, s16, sb});
      w4_gemv_gbps = bytes / w4_gemv_s / 1e9;
      eigen_gemv_s = std::min(se, se1);
    }
  }

  // 3. W4 GEMM at small batches against Eigen fp32 GEMM (parallelised over column blocks).
  {
    const std::int64_t n = 4096, k = 4096;
    const auto wf = randoms(static_cast<std::size_t>(n * k), 5);
    const auto w = wq::quantize<weft::half>(wf, n, k, {4, 128, true}).weights;
    const Eigen::MatrixXf ew =
        Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(wf.data(), n, k);
    for (std::int64_t m : {8, 32, 128}) {
      const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
      const auto x = randoms(static_cast<std::size_t>(m * k), 6);
      std::vector<float> y(static_cast<std::size_t>(m * n));
      const double s = time_median(reps, [&] { wq::gemm_w4(w, std::span<const float>(x), m, std::span<float>(y)); });
      record("gemm_w4", "weft_w4a32", shape, s, static_cast<double>(w.weight_bytes()), 2.0 * m * n * k);
      const Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> ex(x.data(), m, k);
      Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> ey(m, n);
      const double se = time_median(reps, [&] {
        tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, 512), [&](const tbb::blocked_range<std::int64_t>& r) {
          ey.middleCols(r.begin(), r.size()).noalias() = ex * ew.middleRows(r.begin(), r.size()).transpose();
        });
      });
      record("gemm_w4", "eigen_fp32", shape, se, 4.0 * n * k, 2.0 * m * n * k);
    }
  }

  // 4. W8A8 GEMM 4096^3, s8 x s8 -> s32: weft against oneDNN's matmul (its best kernel here).
  double weft_w8_s = 0, dnnl_s = 0;
  {
    const std::int64_t m = 4096, n = 4096, k = 4096;
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> d(-127, 127);
    std::vector<std::int32_t> codes(static_cast<std::size_t>(n * k));
    for (auto& c : codes) c = d(rng);
    const auto w = wq::quantized_matrix<float>::from_codes(n, k, {8, 0, true}, codes, std::vector<float>(n, 0.01f));
    std::vector<std::int8_t> a(static_cast<std::size_t>(m * k));
    for (auto& v : a) v = static_cast<std::int8_t>(d(rng));
    std::vector<std::int32_t> c(static_cast<std::size_t>(m * n));
    const std::string shape = "4096^3";
    weft_w8_s = time_median(
        reps, [&] { wq::gemm_w8a8_i32(w, std::span<const std::int8_t>(a), m, std::span<std::int32_t>(c)); });
    record("gemm_w8a8", std::string("weft_") + std::string(wq::to_string(wq::w8a8_path())), shape, weft_w8_s, 0,
           2.0 * m * n * k);
    if (wq::cpu_features::get().supports(wq::isa::avx512_vnni)) {
      const double sv = time_median(quick ? 1 : 3, [&] {
        wq::gemm_w8a8_i32(w, std::span<const std::int8_t>(a), m, std::span<std::int32_t>(c),
                          {wq::isa::avx512_vnni, true});
      });
      record("gemm_w8a8", "weft_avx512_vnni", shape, sv, 0, 2.0 * m * n * k);
    }
    using namespace dnnl;
    engine eng(engine::kind::cpu, 0);
    stream st(eng);
    memory::desc ad({m, k}, memory::data_type::s8, memory::format_tag::ab);
    memory::desc bd({k, n}, memory::data_type::s8, memory::format_tag::any);
    memory::desc cd({m, n}, memory::data_type::s32, memory::format_tag::ab);
    matmul::primitive_desc pd(matmul::desc(ad, bd, cd), eng);
    memory am(ad, eng, a.data()), bm(pd.weights_desc(), eng), cm(cd, eng);
    std::memset(bm.get_data_handle(), 1, pd.weights_desc().get_size());
    matmul mm(pd);
    dnnl_s = time_median(reps, [&] {
      mm.execute(st, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
      st.wait();
    });
    record("gemm_w8a8", std::string("onednn_") + pd.impl_info_str(), shape, dnnl_s, 0, 2.0 * m * n * k);
  }

  std::printf("\nTargets (this run; the machine is shared, so expect noise):\n");
  std::printf("  W4 GEMV 4096x4096 batch 1: %.2f GB/s of weights = %.0f%% of triad %.2f GB/s (target >= 70%%)\n",
              w4_gemv_gbps, 100.0 * w4_gemv_gbps / bandwidth, bandwidth);
  std::printf("  W4 GEMV vs the faster Eigen fp32 GEMV, same matrix: %.2fx faster (target >= 3x)\n",
              eigen_gemv_s / w4_gemv_s);
  std::printf("  W8A8 GEMM 4096^3: weft %.1f ms, oneDNN %.1f ms: %.2fx of oneDNN's speed (target >= 0.8x)\n",
              weft_w8_s * 1e3, dnnl_s * 1e3, dnnl_s / weft_w8_s);

  const std::string path = std::string(WEFT_BENCH_OUT) + "/quant.csv";
  std::ofstream csv(path);
  csv << "bench,impl,shape,seconds,gb_per_s,gop_per_s\n";
  for (const auto& r : rows)
    csv << r.bench << ',' << r.impl << ',' << r.shape << ',' << r.seconds << ',' << r.gbps << ',' << r.gops << '\n';
  std::printf("wrote %s\n", path.c_str());
  return 0;
}

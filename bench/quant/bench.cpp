// weft::quant benchmark, one run: the machine's memory bandwidth (STREAM triad, McCalpin 1995, and
// a read-only stream), weft's W4 GEMV/GEMM (W4A16, W4A32, W4A8) against Eigen fp32 on the LLM
// shapes that matter (Llama-3-8B attention and MLP, Llama-2-7B MLP), the batch sweep, and W8A8
// GEMM 4096^3 against oneDNN's u8 x s8 and s8 x s8 matmul. Prints the ratios and writes
// WEFT_BENCH_OUT/quant.csv (plot.py draws quant.png).
//   bench_quant_gemm [--quick]
//
// Honest GEMV numbers: every GEMV row says whether one copy of its weights exceeds the last-level
// cache. "dram" rows cycle through copies of the weights whose total is at least 3 x the LLC, so
// every call streams its weights from DRAM, as a model's layers do; "llc" rows call the same
// matrix repeatedly (it stays in cache) and are shown for contrast only. % of triad is computed
// for dram rows only.
#include <weft/quant.hpp>

#include <Eigen/Dense>
#include <dnnl.hpp>
#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace wq = weft::quant;

namespace {

using clock_type = std::chrono::steady_clock;

struct stats {
  double median = 0, min = 0, max = 0;  // seconds
};

// `reps` timed runs after one warm-up.
stats time_runs(int reps, const std::function<void()>& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto start = clock_type::now();
    f();
    t.push_back(std::chrono::duration<double>(clock_type::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), t.back()};
}

struct row {
  std::string bench, impl, shape;
  std::int64_t m = 1;
  double weights_mib = 0;
  std::string llc;        // "exceeds" / "fits" / ""
  std::string residency;  // "dram" / "llc" / ""
  stats t;
  double gbps = 0, gops = 0, pct_triad = -1, ratio = -1;
  std::string ratio_of;
};
std::vector<row> rows;

row row_of(std::string bench, std::string impl, std::string shape, std::int64_t m, double mib, std::string llc,
           std::string residency, stats t) {
  row r;
  r.bench = std::move(bench);
  r.impl = std::move(impl);
  r.shape = std::move(shape);
  r.m = m;
  r.weights_mib = mib;
  r.llc = std::move(llc);
  r.residency = std::move(residency);
  r.t = t;
  return r;
}

std::size_t llc_bytes() {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index3/size");
  std::string s;
  if (in >> s && !s.empty()) {
    const char unit = s.back();
    const double v = std::stod(s);
    if (unit == 'K') return static_cast<std::size_t>(v * 1024);
    if (unit == 'M') return static_cast<std::size_t>(v * 1024 * 1024);
  }
  return std::size_t{32} << 20;
}

row& record(row r, double bytes, double ops) {
  r.gbps = bytes / r.t.median / 1e9;
  r.gops = ops / r.t.median / 1e9;
  rows.push_back(r);
  std::printf("%-9s %-22s %-11s M=%-3lld %6.1f MiB %-7s %-4s %9.3f ms [%8.3f, %8.3f] %7.2f GB/s %8.1f GOP/s\n",
              r.bench.c_str(), r.impl.c_str(), r.shape.c_str(), static_cast<long long>(r.m), r.weights_mib,
              r.llc.c_str(), r.residency.c_str(), r.t.median * 1e3, r.t.min * 1e3, r.t.max * 1e3, r.gbps, r.gops);
  return rows.back();
}

std::vector<float> randoms(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::string shape_name(std::int64_t n, std::int64_t k) { return std::to_string(n) + "x" + std::to_string(k); }

#if defined(__x86_64__)
// vpdpbusd throughput of one core: 12 independent accumulators (more than latency x throughput),
// in instructions per second.
__attribute__((target("avx512f,avx512vnni"))) double vnni_rate() {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0,
          a10 = a0, a11 = a0;
  const __m512i u = _mm512_set1_epi8(3), v = _mm512_set1_epi8(5);
  const long iters = 50000000;
  const auto start = clock_type::now();
  for (long i = 0; i < iters; ++i) {
    a0 = _mm512_dpbusd_epi32(a0, u, v);
    a1 = _mm512_dpbusd_epi32(a1, u, v);
    a2 = _mm512_dpbusd_epi32(a2, u, v);
    a3 = _mm512_dpbusd_epi32(a3, u, v);
    a4 = _mm512_dpbusd_epi32(a4, u, v);
    a5 = _mm512_dpbusd_epi32(a5, u, v);
    a6 = _mm512_dpbusd_epi32(a6, u, v);
    a7 = _mm512_dpbusd_epi32(a7, u, v);
    a8 = _mm512_dpbusd_epi32(a8, u, v);
    a9 = _mm512_dpbusd_epi32(a9, u, v);
    a10 = _mm512_dpbusd_epi32(a10, u, v);
    a11 = _mm512_dpbusd_epi32(a11, u, v);
    __asm__ volatile(""
                     : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),
                       "+v"(a9), "+v"(a10), "+v"(a11));
  }
  const double s = std::chrono::duration<double>(clock_type::now() - start).count();
  volatile int sink = _mm512_cvtsi512_si32(a0) + _mm512_cvtsi512_si32(a11);
  (void)sink;
  return 12.0 * static_cast<double>(iters) / s;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const int threads = tbb::info::default_concurrency();
  tbb::global_control control(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
  const int reps = quick ? 5 : 15;
  const std::size_t llc = llc_bytes();
  std::printf("weft::quant benchmark: %d threads, LLC %.0f MiB, paths w4=%s w4a8=%s w8a8=%s%s\n", threads,
              static_cast<double>(llc) / 1048576.0, wq::to_string(wq::w4_path()).data(),
              wq::to_string(wq::w4a8_path()).data(), wq::to_string(wq::w8a8_path()).data(), quick ? " (quick)" : "");
  std::printf("No GPU in this run: the CUDA kernels are compiled and their tile math tested on the CPU only.\n");
  std::printf("%-9s %-22s %-11s %-5s %10s %-7s %-4s %12s %21s %12s %14s\n", "bench", "impl", "shape", "M", "weights",
              "vs LLC", "res", "median", "[min, max]", "weights/s", "ops/s");

  // 1. Bandwidth: STREAM triad a = b + s c (3 x 128 MiB, counted as 3 arrays as STREAM does) and
  //    a read-only stream (a sum), both split over the same threads as the kernels.
  double triad = 0;
  {
    const std::size_t n = std::size_t{32} << 20;
    std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
    const auto t = time_runs(reps, [&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 1 << 16), [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) a[i] = b[i] + 3.0f * c[i];
      });
    });
    triad = record(row_of("bandwidth", "stream_triad", "3x128MiB", 1, 384, "", "dram", t), 3.0 * n * 4, 2.0 * n).gbps;
    // Eight independent 64-bit sums, so the loop is bound by loads, not by an add chain.
    std::atomic<std::uint64_t> sink{0};
    const std::size_t count = n / 2;  // 128 MiB of 64-bit words
    const std::vector<std::uint64_t> words(count, 1);
    const auto t2 = time_runs(reps, [&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, count / static_cast<std::size_t>(threads)),
                        [&](const tbb::blocked_range<std::size_t>& r) {
                          std::uint64_t s[8] = {};
                          for (std::size_t i = r.begin(); i + 8 <= r.end(); i += 8)
                            for (int j = 0; j < 8; ++j) s[j] += words[i + static_cast<std::size_t>(j)];
                          sink.fetch_add(s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7],
                                         std::memory_order_relaxed);
                        });
    });
    record(row_of("bandwidth", "stream_read", "128MiB", 1, 128, "", "dram", t2), 1.0 * n * 4, 1.0 * n);
  }

  // 2. GEMV batch 1 on LLM shapes (N x K): Llama-3-8B q/o, k/v, gate/up, down; Llama-2-7B MLP.
  struct shape {
    std::int64_t n, k;
    const char* model;
  };
  std::vector<shape> shapes = {{4096, 4096, "8B q/o"},   {1024, 4096, "8B k/v"},      {14336, 4096, "8B gate/up"},
                               {4096, 14336, "8B down"}, {11008, 4096, "7B gate/up"}, {4096, 11008, "7B down"}};
  if (quick) shapes.resize(3);
  std::map<std::string, double> eigen_best, w4_bf16_dram, w4a8_dram, sparse_dram;
  for (const auto& s : shapes) {
    const std::int64_t n = s.n, k = s.k;
    const std::string name = shape_name(n, k);
    const auto wf = randoms(static_cast<std::size_t>(n * k), 1, 0.02f);
    const auto w = wq::quantize<weft::half>(wf, n, k, {4, 128, true}).weights;
    const double bytes = static_cast<double>(w.weight_bytes()), mib = bytes / 1048576.0;
    const std::string vs_llc = bytes > static_cast<double>(llc) ? "exceeds" : "fits";
    const int copies = static_cast<int>(std::max<double>(2.0, std::ceil(4.0 * static_cast<double>(llc) / bytes)));
    std::vector<wq::quantized_matrix<weft::half>> ws(static_cast<std::size_t>(copies), w);
    const auto x = randoms(static_cast<std::size_t>(k), 99);
    std::vector<weft::half> xh(x.begin(), x.end());
    std::vector<weft::bfloat16> xb(x.begin(), x.end());
    std::vector<float> y(static_cast<std::size_t>(n));
    int next = 0;
    const auto pick = [&](bool dram) -> const wq::quantized_matrix<weft::half>& {
      return dram ? ws[static_cast<std::size_t>(next++ % copies)] : ws[0];
    };
    for (bool dram : {true, false}) {
      if (!dram && bytes > static_cast<double>(llc) / 2) continue;  // cannot stay in cache: no llc row
      const std::string res = dram ? "dram" : "llc";
      const auto add = [&](const char* impl, const std::function<void()>& f) -> row& {
        row& r = record(row_of("gemv", impl, name, 1, mib, vs_llc, res, time_runs(reps * 4, f)), bytes, 2.0 * n * k);
        if (dram) r.pct_triad = 100.0 * r.gbps / triad;
        return r;
      };
      const double t16 = add("weft_w4a16_bf16", [&] {
                           wq::gemv_w4(pick(dram), std::span<const weft::bfloat16>(xb), std::span<float>(y));
                         }).t.median;
      add("weft_w4a16_fp16", [&] { wq::gemv_w4(pick(dram), std::span<const weft::half>(xh), std::span<float>(y)); });
      add("weft_w4a32", [&] { wq::gemv_w4(pick(dram), std::span<const float>(x), std::span<float>(y)); });
      const double t8 =
          add("weft_w4a8", [&] { wq::gemv_w4a8(pick(dram), std::span<const float>(x), std::span<float>(y)); }).t.median;
      if (dram) {
        w4_bf16_dram[name] = t16;
        w4a8_dram[name] = t8;
      }
    }
    ws.clear();
    {
      // 2:4 sparse int4 (Sparse-Marlin's format) of the same layer, magnitude-pruned: 3 bits per
      // weight plus scales. Rows count the sparse bytes actually read.
      const auto sw = wq::quantize_2_4<weft::half>(wq::prune_2_4(wf, n, k), n, k, {4, 128, true}).weights;
      const double sbytes = static_cast<double>(sw.weight_bytes());
      const int s_copies = static_cast<int>(std::max<double>(2.0, std::ceil(4.0 * static_cast<double>(llc) / sbytes)));
      std::vector<wq::sparse24_matrix<weft::half>> sws(static_cast<std::size_t>(s_copies), sw);
      const auto ts = time_runs(reps * 4, [&] {
        wq::gemv_sparse24(sws[static_cast<std::size_t>(next++ % s_copies)], std::span<const weft::bfloat16>(xb),
                          std::span<float>(y));
      });
      row& r = record(row_of("gemv", "weft_w4a16_2of4_bf16", name, 1, sbytes / 1048576.0,
                             sbytes > static_cast<double>(llc) ? "exceeds" : "fits", "dram", ts),
                      sbytes, 2.0 * n * k);
      r.pct_triad = 100.0 * r.gbps / triad;
      sparse_dram[name] = ts.median;
    }
    // Eigen fp32 on the same shape and residency (dram): row blocks split over the same threads
    // (Eigen's GEMV itself is single-threaded), and one thread. Weights are 4 bytes each.
    const double ebytes = 4.0 * static_cast<double>(n) * static_cast<double>(k);
    const int e_copies = static_cast<int>(std::max<double>(2.0, std::ceil(4.0 * static_cast<double>(llc) / ebytes)));
    std::vector<Eigen::MatrixXf> em;
    for (int l = 0; l < e_copies; ++l) em.push_back(Eigen::MatrixXf::Random(n, k) * 0.02f);
    const Eigen::Map<const Eigen::VectorXf> ex(x.data(), k);
    Eigen::VectorXf ey(n);
    const std::string e_llc = ebytes > static_cast<double>(llc) ? "exceeds" : "fits";
    const auto te = time_runs(reps * 2, [&] {
      const auto& m = em[static_cast<std::size_t>(next++ % e_copies)];
      tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, 256), [&](const tbb::blocked_range<std::int64_t>& r) {
        ey.segment(r.begin(), r.size()).noalias() = m.middleRows(r.begin(), r.size()) * ex;
      });
    });
    record(row_of("gemv", "eigen_fp32", name, 1, ebytes / 1048576.0, e_llc, "dram", te), ebytes, 2.0 * n * k)
        .pct_triad = 100.0 * ebytes / te.median / 1e9 / triad;
    const auto te1 = time_runs(reps, [&] { ey.noalias() = em[static_cast<std::size_t>(next++ % e_copies)] * ex; });
    record(row_of("gemv", "eigen_fp32_1thread", name, 1, ebytes / 1048576.0, e_llc, "dram", te1), ebytes, 2.0 * n * k)
        .pct_triad = 100.0 * ebytes / te1.median / 1e9 / triad;
    eigen_best[name] = std::min(te.median, te1.median);
  }
  for (auto& r : rows)
    if (r.bench == "gemv" && r.residency == "dram" && r.impl.rfind("weft", 0) == 0) {
      r.ratio = eigen_best[r.shape] / r.t.median;
      r.ratio_of = "faster Eigen fp32 GEMV / this";
    }

  // 3. Batch sweep: time(M) / time(1) with weights from DRAM (small batches of a decoder step).
  //    Each repetition times an M = 1 call and an M call back to back, so the ratio is taken under
  //    the same machine conditions even when they drift during the run.
  for (const auto& s : std::vector<shape>{{4096, 4096, ""}, {14336, 4096, ""}}) {
    const std::int64_t n = s.n, k = s.k;
    const auto w =
        wq::quantize<weft::half>(randoms(static_cast<std::size_t>(n * k), 2, 0.02f), n, k, {4, 128, true}).weights;
    const double bytes = static_cast<double>(w.weight_bytes());
    const int copies = static_cast<int>(std::max<double>(2.0, std::ceil(4.0 * static_cast<double>(llc) / bytes)));
    std::vector<wq::quantized_matrix<weft::half>> ws(static_cast<std::size_t>(copies), w);
    int next = 0;
    const std::string name = shape_name(n, k);
    const auto x1 = randoms(static_cast<std::size_t>(k), 3);
    const std::vector<weft::bfloat16> xb1(x1.begin(), x1.end());
    std::vector<float> y1(static_cast<std::size_t>(n));
    for (std::int64_t m : {2, 3, 4, 8}) {
      const auto x = randoms(static_cast<std::size_t>(m * k), 3);
      std::vector<weft::bfloat16> xb(x.begin(), x.end());
      std::vector<float> y(static_cast<std::size_t>(m * n));
      for (bool w4a8 : {false, true}) {
        const auto call = [&](std::int64_t rows, std::span<const float> xf, std::span<const weft::bfloat16> xbf,
                              std::span<float> out) {
          const auto& mat = ws[static_cast<std::size_t>(next++ % copies)];
          if (w4a8)
            wq::gemm_w4a8(mat, xf, rows, out);
          else
            wq::gemm_w4(mat, xbf, rows, out);
        };
        std::vector<double> t1, tm, ratio;
        for (int rep = 0; rep < reps * 2 + 1; ++rep) {
          auto start = clock_type::now();
          call(1, x1, xb1, y1);
          const double a = std::chrono::duration<double>(clock_type::now() - start).count();
          start = clock_type::now();
          call(m, x, xb, y);
          const double b = std::chrono::duration<double>(clock_type::now() - start).count();
          if (rep == 0) continue;  // warm-up
          t1.push_back(a);
          tm.push_back(b);
          ratio.push_back(b / a);
        }
        std::sort(t1.begin(), t1.end());
        std::sort(tm.begin(), tm.end());
        std::sort(ratio.begin(), ratio.end());
        const stats st{tm[tm.size() / 2], tm.front(), tm.back()};
        row& r =
            record(row_of("batch", w4a8 ? "weft_w4a8" : "weft_w4a16_bf16", name, m, bytes / 1048576.0, "", "dram", st),
                   bytes, 2.0 * m * n * k);
        r.ratio = ratio[ratio.size() / 2];
        r.ratio_of = "median of paired time(M) / time(1); min " + std::to_string(ratio.front()) + " max " +
                     std::to_string(ratio.back()) + "; time(1) median " + std::to_string(t1[t1.size() / 2] * 1e3) +
                     " ms";
      }
    }
  }

  // 4. W4 GEMM at larger batches against Eigen fp32 GEMM (weights in cache; compute-bound).
  if (!quick) {
    const std::int64_t n = 4096, k = 4096;
    const auto wf = randoms(static_cast<std::size_t>(n * k), 5, 0.02f);
    const auto w = wq::quantize<weft::half>(wf, n, k, {4, 128, true}).weights;
    const Eigen::MatrixXf ew =
        Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(wf.data(), n, k);
    for (std::int64_t m : {32, 128}) {
      const std::string name = shape_name(n, k);
      const auto x = randoms(static_cast<std::size_t>(m * k), 6);
      std::vector<weft::bfloat16> xb(x.begin(), x.end());
      std::vector<float> y(static_cast<std::size_t>(m * n));
      const Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> ex(x.data(), m, k);
      Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> ey(m, n);
      const auto te = time_runs(reps, [&] {
        tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, 512), [&](const tbb::blocked_range<std::int64_t>& r) {
          ey.middleCols(r.begin(), r.size()).noalias() = ex * ew.middleRows(r.begin(), r.size()).transpose();
        });
      });
      record(row_of("gemm", "eigen_fp32", name, m, 4.0 * n * k / 1048576.0, "", "llc", te), 4.0 * n * k,
             2.0 * m * n * k);
      const auto t16 =
          time_runs(reps, [&] { wq::gemm_w4(w, std::span<const weft::bfloat16>(xb), m, std::span<float>(y)); });
      row& r16 = record(row_of("gemm", "weft_w4a16_bf16", name, m, w.weight_bytes() / 1048576.0, "", "llc", t16),
                        static_cast<double>(w.weight_bytes()), 2.0 * m * n * k);
      r16.ratio = te.median / t16.median;
      r16.ratio_of = "Eigen fp32 GEMM / this";
      const auto t8 = time_runs(reps, [&] { wq::gemm_w4a8(w, std::span<const float>(x), m, std::span<float>(y)); });
      row& r8 = record(row_of("gemm", "weft_w4a8", name, m, w.weight_bytes() / 1048576.0, "", "llc", t8),
                       static_cast<double>(w.weight_bytes()), 2.0 * m * n * k);
      r8.ratio = te.median / t8.median;
      r8.ratio_of = "Eigen fp32 GEMM / this";
    }
  }

  // 5. W8A8 GEMM 4096^3 (int32 out): weft against oneDNN's matmul with s8 and with u8 activations.
  double weft_w8 = 0, dnnl_best = 1e30, vnni_peak_gops = 0;
  std::string dnnl_best_name;
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
    const std::string name = "4096^3";
    const int w8_reps = quick ? 3 : 7;
    using namespace dnnl;
    engine eng(engine::kind::cpu, 0);
    stream st(eng);
    for (auto src_type : {memory::data_type::s8, memory::data_type::u8}) {
      memory::desc ad({m, k}, src_type, memory::format_tag::ab);
      memory::desc bd({k, n}, memory::data_type::s8, memory::format_tag::any);
      memory::desc cd({m, n}, memory::data_type::s32, memory::format_tag::ab);
      matmul::primitive_desc pd(matmul::desc(ad, bd, cd), eng);
      memory am(ad, eng, a.data()), bm(pd.weights_desc(), eng), cm(cd, eng);
      std::memset(bm.get_data_handle(), 1, pd.weights_desc().get_size());
      matmul mm(pd);
      const auto t = time_runs(w8_reps, [&] {
        mm.execute(st, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
        st.wait();
      });
      const std::string impl =
          std::string("onednn_") + (src_type == memory::data_type::s8 ? "s8s8_" : "u8s8_") + pd.impl_info_str();
      record(row_of("gemm_w8a8", impl, name, m, n * k / 1048576.0, "", "", t), 0, 2.0 * m * n * k);
      if (t.median < dnnl_best) {
        dnnl_best = t.median;
        dnnl_best_name = impl;
      }
    }
    const auto tw = time_runs(
        w8_reps, [&] { wq::gemm_w8a8_i32(w, std::span<const std::int8_t>(a), m, std::span<std::int32_t>(c)); });
    weft_w8 = tw.median;
    row& r = record(row_of("gemm_w8a8", std::string("weft_") + std::string(wq::to_string(wq::w8a8_path())), name, m,
                           n * k / 1048576.0, "", "", tw),
                    0, 2.0 * m * n * k);
    r.ratio = dnnl_best / weft_w8;
    r.ratio_of = "faster oneDNN / this";
#if defined(__x86_64__)
    if (wq::cpu_features::get().supports(wq::isa::avx512_vnni)) {
      // The instruction's ceiling on all threads at once: 64 multiply-adds (128 ops) per vpdpbusd.
      std::vector<double> rate(static_cast<std::size_t>(threads));
      std::vector<std::thread> pool;
      for (int i = 0; i < threads; ++i) pool.emplace_back([&, i] { rate[static_cast<std::size_t>(i)] = vnni_rate(); });
      for (auto& th : pool) th.join();
      for (double v : rate) vnni_peak_gops += v * 128.0 / 1e9;
      record(row_of("peak", "vpdpbusd_all_threads", name, m, 0, "", "", {1, 1, 1}), 0, vnni_peak_gops * 1e9);
    }
#endif
  }

  // 6. Accuracy on one layer (4096 x 4096, Gaussian weights, 8 tokens whose activations have a few
  //    large channels as LLM activations do): each scheme's output against the fp32 product.
  struct accuracy {
    std::string scheme;
    double bytes_per_weight, rel_error, sqnr_db;
  };
  std::vector<accuracy> acc;
  {
    const std::int64_t n = 4096, k = 4096, m = 8;
    const auto wf = randoms(static_cast<std::size_t>(n * k), 11, 0.02f);
    auto xf = randoms(static_cast<std::size_t>(m * k), 12);
    for (std::int64_t r = 0; r < m; ++r)
      for (std::int64_t i = 0; i < k; i += 512) xf[static_cast<std::size_t>(r * k + i)] *= 20.0f;  // outlier channels
    std::vector<double> ref(static_cast<std::size_t>(m * n));
    tbb::parallel_for(std::int64_t{0}, n, [&](std::int64_t j) {
      for (std::int64_t r = 0; r < m; ++r) {
        double s = 0;
        for (std::int64_t i = 0; i < k; ++i)
          s += double(wf[static_cast<std::size_t>(j * k + i)]) * xf[static_cast<std::size_t>(r * k + i)];
        ref[static_cast<std::size_t>(r * n + j)] = s;
      }
    });
    const auto score = [&](const char* scheme, double bytes, const std::vector<float>& y) {
      double err = 0, norm = 0;
      for (std::size_t i = 0; i < y.size(); ++i) {
        err += (y[i] - ref[i]) * (y[i] - ref[i]);
        norm += ref[i] * ref[i];
      }
      acc.push_back({scheme, bytes / static_cast<double>(n * k), std::sqrt(err / norm), 10 * std::log10(norm / err)});
    };
    std::vector<float> y(static_cast<std::size_t>(m * n));
    const auto w4 = wq::quantize<weft::half>(wf, n, k, {4, 128, true}).weights;
    std::vector<weft::bfloat16> xb(xf.begin(), xf.end());
    std::vector<weft::half> xh(xf.begin(), xf.end());
    wq::gemm_w4(w4, std::span<const float>(xf), m, std::span<float>(y));
    score("W4A32 (int4 g128, fp32 act)", static_cast<double>(w4.weight_bytes()), y);
    wq::gemm_w4(w4, std::span<const weft::half>(xh), m, std::span<float>(y));
    score("W4A16 (int4 g128, fp16 act)", static_cast<double>(w4.weight_bytes()), y);
    wq::gemm_w4(w4, std::span<const weft::bfloat16>(xb), m, std::span<float>(y));
    score("W4A16 (int4 g128, bf16 act)", static_cast<double>(w4.weight_bytes()), y);
    wq::gemm_w4a8(w4, std::span<const float>(xf), m, std::span<float>(y));
    score("W4A8 (int4 g128, int8 per-token act)", static_cast<double>(w4.weight_bytes()), y);
    const auto w8 = wq::quantize<float>(wf, n, k, {8, 0, true}).weights;
    wq::gemm_w8a8(w8, wq::quantize_activations(xf, m, k), std::span<float>(y));
    score("W8A8 (int8 per-channel, int8 per-token act)", static_cast<double>(w8.weight_bytes()), y);
    // 2:4 sparse: against the dense layer (magnitude pruning of a dense random layer: the pruning
    // error dominates) and against the pruned layer (a model trained or fine-tuned 2:4, as
    // Sparse-Marlin assumes: the format's own error).
    const auto pruned = wq::prune_2_4(wf, n, k);
    const auto sw = wq::quantize_2_4<weft::half>(pruned, n, k, {4, 128, true}).weights;
    wq::gemm_sparse24(sw, std::span<const weft::bfloat16>(xb), m, std::span<float>(y));
    score("W4A16 2:4 sparse (bf16 act) vs dense fp32", static_cast<double>(sw.weight_bytes()), y);
    std::vector<double> dense_ref = ref;
    tbb::parallel_for(std::int64_t{0}, n, [&](std::int64_t j) {
      for (std::int64_t r = 0; r < m; ++r) {
        double s = 0;
        for (std::int64_t i = 0; i < k; ++i)
          s += double(pruned[static_cast<std::size_t>(j * k + i)]) * xf[static_cast<std::size_t>(r * k + i)];
        ref[static_cast<std::size_t>(r * n + j)] = s;
      }
    });
    const auto w4p = wq::quantize<weft::half>(pruned, n, k, {4, 128, true}).weights;
    wq::gemm_w4(w4p, std::span<const weft::bfloat16>(xb), m, std::span<float>(y));
    score("W4A16 dense int4 of the pruned layer vs pruned fp32", static_cast<double>(w4p.weight_bytes()), y);
    wq::gemm_sparse24(sw, std::span<const weft::bfloat16>(xb), m, std::span<float>(y));
    score("W4A16 2:4 sparse (bf16 act) vs pruned fp32", static_cast<double>(sw.weight_bytes()), y);
    ref = dense_ref;
  }

  std::printf("\nSummary (this run; figures from a quiet machine only mean something)\n");
  std::printf("  STREAM triad %.2f GB/s\n", triad);
  for (const auto& r : rows)
    if (r.bench == "gemv" && r.residency == "dram" && r.impl.rfind("weft", 0) == 0)
      std::printf("  GEMV %-11s %-16s %-7s %6.2f GB/s = %5.1f%% of triad, %5.2fx the faster Eigen fp32 GEMV\n",
                  r.shape.c_str(), r.impl.c_str(), r.llc.c_str(), r.gbps, r.pct_triad, r.ratio);
  for (const auto& r : rows)
    if (r.bench == "batch")
      std::printf("  batch %-11s %-16s M=%lld: %.3f ms = %.2fx M = 1 (%s)\n", r.shape.c_str(), r.impl.c_str(),
                  static_cast<long long>(r.m), r.t.median * 1e3, r.ratio, r.ratio_of.c_str());
  for (const auto& [name, t] : w4a8_dram)
    std::printf("  W4A8 vs W4A16 (bf16) GEMV %-11s: %.2fx W4A16's speed\n", name.c_str(), w4_bf16_dram[name] / t);
  for (const auto& [name, t] : sparse_dram)
    std::printf("  2:4 sparse vs dense W4A16 (bf16) GEMV %-11s: %.2fx dense's speed\n", name.c_str(),
                w4_bf16_dram[name] / t);
  std::printf("  W8A8 4096^3: weft %.1f ms, faster oneDNN (%s) %.1f ms: %.2fx\n", weft_w8 * 1e3, dnnl_best_name.c_str(),
              dnnl_best * 1e3, dnnl_best / weft_w8);
  if (vnni_peak_gops > 0)
    std::printf("  vpdpbusd ceiling, all threads: %.0f GOP/s; weft reaches %.0f%%, oneDNN %.0f%%\n", vnni_peak_gops,
                100.0 * 2.0 * 4096.0 * 4096.0 * 4096.0 / weft_w8 / 1e9 / vnni_peak_gops,
                100.0 * 2.0 * 4096.0 * 4096.0 * 4096.0 / dnnl_best / 1e9 / vnni_peak_gops);
  std::printf("\nAccuracy, one 4096 x 4096 layer, 8 tokens (relative Frobenius error of Y against fp32):\n");
  std::printf("  %-46s %14s %12s %10s\n", "scheme", "bytes/weight", "rel. error", "SQNR dB");
  for (const auto& a : acc)
    std::printf("  %-46s %14.4f %12.2e %10.1f\n", a.scheme.c_str(), a.bytes_per_weight, a.rel_error, a.sqnr_db);

  const std::string path = std::string(WEFT_BENCH_OUT) + "/quant.csv";
  std::ofstream csv(path);
  csv << "bench,impl,shape,m,weights_mib,vs_llc,residency,median_ms,min_ms,max_ms,gb_per_s,gop_per_s,pct_triad,"
         "ratio,ratio_of\n";
  for (const auto& r : rows)
    csv << r.bench << ',' << r.impl << ',' << r.shape << ',' << r.m << ',' << r.weights_mib << ',' << r.llc << ','
        << r.residency << ',' << r.t.median * 1e3 << ',' << r.t.min * 1e3 << ',' << r.t.max * 1e3 << ',' << r.gbps
        << ',' << r.gops << ',' << (r.pct_triad >= 0 ? std::to_string(r.pct_triad) : "") << ','
        << (r.ratio >= 0 ? std::to_string(r.ratio) : "") << ',' << r.ratio_of << '\n';
  const std::string acc_path = std::string(WEFT_BENCH_OUT) + "/quant_accuracy.csv";
  std::ofstream acc_csv(acc_path);
  acc_csv << "scheme,bytes_per_weight,relative_error,sqnr_db\n";
  for (const auto& a : acc)
    acc_csv << '"' << a.scheme << '"' << ',' << a.bytes_per_weight << ',' << a.rel_error << ',' << a.sqnr_db << '\n';
  std::printf("wrote %s and %s\n", path.c_str(), acc_path.c_str());
  return 0;
}

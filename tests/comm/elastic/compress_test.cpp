#include "../rank_threads.hpp"

#include <weft/comm/compress/any_compressor.hpp>
#include <weft/comm/compress/compressed_allreduce.hpp>
#include <weft/comm/compress/metered_transport.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

namespace wc = weft::comm;
namespace cz = weft::comm::compress;
using namespace std::chrono_literals;

namespace {

std::vector<float> gradient(int rank, std::size_t n, unsigned seed = 7) {
  std::mt19937 gen(seed * 1000u + static_cast<unsigned>(rank));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> g(n);
  for (auto& x : g) x = d(gen);
  return g;
}

std::vector<float> exact_sum(int p, std::size_t n) {
  std::vector<double> acc(n, 0.0);
  for (int r = 0; r < p; ++r) {
    auto g = gradient(r, n);
    for (std::size_t i = 0; i < n; ++i) acc[i] += g[i];
  }
  return {acc.begin(), acc.end()};
}

template <class C>
std::vector<float> roundtrip(C& c, const std::vector<float>& x) {
  std::vector<std::byte> enc(c.encoded_bytes(x.size()));
  c.encode(std::span<const float>(x), std::span<std::byte>(enc));
  std::vector<float> back(x.size());
  c.decode(std::span<const std::byte>(enc), std::span<float>(back));
  return back;
}

// The weakest type satisfying compress::compressor (archetype), and an example of a user-written
// policy: sign compression with one scale per tensor (signSGD with a norm, Bernstein et al. 2018).
struct sign_compressor {
  std::size_t encoded_bytes(std::size_t n) const { return 4 + (n + 7) / 8; }
  void encode(std::span<const float> in, std::span<std::byte> out) {
    float mean_abs = 0;
    for (float x : in) mean_abs += std::fabs(x);
    mean_abs = in.empty() ? 0 : mean_abs / static_cast<float>(in.size());
    std::memcpy(out.data(), &mean_abs, 4);
    for (std::size_t i = 4; i < out.size(); ++i) out[i] = std::byte{0};
    for (std::size_t i = 0; i < in.size(); ++i)
      if (in[i] >= 0) out[4 + i / 8] |= std::byte(1u << (i % 8));
  }
  void decode(std::span<const std::byte> in, std::span<float> out) const {
    float s = 0;
    std::memcpy(&s, in.data(), 4);
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = (static_cast<unsigned>(in[4 + i / 8]) >> (i % 8)) & 1u ? s : -s;
  }
  const char* name() const { return "sign"; }
};
static_assert(cz::compressor<sign_compressor>);
static_assert(cz::compressor<cz::any_compressor> && !cz::summable_compressor<cz::any_compressor>);
static_assert(weft::comm::transport<cz::metered_transport<weft::comm::inproc_transport>>);
static_assert(!cz::summable_compressor<sign_compressor> && !cz::sparse_compressor<sign_compressor>);

}  // namespace

TEST_CASE("casts round to the nearest fp16/bf16 and halve the bytes", "[comm][compress]") {
  const auto x = gradient(0, 1000);
  cz::fp16_compressor h;
  cz::bf16_compressor b;
  CHECK(h.encoded_bytes(1000) == 2000);
  const auto xh = roundtrip(h, x), xb = roundtrip(b, x);
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK(std::fabs(xh[i] - x[i]) <= std::fabs(x[i]) * 0.0005f + 1e-7f);
    CHECK(std::fabs(xb[i] - x[i]) <= std::fabs(x[i]) * 0.004f + 1e-30f);
  }
}

TEST_CASE("block quantizers stay within half a grid step per element", "[comm][compress]") {
  const auto x = gradient(1, 1000);
  for (auto scheme : {cz::quant_scheme::minmax, cz::quant_scheme::absmax})
    for (std::size_t block : {std::size_t{1}, std::size_t{7}, std::size_t{64}, std::size_t{256}, std::size_t{5000}}) {
      cz::int8_quantizer q8(scheme, block);
      cz::int4_quantizer q4(scheme, block);
      INFO(q8.name() << " / " << q4.name());
      const auto b8 = roundtrip(q8, x), b4 = roundtrip(q4, x);
      for (std::size_t lo = 0; lo < x.size(); lo += block) {
        const std::size_t hi = std::min(x.size(), lo + block);
        float mn = x[lo], mx = x[lo], am = 0;
        for (std::size_t i = lo; i < hi; ++i)
          mn = std::min(mn, x[i]), mx = std::max(mx, x[i]), am = std::max(am, std::fabs(x[i]));
        const float step8 = scheme == cz::quant_scheme::minmax ? (mx - mn) / 255 : am / 127;
        const float step4 = scheme == cz::quant_scheme::minmax ? (mx - mn) / 15 : am / 7;
        for (std::size_t i = lo; i < hi; ++i) {
          REQUIRE(std::fabs(b8[i] - x[i]) <= step8 * 0.5f + 1e-5f);
          REQUIRE(std::fabs(b4[i] - x[i]) <= step4 * 0.5f + 1e-5f);
        }
      }
    }
  cz::int8_quantizer q(cz::quant_scheme::absmax, 256);
  CHECK(q.encoded_bytes(1000) == 3 * (4 + 256) + (4 + 232));
  cz::int4_quantizer q4(cz::quant_scheme::minmax, 7);
  CHECK(q4.encoded_bytes(15) == 2 * (8 + 4) + (8 + 1));
  CHECK(q.encoded_bytes(0) == 0);
}

TEST_CASE("top-k keeps the largest magnitudes, random-k reproduces from its seed", "[comm][compress]") {
  std::vector<float> x{0.1f, -5.0f, 0.2f, 3.0f, -0.3f, 4.0f, 0.0f, -0.05f, 1.0f, 2.0f};
  cz::top_k top(0.3);
  const auto t = roundtrip(top, x);
  CHECK(t == std::vector<float>{0, -5.0f, 0, 3.0f, 0, 4.0f, 0, 0, 0, 0});
  cz::random_k a(0.5, 42), b(0.5, 42), c(0.5, 43);
  const auto ra = roundtrip(a, x), rb = roundtrip(b, x), rc = roundtrip(c, x);
  CHECK(ra == rb);
  std::size_t nonzero = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK((ra[i] == 0.0f || ra[i] == x[i]));
    nonzero += ra[i] != 0.0f;
  }
  CHECK(nonzero >= 4);  // 5 kept; x[6] may be among them
  CHECK(ra != rc);
  CHECK(roundtrip(a, x) != ra);  // the generator advanced
}

TEST_CASE("bad compressor arguments are refused with the value and the rule", "[comm][compress][errors]") {
  CHECK_THROWS_WITH(cz::int8_quantizer(cz::quant_scheme::absmax, 0), Catch::Contains("block size must be positive"));
  CHECK_THROWS_WITH(cz::top_k(0.0), Catch::Contains("density 0"));
  CHECK_THROWS_WITH(cz::random_k(1.5), Catch::Contains("must be in (0, 1]"));
  CHECK_THROWS_WITH(cz::make_compressor("int3"), Catch::Contains("unknown compressor 'int3'"));
  cz::int8_quantizer q;
  std::vector<float> x(10);
  std::vector<std::byte> small(3);
  CHECK_THROWS_WITH(q.encode(std::span<const float>(x), std::span<std::byte>(small)),
                    Catch::Contains("output has 3 bytes"));
  std::vector<std::byte> junk(8, std::byte{0xff});
  std::vector<float> out(10);
  cz::top_k top(0.1);
  CHECK_THROWS_AS(top.decode(std::span<const std::byte>(junk), std::span<float>(out)), weft::error);
  auto errors = weft_test::run_ranks(2, [&](wc::inproc_transport& t) {
    std::vector<float> d(16, 1.0f);
    cz::top_k tk(0.5);
    cz::compress_options opt;
    opt.how = cz::strategy::native;
    cz::compressed_allreduce(t, std::span<float>(d), tk, weft::op::sum{}, opt);
  });
  for (auto& e : errors) CHECK_THROWS_WITH(std::rethrow_exception(e), Catch::Contains("needs a summable compressor"));
}

TEST_CASE("ranks using different compressors fail with a mismatch, not a hang", "[comm][compress][errors]") {
  auto errors = weft_test::run_ranks(3, [&](wc::inproc_transport& t) {
    std::vector<float> d(300, 1.0f);
    auto c = cz::make_compressor(t.rank() == 1 ? "int4-absmax" : "int8-absmax");
    cz::compress_options opt;
    opt.base.timeout = 5s;
    cz::compressed_allreduce(t, std::span<float>(d), c, weft::op::sum{}, opt);
  });
  bool mismatch = false;
  for (auto& e : errors) {
    REQUIRE(e);
    try {
      std::rethrow_exception(e);
    } catch (const weft::error& err) {
      mismatch |= err.code() == weft::errc::mismatch;
      CHECK((err.code() == weft::errc::mismatch || err.code() == weft::errc::aborted));
    }
  }
  CHECK(mismatch);
}

namespace {
struct outcome {
  double max_abs_err = 0, rel_l2_err = 0;
  std::uint64_t bytes_per_rank = 0;
  bool identical = true;
};

template <class Make>
outcome run_compressed(int p, std::size_t n, Make make, cz::strategy how, bool average = false) {
  std::vector<std::vector<float>> result(static_cast<std::size_t>(p));
  std::vector<std::uint64_t> bytes(static_cast<std::size_t>(p));
  auto errors = weft_test::run_ranks(p, [&](wc::inproc_transport& t) {
    cz::metered_transport<wc::inproc_transport> m(t);
    auto data = gradient(t.rank(), n);
    auto comp = make();
    cz::compress_options opt;
    opt.how = how;
    opt.base.algo = wc::algorithm::ring;
    if (average)
      cz::compressed_allreduce(m, std::span<float>(data), comp, weft::op::avg{}, opt);
    else
      cz::compressed_allreduce(m, std::span<float>(data), comp, weft::op::sum{}, opt);
    result[static_cast<std::size_t>(t.rank())] = std::move(data);
    bytes[static_cast<std::size_t>(t.rank())] = m.bytes_sent();
  });
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  outcome o;
  auto exact = exact_sum(p, n);
  if (average)
    for (auto& x : exact) x /= static_cast<float>(p);
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(result[0][i]) - exact[i];
    o.max_abs_err = std::max(o.max_abs_err, std::fabs(d));
    num += d * d;
    den += static_cast<double>(exact[i]) * exact[i];
  }
  o.rel_l2_err = den > 0 ? std::sqrt(num / den) : 0;
  for (int r = 1; r < p; ++r)
    o.identical = o.identical &&
                  (n == 0 || std::memcmp(result[0].data(), result[static_cast<std::size_t>(r)].data(), n * 4) == 0);
  o.bytes_per_rank = bytes[0];
  return o;
}
}  // namespace

TEST_CASE("compressed allreduce: every rank holds the same bits, close to the exact sum", "[comm][compress]") {
  for (int p : {1, 2, 3, 4, 5})
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{4}, std::size_t{1001}}) {
      INFO("p=" << p << " n=" << n);
      auto q = run_compressed(
          p, n, [] { return cz::int8_quantizer(cz::quant_scheme::absmax, 64); }, cz::strategy::ring);
      CHECK(q.identical);
      CHECK(q.rel_l2_err < 0.02);
      auto q4 = run_compressed(
          p, n, [] { return cz::int4_quantizer(cz::quant_scheme::minmax, 32); }, cz::strategy::ring);
      CHECK(q4.identical);
      CHECK(q4.rel_l2_err < 0.3);
      auto h = run_compressed(
          p, n, [] { return cz::fp16_compressor{}; }, cz::strategy::native);
      CHECK(h.identical);
      CHECK(h.rel_l2_err < 0.002);
      auto g = run_compressed(
          p, n, [] { return cz::int8_quantizer(cz::quant_scheme::minmax, 64); }, cz::strategy::allgather);
      CHECK(g.identical);
      CHECK(g.rel_l2_err < 0.02);
      auto k = run_compressed(
          p, n, [] { return cz::top_k(0.25); }, cz::strategy::automatic);
      CHECK(k.identical);
      auto u = run_compressed(
          p, n, [] { return sign_compressor{}; }, cz::strategy::ring);  // user-written policy
      CHECK(u.identical);
      auto a = run_compressed(
          p, n, [] { return cz::make_compressor("bf16"); }, cz::strategy::ring, true);
      CHECK(a.identical);
      CHECK(a.rel_l2_err < 0.02);
    }
}

TEST_CASE("compression report: bytes on the wire and error against the exact sum", "[comm][compress][report]") {
  const int p = 4;
  const std::size_t n = 1 << 16;
  struct row {
    const char* name;
    std::function<cz::any_compressor()> make;
    cz::strategy how;
    double max_rel;  // a bound the error must stay under
  };
  const std::vector<row> rows{
      {"none", [] { return cz::any_compressor(cz::identity_compressor{}); }, cz::strategy::ring, 1e-6},
      {"fp16", [] { return cz::any_compressor(cz::fp16_compressor{}); }, cz::strategy::ring, 2e-3},
      {"bf16", [] { return cz::any_compressor(cz::bf16_compressor{}); }, cz::strategy::ring, 1e-2},
      {"int8-minmax/256", [] { return cz::make_compressor("int8-minmax", 256); }, cz::strategy::ring, 2e-2},
      {"int8-absmax/256", [] { return cz::make_compressor("int8-absmax", 256); }, cz::strategy::ring, 2e-2},
      {"int8-absmax/32", [] { return cz::make_compressor("int8-absmax", 32); }, cz::strategy::ring, 2e-2},
      {"int4-minmax/64", [] { return cz::make_compressor("int4-minmax", 64); }, cz::strategy::ring, 0.25},
      {"int4-absmax/64", [] { return cz::make_compressor("int4-absmax", 64); }, cz::strategy::ring, 0.3},
      {"top-k/0.01 (allgather)", [] { return cz::make_compressor("top-k", 0.01); }, cz::strategy::allgather, 1.0},
      {"random-k/0.01 (allgather)", [] { return cz::make_compressor("random-k", 0.01); }, cz::strategy::allgather, 1.0},
  };
  std::printf("compressed allreduce, p=%d, n=%zu floats (%zu KiB), inproc, ring unless noted\n", p, n, n * 4 / 1024);
  std::printf("%-28s %14s %10s %14s %12s %9s\n", "compressor", "bytes/rank", "vs none", "max abs err", "rel L2 err",
              "parity");
  double none_bytes = 0;
  for (const auto& r : rows) {
    auto o = run_compressed(p, n, r.make, r.how);
    if (none_bytes == 0) none_bytes = static_cast<double>(o.bytes_per_rank);
    std::printf("%-28s %14llu %9.3fx %14.3g %12.3g %9s\n", r.name, static_cast<unsigned long long>(o.bytes_per_rank),
                static_cast<double>(o.bytes_per_rank) / none_bytes, o.max_abs_err, o.rel_l2_err,
                o.identical ? "yes" : "NO");
    INFO(r.name);
    CHECK(o.identical);
    CHECK(o.rel_l2_err <= r.max_rel);
  }
  // The uncompressed ring moves 2(p-1)/p of the data per rank; int8 about a quarter of that. The
  // agreement before it sends p-1 votes of 24 bytes per rank (Bruck's allgather).
  CHECK(none_bytes == static_cast<double>(2 * (p - 1) * (n / p) * 4 + (p - 1) * wc::detail::vote_bytes));
}

TEST_CASE("error feedback keeps the accumulated top-k sum close to the exact one", "[comm][compress]") {
  const int p = 3;
  const std::size_t n = 200;
  const int steps = 40;
  auto run = [&](bool feedback) {
    double err = 0;
    std::vector<std::vector<double>> total(static_cast<std::size_t>(p), std::vector<double>(n, 0.0));
    auto errors = weft_test::run_ranks(p, [&](wc::inproc_transport& t) {
      cz::error_feedback fb(n);
      cz::top_k top(0.05);
      auto& mine = total[static_cast<std::size_t>(t.rank())];
      for (int s = 0; s < steps; ++s) {
        auto g = gradient(t.rank(), n, 3);  // the same gradient every step
        cz::compress_options opt;
        opt.feedback = feedback ? &fb : nullptr;
        cz::compressed_allreduce(t, std::span<float>(g), top, weft::op::sum{}, opt);
        for (std::size_t i = 0; i < n; ++i) mine[i] += g[i];
      }
    });
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    std::vector<double> exact(n, 0.0);
    for (int r = 0; r < p; ++r) {
      auto g = gradient(r, n, 3);
      for (std::size_t i = 0; i < n; ++i) exact[i] += steps * static_cast<double>(g[i]);
    }
    double num = 0, den = 0;
    for (std::size_t i = 0; i < n; ++i)
      num += (total[0][i] - exact[i]) * (total[0][i] - exact[i]), den += exact[i] * exact[i];
    err = std::sqrt(num / den);
    return err;
  };
  const double with = run(true), without = run(false);
  INFO("relative error of the 40-step sum: with feedback " << with << ", without " << without);
  CHECK(with < 0.35);
  CHECK(without > 0.6);
  CHECK(with < without / 2);
  cz::error_feedback fb(3);
  std::vector<float> wrong(4);
  CHECK_THROWS_WITH(fb.compensate(std::span<float>(wrong)), Catch::Contains("tensor has 4 elements"));
}

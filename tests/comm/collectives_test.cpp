#include "rank_threads.hpp"

#include <weft/comm/collectives.hpp>
#include <weft/comm/nonblocking.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <vector>

namespace wc = weft::comm;

namespace {
constexpr int rank_counts[] = {1, 2, 3, 4, 5, 7, 8};
std::vector<std::size_t> sizes(int p) {
  return {0, 1, static_cast<std::size_t>(p - 1), static_cast<std::size_t>(3 * p + 2), 1000};
}
std::int32_t val(int r, std::size_t i) { return static_cast<std::int32_t>(r * 1000 + static_cast<int>(i % 997)); }
}  // namespace

TEST_CASE("reduce_scatter gives each rank its block of the sum", "[comm][collectives]") {
  for (int p : rank_counts)
    for (std::size_t b : sizes(p)) {
      const auto P = static_cast<std::size_t>(p);
      auto errors = weft_test::run_ranks(p, [&](wc::inproc_transport& t) {
        std::vector<std::int32_t> in(P * b), out(b);
        for (std::size_t i = 0; i < in.size(); ++i) in[i] = val(t.rank(), i);
        wc::reduce_scatter(t, std::span<const std::int32_t>(in), std::span<std::int32_t>(out));
        for (std::size_t i = 0; i < b; ++i) {
          const std::size_t g = static_cast<std::size_t>(t.rank()) * b + i;
          std::int32_t expect = 0;
          for (int r = 0; r < p; ++r) expect += val(r, g);
          if (out[i] != expect) throw std::runtime_error("wrong reduce_scatter value");
        }
      });
      INFO("p=" << p << " block=" << b);
      REQUIRE(weft_test::all_ok(errors));
    }
}

TEST_CASE("allgather, broadcast and reduce for every rank count, size and root", "[comm][collectives]") {
  for (int p : rank_counts)
    for (std::size_t n : sizes(p)) {
      const auto P = static_cast<std::size_t>(p);
      auto errors = weft_test::run_ranks(p, [&](wc::inproc_transport& t) {
        const int r = t.rank();
        std::vector<std::int32_t> in(n), out(P * n);
        for (std::size_t i = 0; i < n; ++i) in[i] = val(r, i);
        wc::options opt;
        opt.segment_bytes = 40;  // several segments
        wc::allgather(t, std::span<const std::int32_t>(in), std::span<std::int32_t>(out), opt);
        for (int q = 0; q < p; ++q)
          for (std::size_t i = 0; i < n; ++i)
            if (out[static_cast<std::size_t>(q) * n + i] != val(q, i)) throw std::runtime_error("allgather");
        for (int root = 0; root < p; ++root) {
          std::vector<std::int32_t> data(n);
          for (std::size_t i = 0; i < n; ++i) data[i] = val(r, i);
          wc::broadcast(t, std::span<std::int32_t>(data), root, opt);
          for (std::size_t i = 0; i < n; ++i)
            if (data[i] != val(root, i)) throw std::runtime_error("broadcast");
          for (std::size_t i = 0; i < n; ++i) data[i] = val(r, i);
          wc::reduce(t, std::span<std::int32_t>(data), root, weft::op::max{}, opt);
          for (std::size_t i = 0; i < n; ++i) {
            const std::int32_t expect = r == root ? val(p - 1, i) : val(r, i);  // others keep their data
            if (data[i] != expect) throw std::runtime_error("reduce");
          }
        }
        wc::barrier(t);
      });
      INFO("p=" << p << " n=" << n);
      REQUIRE(weft_test::all_ok(errors));
    }
}

TEST_CASE("alltoall and alltoallv route every block", "[comm][collectives]") {
  for (int p : rank_counts)
    for (std::size_t b : {std::size_t{0}, std::size_t{1}, std::size_t{5}}) {
      const auto P = static_cast<std::size_t>(p);
      auto errors = weft_test::run_ranks(p, [&](wc::inproc_transport& t) {
        const int r = t.rank();
        std::vector<double> in(P * b), out(P * b);
        for (std::size_t q = 0; q < P; ++q)
          for (std::size_t i = 0; i < b; ++i) in[q * b + i] = r * 100.0 + static_cast<double>(q) + 0.001 * i;
        wc::alltoall(t, std::span<const double>(in), std::span<double>(out));
        for (std::size_t q = 0; q < P; ++q)
          for (std::size_t i = 0; i < b; ++i)
            if (out[q * b + i] != static_cast<double>(q) * 100.0 + r + 0.001 * i) throw std::runtime_error("alltoall");
        // alltoallv: rank r sends (r + q + b) % 4 elements to rank q (value r*1000 + q).
        std::vector<std::size_t> sc(P), rc(P);
        for (std::size_t q = 0; q < P; ++q) {
          sc[q] = (static_cast<std::size_t>(r) + q + b) % 4;
          rc[q] = (q + static_cast<std::size_t>(r) + b) % 4;
        }
        std::vector<std::int64_t> vin, vout(std::accumulate(rc.begin(), rc.end(), std::size_t{0}));
        for (std::size_t q = 0; q < P; ++q)
          for (std::size_t i = 0; i < sc[q]; ++i) vin.push_back(r * 1000 + static_cast<std::int64_t>(q));
        wc::alltoallv(t, std::span<const std::int64_t>(vin), std::span<const std::size_t>(sc),
                      std::span<std::int64_t>(vout), std::span<const std::size_t>(rc));
        std::size_t k = 0;
        for (std::size_t q = 0; q < P; ++q)
          for (std::size_t i = 0; i < rc[q]; ++i)
            if (vout[k++] != static_cast<std::int64_t>(q) * 1000 + r) throw std::runtime_error("alltoallv");
      });
      INFO("p=" << p << " block=" << b);
      REQUIRE(weft_test::all_ok(errors));
    }
}

TEST_CASE("several non-blocking collectives in flight on distinct channels", "[comm][nonblocking]") {
  const int p = 4;
  auto errors = weft_test::run_ranks(p, [&](wc::inproc_transport& t) {
    std::vector<float> a(1000, 1.0f), b(777, 2.0f);
    std::vector<int> in(4 * 3, t.rank()), out(4 * 3);
    wc::options oa, ob, oc;
    oa.channel = 1;
    ob.channel = 2;
    ob.algo = wc::algorithm::tree;
    oc.channel = 3;
    auto ha = wc::start_allreduce(t, std::span<float>(a), weft::op::sum{}, oa);
    auto hb = wc::start_allreduce(t, std::span<float>(b), weft::op::sum{}, ob);
    auto hc = wc::start_alltoall(t, std::span<const int>(in), std::span<int>(out), oc);
    hc.wait();
    hb.wait();
    ha.wait();
    if (!ha.ready()) throw std::runtime_error("a waited handle is not ready");
    for (float x : a)
      if (x != 4.0f) throw std::runtime_error("allreduce a");
    for (float x : b)
      if (x != 8.0f) throw std::runtime_error("allreduce b");
    for (int q = 0; q < p; ++q)
      for (int i = 0; i < 3; ++i)
        if (out[static_cast<std::size_t>(q * 3 + i)] != q) throw std::runtime_error("alltoall");
  });
  REQUIRE(weft_test::all_ok(errors));
  wc::pending empty;
  CHECK(empty.ready());
  CHECK_THROWS_AS(empty.wait(), weft::error);
}

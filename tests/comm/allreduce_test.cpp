#include "rank_threads.hpp"

#include <weft/comm/allreduce.hpp>
#include <weft/core/half.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

namespace wc = weft::comm;

namespace {

constexpr wc::algorithm all_algorithms[] = {wc::algorithm::ring,
                                            wc::algorithm::tree,
                                            wc::algorithm::star,
                                            wc::algorithm::halving_doubling,
                                            wc::algorithm::recursive_doubling,
                                            wc::algorithm::hierarchical};

// Small integers, so every sum the algorithms form (in any order) is exact in every type,
// and the result must equal the serial reference bit for bit.
template <class T>
T value(int rank, std::size_t i) {
  const int v = static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 13) % 17) - 8;
  if constexpr (std::is_unsigned_v<T>) return static_cast<T>(v + 8);
  if constexpr (std::is_same_v<T, weft::half> || std::is_same_v<T, weft::bfloat16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

template <class T, class Op>
std::vector<T> reference(int p, std::size_t n, Op op) {
  using A = weft::accumulator_t<T>;
  std::vector<T> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    A acc = static_cast<A>(value<T>(0, i));
    for (int r = 1; r < p; ++r) acc = op(acc, static_cast<A>(value<T>(r, i)));
    out[i] = static_cast<T>(weft::finalize(op, acc, static_cast<std::size_t>(p)));
  }
  return out;
}

// Two hosts-per-rank layouts: interleaved host ids exercise non-contiguous local groups.
std::vector<int> host_map(int p) {
  std::vector<int> hosts(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) hosts[static_cast<std::size_t>(r)] = r % 3;
  return hosts;
}

template <class T, class Op = weft::op::sum>
void check_allreduce(wc::algorithm algo, int p, std::size_t n, Op op = {}, std::size_t segment_bytes = 64) {
  const auto expected = reference<T>(p, n, op);
  const auto hosts = host_map(p);
  std::vector<std::vector<T>> results(static_cast<std::size_t>(p));
  auto errors = weft_test::run_ranks(p, [&](wc::inproc_transport& t) {
    std::vector<T> data(n);
    for (std::size_t i = 0; i < n; ++i) data[i] = value<T>(t.rank(), i);
    wc::options opt;
    opt.algo = algo;
    opt.segment_bytes = segment_bytes;  // small segments: many pipeline steps even for small n
    opt.hosts = hosts;
    opt.timeout = std::chrono::seconds(20);
    wc::allreduce(t, std::span<T>(data), op, opt);
    results[static_cast<std::size_t>(t.rank())] = std::move(data);
  });
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (int r = 0; r < p; ++r) {
    INFO("algorithm " << wc::to_string(algo) << " p=" << p << " n=" << n << " rank " << r);
    REQUIRE(results[static_cast<std::size_t>(r)].size() == n);
    REQUIRE((n == 0 || std::memcmp(results[static_cast<std::size_t>(r)].data(), expected.data(), n * sizeof(T)) == 0));
  }
}

}  // namespace

TEST_CASE("every allreduce algorithm matches the serial reference for every rank count and size", "[comm][allreduce]") {
  for (auto algo : all_algorithms)
    for (int p : {1, 2, 3, 4, 5, 7, 8})
      for (std::size_t n :
           {std::size_t{0}, std::size_t{1}, static_cast<std::size_t>(p - 1), std::size_t{4 * 8 + 3}, std::size_t{1000}})
        check_allreduce<float>(algo, p, n);
}

TEST_CASE("allreduce handles every element type with float accumulation for half types", "[comm][allreduce]") {
  for (auto algo : all_algorithms)
    for (int p : {3, 4}) {
      check_allreduce<double>(algo, p, 37);
      check_allreduce<std::int32_t>(algo, p, 37);
      check_allreduce<std::int64_t>(algo, p, 37);
      check_allreduce<std::uint8_t>(algo, p, 37);
      check_allreduce<weft::half>(algo, p, 37);
      check_allreduce<weft::bfloat16>(algo, p, 37);
    }
}

TEST_CASE("allreduce supports max, prod and avg (avg finalized once)", "[comm][allreduce]") {
  for (auto algo : all_algorithms)
    for (int p : {2, 5, 8}) {
      check_allreduce<float>(algo, p, 29, weft::op::max{});
      check_allreduce<std::int64_t>(algo, p, 29, weft::op::prod{});
      check_allreduce<double>(algo, p, 29, weft::op::avg{});
      check_allreduce<std::int32_t>(algo, p, 29, weft::op::bit_xor{});
    }
}

TEST_CASE("allreduce of several MiB with default segments", "[comm][allreduce]") {
  const std::size_t n = (std::size_t{3} << 20) / sizeof(float) + 7;  // 3 MiB and not divisible
  for (auto algo : all_algorithms) check_allreduce<float>(algo, 4, n, weft::op::sum{}, std::size_t{1} << 18);
  check_allreduce<float>(wc::algorithm::ring, 7, n, weft::op::sum{}, std::size_t{1} << 18);
}

TEST_CASE("rounded float sums are bit-identical on every rank and reproducible", "[comm][allreduce]") {
  const std::size_t n = 513;
  for (auto algo : all_algorithms)
    for (int p : {3, 5, 8}) {
      std::vector<std::vector<float>> first, second;
      for (auto* out : {&first, &second}) {
        out->assign(static_cast<std::size_t>(p), {});
        auto errors = weft_test::run_ranks(p, [&](wc::inproc_transport& t) {
          std::mt19937 rng(static_cast<unsigned>(1234 + t.rank()));
          std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
          std::vector<float> data(n);
          for (auto& x : data) x = dist(rng);
          wc::options opt;
          opt.algo = algo;
          opt.segment_bytes = 256;
          const auto hosts = host_map(p);
          opt.hosts = hosts;
          wc::allreduce(t, std::span<float>(data), weft::op::sum{}, opt);
          (*out)[static_cast<std::size_t>(t.rank())] = std::move(data);
        });
        REQUIRE(weft_test::all_ok(errors));
      }
      for (int r = 0; r < p; ++r) {
        INFO("algorithm " << wc::to_string(algo) << " p=" << p << " rank " << r);
        CHECK(std::memcmp(first[static_cast<std::size_t>(r)].data(), first[0].data(), n * sizeof(float)) == 0);
        CHECK(std::memcmp(second[static_cast<std::size_t>(r)].data(), first[0].data(), n * sizeof(float)) == 0);
      }
    }
}

TEST_CASE("automatic algorithm choice is consistent across ranks and correct", "[comm][allreduce][tuner]") {
  for (std::size_t n : {std::size_t{1}, std::size_t{100000}}) check_allreduce<float>(wc::algorithm::automatic, 4, n);
}

TEST_CASE("double binary trees span every rank once", "[comm][allreduce]") {
  for (int p = 1; p <= 9; ++p)
    for (int which : {0, 1}) {
      int roots = 0;
      std::vector<int> child_count(static_cast<std::size_t>(p), 0);
      for (int r = 0; r < p; ++r) {
        const auto l = wc::detail::double_tree_links(p, r, which);
        if (l.parent < 0)
          ++roots;
        else {
          const auto pl = wc::detail::double_tree_links(p, l.parent, which);
          CHECK((pl.children[0] == r || pl.children[1] == r));
        }
        for (int c : l.children)
          if (c >= 0) ++child_count[static_cast<std::size_t>(c)];
      }
      CHECK(roots == 1);
      for (int r = 0; r < p; ++r) CHECK(child_count[static_cast<std::size_t>(r)] <= 1);
    }
}

namespace {
// Every rank holds values at the type's limits; the sum and product wrap (two's complement) and
// every algorithm, whatever its order of operations, must give the wrapped result computed in
// unsigned arithmetic (associative and commutative mod 2^k, so the order cannot matter).
template <class T>
void check_wrapping_allreduce(wc::algorithm algo, int p) {
  using L = std::numeric_limits<T>;
  using U = std::make_unsigned_t<T>;
  const std::vector<T> pattern{L::max(), L::min(), static_cast<T>(L::max() - 1), T(1), static_cast<T>(-1), T(0)};
  auto at = [&](int r, std::size_t i) { return pattern[(i + static_cast<std::size_t>(r)) % pattern.size()]; };
  const std::size_t n = 2 * pattern.size() + 1;
  std::vector<T> want_sum(n), want_prod(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t s = 0, m = 1;
    for (int r = 0; r < p; ++r) {
      s += static_cast<U>(at(r, i));
      m *= static_cast<U>(at(r, i));
    }
    const auto su = static_cast<U>(s), mu = static_cast<U>(m);
    std::memcpy(&want_sum[i], &su, sizeof(T));
    std::memcpy(&want_prod[i], &mu, sizeof(T));
  }
  const auto hosts = host_map(p);
  std::vector<std::vector<T>> sums(static_cast<std::size_t>(p)), prods(static_cast<std::size_t>(p));
  auto errors = weft_test::run_ranks(p, [&](wc::inproc_transport& t) {
    std::vector<T> s(n), m(n);
    for (std::size_t i = 0; i < n; ++i) s[i] = m[i] = at(t.rank(), i);
    wc::options opt;
    opt.algo = algo;
    opt.segment_bytes = 4;  // several segments even here
    opt.hosts = hosts;
    wc::allreduce(t, std::span<T>(s), weft::op::sum{}, opt);
    wc::allreduce(t, std::span<T>(m), weft::op::prod{}, opt);
    sums[static_cast<std::size_t>(t.rank())] = std::move(s);
    prods[static_cast<std::size_t>(t.rank())] = std::move(m);
  });
  REQUIRE(weft_test::all_ok(errors));
  for (int r = 0; r < p; ++r) {
    INFO(sizeof(T) << "-byte " << (L::is_signed ? "signed" : "unsigned") << ", algorithm " << wc::to_string(algo)
                   << " p=" << p << " rank " << r);
    CHECK(sums[static_cast<std::size_t>(r)] == want_sum);
    CHECK(prods[static_cast<std::size_t>(r)] == want_prod);
  }
}
}  // namespace

TEST_CASE("integer sum and prod wrap around at the limits of every integer dtype, on every algorithm",
          "[comm][allreduce]") {
  for (auto algo : all_algorithms)
    for (int p : {2, 3, 5}) {
      check_wrapping_allreduce<std::int8_t>(algo, p);
      check_wrapping_allreduce<std::uint8_t>(algo, p);
      check_wrapping_allreduce<std::int32_t>(algo, p);
      check_wrapping_allreduce<std::int64_t>(algo, p);
    }
}

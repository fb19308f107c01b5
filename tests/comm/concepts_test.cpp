#include "rank_threads.hpp"

#include <weft/comm/allreduce.hpp>
#include <weft/comm/any_transport.hpp>
#include <weft/comm/calibrate.hpp>
#include <weft/comm/collectives.hpp>
#include <weft/comm/group_view.hpp>
#include <weft/comm/shm_transport.hpp>
#include <weft/comm/tcp_transport.hpp>
#include <weft/comm/tuner.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

namespace wc = weft::comm;

namespace {
// Archetype: the weakest transport the concept accepts — rank/size (as short), send, recv and
// sendrecv, nothing else: not abortable, not usable from several threads.
class archetype_transport {
 public:
  explicit archetype_transport(wc::inproc_transport t) : t_(t) {}
  short rank() const { return static_cast<short>(t_.rank()); }
  short size() const { return static_cast<short>(t_.size()); }
  void send(int peer, wc::msg_tag tag, std::span<const std::byte> b, wc::deadline until) {
    t_.send(peer, tag, b, until);
  }
  void recv(int peer, wc::msg_tag tag, std::span<std::byte> b, wc::deadline until) { t_.recv(peer, tag, b, until); }
  void sendrecv(int dst, std::span<const std::byte> out, int src, std::span<std::byte> in, wc::msg_tag tag,
                wc::deadline until) {
    t_.sendrecv(dst, out, src, in, tag, until);
  }

 private:
  wc::inproc_transport t_;
};
}  // namespace

TEST_CASE("transports model the concepts they claim", "[comm][concepts]") {
  STATIC_REQUIRE(wc::transport<archetype_transport>);
  STATIC_REQUIRE(!wc::abortable_transport<archetype_transport>);
  STATIC_REQUIRE(!wc::concurrent_transport<archetype_transport>);
  STATIC_REQUIRE(wc::concurrent_transport<wc::inproc_transport>);
  STATIC_REQUIRE(wc::abortable_transport<wc::inproc_transport>);
  STATIC_REQUIRE(wc::concurrent_transport<wc::shm_transport>);
  STATIC_REQUIRE(wc::abortable_transport<wc::tcp_transport>);
  STATIC_REQUIRE(wc::transport<wc::any_transport>);
  STATIC_REQUIRE(wc::transport<wc::group_view<archetype_transport>>);
  STATIC_REQUIRE(!wc::transport<int>);
}

TEST_CASE("every collective runs over the archetype transport", "[comm][concepts]") {
  auto errors = weft_test::run_ranks(5, [](wc::inproc_transport& inner) {
    archetype_transport t(inner);
    const std::vector<int> hosts{0, 0, 1, 1, 2};
    for (auto algo : {wc::algorithm::ring, wc::algorithm::tree, wc::algorithm::star, wc::algorithm::halving_doubling,
                      wc::algorithm::recursive_doubling, wc::algorithm::hierarchical, wc::algorithm::automatic}) {
      std::vector<std::int32_t> data(23, t.rank() + 1);
      wc::options opt;
      opt.algo = algo;
      opt.hosts = hosts;
      wc::allreduce(t, std::span<std::int32_t>(data), weft::op::sum{}, opt);
      for (auto v : data)
        if (v != 15) throw std::runtime_error("archetype allreduce");
    }
    std::vector<std::int32_t> in(10, t.rank()), out(50);
    wc::allgather(t, std::span<const std::int32_t>(in), std::span<std::int32_t>(out));
    std::vector<std::int32_t> back(50);
    wc::alltoall(t, std::span<const std::int32_t>(out), std::span<std::int32_t>(back));
    wc::broadcast(t, std::span<std::int32_t>(in), 3);
    wc::reduce(t, std::span<std::int32_t>(in), 1);
    wc::barrier(t);
  });
  REQUIRE(weft_test::all_ok(errors));
}

TEST_CASE("any_transport erases the type and forwards abort where it exists", "[comm][concepts]") {
  auto errors = weft_test::run_ranks(3, [](wc::inproc_transport& inner) {
    wc::any_transport t{std::ref(inner)};
    if (!t.is_concurrent()) throw std::runtime_error("inproc is concurrent");
    std::vector<double> data(100, 1.5);
    wc::allreduce(t, std::span<double>(data));
    for (double v : data)
      if (v != 4.5) throw std::runtime_error("any_transport allreduce");
    wc::any_transport weak{archetype_transport(inner)};
    if (weak.is_concurrent()) throw std::runtime_error("archetype is not concurrent");
    weak.abort("no-op for a transport without abort");
    wc::barrier(weak);
  });
  REQUIRE(weft_test::all_ok(errors));
}

TEST_CASE("tuner: cost model predictions and choices", "[comm][tuner]") {
  const wc::cost_model tcp{50e-6, 1.0 / 2e9, 1.0 / 8e9};
  // Latency-bound: star or halving-doubling beat the ring's 2(p-1) message times.
  const auto small = wc::choose_allreduce(64, 8, 1 << 19, tcp);
  CHECK(small != wc::algorithm::ring);
  CHECK(wc::predict_allreduce(small, 64, 8, 1 << 19, tcp) <=
        wc::predict_allreduce(wc::algorithm::ring, 64, 8, 1 << 19, tcp));
  // Bandwidth-bound: the ring's (or halving-doubling's) 2(p-1)/p n beats star's 2(p-1) n.
  const auto big = wc::choose_allreduce(std::size_t{256} << 20, 8, 1 << 19, tcp);
  CHECK((big == wc::algorithm::ring || big == wc::algorithm::halving_doubling));
  CHECK(wc::predict_allreduce(wc::algorithm::star, std::size_t{256} << 20, 8, 1 << 19, tcp) >
        2 * wc::predict_allreduce(big, std::size_t{256} << 20, 8, 1 << 19, tcp));
  // Non-power-of-two rank counts pay halving-doubling's extra fold.
  CHECK(wc::predict_allreduce(wc::algorithm::halving_doubling, 1 << 20, 5, 1 << 19, tcp) >
        wc::predict_allreduce(wc::algorithm::halving_doubling, 1 << 20, 4, 1 << 19, tcp));
  CHECK(wc::predict_allreduce(wc::algorithm::ring, 100, 1, 1, tcp) == 0.0);
  CHECK_THROWS_AS(wc::predict_allreduce(wc::algorithm::hierarchical, 1, 2, 1), weft::error);
  CHECK_THROWS_AS(wc::predict_allreduce(wc::algorithm::ring, 1, 0, 1), weft::error);
  CHECK_THROWS_AS(wc::predict_allreduce(wc::algorithm::ring, 1, 2, 0), weft::error);
}

TEST_CASE("calibrate measures a model and gives every rank the same one", "[comm][tuner]") {
  std::vector<wc::cost_model> models(4);
  auto errors = weft_test::run_ranks(
      4, [&](wc::inproc_transport& t) { models[static_cast<std::size_t>(t.rank())] = wc::calibrate(t, 1 << 16, 3); });
  REQUIRE(weft_test::all_ok(errors));
  for (const auto& m : models) {
    CHECK(m.alpha == models[0].alpha);
    CHECK(m.beta == models[0].beta);
    CHECK(m.gamma == models[0].gamma);
    CHECK(m.alpha > 0);
    CHECK(m.beta > 0);
  }
  auto bad = weft_test::run_ranks(1, [](wc::inproc_transport& t) { wc::calibrate(t, 10); });
  CHECK(bad[0]);
}

namespace {
// A user-written reduce operator: only what weft::reduce_op asks for (no name, no finalize).
struct saturating_add {
  template <class A>
  A operator()(A a, A b) const {
    return a + b > A(100) ? A(100) : A(a + b);
  }
  template <class A>
  static A identity() {
    return A(0);
  }
};
}  // namespace

TEST_CASE("a user-written reduce operator works with every algorithm", "[comm][concepts]") {
  auto errors = weft_test::run_ranks(4, [](wc::inproc_transport& t) {
    const std::vector<int> hosts{0, 1, 0, 1};
    for (auto algo : {wc::algorithm::ring, wc::algorithm::tree, wc::algorithm::star, wc::algorithm::halving_doubling,
                      wc::algorithm::hierarchical}) {
      std::vector<std::int64_t> data(9, 30);
      wc::options opt;
      opt.algo = algo;
      opt.hosts = hosts;
      wc::allreduce(t, std::span<std::int64_t>(data), saturating_add{}, opt);
      for (auto v : data)
        if (v != 100) throw std::runtime_error("saturating_add");
    }
  });
  REQUIRE(weft_test::all_ok(errors));
}

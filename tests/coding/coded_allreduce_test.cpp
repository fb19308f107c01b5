// Coded allreduce over weft::comm's in-process transport (ranks as threads; the forked shm and tcp
// runs are in coded_allreduce_process_test.cpp): the survivors agree on one set, scale and
// allreduce; every rank (a late one included, through the forwarded result) ends with the same
// bits, equal to the true gradient. Assertions hold for every arrival order: which ranks survive is
// never asserted beyond what the test forces (a rank that calls only after the others finished
// cannot be a survivor).
#include "coded_allreduce_common.hpp"

#include <weft/coding/codec.hpp>
#include <weft/coding/coded_allreduce.hpp>
#include <weft/coding/cyclic_repetition.hpp>
#include <weft/coding/detail/random.hpp>
#include <weft/comm/collectives.hpp>
#include <weft/comm/inproc_transport.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

using namespace weft::coding;
using namespace std::chrono_literals;
namespace wc = weft::comm;
using Catch::Matchers::Contains;
using namespace weft_test;

namespace {

// Runs `steps` steps on rank r of a group; the rank in `late` (if any) calls each step only after
// every other rank finished it. Returns outputs and reports per step.
struct rank_result {
  std::vector<std::vector<float>> out;
  std::vector<coded_allreduce_report> rep;
};

template <class T>
rank_result run_rank(T& t, const linear_code& code, std::size_t steps, int late, std::atomic<int>* finished,
                     coded_allreduce_options opt, std::chrono::milliseconds jitter = 0ms) {
  coded_allreduce<T, linear_code> group(t, code, dim, opt);
  rank_result res;
  const auto r = static_cast<std::size_t>(t.rank());
  for (std::uint64_t step = 0; step < steps; ++step) {
    const auto msg = message(code, r, step);
    if (t.rank() == late && finished)
      while (finished[step].load() < t.size() - 1) std::this_thread::sleep_for(1ms);
    if (jitter.count() > 0) {
      weft::coding::detail::rng gen(step * 31 + r);
      std::this_thread::sleep_for(std::chrono::milliseconds(gen.below(static_cast<std::uint64_t>(jitter.count()))));
    }
    std::vector<float> out(dim, -1.0f);
    res.rep.push_back(group.reduce(msg, out));
    res.out.push_back(std::move(out));
    if (t.rank() != late && finished) ++finished[step];
  }
  return res;
}

// Checks the guarantees across ranks: the same F and the same bits everywhere, close to the truth.
void check_group(const std::vector<rank_result>& all, const linear_code& code, int late) {
  const std::size_t steps = all[0].rep.size();
  for (std::size_t step = 0; step < steps; ++step) {
    INFO("step " << step);
    const auto& f = all[0].rep[step].survivors;
    CHECK(code.try_decoder(f) != nullptr);
    if (late >= 0) CHECK(std::find(f.begin(), f.end(), static_cast<std::size_t>(late)) == f.end());
    for (std::size_t r = 0; r < all.size(); ++r) {
      CHECK(all[r].rep[step].step == step);
      CHECK(all[r].rep[step].survivors == f);
      CHECK(all[r].rep[step].included == (std::find(f.begin(), f.end(), r) != f.end()));
      CHECK(std::memcmp(all[r].out[step].data(), all[0].out[step].data(), dim * sizeof(float)) == 0);
    }
    CHECK(rel_error(all[0].out[step], truth(step, code.n_partitions())) < 1e-5);
  }
}

}  // namespace

TEST_CASE("coded allreduce over inproc: nobody late, everyone survives", "[coding][coded_allreduce]") {
  const auto code = hybrid_repetition(4, 1);
  wc::inproc_world world(4);
  std::vector<rank_result> all(4);
  coded_allreduce_options opt;
  opt.patience = 10s;  // nobody is left behind while everyone calls promptly
  std::vector<std::thread> th;
  for (int r = 0; r < 4; ++r)
    th.emplace_back([&, r] {
      auto t = world.transport(r);
      all[static_cast<std::size_t>(r)] = run_rank(t, code, 3, -1, nullptr, opt);
    });
  for (auto& x : th) x.join();
  check_group(all, code, -1);
  for (const auto& rep : all[2].rep) CHECK(rep.survivors == std::vector<std::size_t>{0, 1, 2, 3});
}

TEST_CASE("coded allreduce over inproc: a late rank is excluded on every rank and gets the same bits",
          "[coding][coded_allreduce]") {
  const auto code = hybrid_repetition(4, 1);
  for (int late : {0, 2}) {  // the coordinator itself, and another rank
    INFO("late rank " << late);
    wc::inproc_world world(4);
    std::vector<rank_result> all(4);
    std::vector<std::atomic<int>> finished(4);
    coded_allreduce_options opt;
    opt.patience = 1ms;
    std::vector<std::thread> th;
    for (int r = 0; r < 4; ++r)
      th.emplace_back([&, r] {
        auto t = world.transport(r);
        all[static_cast<std::size_t>(r)] = run_rank(t, code, 4, late, finished.data(), opt);
      });
    for (auto& x : th) x.join();
    check_group(all, code, late);
    for (const auto& rep : all[static_cast<std::size_t>(late)].rep) CHECK_FALSE(rep.included);
  }
}

TEST_CASE("coded allreduce over inproc: random arrival, the same F and bits on every rank",
          "[coding][coded_allreduce]") {
  const auto code = cyclic_repetition(5, 2);
  wc::inproc_world world(5);
  std::vector<rank_result> all(5);
  coded_allreduce_options opt;
  opt.patience = 3ms;
  std::vector<std::thread> th;
  for (int r = 0; r < 5; ++r)
    th.emplace_back([&, r] {
      auto t = world.transport(r);
      all[static_cast<std::size_t>(r)] = run_rank(t, code, 12, -1, nullptr, opt, 12ms);
    });
  for (auto& x : th) x.join();
  check_group(all, code, -1);
}

TEST_CASE("coded allreduce: bad arguments and no decodable set are clear errors", "[coding][coded_allreduce][errors]") {
  wc::inproc_world world(4);
  auto t0 = world.transport(0);
  CHECK_THROWS_WITH((coded_allreduce<wc::inproc_transport, linear_code>(t0, hybrid_repetition(5, 1), dim)),
                    Contains("n = 5") && Contains("4 ranks"));
  coded_allreduce_options bad;
  bad.coordinator = 7;
  CHECK_THROWS_WITH((coded_allreduce<wc::inproc_transport, linear_code>(t0, hybrid_repetition(4, 1), dim, bad)),
                    Contains("coordinator 7"));
  // Only ranks 0 and 1 take part: {0, 1} never decodes for hybrid(4, 1) (groups {0,1}, {2,3}).
  coded_allreduce_options quick;
  quick.timeout = 300ms;
  quick.patience = 1ms;
  const auto code = hybrid_repetition(4, 1);
  std::string errors[2];
  std::thread other([&] {
    auto t1 = world.transport(1);
    coded_allreduce<wc::inproc_transport, linear_code> g(t1, code, dim, quick);
    std::vector<float> out(dim);
    try {
      g.reduce(message(code, 1, 0), out);
    } catch (const weft::error& e) {
      errors[1] = e.what();
    }
  });
  {
    coded_allreduce<wc::inproc_transport, linear_code> g(t0, code, dim, quick);
    std::vector<float> out(dim), small(3);
    CHECK_THROWS_WITH(g.reduce(small, out), Contains("dim = 257"));
    try {
      g.reduce(message(code, 0, 0), out);
    } catch (const weft::error& e) {
      errors[0] = e.what();
    }
    other.join();
  }
  CHECK_THAT(errors[0], Contains("step 0 found no decodable set") && Contains("2 of 4 ranks were ready"));
  CHECK_THAT(errors[1], Contains("step 0 found no decodable set"));
}

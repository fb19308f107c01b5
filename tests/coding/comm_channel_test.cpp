// Coded aggregation over a weft::comm transport (the in-process one: ranks are threads): the master
// decodes from the first decodable set and the cancelled straggler learns it through the transport.
#include <weft/coding/aggregator.hpp>
#include <weft/coding/comm_channel.hpp>
#include <weft/coding/cyclic_repetition.hpp>
#include <weft/comm/inproc_transport.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using namespace weft::coding;
using namespace std::chrono_literals;

TEST_CASE("aggregate over weft::comm's inproc transport cancels the straggler", "[coding][comm]") {
  constexpr std::size_t n = 4, dim = 8;
  const auto code = cyclic_repetition(n, 1);
  std::vector<std::vector<float>> partial(n, std::vector<float>(dim));
  std::vector<double> truth(dim, 0.0);
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t e = 0; e < dim; ++e) truth[e] += (partial[j][e] = static_cast<float>(j * 10 + e) * 0.5f);
  weft::comm::inproc_world world(static_cast<int>(n + 1));  // rank 0 is the master
  std::atomic<int> saw_cancel{0};
  std::vector<std::thread> workers;
  for (std::size_t w = 0; w < n; ++w)
    workers.emplace_back([&, w] {
      auto t = world.transport(static_cast<int>(w + 1));
      comm_worker_channel<weft::comm::inproc_transport> ch(t, 0, dim);
      if (w == 2) {  // the straggler: waits for the cancellation (at most 5 s)
        const auto until = std::chrono::steady_clock::now() + 5s;
        while (!ch.cancelled(3) && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
        if (ch.cancelled(3)) ++saw_cancel;
        return;
      }
      std::vector<std::span<const float>> in;
      for (std::size_t j : code.assignment(w)) in.emplace_back(partial[j]);
      std::vector<float> msg(dim);
      encode(code, w, in, msg);
      ch.send(3, msg);
    });
  std::vector<float> out(dim);
  {
    auto master = world.transport(0);
    comm_master_channel<weft::comm::inproc_transport> ch(master, dim);
    CHECK(ch.num_workers() == n);
    auto r = aggregate(code, ch, 3, out, std::chrono::steady_clock::now() + 10s);
    REQUIRE(r.has_value());
    // Which workers decode depends on arrival order (workers 1 and 3 alone cover every partition,
    // so they may decode before 0 arrives): assert only what every order guarantees. Worker 2
    // never sends, so it is always cancelled and never a survivor; survivors and cancelled workers
    // partition the workers.
    CHECK(std::find(r->cancelled.begin(), r->cancelled.end(), std::size_t{2}) != r->cancelled.end());
    std::vector<std::size_t> everyone = r->survivors;
    everyone.insert(everyone.end(), r->cancelled.begin(), r->cancelled.end());
    std::sort(everyone.begin(), everyone.end());
    CHECK(everyone == std::vector<std::size_t>{0, 1, 2, 3});
    for (auto& t : workers) t.join();
  }
  CHECK(saw_cancel.load() == 1);
  for (std::size_t e = 0; e < dim; ++e) CHECK(out[e] == Approx(truth[e]).epsilon(1e-5));
}

// The coded aggregator over the in-process channel with real worker threads: it stops at the first
// decodable set, cancels the rest, and decodes the exact sum.
#include <weft/coding/aggregator.hpp>
#include <weft/coding/approximate.hpp>
#include <weft/coding/cyclic_repetition.hpp>
#include <weft/coding/inproc_channel.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

using namespace weft::coding;
using namespace std::chrono_literals;

namespace {
// Worker w encodes its partials and sends; worker `slow` first waits until cancelled (or 5 s).
void run_workers(const linear_code& code, inproc_channel& ch, std::uint64_t step,
                 const std::vector<std::vector<float>>& partial, std::vector<std::size_t> slow,
                 std::atomic<int>& cancelled_seen) {
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < code.num_workers(); ++w)
    threads.emplace_back([&, w] {
      if (std::find(slow.begin(), slow.end(), w) != slow.end()) {
        const auto until = std::chrono::steady_clock::now() + 5s;
        while (!ch.cancelled(w, step) && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
        if (ch.cancelled(w, step)) {
          ++cancelled_seen;
          return;
        }
      }
      std::vector<std::span<const float>> in;
      for (std::size_t j : code.assignment(w)) in.emplace_back(partial[j]);
      coded_message m{w, step, std::vector<float>(partial[0].size())};
      encode(code, w, in, m.payload);
      ch.send(std::move(m));
    });
  for (auto& t : threads) t.join();
}
}  // namespace

TEST_CASE("aggregate decodes from the fast workers and cancels the stragglers", "[coding][aggregate]") {
  const auto code = cyclic_repetition(6, 2);
  std::vector<std::vector<float>> partial(6, std::vector<float>(16));
  std::vector<double> truth(16, 0.0);
  for (std::size_t j = 0; j < 6; ++j)
    for (std::size_t e = 0; e < 16; ++e) {
      partial[j][e] = static_cast<float>(j + 1) * 0.25f + static_cast<float>(e);
      truth[e] += partial[j][e];
    }
  inproc_channel ch(6);
  std::atomic<int> cancelled_seen{0};
  // A stale message of an earlier step must be dropped.
  ch.send({0, 41, std::vector<float>(16, 99.0f)});
  std::thread workers([&] { run_workers(code, ch, 42, partial, {1, 4}, cancelled_seen); });
  std::vector<float> out(16);
  auto r = aggregate(code, ch, 42, out, std::chrono::steady_clock::now() + 10s);
  workers.join();
  REQUIRE(r.has_value());
  CHECK(r->survivors.size() == 4);
  CHECK(r->cancelled == std::vector<std::size_t>({1, 4}));
  CHECK(r->stale_dropped == 1);
  CHECK(cancelled_seen.load() == 2);
  for (std::size_t e = 0; e < 16; ++e) CHECK(out[e] == Approx(truth[e]).epsilon(1e-5));
}

TEST_CASE("aggregate times out with a failure naming the step", "[coding][aggregate]") {
  const auto code = cyclic_repetition(4, 1);
  inproc_channel ch(4);
  ch.send({0, 5, std::vector<float>(4, 1.0f)});
  std::vector<float> out(4, -1.0f);
  auto r = aggregate(code, ch, 5, out, std::chrono::steady_clock::now() + 20ms);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == weft::errc::timeout);
  CHECK(r.error().message.find("step 5") != std::string::npos);
  CHECK(out[0] == -1.0f);
  CHECK_FALSE(ch.cancelled(1, 5));
}

TEST_CASE("backup workers: ignore-stragglers waits for wait_for messages", "[coding][aggregate]") {
  const auto code = ignore_stragglers(5);
  inproc_channel ch(5);
  for (std::size_t w : {3u, 0u, 4u}) ch.send({w, 1, std::vector<float>(2, static_cast<float>(w))});
  std::vector<float> out(2);
  auto r = aggregate(code, ch, 1, out, std::chrono::steady_clock::now() + 1s, 3);
  REQUIRE(r.has_value());
  CHECK(out[0] == 7.0f);
  CHECK(r->residual == Approx(std::sqrt(2.0 / 5.0)));
  CHECK(r->cancelled == std::vector<std::size_t>({1, 2}));
}

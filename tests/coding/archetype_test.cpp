// Archetypes: the weakest types satisfying each weft::coding concept, run through the algorithms
// that take them (encode, aggregate, sequential_coder, a user-written backup policy).
#include <weft/coding/aggregator.hpp>
#include <weft/coding/backup_workers.hpp>
#include <weft/coding/codec.hpp>
#include <weft/coding/concepts.hpp>
#include <weft/coding/sequential.hpp>

#include <catch2/catch.hpp>

#include <deque>
#include <memory>
#include <vector>

namespace {

// A two-worker repetition code written from scratch: both workers hold the one partition.
struct minimal_code {
  std::vector<std::size_t> held{0};
  std::size_t n_workers() const { return 2; }
  std::size_t n_partitions() const { return 1; }
  std::size_t stragglers() const { return 1; }
  std::span<const std::size_t> assignment(std::size_t) const { return held; }
  double coefficient(std::size_t, std::size_t) const { return 1.0; }
  std::shared_ptr<const weft::coding::decoder> try_decoder(std::span<const std::size_t> f) const {
    if (f.empty()) return nullptr;
    auto d = std::make_shared<weft::coding::decoder>();
    d->survivors = {f[0]};
    d->weights = {1.0};
    return d;
  }
};

// A channel that replays a fixed queue and records cancellations.
struct minimal_channel {
  std::deque<weft::coding::coded_message> queue;
  std::vector<std::size_t> cancelled;
  std::optional<weft::coding::coded_message> receive(std::chrono::steady_clock::time_point) {
    if (queue.empty()) return std::nullopt;
    auto m = queue.front();
    queue.pop_front();
    return m;
  }
  void cancel(std::size_t w, std::uint64_t) { cancelled.push_back(w); }
};

// A user-written backup policy: drop one worker once any latency exceeded a threshold.
struct threshold_backup {
  bool slow_seen = false;
  void observe(std::span<const double> l) {
    for (double x : l) slow_seen = slow_seen || x > 1.0;
  }
  std::size_t backups(std::size_t) const { return slow_seen ? 1 : 0; }
};

}  // namespace

static_assert(weft::coding::gradient_code<minimal_code>);
static_assert(weft::coding::coded_channel<minimal_channel>);
static_assert(weft::coding::backup_policy<threshold_backup>);
static_assert(!weft::coding::gradient_code<int>);

TEST_CASE("archetypes run through encode, aggregate and sequential_coder", "[coding][archetype]") {
  minimal_code code;
  const std::vector<float> g{1.5f, -2};
  std::vector<float> msg(2);
  const std::array<std::span<const float>, 1> parts{g};
  weft::coding::encode(code, 1, parts, msg);
  CHECK(msg == g);

  minimal_channel ch;
  ch.queue.push_back({1, 7, {1.5f, -2}});
  std::vector<float> out(2);
  auto r = weft::coding::aggregate(code, ch, 7, out, std::chrono::steady_clock::now());
  REQUIRE(r.has_value());
  CHECK(out == g);
  CHECK(ch.cancelled == std::vector<std::size_t>{0});

  minimal_channel empty;
  auto t = weft::coding::aggregate(code, empty, 8, out, std::chrono::steady_clock::now());
  CHECK_FALSE(t.has_value());
  CHECK(t.error().code == weft::errc::timeout);

  weft::coding::sequential_coder<minimal_code> seq({code}, 0);
  seq.begin_round();
  const std::vector<std::size_t> fin{0};
  CHECK(seq.end_round(fin).decoded == std::vector<std::uint64_t>{0});

  threshold_backup p;
  const std::vector<double> lat{0.5, 2.0};
  p.observe(lat);
  CHECK(p.backups(2) == 1);
}

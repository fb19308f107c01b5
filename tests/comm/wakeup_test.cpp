// Two threads of one rank share a stream: the thread that pumps it is often not the one whose
// receive it completes. These tests drive the stream engine through a link whose wait() returns
// only when poked (or when told to), so a missing wake-up or a completion lost at the deadline
// shows as a wrong result, never as a slow one.
#include "fake_link.hpp"

#include <weft/comm/comm_error.hpp>
#include <weft/comm/options.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace wc = weft::comm;
namespace wd = weft::comm::detail;
using weft_test::append_data;

namespace {

// Bytes from peer 1 on one connection, read by any thread. wait() sleeps until poke() (counted in
// `gen`), until `until` once the stream is paused, or until a safety limit (counted as a missed
// wake-up). read_some may pause once at byte `pause_at`, holding the stream, until released.
struct threaded_link {
  static constexpr std::size_t stage_bytes = 0;
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::byte> in;
  std::size_t at = 0, max_read = 10;
  std::size_t pause_at = SIZE_MAX;
  bool paused = false, released = false;
  std::uint64_t gen = 0;
  int in_wait = 0, missed_wakeups = 0;
  std::chrono::milliseconds safety{5'000};

  void append(const std::vector<std::byte>& bytes, std::size_t pause_at_byte = SIZE_MAX) {
    std::lock_guard lock(m);
    in.insert(in.end(), bytes.begin(), bytes.end());
    pause_at = pause_at_byte;
  }
  std::size_t write_some(int, int, const wd::io_part* parts, int count) {
    std::size_t n = 0;
    for (int i = 0; i < count; ++i) n += parts[i].len;
    return n;
  }
  std::size_t read_some(int peer, int, std::byte* dst, std::size_t n) {
    if (peer != 1) return 0;
    std::unique_lock lock(m);
    if (at == pause_at && !released) {
      paused = true;
      cv.notify_all();
      cv.wait(lock, [&] { return released; });
    }
    const std::size_t k = std::min({n, in.size() - at, max_read});
    if (k == 0) return 0;
    std::memcpy(dst, in.data() + at, k);
    at += k;
    return k;
  }
  void commit_reads(int, int) {}
  std::uint64_t prepare_wait() {
    std::lock_guard lock(m);
    return gen;
  }
  void wait(std::uint64_t token, wc::deadline until, int) {
    std::unique_lock lock(m);
    if (gen != token || wc::clock_type::now() >= until) return;
    ++in_wait;
    cv.notify_all();
    const auto limit = wc::clock_type::now() + safety;
    for (;;) {
      if (gen != token) break;
      const auto now = wc::clock_type::now();
      if (paused && now >= until) break;
      if (now >= limit) {
        ++missed_wakeups;
        break;
      }
      cv.wait_until(lock, paused ? std::min(until, limit) : limit);
    }
    --in_wait;
  }
  void poke() {
    std::lock_guard lock(m);
    ++gen;
    cv.notify_all();
  }
  template <class Pred>
  void wait_for(Pred pred) {
    std::unique_lock lock(m);
    cv.wait(lock, pred);
  }
  void release() {
    std::lock_guard lock(m);
    released = true;
    cv.notify_all();
  }
  void check_alive(int) {}
  std::size_t remote_min() const { return SIZE_MAX; }
  void remote_read(int, std::uint64_t, std::byte*, std::size_t) {
    throw weft::error(weft::errc::unsupported, "threaded_link", "no single copy");
  }
  void remote_ack(int) {}
  std::uint64_t remote_post(int) { return 0; }
  std::uint64_t remote_acked(int) const { return 0; }
  void on_abort(const std::string&) {}
};

wd::engine_config sleeping_config() {
  wd::engine_config cfg;
  cfg.waiting.mode = wc::wait_mode::block;  // sleep at once: the wake-up is what is tested
  cfg.blame_window = std::chrono::milliseconds(0);
  cfg.drain_window = std::chrono::milliseconds(0);
  return cfg;
}

}  // namespace

TEST_CASE("a thread that completes another thread's receive wakes it", "[comm][wire][concurrent]") {
  threaded_link link;
  wd::stream_engine<threaded_link> engine(link, 0, 2, 1, SIZE_MAX, "test", sleeping_config());
  std::vector<std::byte> a(100), b(16);
  std::optional<std::string> a_error;
  // A waits for channel 5 and falls asleep before anything has arrived.
  std::thread owner([&] {
    try {
      engine.recv(1, wc::msg_tag{5, 0}, std::span<std::byte>(a), wc::clock_type::now() + std::chrono::seconds(60));
    } catch (const std::exception& e) {
      a_error = e.what();
    }
  });
  link.wait_for([&] { return link.in_wait > 0; });
  // Then both messages arrive, and B, receiving channel 6, reads A's on the way to its own.
  std::vector<std::byte> bytes;
  append_data(bytes, 5, 0, a.size(), 0, nullptr, std::byte{1});
  append_data(bytes, 6, 0, b.size(), 0, nullptr, std::byte{2});
  link.append(bytes);
  engine.recv(1, wc::msg_tag{6, 0}, std::span<std::byte>(b), wc::clock_type::now() + std::chrono::seconds(60));
  owner.join();
  CHECK_FALSE(a_error);
  CHECK(a == std::vector<std::byte>(a.size(), std::byte{1}));
  CHECK(b == std::vector<std::byte>(b.size(), std::byte{2}));
  // A was woken by B's completion, not by its safety limit.
  CHECK(link.missed_wakeups == 0);
}

TEST_CASE("a receive completed by another thread as its deadline passes is delivered, not lost",
          "[comm][wire][concurrent]") {
  threaded_link link;
  wd::stream_engine<threaded_link> engine(link, 0, 2, 1, SIZE_MAX, "test", sleeping_config());
  std::vector<std::byte> a(100), b(16);
  std::optional<std::string> a_error;
  const auto a_deadline = wc::clock_type::now() + std::chrono::milliseconds(300);
  std::thread owner([&] {
    try {
      engine.recv(1, wc::msg_tag{5, 0}, std::span<std::byte>(a), a_deadline);
    } catch (const std::exception& e) {
      a_error = e.what();
    }
  });
  link.wait_for([&] { return link.in_wait > 0; });
  // B starts reading A's message and holds the stream mid-payload across A's deadline; only then
  // does it finish. Whatever A sees of this, the message arrived whole: A must not lose it.
  std::vector<std::byte> bytes;
  append_data(bytes, 5, 0, a.size(), 0, nullptr, std::byte{1});
  append_data(bytes, 6, 0, b.size(), 0, nullptr, std::byte{2});
  link.append(bytes, wd::frame_header_bytes + 10);
  std::thread releaser([&] {
    link.wait_for([&] { return link.paused; });
    std::this_thread::sleep_until(a_deadline + std::chrono::milliseconds(100));
    link.release();
  });
  engine.recv(1, wc::msg_tag{6, 0}, std::span<std::byte>(b), wc::clock_type::now() + std::chrono::seconds(60));
  releaser.join();
  owner.join();
  CHECK_FALSE(a_error);
  CHECK(a == std::vector<std::byte>(a.size(), std::byte{1}));
  CHECK(b == std::vector<std::byte>(b.size(), std::byte{2}));
  CHECK_FALSE(engine.aborted());
}

TEST_CASE("a receive whose message only partly arrived by its deadline fails and aborts", "[comm][wire][concurrent]") {
  threaded_link link;
  wd::stream_engine<threaded_link> engine(link, 0, 2, 1, SIZE_MAX, "test", sleeping_config());
  std::vector<std::byte> a(100);
  std::vector<std::byte> bytes;
  append_data(bytes, 5, 0, a.size(), 0, nullptr, std::byte{1});
  bytes.resize(wd::frame_header_bytes + 40);  // the rest never comes
  link.append(bytes);
  link.safety = std::chrono::milliseconds(20);  // nobody pokes: wait returns by itself
  CHECK_THROWS_AS(engine.recv(1, wc::msg_tag{5, 0}, std::span<std::byte>(a),
                              wc::clock_type::now() + std::chrono::milliseconds(100)),
                  wc::comm_error);
  CHECK(engine.aborted());
}

// The receive matcher on its own (detail/receive_matcher.hpp): frames land in the receive posted
// for their channel or are kept aside and taken later, oldest first, whatever order receives and
// frames come in (against a reference model of per-channel queues); a frame that disagrees with
// its receive fails it with the field; the limits refuse a frame before anything changes; a close
// fails what waits and spares what was kept; detaching the receive a frame is landing in cuts it off.
#include <weft/comm/detail/receive_matcher.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <vector>

namespace wd = weft::comm::detail;

namespace {

wd::frame_facts facts(std::uint32_t channel, std::uint64_t bytes, std::uint32_t check = 7, std::uint32_t seq = 0) {
  return wd::frame_facts{channel, seq, check, bytes, bytes};
}

void aim(wd::recv_request& r, std::uint32_t channel, std::vector<std::byte>& buf, std::uint32_t check = 7) {
  r.channel = channel;
  r.check = check;
  r.total = buf.size();
  r.len = buf.size();
  r.dst = buf.data();
  r.peer = 1;
  r.owner = wd::this_thread_token();
}

// Delivers a frame of `bytes` (value v) as the engine does: arrive, write the payload, complete.
wd::receive_matcher::landing deliver(wd::receive_matcher& m, std::uint32_t channel, std::size_t bytes, int v,
                                     std::uint32_t check = 7) {
  auto l = m.arrive(facts(channel, bytes, check), 1);
  if (l.refused) return l;
  if (l.target) std::memset(l.target, v, bytes);
  m.complete();
  return l;
}

bool all_equal(const std::vector<std::byte>& b, int v) {
  for (auto x : b)
    if (x != static_cast<std::byte>(v)) return false;
  return true;
}

}  // namespace

TEST_CASE("matcher: a posted receive takes its frame in place; an early frame is kept and copied",
          "[comm][receive_matcher]") {
  wd::receive_matcher m(16, 1 << 20);
  std::vector<std::byte> a(100), b(50);
  wd::recv_request ra, rb;
  aim(ra, 1, a);
  REQUIRE_FALSE(m.post(ra));
  CHECK(m.posted() == 1);
  const auto l = m.arrive(facts(1, 100), 1);
  CHECK(l.target == a.data());  // in place: no copy
  CHECK_FALSE(ra.is_done());    // not before its bytes are in
  std::memset(l.target, 3, 100);
  m.complete();
  CHECK(ra.is_done());
  CHECK_FALSE(ra.failed.load());
  CHECK(all_equal(a, 3));

  // Nobody waits on channel 2 yet: the frame is kept (bytes counted), then copied by the post.
  deliver(m, 2, 50, 4);
  CHECK(m.kept_frames() == 1);
  CHECK(m.kept_bytes() == 50);
  aim(rb, 2, b);
  REQUIRE_FALSE(m.post(rb));
  CHECK(rb.is_done());
  CHECK(all_equal(b, 4));
  CHECK(m.kept_frames() == 0);
  CHECK(m.kept_bytes() == 0);
  CHECK(m.finished() == 0);  // both receives are this thread's: nobody else to wake
}

TEST_CASE("matcher: a receive posted while its kept frame is still arriving is deferred, then served",
          "[comm][receive_matcher]") {
  wd::receive_matcher m(16, 1 << 20);
  auto l = m.arrive(facts(5, 8), 1);
  REQUIRE(l.target);
  std::memset(l.target, 9, 4);  // half of it so far
  std::vector<std::byte> buf(8);
  wd::recv_request r;
  aim(r, 5, buf);
  REQUIRE_FALSE(m.post(r));
  CHECK(r.deferred);
  CHECK_FALSE(r.is_done());
  std::memset(l.target + 4, 9, 4);
  m.complete();
  REQUIRE_FALSE(m.post(r));
  CHECK(r.is_done());
  CHECK(all_equal(buf, 9));
}

TEST_CASE("matcher: messages on each channel in order, whatever the interleaving (reference model)",
          "[comm][receive_matcher]") {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 200; ++trial) {
    wd::receive_matcher m(1 << 16, 1 << 30);
    // Per channel, the values of the frames sent, in order; the receives take them in that order.
    std::map<std::uint32_t, std::deque<int>> sent;
    std::deque<std::unique_ptr<wd::recv_request>> reqs;
    std::deque<std::unique_ptr<std::vector<std::byte>>> bufs;
    std::map<std::uint32_t, std::deque<std::pair<wd::recv_request*, std::vector<std::byte>*>>> waiting;
    int value = 1;
    std::map<std::uint32_t, int> frames_left, recvs_left;
    for (std::uint32_t ch = 1; ch <= 3; ++ch) frames_left[ch] = recvs_left[ch] = 1 + static_cast<int>(rng() % 6);
    auto bytes_of = [](std::uint32_t ch) { return static_cast<std::size_t>(ch) * 3; };
    for (;;) {
      std::vector<std::pair<bool, std::uint32_t>> moves;  // (frame?, channel)
      for (auto& [ch, k] : frames_left)
        if (k > 0) moves.push_back({true, ch});
      for (auto& [ch, k] : recvs_left)
        if (k > 0) moves.push_back({false, ch});
      if (moves.empty()) break;
      const auto [frame, ch] = moves[rng() % moves.size()];
      if (frame) {
        --frames_left[ch];
        sent[ch].push_back(value);
        deliver(m, ch, bytes_of(ch), value++);
      } else {
        --recvs_left[ch];
        bufs.push_back(std::make_unique<std::vector<std::byte>>(bytes_of(ch)));
        reqs.push_back(std::make_unique<wd::recv_request>());
        aim(*reqs.back(), ch, *bufs.back());
        REQUIRE_FALSE(m.post(*reqs.back()));
        waiting[ch].push_back({reqs.back().get(), bufs.back().get()});
      }
    }
    for (auto& [ch, q] : waiting) {
      INFO("trial " << trial << " channel " << ch);
      REQUIRE(q.size() == sent[ch].size());
      for (std::size_t i = 0; i < q.size(); ++i) {
        REQUIRE(q[i].first->is_done());
        CHECK_FALSE(q[i].first->failed.load());
        CHECK(all_equal(*q[i].second, sent[ch][i]));
      }
    }
    CHECK(m.kept_frames() == 0);
    CHECK(m.posted() == 0);
  }
}

TEST_CASE("matcher: a frame that disagrees with its receive fails it, naming the field", "[comm][receive_matcher]") {
  wd::receive_matcher m(16, 1 << 20);
  std::vector<std::byte> buf(16);
  wd::recv_request r;
  aim(r, 1, buf);
  REQUIRE_FALSE(m.post(r));
  auto l = m.arrive(facts(1, 17), 1);
  CHECK(l.target == nullptr);  // its bytes are read past
  REQUIRE(l.mismatch);
  CHECK(l.mismatch->code == weft::errc::mismatch);
  CHECK(l.mismatch->field == "message bytes");
  CHECK(l.mismatch->blamed == 1);
  CHECK(r.is_done());
  CHECK(r.failed.load());

  // The same message split another way (the ranks' connections or stripe_min differ).
  wd::recv_request rs;
  aim(rs, 3, buf);
  REQUIRE_FALSE(m.post(rs));
  auto split = m.arrive(wd::frame_facts{3, 0, 7, 16, 8}, 1);
  CHECK(split.target == nullptr);
  REQUIRE(split.mismatch);
  CHECK(split.mismatch->field == "message split");
  CHECK(split.mismatch->here == "16");
  CHECK(split.mismatch->there == "8");
  CHECK(rs.failed.load());

  // Another check word, found when a later receive takes a kept frame: reported by post().
  deliver(m, 2, 16, 1, /*check=*/8);
  wd::recv_request r2;
  aim(r2, 2, buf);
  const auto f = m.post(r2);
  REQUIRE(f);
  CHECK(f->field == "operation");
  CHECK(r2.failed.load());
  CHECK(m.kept_frames() == 0);  // the frame is used up either way

  // Another collective sequence.
  wd::recv_request r3;
  aim(r3, 3, buf);
  r3.seq = 4;
  REQUIRE_FALSE(m.post(r3));
  const auto l3 = m.arrive(facts(3, 16, 7, 5), 1);
  REQUIRE(l3.mismatch);
  CHECK(l3.mismatch->field == "collective sequence");
  CHECK(l3.mismatch->here == "4");
  CHECK(l3.mismatch->there == "5");
}

TEST_CASE("matcher: frames nobody asked for are bounded before anything is allocated", "[comm][receive_matcher]") {
  wd::receive_matcher m(2, 100);
  REQUIRE_FALSE(deliver(m, 1, 60, 1).refused);
  const auto l = m.arrive(facts(1, 41), 1);  // 101 bytes kept: refused
  REQUIRE(l.refused);
  CHECK(l.refused->code == weft::errc::capacity);
  CHECK(l.target == nullptr);
  CHECK(m.kept_bytes() == 60);  // nothing changed
  CHECK(m.kept_frames() == 1);
  REQUIRE_FALSE(deliver(m, 1, 40, 2).refused);
  const auto l2 = m.arrive(facts(2, 0), 1);  // a third frame, even of zero bytes
  REQUIRE(l2.refused);
  CHECK(m.kept_frames() == 2);
}

TEST_CASE("matcher: a close fails what waits; frames kept before it are still delivered", "[comm][receive_matcher]") {
  wd::receive_matcher m(16, 1 << 20);
  deliver(m, 1, 8, 5);
  std::vector<std::byte> b1(8), b2(8), b3(8);
  wd::recv_request waiting, first, later;
  aim(waiting, 2, b2);
  REQUIRE_FALSE(m.post(waiting));
  weft::comm::detail::fault why;
  why.code = weft::errc::peer_failure;
  why.blamed = 1;
  why.detail = "peer 1 closed the connection";
  m.close(why);
  CHECK(m.closed());
  CHECK(waiting.failed.load());
  CHECK(waiting.why->detail == "peer 1 closed the connection");
  CHECK(m.finished() == 1);
  aim(first, 1, b1);
  REQUIRE_FALSE(m.post(first));
  CHECK(first.is_done());
  CHECK_FALSE(first.failed.load());
  CHECK(all_equal(b1, 5));
  aim(later, 1, b3);
  REQUIRE_FALSE(m.post(later));
  CHECK(later.failed.load());
  CHECK(later.why->code == weft::errc::peer_failure);
}

TEST_CASE("matcher: detaching the receive a frame lands in cuts it off; a queued one lets frames be kept",
          "[comm][receive_matcher]") {
  wd::receive_matcher m(16, 1 << 20);
  std::vector<std::byte> buf(8);
  wd::recv_request r;
  aim(r, 1, buf);
  REQUIRE_FALSE(m.post(r));
  CHECK_FALSE(m.detach(r));  // only queued: nothing of it had arrived
  CHECK(m.posted() == 0);
  deliver(m, 1, 8, 2);  // so this one is kept
  CHECK(m.kept_frames() == 1);

  wd::recv_request r2;
  aim(r2, 3, buf);
  REQUIRE_FALSE(m.post(r2));
  auto l = m.arrive(facts(3, 8), 1);
  REQUIRE(l.target == buf.data());
  CHECK(m.detach(r2));  // its frame was landing: cut off
  m.complete();         // the engine read the rest past it
  CHECK_FALSE(r2.is_done());
}

TEST_CASE("matcher: a lost payload fails its receive, or the receive that takes the kept frame",
          "[comm][receive_matcher]") {
  wd::receive_matcher m(16, 1 << 20);
  std::vector<std::byte> buf(8);
  wd::recv_request r;
  aim(r, 1, buf);
  REQUIRE_FALSE(m.post(r));
  m.arrive(facts(1, 8), 1);
  weft::comm::detail::fault gone;
  gone.code = weft::errc::peer_failure;
  gone.blamed = 1;
  m.lose(gone);
  m.complete();
  CHECK(r.failed.load());
  CHECK(r.why->code == weft::errc::peer_failure);

  m.arrive(facts(2, 8), 1);
  m.lose(gone);
  m.complete();
  wd::recv_request r2;
  aim(r2, 2, buf);
  REQUIRE_FALSE(m.post(r2));
  CHECK(r2.failed.load());
  CHECK(r2.why->code == weft::errc::peer_failure);
  CHECK(m.kept_frames() == 0);
}

TEST_CASE("matcher: completing another thread's receive is counted (its owner may sleep)", "[comm][receive_matcher]") {
  wd::receive_matcher m(16, 1 << 20);
  std::vector<std::byte> buf(4);
  wd::recv_request r;
  aim(r, 1, buf);
  static const char elsewhere = 0;
  r.owner = &elsewhere;
  REQUIRE_FALSE(m.post(r));
  deliver(m, 1, 4, 1);
  CHECK(r.is_done());
  CHECK(m.finished() == 1);
}

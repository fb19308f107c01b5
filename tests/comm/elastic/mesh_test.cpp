// elastic::mesh_transport's data path over socket pairs: striped and unstriped messages of every
// size class on interleaved channels, receives posted in another order than the sends, every comm
// algorithm on top, and hostile frames (oversized, out of order, pieces that disagree) refused
// with a weft::error that closes that peer, never a crash.
#include <weft/comm/collectives.hpp>
#include <weft/comm/elastic/mesh_transport.hpp>

#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

namespace wc = weft::comm;
namespace we = weft::comm::elastic;
using namespace std::chrono_literals;

namespace {

const std::vector<we::peer_address> two = {{"a", "127.0.0.1", 4000, 1}, {"b", "127.0.0.1", 4001, 2}};

// Two members joined by K socket pairs each way; mesh[0] is member a, mesh[1] member b.
struct pair_of_meshes {
  std::unique_ptr<we::mesh_transport> mesh[2];
  pair_of_meshes(int K, std::size_t stripe_min, weft::comm::detail::wire_limits limits = {}) {
    std::vector<int> fa(2 * K, -1), fb(2 * K, -1);
    for (int k = 0; k < K; ++k) {
      int sv[2];
      REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
      fa[K + k] = sv[0];  // a's connection k to b
      fb[k] = sv[1];      // b's connection k to a
    }
    mesh[0] = std::make_unique<we::mesh_transport>(two, 0, 1, fa, limits, we::mesh_options{K, stripe_min});
    mesh[1] = std::make_unique<we::mesh_transport>(two, 1, 1, fb, limits, we::mesh_options{K, stripe_min});
  }
};

std::vector<std::byte> pattern(std::size_t n, int salt) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 31 + static_cast<std::size_t>(salt)) & 0xff);
  return v;
}

}  // namespace

TEST_CASE("mesh: striped and unstriped messages arrive whole and in order per channel", "[comm][elastic][mesh]") {
  for (int K : {1, 2, 3}) {
    pair_of_meshes p(K, 1024);
    const std::vector<std::size_t> sizes = {0, 1, 1023, 1024, 1025, 70'001, (1u << 20) + 7};
    const auto until = wc::clock_type::now() + 20s;
    std::thread sender([&] {
      for (std::size_t i = 0; i < sizes.size(); ++i)
        for (std::uint32_t ch : {1u, 2u}) {
          const auto v = pattern(sizes[i], static_cast<int>(i * 2 + ch));
          p.mesh[0]->send(1, wc::msg_tag{ch, 7}, v, until);
        }
    });
    // Channel 2 first, then channel 1: channel 1's messages wait aside meanwhile.
    bool ok = true;
    for (std::uint32_t ch : {2u, 1u})
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        std::vector<std::byte> got(sizes[i]);
        p.mesh[1]->recv(0, wc::msg_tag{ch, 7}, got, until);
        ok = ok && got == pattern(sizes[i], static_cast<int>(i * 2 + ch));
      }
    sender.join();
    INFO("K = " << K);
    CHECK(ok);
  }
}

TEST_CASE("mesh: every collective over a striped pair, and a size mismatch is an error", "[comm][elastic][mesh]") {
  pair_of_meshes p(2, 4096);
  std::vector<float> out[2];
  std::thread t([&] {
    std::vector<float> v(300'001, 2.0f);
    wc::allreduce(*p.mesh[1], std::span<float>(v));
    out[1] = v;
  });
  std::vector<float> v(300'001, 1.0f);
  wc::allreduce(*p.mesh[0], std::span<float>(v));
  t.join();
  out[0] = v;
  CHECK(out[0] == std::vector<float>(300'001, 3.0f));
  CHECK(out[1] == out[0]);

  const auto until = wc::clock_type::now() + 10s;
  std::thread s([&] { p.mesh[0]->send(1, wc::msg_tag{9, 1}, pattern(100'000, 1), until); });
  std::vector<std::byte> wrong(99'999);
  CHECK_THROWS_WITH(p.mesh[1]->recv(0, wc::msg_tag{9, 1}, wrong, until),
                    Catch::Contains("the peer sent 100000 bytes but this member expects 99999"));
  s.join();
}

TEST_CASE("mesh: hostile frames close that peer with an error, never a crash or a phantom message",
          "[comm][elastic][mesh]") {
  struct hdr {
    std::uint32_t channel, check;
    std::uint64_t total, seq;
    std::uint32_t pieces, reserved;
  };
  auto attack = [](std::vector<hdr> frames, std::size_t body_bytes, weft::errc expect) {
    // frames[0], then body_bytes of payload, then the other frames.
    int s0[2], s1[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, s0) == 0);
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, s1) == 0);
    weft::comm::detail::wire_limits limits;
    limits.max_message_bytes = 1 << 20;
    limits.max_unexpected_bytes = 100;
    we::mesh_transport m(two, 0, 1, {-1, -1, s0[0], s1[0]}, limits, we::mesh_options{2, 1024});
    ::send(s0[1], &frames[0], sizeof(hdr), MSG_NOSIGNAL);
    const std::vector<char> body(body_bytes, 'x');
    if (body_bytes) ::send(s0[1], body.data(), body.size(), MSG_NOSIGNAL);
    for (std::size_t i = 1; i < frames.size(); ++i) ::send(s0[1], &frames[i], sizeof(hdr), MSG_NOSIGNAL);
    std::vector<std::byte> buf(16);
    try {
      m.recv(1, wc::msg_tag{1, 0}, buf, wc::clock_type::now() + 2s);
      FAIL("a hostile frame was accepted");
    } catch (const weft::error& e) {
      CHECK(static_cast<weft::errc>(e.code().value()) == expect);
    }
    // The peer is closed for good: a second receive fails too (no phantom message).
    CHECK_THROWS_AS(m.recv(1, wc::msg_tag{1, 0}, buf, wc::clock_type::now() + 200ms), weft::error);
    ::close(s0[1]);
    ::close(s1[1]);
  };
  attack({{1, 0, std::uint64_t{1} << 62, 0, 1, 0}}, 0, weft::errc::capacity);    // an absurd length
  attack({{2, 0, 64, 0, 1, 0}, {2, 0, 64, 1, 1, 0}}, 64, weft::errc::capacity);  // unasked bytes past the cap
  attack({{1, 0, 16, 5, 1, 0}}, 0, weft::errc::parse);                           // out of sequence
  attack({{1, 0, 16, 0, 3, 0}}, 0, weft::errc::parse);                           // pieces neither 1 nor K
  attack({{1, 0, 16, 0, 1, 7}}, 0, weft::errc::parse);                           // reserved bits
  attack({{0xffffffffu, 0, 1 << 20, 0, 1, 0}}, 0, weft::errc::capacity);         // a huge abort reason
}

// elastic::mesh_transport's data path (the stream engine over each epoch's sockets) over socket
// pairs: striped and unstriped messages of every size class on interleaved channels, receives
// posted in another order than the sends, every comm algorithm on top, disagreements named,
// hostile frames (oversized, malformed, past the caps) refused with a weft::error that fails the
// mesh, never a crash; a member that leaves after its last message; bad construction arguments.
#include "../fake_link.hpp"

#include <weft/comm/collectives.hpp>
#include <weft/comm/elastic/mesh_transport.hpp>

#include <catch2/catch.hpp>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
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
  std::thread s([&] {
    try {  // the receiver's failure may shut the connections before the bytes are all out
      p.mesh[0]->send(1, wc::msg_tag{9, 1}, pattern(1000, 1), until);
    } catch (const weft::error&) {
    }
  });
  std::vector<std::byte> wrong(999);
  try {
    p.mesh[1]->recv(0, wc::msg_tag{9, 1}, wrong, until);
    FAIL("a message of another size was accepted");
  } catch (const wc::comm_error& e) {
    CHECK(e.code_value() == weft::errc::mismatch);
    CHECK(e.info().field == "message bytes");
    CHECK(e.info().blamed == 0);
    const std::string what = e.what();
    CHECK(what.find("message bytes 999 here, 1000 at rank 0") != std::string::npos);
    CHECK(what.find("[members: 1 (b), 0 (a)]") != std::string::npos);  // the members, by name
  }
  s.join();
}

TEST_CASE("mesh: members that stripe a message differently fail with the split named", "[comm][elastic][mesh]") {
  std::vector<int> fa(4, -1), fb(4, -1);
  for (int k = 0; k < 2; ++k) {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    fa[2 + k] = sv[0];
    fb[k] = sv[1];
  }
  we::mesh_transport a(two, 0, 1, fa, {}, we::mesh_options{2, 1024});
  we::mesh_transport b(two, 1, 1, fb, {}, we::mesh_options{2, 1 << 20});  // does not split 4 KiB
  const auto until = wc::clock_type::now() + 10s;
  std::thread s([&] {
    try {
      a.send(1, wc::msg_tag{1, 0}, pattern(4096, 1), until);
    } catch (const weft::error&) {
    }
  });
  std::vector<std::byte> in(4096);
  try {
    b.recv(0, wc::msg_tag{1, 0}, in, until);
    FAIL("a differently split message was accepted");
  } catch (const wc::comm_error& e) {
    CHECK(e.code_value() == weft::errc::mismatch);
    CHECK(e.info().field == "message split");
  }
  s.join();
}

TEST_CASE("mesh: hostile frames fail the mesh with an error, never a crash or a phantom message",
          "[comm][elastic][mesh]") {
  // Frames (weft::comm's data frames, docs/comm.md "Wire format: data frames") from member b on
  // its connection 0, while member a waits for 16 bytes on channel 1.
  auto attack = [](const std::vector<std::byte>& bytes, weft::errc expect) {
    int s0[2], s1[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, s0) == 0);
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, s1) == 0);
    weft::comm::detail::wire_limits limits;
    limits.max_message_bytes = 1 << 20;
    limits.max_unexpected_bytes = 100;
    we::mesh_transport m(two, 0, 1, {-1, -1, s0[0], s1[0]}, limits, we::mesh_options{2, 1024});
    ::send(s0[1], bytes.data(), bytes.size(), MSG_NOSIGNAL);
    std::vector<std::byte> buf(16);
    try {
      m.recv(1, wc::msg_tag{1, 0}, buf, wc::clock_type::now() + 2s);
      FAIL("a hostile frame was accepted");
    } catch (const weft::error& e) {
      CHECK(static_cast<weft::errc>(e.code().value()) == expect);
    }
    // The mesh is failed for good: a second receive fails too (no phantom message).
    CHECK_THROWS_AS(m.recv(1, wc::msg_tag{1, 0}, buf, wc::clock_type::now() + 200ms), weft::error);
    ::close(s0[1]);
    ::close(s1[1]);
  };
  using weft_test::frame_spec;
  auto frame = [](frame_spec f, std::size_t body = 0) {
    std::vector<std::byte> out;
    weft_test::append_header(out, f);
    out.insert(out.end(), body, std::byte{'x'});
    return out;
  };
  frame_spec absurd;
  absurd.channel = 1;
  absurd.total = absurd.piece = std::uint64_t{1} << 62;
  attack(frame(absurd), weft::errc::capacity);  // an absurd length
  std::vector<std::byte> two_unasked;
  weft_test::append_data(two_unasked, 2, 0, 64);
  weft_test::append_data(two_unasked, 2, 0, 64);
  attack(two_unasked, weft::errc::capacity);  // unasked bytes past the cap
  frame_spec marker;
  marker.marker = 0x1234;
  marker.channel = 1;
  marker.total = marker.piece = 16;
  attack(frame(marker, 16), weft::errc::parse);  // out of step: not a frame
  frame_spec piece;
  piece.channel = 1;
  piece.total = 16;
  piece.piece = 17;
  attack(frame(piece), weft::errc::parse);  // a piece larger than its message
  frame_spec flags;
  flags.channel = 1;
  flags.total = flags.piece = 16;
  flags.flags = 0x80;
  attack(frame(flags, 16), weft::errc::parse);  // unknown flag bits
  flags.flags = weft::comm::detail::frame_flag_inline;
  attack(frame(flags, 16), weft::errc::parse);  // an eager frame: tcp has no eager path
  frame_spec huge_abort;
  huge_abort.kind = static_cast<std::uint8_t>(weft::comm::detail::frame_kind::abort);
  huge_abort.total = huge_abort.piece = 1 << 20;
  attack(frame(huge_abort), weft::errc::parse);  // a huge abort reason
  std::vector<std::byte> aborted;
  weft_test::append_abort(aborted, 1, -1, -1, weft::errc::io, "b gave up");
  attack(aborted, weft::errc::aborted);  // a well-formed abort: the reason reaches a
}

TEST_CASE("mesh: a peer that closes fails only what waits on it, with both members named", "[comm][elastic][mesh]") {
  pair_of_meshes p(2, 1024);
  std::vector<std::byte> got(8);
  // A quiet point-to-point timeout first: nothing moved, so the mesh stays usable.
  try {
    p.mesh[0]->recv(1, wc::msg_tag{3, 0}, got, wc::clock_type::now() + 50ms);
    FAIL("a receive with nothing sent completed");
  } catch (const wc::comm_error& e) {
    CHECK(e.code_value() == weft::errc::timeout);
    CHECK(std::string(e.what()).find("before the deadline") != std::string::npos);
    CHECK(std::string(e.what()).find("1 (b)") != std::string::npos);
  }
  p.mesh[1]->send(0, wc::msg_tag{3, 0}, pattern(8, 3), wc::clock_type::now() + 5s);
  p.mesh[1].reset();  // b leaves after its last message: it is still delivered
  p.mesh[0]->recv(1, wc::msg_tag{3, 0}, got, wc::clock_type::now() + 5s);
  CHECK(got == pattern(8, 3));
  try {
    p.mesh[0]->recv(1, wc::msg_tag{3, 0}, got, wc::clock_type::now() + 5s);
    FAIL("a receive from a member that left completed");
  } catch (const wc::comm_error& e) {
    CHECK(e.code_value() == weft::errc::peer_failure);
    CHECK(e.info().blamed == 1);
    CHECK(std::string(e.what()).find("1 (b)") != std::string::npos);
  }
}

TEST_CASE("mesh: bad construction arguments are refused and the sockets closed", "[comm][elastic][mesh]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  CHECK_THROWS_WITH(we::mesh_transport(two, 0, 1, {-1, sv[0], -1}, {}, we::mesh_options{1, 1024}),
                    Catch::Contains("3 sockets for 2 members"));
  CHECK(::fcntl(sv[0], F_GETFD) == -1);  // the mesh owned it: closed
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  CHECK_THROWS_WITH(we::mesh_transport(two, 0, 1, {sv[0], sv[1]}, {}, we::mesh_options{1, 1024}),
                    Catch::Contains("this member's own) must be -1"));
  CHECK_THROWS_WITH(we::mesh_transport(two, 2, 1, {-1, -1}, {}, we::mesh_options{1, 1024}),
                    Catch::Contains("member index 2"));
  CHECK_THROWS_WITH(we::mesh_transport(two, 0, 1, {-1, -1}, {}, we::mesh_options{0, 1024}),
                    Catch::Contains("connections 0"));
}

TEST_CASE("mesh: a process of the previous wire version is refused at the handshake; the epoch forms without it",
          "[comm][elastic][mesh]") {
  namespace wd = weft::comm::detail;
  int port_a = 0, port_b = 0;
  const int la = we::detail::listen_on("127.0.0.1", port_a, "test");
  const int lb = we::detail::listen_on("127.0.0.1", port_b, "test");
  const std::vector<we::peer_address> members = {{"a", "127.0.0.1", port_a, 11}, {"b", "127.0.0.1", port_b, 12}};
  const auto until = wc::clock_type::now() + 10s;
  std::unique_ptr<we::mesh_transport> a, b;
  std::string a_failed;
  std::thread ta([&] {
    try {
      a = std::make_unique<we::mesh_transport>(members, 0, la, 7, until, wd::job_secret{}, wd::wire_limits{},
                                               we::mesh_options{1, 1024});
    } catch (const std::exception& e) {
      a_failed = e.what();
    }
  });
  struct joiner {
    std::thread& t;
    ~joiner() {
      if (t.joinable()) t.join();
    }
  } join_a{ta};
  // A member b of wire version 6 - 1 (whose mesh spoke frames of its own) knocks first: it is
  // answered with a's hello (so it can say why) and closed before it may send a frame.
  wd::peer_identity id;
  id.rank = 1;
  id.size = 2;
  id.index = 0;
  id.count = 1;
  id.epoch = 7;
  id.instance = 12;
  id.name = "b";
  auto hello = wd::encode_hello(wd::conn_kind::elastic_mesh, false, id, {});
  hello[4] = static_cast<std::byte>((wd::wire_version - 1) & 0xff);  // u16 version, little-endian
  hello[5] = static_cast<std::byte>((wd::wire_version - 1) >> 8);
  const int old = we::detail::connect_to("127.0.0.1", port_a, until, "test", "member a");
  REQUIRE(we::detail::write_all(old, hello.data(), hello.size(), until));
  std::vector<std::byte> reply;
  bool closed = false;
  while (!closed && wc::clock_type::now() < until) {
    std::byte buf[512];
    pollfd p{old, POLLIN, 0};
    ::poll(&p, 1, 100);
    const ssize_t r = ::recv(old, buf, sizeof buf, MSG_DONTWAIT);
    if (r > 0) reply.insert(reply.end(), buf, buf + r);
    closed = r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  ::close(old);
  CHECK(closed);
  REQUIRE(reply.size() >= wd::hello_fixed_bytes);
  CHECK(std::to_integer<int>(reply[4]) == (wd::wire_version & 0xff));  // a said which version it speaks
  CHECK(std::to_integer<int>(reply[5]) == (wd::wire_version >> 8));
  // The real member b (this version) still forms the epoch with a, and data flows.
  b = std::make_unique<we::mesh_transport>(members, 1, lb, 7, until, wd::job_secret{}, wd::wire_limits{},
                                           we::mesh_options{1, 1024});
  ta.join();
  INFO(a_failed);
  REQUIRE(a);
  std::thread s([&] { b->send(0, wc::msg_tag{1, 0}, pattern(5000, 4), until); });
  std::vector<std::byte> got(5000);
  a->recv(1, wc::msg_tag{1, 0}, got, until);
  s.join();
  CHECK(got == pattern(5000, 4));
  a.reset();
  b.reset();
  ::close(la);
  ::close(lb);
}

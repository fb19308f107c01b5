// The data-frame layer against exact and hostile bytes: every length is checked before anything
// is allocated or pointed at, every violation is a comm_error that names the peer and aborts the
// group, and descriptors and abort bodies are compared and read as fields.
#include "fake_link.hpp"

#include <weft/comm/comm_error.hpp>
#include <weft/comm/options.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <limits>
#include <string>
#include <vector>

namespace wc = weft::comm;
namespace wd = weft::comm::detail;
using weft_test::append_abort;
using weft_test::append_data;
using weft_test::append_header;
using weft_test::frame_spec;

namespace {

template <class Link>
struct rig {
  Link link;
  wd::engine_config cfg;
  std::unique_ptr<wd::stream_engine<Link>> engine;
  explicit rig(int size = 2) {
    cfg.blame_window = std::chrono::milliseconds(0);
    cfg.drain_window = std::chrono::milliseconds(0);
    cfg.limits.max_unexpected_bytes = 1 << 16;
    cfg.limits.max_unexpected_frames = 64;
    cfg.limits.max_message_bytes = 1 << 20;
    cfg.limits.max_pending_descriptors = 4;
    make(size);
  }
  void make(int size) { engine = std::make_unique<wd::stream_engine<Link>>(link, 0, size, 1, SIZE_MAX, "test", cfg); }
  // recv of n bytes on channel from peer 1 that gives up at once once the input is drained.
  wc::comm_error recv_error(std::uint32_t channel, std::size_t n, std::uint32_t check = 0) {
    std::vector<std::byte> buf(n);
    try {
      engine->recv(1, wc::msg_tag{channel, check}, std::span<std::byte>(buf), wc::clock_type::now());
    } catch (const wc::comm_error& e) {
      return e;
    }
    FAIL("recv succeeded");
    throw;
  }
};

using plain = rig<weft_test::fake_link<0>>;
using staged = rig<weft_test::fake_link<64>>;

weft::errc code(const wc::comm_error& e) { return static_cast<weft::errc>(e.code().value()); }

}  // namespace

TEST_CASE("a well-formed frame is received, in pieces of any size, with or without staging", "[comm][wire]") {
  for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{32}, SIZE_MAX}) {
    plain a;
    staged b;
    for (auto* l : {&a.link.in, &b.link.in}) append_data(*l, 5, 9, 100);
    a.link.max_read = b.link.max_read = chunk;
    std::vector<std::byte> x(100), y(100);
    a.engine->recv(1, wc::msg_tag{5, 9}, std::span<std::byte>(x), wc::clock_type::now() + std::chrono::seconds(5));
    b.engine->recv(1, wc::msg_tag{5, 9}, std::span<std::byte>(y), wc::clock_type::now() + std::chrono::seconds(5));
    CHECK(x == std::vector<std::byte>(100, std::byte{7}));
    CHECK(y == x);
  }
}

TEST_CASE("a wrong marker, kind or flag is a parse error naming the peer, and aborts", "[comm][wire]") {
  for (int which = 0; which < 3; ++which) {
    plain r;
    frame_spec f;
    if (which == 0) f.marker = 0x1234;
    if (which == 1) f.kind = 9;
    if (which == 2) f.flags = 0x80;
    append_header(r.link.in, f);
    const auto e = r.recv_error(0, 0);
    INFO(e.what());
    CHECK(code(e) == weft::errc::parse);
    CHECK(e.info().blamed == 1);
    CHECK(r.engine->aborted());
    CHECK(r.link.aborts == 1);
  }
}

TEST_CASE("huge lengths are refused before any allocation or pointer update", "[comm][wire]") {
  for (std::uint64_t total : {std::uint64_t{1} << 21, std::uint64_t{1} << 40,
                              static_cast<std::uint64_t>(std::numeric_limits<std::ptrdiff_t>::max()) + 1,
                              std::numeric_limits<std::uint64_t>::max()}) {
    plain r;
    frame_spec f;
    f.total = f.piece = total;
    append_header(r.link.in, f);
    const auto e = r.recv_error(3, 16);  // nobody waits on channel 0: it would be kept aside
    INFO(e.what());
    CHECK(code(e) == weft::errc::capacity);
    CHECK(e.info().blamed == 1);
  }
  // A posted receive is matched only by the exact size it expects.
  plain r;
  frame_spec f;
  f.total = f.piece = std::uint64_t{1} << 19;
  append_header(r.link.in, f);
  const auto e = r.recv_error(0, 16);
  CHECK(code(e) == weft::errc::mismatch);
  CHECK(e.info().field == "message bytes");
  CHECK(e.info().here == "16");
  CHECK(e.info().there == "524288");
}

TEST_CASE("a piece larger than its message is a parse error", "[comm][wire]") {
  plain r;
  frame_spec f;
  f.total = 10;
  f.piece = 11;
  append_header(r.link.in, f);
  CHECK(code(r.recv_error(0, 10)) == weft::errc::parse);
}

TEST_CASE("frames nobody asked for are kept only up to the caps", "[comm][wire]") {
  {
    plain r;  // bytes: 5 frames of 16 KiB fit under 64 KiB... the fifth does not
    for (int i = 0; i < 5; ++i) append_data(r.link.in, 1, 0, 16 * 1024);
    const auto e = r.recv_error(2, 1);
    INFO(e.what());
    CHECK(code(e) == weft::errc::capacity);
    CHECK(std::string(e.what()).find("max_unexpected_bytes") != std::string::npos);
  }
  {
    plain r;  // frames: 65 zero-byte frames against a cap of 64
    for (int i = 0; i < 65; ++i) append_data(r.link.in, 1, 0, 0);
    CHECK(code(r.recv_error(2, 1)) == weft::errc::capacity);
  }
  {
    plain r;  // under the caps: kept, then delivered in order to the receives that come later
    append_data(r.link.in, 1, 0, 4, 0, nullptr, std::byte{1});
    append_data(r.link.in, 1, 0, 4, 0, nullptr, std::byte{2});
    std::vector<std::byte> a(4), b(4);
    const auto until = wc::clock_type::now() + std::chrono::seconds(5);
    r.engine->recv(1, wc::msg_tag{1, 0}, std::span<std::byte>(a), until);
    r.engine->recv(1, wc::msg_tag{1, 0}, std::span<std::byte>(b), until);
    CHECK(a == std::vector<std::byte>(4, std::byte{1}));
    CHECK(b == std::vector<std::byte>(4, std::byte{2}));
  }
}

TEST_CASE("abort frames are bounded and read as fields", "[comm][wire]") {
  {
    plain r;
    append_abort(r.link.in, 1, 1, -1, weft::errc::mismatch, "rank 1: count 10 here, 11 at rank 0", "count", "10", "11");
    const auto e = r.recv_error(0, 8);
    INFO(e.what());
    CHECK(code(e) == weft::errc::aborted);
    CHECK(e.info().origin == 1);
    CHECK(e.info().blamed == 1);
    CHECK(e.info().field == "count");
    CHECK(e.info().here == "10");
    CHECK(e.info().there == "11");
  }
  {
    plain r;  // claims to come from rank 5 of 2
    append_abort(r.link.in, 5, -1, -1, weft::errc::aborted, "x");
    CHECK(code(r.recv_error(0, 8)) == weft::errc::parse);
  }
  {
    plain r;  // a string length that runs past the body
    frame_spec f;
    f.kind = static_cast<std::uint8_t>(wd::frame_kind::abort);
    f.total = f.piece = wd::abort_fixed_bytes + 2;
    append_header(r.link.in, f);
    std::vector<std::byte> body(wd::abort_fixed_bytes + 2);
    wd::put_le<std::uint32_t>(body.data(), 1);
    wd::put_le<std::int32_t>(body.data() + 4, -1);
    wd::put_le<std::int32_t>(body.data() + 8, -1);
    wd::put_le<std::uint32_t>(body.data() + 12, static_cast<std::uint32_t>(weft::errc::aborted));
    wd::put_le<std::uint16_t>(body.data() + wd::abort_fixed_bytes, 60000);
    r.link.in.insert(r.link.in.end(), body.begin(), body.end());
    CHECK(code(r.recv_error(0, 8)) == weft::errc::parse);
  }
  {
    plain r;  // longer than max_abort_bytes
    frame_spec f;
    f.kind = static_cast<std::uint8_t>(wd::frame_kind::abort);
    f.total = f.piece = std::uint64_t{1} << 32;
    append_header(r.link.in, f);
    CHECK(code(r.recv_error(0, 8)) == weft::errc::parse);
  }
}

TEST_CASE("a descriptor is compared on arrival, before any receive is posted", "[comm][wire]") {
  const auto mine = wd::describe_call(wc::collective::allreduce, weft::dtype::f32, 1000000, "sum", 2, 1 << 19, -1,
                                      wc::algorithm::ring);
  auto theirs = mine;
  theirs.count = 999999;
  theirs.algo = wc::algorithm::tree;  // the count is reported, not the algorithm it led to
  {
    plain r;  // the peer's frame arrives first (on a channel nobody receives on), then we begin
    append_data(r.link.in, 3, 0, 4, 1, &theirs);
    CHECK(code(r.recv_error(9, 1)) == weft::errc::timeout);  // drains the input; the frame is kept
    CHECK_FALSE(r.engine->aborted());
    try {
      r.engine->begin_collective(3, mine, {});
      FAIL("begin_collective accepted a different descriptor");
    } catch (const wc::comm_error& e) {
      INFO(e.what());
      CHECK(code(e) == weft::errc::mismatch);
      CHECK(e.info().field == "count");
      CHECK(e.info().here == "1000000");
      CHECK(e.info().there == "999999");
      CHECK(e.info().blamed == 1);
      CHECK(std::string(e.what()).find("count 1000000 here, 999999 at rank 1") != std::string::npos);
    }
  }
  {
    plain r;  // we begin first; the frame arrives while we wait on another channel
    r.engine->begin_collective(3, mine, {});
    append_data(r.link.in, 3, 0, 4, 1, &theirs);
    const auto e = r.recv_error(9, 1);
    CHECK(code(e) == weft::errc::mismatch);
    CHECK(e.info().field == "count");
  }
  {
    plain r;  // agreeing descriptors: nothing happens
    r.engine->begin_collective(3, mine, {});
    append_data(r.link.in, 3, 0, 4, 1, &mine);
    std::vector<std::byte> b(4);
    r.engine->recv(1, wc::msg_tag{3, 0}, std::span<std::byte>(b), wc::clock_type::now() + std::chrono::seconds(5));
    CHECK_FALSE(r.engine->aborted());
  }
  {
    plain r;  // a peer that runs ahead by more than max_pending_descriptors collectives
    for (std::uint32_t s = 1; s <= 5; ++s) append_data(r.link.in, 3, 0, 0, s, &mine);
    CHECK(code(r.recv_error(9, 1)) == weft::errc::capacity);
  }
}

TEST_CASE("what this rank sends: marker, sequence and the descriptor once per collective", "[comm][wire]") {
  plain r;
  const auto d = wd::describe_call(wc::collective::broadcast, weft::dtype::i32, 7, "", 2, 4096, 0, wc::algorithm::tree);
  r.engine->begin_collective(4, d, {});
  const std::vector<std::byte> payload(8, std::byte{3});
  const auto until = wc::clock_type::now() + std::chrono::seconds(5);
  r.engine->send(1, wc::msg_tag{4, 77}, std::span<const std::byte>(payload), until);
  r.engine->send(1, wc::msg_tag{4, 77}, std::span<const std::byte>(payload), until);
  const auto& out = r.link.out;
  REQUIRE(out.size() == 2 * (wd::frame_header_bytes + payload.size()) + wc::descriptor_wire_bytes);
  CHECK(wd::get_le<std::uint16_t>(out.data()) == wd::frame_marker);
  CHECK(static_cast<std::uint8_t>(out[3]) == wd::frame_flag_descriptor);
  CHECK(wd::get_le<std::uint32_t>(out.data() + 4) == 4);    // channel
  CHECK(wd::get_le<std::uint32_t>(out.data() + 8) == 1);    // first collective on (peer, channel)
  CHECK(wd::get_le<std::uint32_t>(out.data() + 12) == 77);  // check word
  const auto back = wc::decode(std::span<const std::byte, wc::descriptor_wire_bytes>(
      out.data() + wd::frame_header_bytes, wc::descriptor_wire_bytes));
  CHECK(back == d);
  const std::byte* second = out.data() + wd::frame_header_bytes + wc::descriptor_wire_bytes + payload.size();
  CHECK(static_cast<std::uint8_t>(second[3]) == 0);  // no descriptor the second time
}

TEST_CASE("a closed stream fails the receive with peer_failure naming the peer", "[comm][wire]") {
  plain r;
  r.link.closed_at_end = true;
  const auto e = r.recv_error(0, 8);
  CHECK(code(e) == weft::errc::peer_failure);
  CHECK(e.info().blamed == 1);
  CHECK(e.info().peer == 1);
}

TEST_CASE("descriptors: every field is reported in order, and survives the wire", "[comm][wire]") {
  const auto base = wd::describe_call(wc::collective::allreduce, weft::dtype::f32, 100, "sum", 4, 4096, -1,
                                      wc::algorithm::ring, true);
  auto other = base;
  other.kind = wc::collective::broadcast;
  CHECK(wc::first_difference(base, other)->field == "collective");
  other = base;
  other.count = 99;
  other.type = weft::dtype::i32;
  CHECK(wc::first_difference(base, other)->field == "count");  // before dtype
  other.count = 100;
  CHECK(wc::first_difference(base, other)->field == "dtype");
  CHECK(wc::first_difference(base, other)->there == "i32");
  other = base;
  other.set_op("max");
  CHECK(wc::first_difference(base, other)->field == "op");
  other = base;
  other.algo = wc::algorithm::tree;
  const auto d = wc::first_difference(base, other);
  CHECK(d->field == "algorithm");
  CHECK(d->here == "ring (chosen by the tuner)");
  CHECK(wc::explain(*d, 2).find("cost models differ") != std::string::npos);
  other = base;
  other.segment_bytes = 8192;
  CHECK(wc::first_difference(base, other)->field == "segment_bytes");
  other = base;
  other.hosts = 0x0123456789abcdefull;  // the host map's hash (hierarchical)
  CHECK(wc::first_difference(base, other)->field == "host map");
  CHECK(wc::first_difference(base, other)->there == "hash 0123456789abcdef");
  CHECK_FALSE(wc::first_difference(base, base));
  std::byte buf[wc::descriptor_wire_bytes];
  STATIC_REQUIRE(wc::descriptor_wire_bytes == 56);
  wc::encode(other, std::span<std::byte, wc::descriptor_wire_bytes>(buf, sizeof buf));
  CHECK(wc::decode(std::span<const std::byte, wc::descriptor_wire_bytes>(buf, sizeof buf)) == other);
  CHECK(buf[48] == std::byte{0xef});  // the hash, little-endian, after the operator's name
  wc::encode(base, std::span<std::byte, wc::descriptor_wire_bytes>(buf, sizeof buf));
  CHECK(wc::decode(std::span<const std::byte, wc::descriptor_wire_bytes>(buf, sizeof buf)) == base);
  buf[1] = std::byte{200};  // an unknown dtype from the wire is kept and named, not trusted
  const auto odd = wc::decode(std::span<const std::byte, wc::descriptor_wire_bytes>(buf, sizeof buf));
  CHECK(wc::first_difference(base, odd)->there == "unknown(200)");
}

namespace {
// A rig whose link aligns frames to cache lines and has an eager path of `eager` bytes (as shm).
void align(plain& r, std::size_t eager) {
  r.cfg.frame_align = 64;
  r.cfg.eager_max = eager;
  r.make(2);
}
void append_pad(std::vector<std::byte>& out, std::size_t frame_bytes) {
  out.insert(out.end(), wd::frame_pad(frame_bytes, 64), std::byte{0});
}
}  // namespace

TEST_CASE("eager frames: at the limit eager, one byte over not, both padded to cache lines", "[comm][wire]") {
  plain r;
  align(r, 128);
  const auto until = wc::clock_type::now() + std::chrono::seconds(5);
  for (std::size_t n : {std::size_t{128}, std::size_t{129}, std::size_t{0}}) {
    const std::vector<std::byte> out(n, std::byte{3});
    const std::size_t before = r.link.out.size();
    r.engine->send(1, wc::msg_tag{2, 0}, std::span<const std::byte>(out), until);
    const std::size_t wrote = r.link.out.size() - before;
    INFO("n=" << n);
    CHECK(wrote % 64 == 0);
    CHECK(wrote == wd::frame_header_bytes + n + wd::frame_pad(wd::frame_header_bytes + n, 64));
    const auto flags = static_cast<std::uint8_t>(r.link.out[before + 3]);
    CHECK(((flags & wd::frame_flag_inline) != 0) == (n <= 128));
  }
  // And received: an eager frame at the limit, a plain one over it, each followed by its pad.
  frame_spec f;
  f.channel = 4;
  f.flags = wd::frame_flag_inline;
  f.total = f.piece = 128;
  append_header(r.link.in, f);
  r.link.in.insert(r.link.in.end(), 128, std::byte{5});
  append_pad(r.link.in, 32 + 128);
  append_data(r.link.in, 4, 0, 129);
  append_pad(r.link.in, 32 + 129);
  r.link.max_read = 7;  // the pad arrives in pieces too
  std::vector<std::byte> a(128), b(129);
  r.engine->recv(1, wc::msg_tag{4, 0}, std::span<std::byte>(a), until);
  r.engine->recv(1, wc::msg_tag{4, 0}, std::span<std::byte>(b), until);
  CHECK(a == std::vector<std::byte>(128, std::byte{5}));
  CHECK(b == std::vector<std::byte>(129, std::byte{7}));
  CHECK(r.link.at == r.link.in.size());
}

TEST_CASE("a hostile eager frame (too long, split, or on a link without an eager path) is refused", "[comm][wire]") {
  for (int which = 0; which < 4; ++which) {
    plain r;
    align(r, which == 3 ? 0 : 128);
    frame_spec f;
    f.flags = wd::frame_flag_inline;
    f.total = f.piece = 64;
    if (which == 0) f.total = f.piece = 129;   // claims more inline bytes than eager_max
    if (which == 1) f.total = f.piece = 4096;  // and far more
    if (which == 2) f.total = 100;             // one piece of a larger message
    append_header(r.link.in, f);
    r.link.in.insert(r.link.in.end(), 256, std::byte{1});
    const auto e = r.recv_error(0, 64);
    INFO("case " << which << ": " << e.what());
    CHECK(code(e) == weft::errc::parse);
    CHECK(e.info().blamed == 1);
    CHECK(r.engine->aborted());
    CHECK(r.link.at == wd::frame_header_bytes);  // nothing of the claimed payload was read
  }
}

// The stream engine's frame codec on its own (detail/frame_codec.hpp): headers written and read
// back, every rule of check_frame_header refusing what it must (and nothing else), abort bodies
// round-tripped and malformed ones refused.
#include <weft/comm/detail/frame_codec.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace wd = weft::comm::detail;

namespace {
std::array<std::byte, wd::frame_header_bytes> header(wd::frame_kind kind, std::uint8_t flags, std::uint64_t total,
                                                     std::uint64_t piece) {
  std::array<std::byte, wd::frame_header_bytes> h{};
  wd::encode_frame_header(h.data(), kind, flags, 7, 3, 0xabcdef01u, total, piece);
  return h;
}
wd::frame_rules rules(bool remote = false, std::size_t eager = 0) {
  return wd::frame_rules{std::uint64_t{1} << 20, 8 * 1024, remote, eager};
}
// The refusal of a header, or "" when it is accepted.
std::string refusal(const std::array<std::byte, wd::frame_header_bytes>& h, const wd::frame_rules& r) {
  wd::frame_header out;
  const auto bad = wd::check_frame_header(h.data(), r, out);
  return bad ? bad->what : std::string();
}
}  // namespace

TEST_CASE("frame headers: written, read back, prefix sizes", "[comm][frame_codec]") {
  const auto h = header(wd::frame_kind::data, wd::frame_flag_descriptor, 1000, 500);
  CHECK(static_cast<unsigned>(h[0]) == 0x77);  // "wf", little-endian
  CHECK(static_cast<unsigned>(h[1]) == 0x66);
  wd::frame_header out;
  REQUIRE_FALSE(wd::check_frame_header(h.data(), rules(), out));
  CHECK(out.kind == wd::frame_kind::data);
  CHECK(out.flags == wd::frame_flag_descriptor);
  CHECK(out.channel == 7);
  CHECK(out.seq == 3);
  CHECK(out.check == 0xabcdef01u);
  CHECK(out.total == 1000);
  CHECK(out.piece == 500);
  CHECK(wd::frame_prefix_bytes(0) == 32);
  CHECK(wd::frame_prefix_bytes(wd::frame_flag_descriptor) == 32 + 56);
  CHECK(wd::frame_prefix_bytes(wd::frame_flag_descriptor | wd::frame_flag_remote) == 32 + 56 + 8);
}

TEST_CASE("frame headers: every rule refuses what breaks it", "[comm][frame_codec]") {
  auto h = header(wd::frame_kind::data, 0, 10, 10);
  h[0] = std::byte{0};
  CHECK(refusal(h, rules()).find("frame marker") != std::string::npos);
  h = header(static_cast<wd::frame_kind>(9), 0, 10, 10);
  CHECK(refusal(h, rules()).find("unknown frame kind 9") != std::string::npos);
  h = header(wd::frame_kind::data, 0x80, 10, 10);
  CHECK(refusal(h, rules()).find("unknown frame flags") != std::string::npos);
  h = header(wd::frame_kind::data, 0, 10, 11);
  CHECK(refusal(h, rules()).find("piece of 11 bytes in a message of 10") != std::string::npos);
  h = header(wd::frame_kind::data, 0, (std::uint64_t{1} << 20) + 1, 1);
  wd::frame_header out;
  const auto big = wd::check_frame_header(h.data(), rules(), out);
  REQUIRE(big);
  CHECK(big->code == weft::errc::capacity);  // a size limit, not a malformed frame
  h = header(wd::frame_kind::data, wd::frame_flag_remote, 10, 10);
  CHECK(refusal(h, rules()).find("single-copy piece on a link that has none") != std::string::npos);
  CHECK(refusal(h, rules(true)).empty());
  h = header(wd::frame_kind::data, wd::frame_flag_inline, 10, 10);
  CHECK(refusal(h, rules()).find("eager frame on a link that has none") != std::string::npos);
  CHECK(refusal(h, rules(false, 64)).empty());
  h = header(wd::frame_kind::data, wd::frame_flag_inline, 100, 100);
  CHECK(refusal(h, rules(false, 64)).find("at most eager_max 64") != std::string::npos);
  h = header(wd::frame_kind::data, wd::frame_flag_inline, 20, 10);  // an eager frame is a whole message
  CHECK_FALSE(refusal(h, rules(false, 64)).empty());
  // Abort frames: one piece of 24 bytes to max_abort_bytes, no flags.
  h = header(wd::frame_kind::abort, 0, 24, 24);
  CHECK(refusal(h, rules()).empty());
  for (auto bad : {header(wd::frame_kind::abort, 0, 23, 23), header(wd::frame_kind::abort, 0, 9000, 9000),
                   header(wd::frame_kind::abort, 0, 100, 50), header(wd::frame_kind::abort, 1, 100, 100)})
    CHECK(refusal(bad, rules()).find("abort frame of") != std::string::npos);
}

TEST_CASE("abort bodies: round trip, bounds, and malformed ones refused", "[comm][frame_codec]") {
  wd::abort_body a;
  a.origin = 2;
  a.blamed = 1;
  a.waiting_on = 3;
  a.code = weft::errc::mismatch;
  a.channel = 9;
  a.first = 0;
  a.reason = "count 10 here, 11 at rank 1";
  a.field = "count";
  a.here = "10";
  a.there = "11\x01";  // a control character from a peer is not echoed raw
  const auto body = wd::encode_abort_body(a);
  CHECK(body.size() == wd::abort_fixed_bytes + 4 * 2 + a.reason.size() + 5 + 2 + 3);
  wd::abort_body back;
  REQUIRE_FALSE(wd::decode_abort_body(body, 2, 4, back));
  CHECK(back.origin == 2);
  CHECK(back.blamed == 1);
  CHECK(back.waiting_on == 3);
  CHECK(back.code == weft::errc::mismatch);
  CHECK(back.channel == 9);
  CHECK(back.first == 0);
  CHECK(back.reason == a.reason);
  CHECK(back.field == "count");
  CHECK(back.there == "11?");
  // The sender must be the origin, every rank in the group, the code a weft::errc.
  CHECK(wd::decode_abort_body(body, 1, 4, back));  // sent by rank 1, claims origin 2
  CHECK(wd::decode_abort_body(body, 2, 3, back));  // waiting_on 3 in a group of 3
  auto bad = body;
  wd::put_le<std::uint32_t>(bad.data() + 12, 99);  // no such errc
  CHECK(wd::decode_abort_body(bad, 2, 4, back));
  bad = body;
  bad.resize(bad.size() - 1);  // the last string runs past the end
  CHECK(wd::decode_abort_body(bad, 2, 4, back)->what.find("runs past its end") != std::string::npos);
  bad.resize(wd::abort_fixed_bytes + 1);  // ends inside a string length
  CHECK(wd::decode_abort_body(bad, 2, 4, back)->what.find("inside a string length") != std::string::npos);
  bad.resize(10);
  CHECK(wd::decode_abort_body(bad, 2, 4, back));
  // Strings longer than the limit are cut when written.
  a.reason.assign(wd::abort_max_string_bytes + 100, 'x');
  REQUIRE_FALSE(wd::decode_abort_body(wd::encode_abort_body(a), 2, 4, back));
  CHECK(back.reason.size() == wd::abort_max_string_bytes);
}

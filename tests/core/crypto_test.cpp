#include <weft/core/crypto.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace {
std::string hex(const weft::crypto::sha256_digest& d) {
  std::string out;
  char buf[3];
  for (auto b : d) {
    std::snprintf(buf, sizeof buf, "%02x", b);
    out += buf;
  }
  return out;
}
}  // namespace

using weft::crypto::bytes_of;

TEST_CASE("sha256 matches the FIPS 180-4 test vectors, incrementally and copied", "[core][crypto]") {
  CHECK(hex(weft::crypto::sha256::of(bytes_of(""))) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  weft::crypto::sha256 h;
  h.update(std::string_view("ab"));
  weft::crypto::sha256 copy = h;  // shares the absorbed prefix
  h.update(std::string_view("c"));
  CHECK(hex(h.finish()) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  copy.update(std::string_view("c"));
  CHECK(hex(copy.finish()) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  h.reset();
  h.update(std::string_view("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"));
  CHECK(hex(h.finish()) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("hmac_sha256 matches RFC 4231 test case 2 and splits messages freely", "[core][crypto]") {
  const auto d = weft::crypto::hmac_sha256(bytes_of("Jefe"), {bytes_of("what do ya want "), bytes_of("for nothing?")});
  CHECK(hex(d) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK_THROWS_AS(weft::crypto::hmac_sha256({}, {bytes_of("x")}), weft::error);
}

TEST_CASE("random_bytes and equal_constant_time", "[core][crypto]") {
  std::vector<std::byte> a(32), b(32);
  weft::crypto::random_bytes(a);
  weft::crypto::random_bytes(b);
  CHECK(a != b);
  CHECK(weft::crypto::equal_constant_time(a, a));
  CHECK_FALSE(weft::crypto::equal_constant_time(a, b));
  CHECK_FALSE(weft::crypto::equal_constant_time(a, std::span(a).first(31)));
  CHECK(weft::crypto::random_u64() != weft::crypto::random_u64());
}

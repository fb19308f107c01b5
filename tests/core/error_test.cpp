#include <weft/core/error.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <system_error>

TEST_CASE("weft::error carries code, context and message", "[core][error]") {
  try {
    weft::expects(false, weft::errc::invalid_argument, "kv::block_pool::free", "block ", 7, " was never allocated");
    FAIL("expects(false) must throw");
  } catch (const weft::error& e) {
    CHECK(std::string(e.what()) == "kv::block_pool::free: block 7 was never allocated");
    CHECK(e.context() == "kv::block_pool::free");
    CHECK(e.code() == weft::errc::invalid_argument);
    CHECK(e.code().category().name() == std::string("weft"));
    CHECK(e.code().message() == "invalid argument");
  }
  CHECK_NOTHROW(weft::expects(true, weft::errc::timeout, "x", "never formatted"));
}

TEST_CASE("weft::errc converts to std::error_code and compares", "[core][error]") {
  std::error_code ec = weft::errc::timeout;
  CHECK(ec == weft::errc::timeout);
  CHECK(ec != weft::errc::peer_failure);
  CHECK(ec.message() == "timeout");
  for (int c = 1; c <= static_cast<int>(weft::errc::aborted); ++c)
    CHECK(std::string(weft::to_string(static_cast<weft::errc>(c))) != "unknown weft error");
}

TEST_CASE("weft::error is a std::runtime_error", "[core][error]") {
  CHECK_THROWS_AS(weft::expects(false, weft::errc::io, "", "x"), std::runtime_error);
  CHECK_THROWS_WITH(weft::expects(false, weft::errc::io, "", "plain"), "plain");
}

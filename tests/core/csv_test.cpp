#include <weft/core/csv.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <sstream>
#include <string>

using weft::csv_reader;

namespace {
std::string error_of(const std::string& text, weft::csv_limits limits = {}) {
  std::istringstream in(text);
  try {
    csv_reader r(in, "t.csv", limits);
    while (r.next()) {
      for (std::size_t i = 0; i < r.header().size(); ++i) (void)r.number<std::int64_t>(i);
    }
  } catch (const weft::error& e) {
    CHECK(e.code() == weft::errc::parse);
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("csv_reader reads headers, numbers, quotes, CRLF, a BOM and blank lines", "[core][csv]") {
  std::istringstream in("\xEF\xBB\xBF a , b,name\r\n1,2.5,\"x, \"\"y\"\"\"\r\n\r\n+3, -4e2 ,\"multi\nline\"\n7,8,z");
  csv_reader r(in, "mem");
  REQUIRE(r.header() == std::vector<std::string>{"a", "b", "name"});
  CHECK(r.column("name") == 2);
  CHECK(r.find_column("zzz") == -1);
  REQUIRE(r.next());
  CHECK(r.line() == 2);
  CHECK(r.number<int>(0) == 1);
  CHECK(r.number<double>(1) == 2.5);
  CHECK(r.field(2) == "x, \"y\"");
  REQUIRE(r.next());
  CHECK(r.line() == 4);
  CHECK(r.number<std::int64_t>(0) == 3);
  CHECK(r.number<double>(1) == -400.0);
  CHECK(r.field(2) == "multi\nline");
  REQUIRE(r.next());
  CHECK(r.line() == 6);  // the quoted newline counted
  CHECK(r.trimmed(2) == "z");
  CHECK_FALSE(r.next());
  CHECK(r.records() == 3);
}

TEST_CASE("csv_reader errors name the source, line, column and a clipped value", "[core][csv]") {
  CHECK(error_of("") == "weft::csv_reader: t.csv:1: the input is empty: expected a header row");
  CHECK(error_of("a,b\n1,x\n") == "weft::csv_reader: t.csv:2:2: column 'b': 'x' is not a whole number");
  CHECK(error_of("a\n1\n2\n99999999999999999999\n") ==
        "weft::csv_reader: t.csv:4:1: column 'a': 99999999999999999999 is out of range");
  CHECK(error_of("a,b\n1\n") == "weft::csv_reader: t.csv:2:2: the record has 1 fields, column 'b' is missing");
  CHECK(error_of("a\n\"open\n") == "weft::csv_reader: t.csv:2:1: unterminated quoted field");
  CHECK(error_of("a\n\"q\"x\n") == "weft::csv_reader: t.csv:2:1: characters after the closing quote of a quoted field");
  CHECK(error_of("a\n1.5\n").find("'1.5' is not a whole number") != std::string::npos);
  CHECK(error_of("a\n\n").empty());
  // A 10 MB bad field yields a short message, not a 10 MB one.
  const std::string huge(10'000'000, '7');
  const std::string msg = error_of("a\nx" + huge + "\n", {.max_record_bytes = 20'000'000});
  CHECK(msg.size() < 200);
  CHECK(msg.find("...(10000001 bytes)") != std::string::npos);
}

TEST_CASE("csv_reader bounds records, fields and record counts before allocating", "[core][csv]") {
  CHECK(error_of("a\n" + std::string(2000, '1') + "\n", {.max_record_bytes = 1000}) ==
        "weft::csv_reader: t.csv:2: record longer than 1000 bytes (csv_limits::max_record_bytes)");
  CHECK(error_of("a\n1,2,3,4\n", {.max_fields = 3}) ==
        "weft::csv_reader: t.csv:2: more than 3 fields (csv_limits::max_fields)");
  CHECK(error_of("a\n1\n2\n3\n", {.max_records = 2}) ==
        "weft::csv_reader: t.csv:4: more than 2 records (csv_limits::max_records)");
  std::istringstream in("a,b\n1,nan\n2,inf\n");
  csv_reader r(in, "t");
  REQUIRE(r.next());
  CHECK_THROWS_WITH(r.number<double>(1), "weft::csv_reader: t:2:2: column 'b': nan is not finite");
  CHECK_THROWS_WITH(r.column("c"), "weft::csv_reader: t:1: missing column 'c' (columns: a, b)");
  CHECK_THROWS_WITH(r.fail("arrival ", 3, " before ", 4), "weft::csv_reader: t:2: arrival 3 before 4");
}

TEST_CASE("csv_reader skips comment records and numbers lines from first_line", "[core][csv]") {
  std::istringstream in("a,b\n# note, with a comma\n1,2\n#\n3,4\n");
  csv_reader r(in, "t", {.comment = '#', .first_line = 5});
  CHECK(r.header() == std::vector<std::string>{"a", "b"});
  REQUIRE(r.next());
  CHECK(r.line() == 7);
  REQUIRE(r.next());
  CHECK(r.line() == 9);
  CHECK(r.number<int>(1) == 4);
  CHECK_FALSE(r.next());
  CHECK(error_of("a\n#" + std::string(100, 'x') + "\n", {.max_record_bytes = 50, .comment = '#'}) ==
        "weft::csv_reader: t.csv:2: comment longer than 50 bytes (csv_limits::max_record_bytes)");
}

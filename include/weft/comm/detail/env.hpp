// Internal: strict reading of weft's WEFT_* environment variables. A variable that is set must be
// exactly what its documentation says (a decimal integer in its range, a string of bounded length):
// "" is not 0 and 4294967297 is not 1. Standard library only.
#pragma once

#include <weft/core/error.hpp>

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace weft::comm::detail {

/// Parses `text` as a decimal integer in [lo, hi]: optional '-' then digits, nothing else (no
/// spaces, no '+', no hex). weft::error(parse) naming `what` and the text otherwise. O(length).
inline long long parse_decimal(std::string_view text, long long lo, long long hi, const char* where,
                               std::string_view what) {
  long long v = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, v, 10);
  const bool whole = !text.empty() && ec == std::errc{} && end == last;
  const std::string shown(text.substr(0, 64));
  expects(whole, errc::parse, where, what, "='", shown, text.size() > 64 ? "..." : "", "' is not a decimal integer");
  expects(v >= lo && v <= hi, errc::parse, where, what, "=", v, " is outside [", lo, ", ", hi, "]");
  return v;
}

/// The integer in environment variable `name` if it is set (checked as parse_decimal), nullopt if
/// it is unset. Set-but-empty is an error, not "unset". Thread-safe as far as getenv is.
inline std::optional<long long> env_integer(const char* name, long long lo, long long hi, const char* where) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return parse_decimal(v, lo, hi, where, name);
}

/// The string in environment variable `name` if it is set, nullopt if unset; weft::error(parse)
/// when it is set but shorter than min_bytes or longer than max_bytes (the value itself is never
/// echoed: it may be a secret).
inline std::optional<std::string> env_string(const char* name, std::size_t min_bytes, std::size_t max_bytes,
                                             const char* where) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  const std::string_view s(v);
  expects(s.size() >= min_bytes && s.size() <= max_bytes, errc::parse, where, name, " has ", s.size(),
          " bytes; it must have between ", min_bytes, " and ", max_bytes);
  return std::string(s);
}

}  // namespace weft::comm::detail

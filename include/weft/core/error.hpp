// weft's error vocabulary: weft::error (a std::runtime_error with an error code and context),
// the std::error_category for weft's codes, and helpers that raise errors from cold, non-inlined
// code. Invalid arguments throw; expected run-time outcomes are returned (see result.hpp).
#pragma once

#include <weft/core/config.hpp>

#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

namespace weft {

/// What went wrong, coarsely. The message of weft::error says exactly what.
enum class errc : int {
  invalid_argument = 1,  ///< an argument broke a documented rule (size, range, id never issued)
  out_of_range,          ///< an index or id outside the valid range
  not_found,             ///< a key, rank or entry that does not exist
  already_exists,        ///< inserting a key or id twice
  precondition,          ///< the object is in a state where the call is not allowed
  capacity,              ///< a fixed capacity would be exceeded (where this is an error, not an outcome)
  timeout,               ///< a deadline passed
  peer_failure,          ///< a communication peer died, stalled or reset its connection
  mismatch,              ///< peers disagree (counts, dtypes, shapes, collective order)
  io,                    ///< the operating system refused (socket, shared memory, file)
  parse,                 ///< malformed input data (trace rows, config text)
  unsupported,           ///< not available in this build or on this platform
  aborted,               ///< cancelled by the caller or by a failure elsewhere
};

/// Name of an error code, e.g. "timeout". Thread-safe. O(1).
constexpr const char* to_string(errc code) noexcept {
  switch (code) {
    case errc::invalid_argument:
      return "invalid argument";
    case errc::out_of_range:
      return "out of range";
    case errc::not_found:
      return "not found";
    case errc::already_exists:
      return "already exists";
    case errc::precondition:
      return "precondition violated";
    case errc::capacity:
      return "capacity exceeded";
    case errc::timeout:
      return "timeout";
    case errc::peer_failure:
      return "peer failure";
    case errc::mismatch:
      return "mismatch between peers";
    case errc::io:
      return "I/O error";
    case errc::parse:
      return "parse error";
    case errc::unsupported:
      return "unsupported";
    case errc::aborted:
      return "aborted";
  }
  return "unknown weft error";
}

namespace detail {
class weft_error_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "weft"; }
  std::string message(int value) const override { return to_string(static_cast<errc>(value)); }
};
}  // namespace detail

/// The std::error_category of weft::errc. Thread-safe.
inline const std::error_category& error_category() noexcept {
  static const detail::weft_error_category category;
  return category;
}

/// Makes weft::errc usable wherever std::error_code is. Thread-safe.
inline std::error_code make_error_code(errc code) noexcept { return {static_cast<int>(code), error_category()}; }

/// The one exception type weft throws. what() is the full message ("<context>: <detail>");
/// code() says which rule was broken; context() names the operation (e.g. "kv::block_pool::free").
/// Thread-safe to read from several threads (immutable after construction).
class error : public std::runtime_error {
 public:
  error(errc code, const std::string& context, const std::string& detail)
      : std::runtime_error(context.empty() ? detail : context + ": " + detail),
        code_(make_error_code(code)),
        context_(context) {}

  const std::error_code& code() const noexcept { return code_; }
  const std::string& context() const noexcept { return context_; }

 private:
  std::error_code code_;
  std::string context_;
};

namespace detail {

template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

/// Raises weft::error with a message assembled from parts. Cold and never inlined.
template <class... Parts>
[[noreturn]] WEFT_COLD void raise(errc code, const char* context, const Parts&... parts) {
  throw error(code, context, concat(parts...));
}

}  // namespace detail

/// Throws weft::error(code, context, parts...) unless ok. The message parts are only formatted
/// on failure, so checks cost one branch on the hot path. Thread-safe.
template <class... Parts>
constexpr void expects(bool ok, errc code, const char* context, const Parts&... parts) {
  if (!ok) [[unlikely]]
    detail::raise(code, context, parts...);
}

}  // namespace weft

template <>
struct std::is_error_code_enum<weft::errc> : std::true_type {};

// Internal: the checks every fair queue makes of the service a scheduler reports (on_tokens,
// on_finish), written once so every queue rejects the same reports with the same message.
#pragma once

#include <weft/core/error.hpp>
#include <weft/sched/request.hpp>

#include <cstdint>

namespace weft::sched::detail {

/// Throws weft::error (invalid_argument), naming r, when an on_tokens count n is negative. O(1).
inline void check_token_count(const request& r, std::int64_t n, const char* where) {
  expects(n >= 0, errc::invalid_argument, where, "request ", r.id, ": token count must be >= 0, got ", n);
}

/// Throws weft::error (invalid_argument), naming r, when an on_finish count of generated tokens is
/// negative. O(1).
inline void check_generated_count(const request& r, std::int64_t generated, const char* where) {
  expects(generated >= 0, errc::invalid_argument, where, "request ", r.id, ": generated must be >= 0, got ", generated);
}

}  // namespace weft::sched::detail

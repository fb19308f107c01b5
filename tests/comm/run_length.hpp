// How long a test runs, from the environment: the soak and long runs (weft_add_test_run in
// cmake/WeftTesting.cmake) run the same executable as `make test` with these set, instead of a second
// build of the same sources.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace weft_test {

/// The positive integer in environment variable `name`, or `fallback` when it is unset. A value that
/// is not a positive integer is an error (a misspelt soak setting must not run the short test).
inline std::uint64_t env_count(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (*end != '\0' || n == 0 || v[0] == '-')
    throw std::invalid_argument(std::string(name) + " must be a positive integer, got '" + v + "'");
  return n;
}

/// True when environment variable `name` is set to anything but "" or "0".
inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

}  // namespace weft_test

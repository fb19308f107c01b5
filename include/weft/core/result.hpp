// weft::result<T>: the return type for expected run-time outcomes (pool exhausted, cache miss,
// peer timed out) — either a value or an error code with a message. A small subset of C++23's
// std::expected, which g++ 12 in C++20 mode lacks.
#pragma once

#include <weft/core/error.hpp>

#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace weft {

/// The failure half of a result: an error code and a human-readable message.
struct failure {
  errc code{errc::aborted};
  std::string message;

  friend bool operator==(const failure& a, const failure& b) { return a.code == b.code; }
};

/// Either a T or a failure. Not thread-safe (a plain value type). All operations O(1) plus T's.
template <class T>
class [[nodiscard]] result {
  static_assert(!std::is_reference_v<T>, "weft::result<T&> is not supported; use result<T*>");
  static_assert(!std::is_same_v<std::remove_cv_t<T>, failure>, "result<failure> is ambiguous");

 public:
  using value_type = T;

  template <class U = T>
  requires std::is_constructible_v<T, U&&> &&
      (!std::is_same_v<std::remove_cvref_t<U>, failure>)&&(!std::is_same_v<std::remove_cvref_t<U>, result>)
          result(U&& value)
      : state_(std::in_place_index<0>, std::forward<U>(value)) {}      // NOLINT: implicit by design
  result(failure f) : state_(std::in_place_index<1>, std::move(f)) {}  // NOLINT: implicit by design

  bool has_value() const noexcept { return state_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  /// The value; throws weft::error carrying the failure when there is none.
  T& value() & {
    ensure_value();
    return std::get<0>(state_);
  }
  const T& value() const& {
    ensure_value();
    return std::get<0>(state_);
  }
  T&& value() && {
    ensure_value();
    return std::get<0>(std::move(state_));
  }

  template <class U>
  T value_or(U&& fallback) const& {
    return has_value() ? std::get<0>(state_) : static_cast<T>(std::forward<U>(fallback));
  }

  /// Unchecked access; the caller has tested has_value().
  T& operator*() & noexcept { return *std::get_if<0>(&state_); }
  const T& operator*() const& noexcept { return *std::get_if<0>(&state_); }
  T* operator->() noexcept { return std::get_if<0>(&state_); }
  const T* operator->() const noexcept { return std::get_if<0>(&state_); }

  /// The failure; precondition: !has_value().
  const failure& error() const& {
    expects(!has_value(), errc::precondition, "weft::result::error", "the result holds a value");
    return std::get<1>(state_);
  }

 private:
  void ensure_value() const {
    if (!has_value()) [[unlikely]] {
      const failure& f = std::get<1>(state_);
      detail::raise(f.code, "weft::result::value", f.message);
    }
  }

  std::variant<T, failure> state_;
};

/// result<void>: success or a failure.
template <>
class [[nodiscard]] result<void> {
 public:
  result() = default;
  result(failure f) : failure_(std::move(f)), ok_(false) {}  // NOLINT: implicit by design

  bool has_value() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  void value() const {
    if (!ok_) [[unlikely]]
      detail::raise(failure_.code, "weft::result::value", failure_.message);
  }
  const failure& error() const& {
    expects(!ok_, errc::precondition, "weft::result::error", "the result holds a value");
    return failure_;
  }

 private:
  failure failure_{};
  bool ok_ = true;
};

/// Builds a failure with a message assembled from parts: `return fail(errc::timeout, "rank ", r);`
template <class... Parts>
failure fail(errc code, const Parts&... parts) {
  return failure{code, detail::concat(parts...)};
}

}  // namespace weft

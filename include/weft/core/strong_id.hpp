// weft::strong_id<Tag, Rep>: integer identifiers that do not mix (a block_id is not a rank is not a
// client_id), so public signatures say what a number means and the compiler checks it.
#pragma once

#include <weft/core/config.hpp>

#include <compare>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>

namespace weft {

/// A distinct integer type per Tag. Explicit construction from Rep, explicit value(); ordered and
/// hashable. invalid() is the largest Rep, reserved to mean "no id". A plain value: thread-safe to
/// copy, O(1) everything.
template <class Tag, std::integral Rep = std::uint32_t>
class strong_id {
 public:
  using rep = Rep;

  constexpr strong_id() noexcept = default;
  WEFT_HOST_DEVICE constexpr explicit strong_id(Rep value) noexcept : value_(value) {}

  WEFT_HOST_DEVICE constexpr Rep value() const noexcept { return value_; }
  WEFT_HOST_DEVICE static constexpr strong_id invalid() noexcept { return strong_id(std::numeric_limits<Rep>::max()); }
  WEFT_HOST_DEVICE constexpr bool valid() const noexcept { return value_ != std::numeric_limits<Rep>::max(); }

  friend constexpr auto operator<=>(strong_id, strong_id) noexcept = default;
  friend std::ostream& operator<<(std::ostream& out, strong_id id) {
    if (!id.valid()) return out << "<invalid>";
    if constexpr (sizeof(Rep) == 1)
      return out << static_cast<int>(id.value_);
    else
      return out << id.value_;
  }

 private:
  Rep value_ = std::numeric_limits<Rep>::max();
};

}  // namespace weft

template <class Tag, class Rep>
struct std::hash<weft::strong_id<Tag, Rep>> {
  std::size_t operator()(weft::strong_id<Tag, Rep> id) const noexcept { return std::hash<Rep>{}(id.value()); }
};

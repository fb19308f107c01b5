// Internal: room for n more elements of a vector with geometric growth. Code that logs a change for
// undo, or must not fail halfway through one, reserves first so the push_backs that follow cannot
// throw (a plain reserve(size() + n) per push would reallocate on every call).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace weft::detail {

/// Makes the next n push_backs of v non-throwing. O(size) when it grows, O(1) otherwise.
template <class T>
void reserve_more(std::vector<T>& v, std::size_t n) {
  if (v.capacity() - v.size() < n) v.reserve(std::max(v.capacity() * 2, v.size() + n));
}

}  // namespace weft::detail

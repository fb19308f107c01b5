// Room for n more elements of a vector with geometric growth: the schedulers reserve before every
// change they log for undo, so the push that follows cannot throw (a plain reserve(size() + n) would
// reallocate on every call).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace weft::sched::detail {

/// Makes the next n push_backs of v non-throwing. O(size) when it grows, O(1) otherwise.
template <class T>
void reserve_more(std::vector<T>& v, std::size_t n) {
  if (v.capacity() - v.size() < n) v.reserve(std::max(v.capacity() * 2, v.size() + n));
}

}  // namespace weft::sched::detail

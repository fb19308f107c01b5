// A per-call scratch array whose first element sits on a cache-line boundary, so the kernels'
// 64-byte vector loads from it never straddle two lines (a split load costs a second L1 access).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace weft::quant::detail {

/// `size` elements of T (filled with `fill`), the first one 64-byte aligned. Movable, not
/// copyable (a copy would lose the alignment). Thread-safety: as std::vector. O(size).
template <class T>
class aligned_buffer {
  static_assert(std::is_trivially_copyable_v<T> && 64 % sizeof(T) == 0, "aligned_buffer holds small scalars");

 public:
  aligned_buffer() = default;
  explicit aligned_buffer(std::size_t size, T fill = T{}) : storage_(size + 64 / sizeof(T), fill), size_(size) {
    const auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
    offset_ = ((64 - address % 64) % 64) / sizeof(T);
  }
  aligned_buffer(const aligned_buffer&) = delete;
  aligned_buffer& operator=(const aligned_buffer&) = delete;
  aligned_buffer(aligned_buffer&&) noexcept = default;
  aligned_buffer& operator=(aligned_buffer&&) noexcept = default;

  T* data() noexcept { return storage_.data() + offset_; }
  const T* data() const noexcept { return storage_.data() + offset_; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  T& operator[](std::size_t i) noexcept { return data()[i]; }
  const T& operator[](std::size_t i) const noexcept { return data()[i]; }

 private:
  std::vector<T> storage_;
  std::size_t size_ = 0, offset_ = 0;
};

}  // namespace weft::quant::detail

// weft::kv::detail::key_map: an open-addressing hash map from 64-bit block keys to 32-bit block
// ids with linear probing and backward-shift deletion (Knuth TAOCP vol. 3, 6.4, Algorithm R), sized
// once for the pool so it never rehashes on the hot path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace weft::kv::detail {

/// Fixed-capacity map: at most max_size entries, table size a power of two >= 4/3 max_size.
/// Not thread-safe. find/insert/erase O(1) expected.
class key_map {
 public:
  static constexpr std::uint32_t npos = std::numeric_limits<std::uint32_t>::max();

  explicit key_map(std::size_t max_size) {
    std::size_t cap = 16;
    while (cap < max_size + max_size / 3 + 1) cap <<= 1;
    slots_.assign(cap, slot{0, npos});
    mask_ = cap - 1;
  }

  std::size_t size() const noexcept { return size_; }
  std::size_t table_size() const noexcept { return slots_.size(); }

  /// The value stored for key, or npos.
  std::uint32_t find(std::uint64_t key) const noexcept {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      const slot& s = slots_[i];
      if (s.value == npos) return npos;
      if (s.key == key) return s.value;
    }
  }

  /// Inserts (key, value) unless key is present; returns the value now stored for key.
  std::uint32_t insert(std::uint64_t key, std::uint32_t value) noexcept {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      slot& s = slots_[i];
      if (s.value == npos) {
        s = slot{key, value};
        ++size_;
        return value;
      }
      if (s.key == key) return s.value;
    }
  }

  /// Removes key; returns whether it was present.
  bool erase(std::uint64_t key) noexcept {
    std::size_t i = home(key);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].value == npos) return false;
      if (slots_[i].key == key) break;
    }
    // Backward shift: pull later entries of the probe run into the hole so no tombstones exist.
    std::size_t hole = i;
    for (std::size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
      if (slots_[j].value == npos) break;
      const std::size_t h = home(slots_[j].key);
      // Entry j may move to hole when its home is not cyclically in (hole, j].
      if (((j - h) & mask_) >= ((j - hole) & mask_)) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = slot{0, npos};
    --size_;
    return true;
  }

  void clear() noexcept {
    for (slot& s : slots_) s = slot{0, npos};
    size_ = 0;
  }

 private:
  struct slot {
    std::uint64_t key;
    std::uint32_t value;
  };
  std::size_t home(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9e3779b97f4a7c15ULL) >> 20) & mask_;
  }

  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace weft::kv::detail

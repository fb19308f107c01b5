// weft::kv::detail::key_map: an open-addressing hash map from 128-bit block keys to 32-bit block
// ids with linear probing and backward-shift deletion (Knuth TAOCP vol. 3, 6.4, Algorithm R), sized
// once for the pool so it never rehashes on the hot path.
#pragma once

#include <weft/kv/types.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace weft::kv::detail {

/// Fixed-capacity map: at most max_size entries, table size a power of two >= 4/3 max_size; 24
/// bytes per slot (the whole key is stored, so a probe needs no second memory access).
/// Not thread-safe. find/insert/erase O(1) expected.
class key_map {
 public:
  static constexpr std::uint32_t npos = std::numeric_limits<std::uint32_t>::max();
  /// Bytes of one table slot (key and value, padded).
  static constexpr std::size_t slot_bytes = 24;

  explicit key_map(std::size_t max_size) {
    std::size_t cap = 16;
    while (cap < max_size + max_size / 3 + 1) cap <<= 1;
    slots_.assign(cap, slot{block_key{}, npos});
    mask_ = cap - 1;
  }

  std::size_t size() const noexcept { return size_; }
  std::size_t table_size() const noexcept { return slots_.size(); }

  /// The value stored for key, or npos.
  std::uint32_t find(const block_key& key) const noexcept {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      const slot& s = slots_[i];
      if (s.value == npos) return npos;
      if (s.key == key) return s.value;
    }
  }

  /// Hints the CPU to fetch key's home slot: a caller that knows its next keys (a prompt's chain)
  /// overlaps the cache misses of a large table with useful work.
  void prefetch(const block_key& key) const noexcept {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(&slots_[home(key)]);
#else
    (void)key;
#endif
  }

  /// Inserts (key, value) unless key is present; returns the value now stored for key.
  std::uint32_t insert(const block_key& key, std::uint32_t value) noexcept {
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
  bool erase(const block_key& key) noexcept {
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
    slots_[hole] = slot{block_key{}, npos};
    --size_;
    return true;
  }

  void clear() noexcept {
    for (slot& s : slots_) s = slot{block_key{}, npos};
    size_ = 0;
  }

 private:
  struct slot {
    block_key key;
    std::uint32_t value;
  };
  static_assert(sizeof(slot) == slot_bytes);
  // Keys are hash outputs already; the multiply spreads a 64-bit hasher's keys (hi == 0) too.
  std::size_t home(const block_key& key) const noexcept {
    return static_cast<std::size_t>(((key.lo ^ key.hi) * 0x9e3779b97f4a7c15ULL) >> 20) & mask_;
  }

  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace weft::kv::detail

// weft::kv::detail::request_index: an open-addressing hash map from request id to a slot number,
// linear probing with backward-shift deletion (Knuth TAOCP vol. 3, 6.4, Algorithm R), so a
// scheduler's per-request lookups cost one multiply and, at half load, about one probe.
#pragma once

#include <weft/core/hash.hpp>
#include <weft/core/ids.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace weft::kv::detail {

/// Grows by doubling at half load. Not thread-safe. find/insert/erase O(1) expected; insert
/// amortised.
class request_index {
 public:
  static constexpr std::uint32_t npos = std::numeric_limits<std::uint32_t>::max();

  request_index() { slots_.assign(16, slot{0, npos}); }

  std::size_t size() const noexcept { return size_; }

  /// The value stored for id, or npos. O(1) expected.
  std::uint32_t find(request_id id) const noexcept {
    const std::uint64_t key = id.value();
    for (std::size_t i = home(key);; i = (i + 1) & mask()) {
      const slot& s = slots_[i];
      if (s.value == npos) return npos;
      if (s.key == key) return s.value;
    }
  }

  /// Stores value for id, which must not be present. May throw bad_alloc (index unchanged).
  void insert(request_id id, std::uint32_t value) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    place(id.value(), value);
    ++size_;
  }

  /// Removes id; returns whether it was present. O(1) expected.
  bool erase(request_id id) noexcept {
    const std::uint64_t key = id.value();
    std::size_t i = home(key);
    for (;; i = (i + 1) & mask()) {
      if (slots_[i].value == npos) return false;
      if (slots_[i].key == key) break;
    }
    // Backward shift: pull later entries of the probe run into the hole, so no tombstones exist.
    std::size_t hole = i;
    for (std::size_t j = (i + 1) & mask();; j = (j + 1) & mask()) {
      if (slots_[j].value == npos) break;
      const std::size_t h = home(slots_[j].key);
      if (((j - h) & mask()) >= ((j - hole) & mask())) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = slot{0, npos};
    --size_;
    return true;
  }

 private:
  struct slot {
    std::uint64_t key;
    std::uint32_t value;
  };

  std::size_t mask() const noexcept { return slots_.size() - 1; }
  std::size_t home(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>(weft::hash_mix(key ^ weft::hash_k0, weft::hash_k1)) & mask();
  }
  void place(std::uint64_t key, std::uint32_t value) noexcept {
    std::size_t i = home(key);
    while (slots_[i].value != npos) i = (i + 1) & mask();
    slots_[i] = slot{key, value};
  }
  void grow() {
    std::vector<slot> old(slots_.size() * 2, slot{0, npos});
    old.swap(slots_);  // slots_ is the new, empty table; old holds the entries
    for (const slot& s : old)
      if (s.value != npos) place(s.key, s.value);
  }

  std::vector<slot> slots_;
  std::size_t size_ = 0;
};

}  // namespace weft::kv::detail

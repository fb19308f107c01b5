// A set of dense key indices with O(1) insert, erase and membership, iterable as a packed array:
// the candidate list behind the scanning eviction policies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace weft::moe::detail {

/// Not thread-safe. insert/erase/contains O(1); iteration O(size).
class candidate_set {
 public:
  static constexpr std::uint32_t npos = std::numeric_limits<std::uint32_t>::max();

  void resize(std::size_t universe) {
    position_.assign(universe, npos);
    items_.clear();
  }
  bool contains(std::size_t index) const noexcept { return position_[index] != npos; }
  // Invariant: items_[position_[i]] == i for every member i; position_[i] == npos otherwise.
  bool insert(std::size_t index) {
    if (position_[index] != npos) return false;
    position_[index] = static_cast<std::uint32_t>(items_.size());
    items_.push_back(static_cast<std::uint32_t>(index));
    return true;
  }
  bool erase(std::size_t index) noexcept {
    const std::uint32_t at = position_[index];
    if (at == npos) return false;
    const std::uint32_t last = items_.back();
    items_[at] = last;
    position_[last] = at;
    items_.pop_back();
    position_[index] = npos;
    return true;
  }
  std::size_t size() const noexcept { return items_.size(); }
  bool empty() const noexcept { return items_.empty(); }
  const std::vector<std::uint32_t>& items() const noexcept { return items_; }

 private:
  std::vector<std::uint32_t> items_;
  std::vector<std::uint32_t> position_;
};

}  // namespace weft::moe::detail

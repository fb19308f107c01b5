// weft::kv::host_tier: the host (CPU) memory tier that preempted sequences are swapped to, and swap
// plans that group consecutive blocks into coarse copy units so each transfer is large (FastSwitch,
// Shen et al. 2024, section 3: per-block copies of small KV blocks leave PCIe bandwidth idle).
#pragma once

#include <weft/core/error.hpp>
#include <weft/kv/block_pool.hpp>
#include <weft/kv/types.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <ostream>
#include <span>
#include <vector>

namespace weft::kv {

/// Direction of a swap: out = device to host (preemption), in = host to device (resumption).
enum class swap_direction : std::uint8_t { out, in };

/// `count` consecutive device blocks starting at device_first and `count` consecutive host blocks
/// starting at host_first, copied in one transfer (one cudaMemcpyAsync per layer, or one per
/// contiguous layer-major region).
struct copy_unit {
  block_id device_first;
  host_block_id host_first;
  std::uint32_t count = 0;
  friend constexpr bool operator==(const copy_unit&, const copy_unit&) = default;
};

inline std::ostream& operator<<(std::ostream& out, const copy_unit& u) {
  return out << "[device " << u.device_first << " host " << u.host_first << " x" << u.count << "]";
}

/// What the engine copies for one swap, in order.
struct swap_plan {
  swap_direction direction = swap_direction::out;
  std::vector<copy_unit> units;
  std::size_t blocks = 0;  ///< total blocks moved (sum of unit counts)
};

/// Groups block pairs (device[i], host[i]) into maximal units where both ids run consecutively,
/// each at most max_unit_blocks long. Throws when the spans differ in length or max_unit_blocks is
/// 0. Thread-safe (pure). O(n).
inline swap_plan make_swap_plan(swap_direction direction, std::span<const block_id> device,
                                std::span<const host_block_id> host,
                                std::size_t max_unit_blocks = std::numeric_limits<std::uint32_t>::max()) {
  expects(device.size() == host.size(), errc::invalid_argument, "weft::kv::make_swap_plan", "device has ",
          device.size(), " blocks but host has ", host.size(), "; they pair one to one");
  expects(max_unit_blocks > 0, errc::invalid_argument, "weft::kv::make_swap_plan", "max_unit_blocks must be positive");
  swap_plan plan;
  plan.direction = direction;
  plan.blocks = device.size();
  for (std::size_t i = 0; i < device.size(); ++i) {
    if (!plan.units.empty()) {
      copy_unit& u = plan.units.back();
      if (u.count < max_unit_blocks && device[i].value() == u.device_first.value() + u.count &&
          host[i].value() == u.host_first.value() + u.count) {
        ++u.count;
        continue;
      }
    }
    plan.units.push_back(copy_unit{device[i], host[i], 1});
  }
  return plan;
}

/// A pool of host blocks (host block 0 is reserved like the device null block). Allocation hands
/// out the lowest run of a fresh pool first, so swaps of a quiet system produce few, large units.
/// Not thread-safe. O(1) per block.
class host_tier {
 public:
  /// `capacity` host block ids including the reserved id 0; capacity >= 2.
  explicit host_tier(std::size_t capacity) : pool_(capacity) {}

  std::size_t capacity() const noexcept { return pool_.capacity(); }
  std::size_t free_blocks() const noexcept { return pool_.free_blocks(); }
  std::size_t used_blocks() const noexcept { return pool_.used_blocks(); }

  /// Appends n host blocks to out, or nothing and false when fewer are free. O(n).
  bool allocate(std::size_t n, std::vector<host_block_id>& out) {
    if (n > pool_.free_blocks()) return false;
    out.reserve(out.size() + n);
    for (std::size_t i = 0; i < n; ++i) out.push_back(host_block_id(pool_.allocate()->value()));
    return true;
  }

  /// Frees a host block. Throws (tier unchanged) for a block that is not allocated. O(1).
  void release(host_block_id b) { pool_.release(block_id(b.value()), free_position::front); }

  std::uint32_t ref_count(host_block_id b) const { return pool_.ref_count(block_id(b.value())); }

 private:
  block_pool pool_;
};

}  // namespace weft::kv

// weft::kv::admission_controller: whether a new request's blocks fit — keeping a watermark of free
// blocks for running sequences' decode growth (vLLM's watermark, which avoids admitting a request
// only to preempt it a step later) — and per-tenant block quotas for multi-tenant serving.
#pragma once

#include <weft/core/error.hpp>
#include <weft/kv/types.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <unordered_map>

namespace weft::kv {

/// Watermark plus quotas. A tenant without a quota is unlimited; tenant_id::invalid() is never
/// accounted. Charges are counted in block
/// references held by the tenant's requests (a shared block counts once per request holding it).
/// Not thread-safe. All operations O(1) expected.
class admission_controller {
 public:
  static constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();

  /// watermark_blocks stay free after any admission (decode growth reserve).
  explicit admission_controller(std::size_t watermark_blocks = 0) : watermark_(watermark_blocks) {}

  std::size_t watermark_blocks() const noexcept { return watermark_; }
  void set_watermark_blocks(std::size_t w) noexcept { watermark_ = w; }

  /// Whether taking `blocks` out of `free_blocks` leaves the watermark. O(1).
  bool fits(std::size_t blocks, std::size_t free_blocks) const noexcept {
    return blocks <= free_blocks && free_blocks - blocks >= watermark_;
  }

  /// Sets tenant's quota (unlimited removes it). Throws when below the tenant's current usage. O(1).
  void set_quota(tenant_id t, std::size_t max_blocks) {
    expects(t.valid(), errc::invalid_argument, "weft::kv::admission_controller::set_quota", "invalid tenant id");
    auto& e = tenants_[t];
    expects(max_blocks >= e.used, errc::invalid_argument, "weft::kv::admission_controller::set_quota", "quota ",
            max_blocks, " for tenant ", t, " is below its current usage of ", e.used, " blocks");
    if (max_blocks != unlimited && e.quota == unlimited) ++quotas_;
    if (max_blocks == unlimited && e.quota != unlimited) --quotas_;
    e.quota = max_blocks;
  }
  std::size_t quota(tenant_id t) const {
    auto it = tenants_.find(t);
    return it == tenants_.end() ? unlimited : it->second.quota;
  }
  std::size_t usage(tenant_id t) const {
    auto it = tenants_.find(t);
    return it == tenants_.end() ? 0 : it->second.used;
  }
  /// Whether tenant t may hold `blocks` more. O(1).
  bool within_quota(tenant_id t, std::size_t blocks) const {
    if (!t.valid() || quotas_ == 0 || blocks == 0) return true;  // the common case costs no lookup
    auto it = tenants_.find(t);
    if (it == tenants_.end()) return true;
    return blocks <= it->second.quota - it->second.used;
  }
  /// Records that t now holds `blocks` more (after within_quota said yes). An invalid() tenant is
  /// not accounted. O(1).
  void charge(tenant_id t, std::size_t blocks) {
    if (t.valid()) tenants_[t].used += blocks;
  }
  /// The usage counter of tenant t, created at 0 when new (so later charges through it cannot fail).
  /// For owners that charge after a step that must not throw. O(1) expected.
  std::size_t& usage_counter(tenant_id t) { return tenants_[t].used; }
  /// Records that t gave back `blocks`. Throws when that exceeds its usage. O(1).
  void refund(tenant_id t, std::size_t blocks) {
    if (!t.valid()) return;
    auto it = tenants_.find(t);
    const std::size_t used = it == tenants_.end() ? 0 : it->second.used;
    expects(blocks <= used, errc::invalid_argument, "weft::kv::admission_controller::refund", "refunding ", blocks,
            " blocks to tenant ", t, " which holds only ", used);
    it->second.used -= blocks;
  }

 private:
  struct account {
    std::size_t quota = unlimited;
    std::size_t used = 0;
  };
  std::size_t watermark_;
  std::size_t quotas_ = 0;  // tenants with a finite quota
  std::unordered_map<tenant_id, account> tenants_;
};

}  // namespace weft::kv

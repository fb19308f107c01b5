// Expert placement for expert parallelism: replicate the hottest experts and spread replicas over
// devices by greedy longest-processing-time first (Graham 1969; as in DeepSeek's EPLB and
// "Lazarus"/"Prophet" placement), then the all-to-all dispatch plan: per-device send/receive counts
// and offsets, the layout an alltoallv consumes (plain vectors; weft::comm is not needed).
#pragma once

#include <weft/core/error.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

namespace weft::moe {

/// Where each expert lives. replicas[e]: devices holding expert e (ascending); device_experts[d]:
/// experts on device d; device_load[d]: expected load if each expert's load splits evenly over its
/// replicas.
struct expert_placement {
  std::uint32_t num_devices = 0;
  std::vector<std::vector<std::uint32_t>> replicas;
  std::vector<std::vector<std::uint32_t>> device_experts;
  std::vector<double> device_load;

  /// max device load / mean device load (1 = perfect). O(devices).
  double imbalance() const {
    if (device_load.empty()) return 0;
    const double total = std::accumulate(device_load.begin(), device_load.end(), 0.0);
    if (total == 0) return 1;
    return *std::max_element(device_load.begin(), device_load.end()) / (total / static_cast<double>(num_devices));
  }
};

/// Places experts with observed `loads` on num_devices devices of slots_per_device expert slots.
/// Spare slots (devices * slots - experts) hold replicas: each goes to the expert with the largest
/// load per replica (at most one replica per device). Replicas are then assigned in decreasing load
/// order to the least-loaded device with a free slot that does not hold that expert yet (LPT); a
/// replica that finds no such device is dropped. Deterministic (ties to smaller ids). Pure.
/// Throws weft::error if slots cannot hold every expert once or a load is negative.
/// O(R log R + R * devices) with R = devices * slots_per_device.
inline expert_placement place_experts(std::span<const double> loads, std::uint32_t num_devices,
                                      std::uint32_t slots_per_device) {
  constexpr const char* where = "weft::moe::place_experts";
  const std::uint32_t E = static_cast<std::uint32_t>(loads.size());
  expects(E >= 1, errc::invalid_argument, where, "no experts to place");
  expects(num_devices >= 1, errc::invalid_argument, where, "num_devices is 0");
  expects(std::uint64_t{num_devices} * slots_per_device >= E, errc::invalid_argument, where, num_devices, " devices x ",
          slots_per_device, " slots cannot hold ", E, " experts once");
  for (std::uint32_t e = 0; e < E; ++e)
    expects(loads[e] >= 0, errc::invalid_argument, where, "load of expert ", e, " is ", loads[e], "; loads are >= 0");

  std::vector<std::uint32_t> count(E, 1);
  std::uint64_t spare = std::uint64_t{num_devices} * slots_per_device - E;
  while (spare > 0) {
    std::uint32_t best = E;
    for (std::uint32_t e = 0; e < E; ++e)
      if (count[e] < num_devices && loads[e] > 0 && (best == E || loads[e] / count[e] > loads[best] / count[best]))
        best = e;
    if (best == E) break;
    ++count[best];
    --spare;
  }
  struct item {
    std::uint32_t expert;
    double load;
  };
  std::vector<item> items;
  for (std::uint32_t e = 0; e < E; ++e)
    for (std::uint32_t r = 0; r < count[e]; ++r) items.push_back({e, loads[e] / count[e]});
  std::stable_sort(items.begin(), items.end(), [](const item& a, const item& b) { return a.load > b.load; });

  expert_placement out;
  out.num_devices = num_devices;
  out.replicas.assign(E, {});
  out.device_experts.assign(num_devices, {});
  out.device_load.assign(num_devices, 0.0);
  std::vector<double> planned(num_devices, 0.0);
  for (const item& it : items) {
    std::uint32_t best = num_devices;
    for (std::uint32_t d = 0; d < num_devices; ++d) {
      if (out.device_experts[d].size() >= slots_per_device) continue;
      const auto& held = out.replicas[it.expert];
      if (std::find(held.begin(), held.end(), d) != held.end()) continue;
      if (best == num_devices || planned[d] < planned[best]) best = d;
    }
    if (best == num_devices) {
      // Only replicas beyond the first can be dropped: the first of each expert is placed while
      // every device still has room for it (E <= devices * slots and first replicas never collide).
      expects(!out.replicas[it.expert].empty(), errc::precondition, where, "internal: expert ", it.expert,
              " could not be placed");
      continue;
    }
    out.replicas[it.expert].push_back(best);
    out.device_experts[best].push_back(it.expert);
    planned[best] += it.load;
  }
  for (std::uint32_t e = 0; e < E; ++e) {
    std::sort(out.replicas[e].begin(), out.replicas[e].end());
    for (const std::uint32_t d : out.replicas[e])
      out.device_load[d] += loads[e] / static_cast<double>(out.replicas[e].size());
  }
  for (auto& list : out.device_experts) std::sort(list.begin(), list.end());
  return out;
}

/// The all-to-all dispatch of one MoE layer. Row-major D x D matrices:
/// send_counts[s*D + d]: routed token slots device s sends to device d; send_offsets[s*D + d]: where
/// they start in s's send buffer (exclusive prefix over d). recv_counts[d*D + s] == send_counts[s*D + d];
/// recv_offsets[d*D + s]: where they land in d's receive buffer. For source s, destination[s][i] and
/// send_position[s][i] say where its i-th routed slot goes and its index in s's send buffer.
struct dispatch_plan {
  std::uint32_t num_devices = 0;
  std::vector<std::uint64_t> send_counts, send_offsets, recv_counts, recv_offsets;
  std::vector<std::vector<std::uint32_t>> destination;
  std::vector<std::vector<std::uint64_t>> send_position;
};

/// Plans the dispatch of routed token slots: routed[s] lists, for each token slot on source device s
/// (token-major, k per token), the expert it goes to. A slot goes to the replica on its own device
/// when there is one, else to the expert's replicas in turn (round robin per expert, so replicas
/// share load). Send buffers are grouped by destination, stable within a destination.
/// Deterministic and pure. Throws weft::error for an unknown expert or a device count mismatch.
/// O(D^2 + total slots).
inline dispatch_plan plan_dispatch(const expert_placement& placement,
                                   std::span<const std::vector<std::uint32_t>> routed) {
  constexpr const char* where = "weft::moe::plan_dispatch";
  const std::uint32_t D = placement.num_devices;
  expects(routed.size() == D, errc::mismatch, where, routed.size(), " source devices for a placement on ", D);
  dispatch_plan plan;
  plan.num_devices = D;
  const std::size_t DD = std::size_t{D} * D;
  plan.send_counts.assign(DD, 0);
  plan.send_offsets.assign(DD, 0);
  plan.recv_counts.assign(DD, 0);
  plan.recv_offsets.assign(DD, 0);
  plan.destination.resize(D);
  plan.send_position.resize(D);
  std::vector<std::uint32_t> turn(placement.replicas.size(), 0);
  for (std::uint32_t s = 0; s < D; ++s) {
    auto& dest = plan.destination[s];
    dest.reserve(routed[s].size());
    for (const std::uint32_t e : routed[s]) {
      expects(e < placement.replicas.size() && !placement.replicas[e].empty(), errc::out_of_range, where, "device ", s,
              " routes to unknown expert ", e, " (", placement.replicas.size(), " placed)");
      const auto& reps = placement.replicas[e];
      std::uint32_t d;
      if (std::binary_search(reps.begin(), reps.end(), s)) {
        d = s;
      } else {
        d = reps[turn[e] % reps.size()];
        ++turn[e];
      }
      dest.push_back(d);
      ++plan.send_counts[std::size_t{s} * D + d];
    }
  }
  for (std::uint32_t s = 0; s < D; ++s) {
    std::uint64_t at = 0;
    for (std::uint32_t d = 0; d < D; ++d) {
      plan.send_offsets[std::size_t{s} * D + d] = at;
      at += plan.send_counts[std::size_t{s} * D + d];
      plan.recv_counts[std::size_t{d} * D + s] = plan.send_counts[std::size_t{s} * D + d];
    }
    std::vector<std::uint64_t> cursor(plan.send_offsets.begin() + static_cast<std::ptrdiff_t>(std::size_t{s} * D),
                                      plan.send_offsets.begin() + static_cast<std::ptrdiff_t>(std::size_t{s} * D + D));
    auto& pos = plan.send_position[s];
    pos.reserve(plan.destination[s].size());
    for (const std::uint32_t d : plan.destination[s]) pos.push_back(cursor[d]++);
  }
  for (std::uint32_t d = 0; d < D; ++d) {
    std::uint64_t at = 0;
    for (std::uint32_t s = 0; s < D; ++s) {
      plan.recv_offsets[std::size_t{d} * D + s] = at;
      at += plan.recv_counts[std::size_t{d} * D + s];
    }
  }
  return plan;
}

}  // namespace weft::moe

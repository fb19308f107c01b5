// Hierarchical allreduce for multi-host jobs: a star reduce inside each host, a ring allreduce
// among the host leaders (the smallest rank of each host), a star broadcast inside each host —
// the two-level scheme of NCCL's and Horovod's hierarchical allreduce, with the intra-host star so
// only one rank per host crosses the network.
#pragma once

#include <weft/comm/algorithms/ring.hpp>
#include <weft/comm/algorithms/star.hpp>
#include <weft/comm/detail/context.hpp>
#include <weft/comm/group_view.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace weft::comm::detail {

/// hosts[q] is rank q's host id (every rank passes the same map). Cost: the ring's over the host
/// count plus 2(local - 1) intra-host transfers of n bytes at the leader.
template <transport Tr, class T, class Op>
void hierarchical_allreduce(Tr& t, std::span<T> data, const Op& op, std::span<const int> hosts, msg_tag tag,
                            deadline until, std::size_t seg) {
  const int p = static_cast<int>(t.size()), r = static_cast<int>(t.rank());
  const int my_host = hosts[static_cast<std::size_t>(r)];
  std::vector<int> local, leaders;  // in rank order; a host's leader is its smallest rank
  for (int q = 0; q < p; ++q) {
    const int h = hosts[static_cast<std::size_t>(q)];
    if (h == my_host) local.push_back(q);
    bool first_of_host = true;
    for (int e = 0; e < q; ++e)
      if (hosts[static_cast<std::size_t>(e)] == h) first_of_host = false;
    if (first_of_host) leaders.push_back(q);
  }
  group_view<Tr> host(t, local);
  {
    call_context c(host, "weft::comm::allreduce[hierarchical intra-host reduce]", tag, until);
    star_reduce(c, data, op, 0, seg);  // no final step yet: the leaders finish the reduction
  }
  if (local.front() == r) {
    group_view<Tr> inter(t, leaders);
    call_context c(inter, "weft::comm::allreduce[hierarchical inter-host ring]", tag, until);
    ring_allreduce(c, data, op, static_cast<std::size_t>(p), seg);
  }
  {
    call_context c(host, "weft::comm::allreduce[hierarchical intra-host broadcast]", tag, until);
    star_broadcast(c, data, seg);
  }
}

}  // namespace weft::comm::detail

// Allreduce over any weft::comm transport: ring (Patarasuk & Yuan, JPDC 2009), double binary tree
// (Sanders, Speck & Träff, Parallel Computing 2009; as in NCCL 2.4), star (reduce to rank 0 then
// broadcast), recursive halving-doubling (Rabenseifner, ICCS 2004; Thakur et al. IJHPCA 2005 §4.4,
// with the non-power-of-two pre/post step) and hierarchical (intra-host, inter-host ring, intra-host).
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/comm/detail/context.hpp>
#include <weft/comm/group_view.hpp>
#include <weft/comm/options.hpp>
#include <weft/comm/tuner.hpp>
#include <weft/core/dtype.hpp>
#include <weft/core/reduce_ops.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <vector>

namespace weft::comm {
namespace detail {

template <class T>
std::span<const T> as_const(std::span<T> s) noexcept {
  return {s.data(), s.size()};
}

inline std::size_t segment_elems(std::size_t segment_bytes, std::size_t elem) {
  return std::max<std::size_t>(1, segment_bytes / elem);
}

/// Ring allreduce: reduce-scatter then allgather, p-1 steps each; every step moves one chunk
/// (n/p elements) in segments, so a segment arrives while the previous one is being reduced.
/// After the reduce-scatter rank r owns chunk r, reduced in ring order starting at r+1.
template <class Ctx, class T, class Op>
void ring_allreduce(Ctx& c, std::span<T> data, const Op& op, std::size_t contributions, std::size_t seg) {
  const int p = c.size(), r = c.rank();
  const std::size_t n = data.size(), P = static_cast<std::size_t>(p);
  if (p == 1) {
    finalize_range(data, op, contributions);
    return;
  }
  const std::size_t max_chunk = chunk_size(n, P, 0);
  const std::size_t segs = std::max<std::size_t>(1, (max_chunk + seg - 1) / seg);
  std::vector<T> tmp(std::min(seg, max_chunk));
  auto piece = [&](int chunk, std::size_t j) {
    const auto ci = static_cast<std::size_t>(chunk);
    const std::size_t len = chunk_size(n, P, ci), lo = std::min(len, j * seg), hi = std::min(len, lo + seg);
    return data.subspan(chunk_begin(n, P, ci) + lo, hi - lo);
  };
  const int next = mod(r + 1, p), prev = mod(r - 1, p);
  for (int s = 0; s < p - 1; ++s) {
    c.phase("ring reduce-scatter", s);
    const int send_c = mod(r - s - 1, p), recv_c = mod(r - s - 2, p);
    for (std::size_t j = 0; j < segs; ++j) {
      auto out = piece(send_c, j);
      auto acc = piece(recv_c, j);
      std::span<T> in(tmp.data(), acc.size());
      c.sendrecv(next, as_const(out), prev, in);
      reduce(acc, as_const(in), op);
    }
  }
  finalize_range(
      data.subspan(chunk_begin(n, P, static_cast<std::size_t>(r)), chunk_size(n, P, static_cast<std::size_t>(r))), op,
      contributions);
  for (int s = 0; s < p - 1; ++s) {
    c.phase("ring allgather", s);
    const int send_c = mod(r - s, p), recv_c = mod(r - s - 1, p);
    for (std::size_t j = 0; j < segs; ++j) c.sendrecv(next, as_const(piece(send_c, j)), prev, piece(recv_c, j));
  }
}

/// The in-order binary tree over positions [lo, hi): the root is the middle position, so the
/// leaves are every other position; the second tree (mirrored for even p, shifted by one for odd
/// p) makes most leaves of one tree inner nodes of the other, as NCCL's double binary tree does.
struct tree_links {
  int parent = -1;
  std::array<int, 2> children{-1, -1};
};

inline int build_inorder(int lo, int hi, int parent, std::vector<tree_links>& out) {
  if (lo >= hi) return -1;
  const int mid = lo + (hi - lo) / 2;
  out[static_cast<std::size_t>(mid)].parent = parent;
  out[static_cast<std::size_t>(mid)].children = {build_inorder(lo, mid, mid, out),
                                                 build_inorder(mid + 1, hi, mid, out)};
  return mid;
}

/// Links of rank r in tree `which` (0 or 1) of p ranks. O(p).
inline tree_links double_tree_links(int p, int r, int which) {
  std::vector<tree_links> pos(static_cast<std::size_t>(p));
  build_inorder(0, p, -1, pos);
  auto to_pos = [&](int rank) { return which == 0 ? rank : (p % 2 == 0 ? p - 1 - rank : mod(rank - 1, p)); };
  auto to_rank = [&](int q) { return q < 0 ? -1 : (which == 0 ? q : (p % 2 == 0 ? p - 1 - q : mod(q + 1, p))); };
  const tree_links& l = pos[static_cast<std::size_t>(to_pos(r))];
  tree_links out;
  out.parent = to_rank(l.parent);
  out.children = {to_rank(l.children[0]), to_rank(l.children[1])};
  return out;
}

/// Double binary tree: the first half of the data is reduced up tree 0 and broadcast down it,
/// the second half over tree 1, segment by segment; each inner node combines own, first child,
/// second child in that order; the root finalizes.
template <class Ctx, class T, class Op>
void tree_allreduce(Ctx& c, std::span<T> data, const Op& op, std::size_t contributions, std::size_t seg) {
  const int p = c.size(), r = c.rank();
  if (p == 1) {
    finalize_range(data, op, contributions);
    return;
  }
  const std::size_t half = data.size() / 2;
  const std::array<std::span<T>, 2> parts{data.first(half), data.subspan(half)};
  const std::array<tree_links, 2> links{double_tree_links(p, r, 0), double_tree_links(p, r, 1)};
  const std::size_t longest = parts[1].size();
  const std::size_t segs = std::max<std::size_t>(1, (longest + seg - 1) / seg);
  std::vector<T> tmp(std::min(seg, longest));
  auto piece = [&](int t, std::size_t j) {
    const auto& part = parts[static_cast<std::size_t>(t)];
    const std::size_t lo = std::min(part.size(), j * seg), hi = std::min(part.size(), lo + seg);
    return part.subspan(lo, hi - lo);
  };
  for (std::size_t j = 0; j < segs; ++j) {
    for (int t = 0; t < 2; ++t) {
      c.phase(t == 0 ? "tree 0 reduce" : "tree 1 reduce", static_cast<int>(j));
      auto mine = piece(t, j);
      for (int child : links[static_cast<std::size_t>(t)].children) {
        if (child < 0) continue;
        std::span<T> in(tmp.data(), mine.size());
        c.recv(child, in);
        reduce(mine, as_const(in), op);
      }
      if (links[static_cast<std::size_t>(t)].parent >= 0)
        c.send(links[static_cast<std::size_t>(t)].parent, as_const(mine));
      else
        finalize_range(mine, op, contributions);
    }
  }
  for (std::size_t j = 0; j < segs; ++j) {
    for (int t = 0; t < 2; ++t) {
      c.phase(t == 0 ? "tree 0 broadcast" : "tree 1 broadcast", static_cast<int>(j));
      auto mine = piece(t, j);
      if (links[static_cast<std::size_t>(t)].parent >= 0) c.recv(links[static_cast<std::size_t>(t)].parent, mine);
      for (int child : links[static_cast<std::size_t>(t)].children)
        if (child >= 0) c.send(child, as_const(mine));
    }
  }
}

/// Star reduce: rank 0 receives every other rank's data in rank order and reduces it, segment
/// by segment, so rank 0 needs one segment of scratch.
template <class Ctx, class T, class Op>
void star_reduce(Ctx& c, std::span<T> data, const Op& op, std::size_t contributions, std::size_t seg) {
  const int p = c.size(), r = c.rank();
  const std::size_t n = data.size();
  const std::size_t segs = std::max<std::size_t>(1, (n + seg - 1) / seg);
  std::vector<T> tmp(r == 0 ? std::min(seg, n) : 0);
  for (std::size_t j = 0; j < segs; ++j) {
    c.phase("star reduce", static_cast<int>(j));
    const std::size_t lo = std::min(n, j * seg), hi = std::min(n, lo + seg);
    auto mine = data.subspan(lo, hi - lo);
    if (r == 0) {
      for (int q = 1; q < p; ++q) {
        std::span<T> in(tmp.data(), mine.size());
        c.recv(q, in);
        reduce(mine, as_const(in), op);
      }
      finalize_range(mine, op, contributions);
    } else {
      c.send(0, as_const(mine));
    }
  }
}

/// Star broadcast: rank 0 sends its data to every other rank, segment by segment.
template <class Ctx, class T>
void star_broadcast(Ctx& c, std::span<T> data, std::size_t seg) {
  const int p = c.size(), r = c.rank();
  const std::size_t n = data.size();
  const std::size_t segs = std::max<std::size_t>(1, (n + seg - 1) / seg);
  for (std::size_t j = 0; j < segs; ++j) {
    c.phase("star broadcast", static_cast<int>(j));
    const std::size_t lo = std::min(n, j * seg), hi = std::min(n, lo + seg);
    auto mine = data.subspan(lo, hi - lo);
    if (r == 0) {
      for (int q = 1; q < p; ++q) c.send(q, as_const(mine));
    } else {
      c.recv(0, mine);
    }
  }
}

/// Recursive halving (reduce-scatter) then recursive doubling (allgather) among the largest
/// power of two p' <= p ranks; the first 2(p - p') ranks first fold pairwise (even into odd) and
/// get the result back at the end, so any p works.
template <class Ctx, class T, class Op>
void halving_doubling_allreduce(Ctx& c, std::span<T> data, const Op& op, std::size_t contributions) {
  const int p = c.size(), r = c.rank();
  const std::size_t n = data.size();
  if (p == 1) {
    finalize_range(data, op, contributions);
    return;
  }
  int pp = 1;
  while (pp * 2 <= p) pp *= 2;
  const int rem = p - pp;
  std::vector<T> tmp(n);
  int vrank;
  if (r < 2 * rem) {
    c.phase("halving-doubling fold");
    if (r % 2 == 0) {
      c.send(r + 1, as_const(data));
      vrank = -1;
    } else {
      std::span<T> in(tmp.data(), n);
      c.recv(r - 1, in);
      reduce(data, as_const(in), op);
      vrank = r / 2;
    }
  } else {
    vrank = r - rem;
  }
  auto real = [&](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  if (vrank >= 0) {
    struct range {
      std::size_t lo, hi;
    };
    std::vector<range> history;
    std::size_t lo = 0, hi = n;
    int step = 0;
    for (int mask = pp / 2; mask >= 1; mask /= 2, ++step) {
      c.phase("recursive halving", step);
      const int partner_v = vrank ^ mask;
      const int partner = real(partner_v);
      const std::size_t mid = lo + (hi - lo) / 2;
      history.push_back({lo, hi});
      std::size_t keep_lo = lo, keep_hi = mid, give_lo = mid, give_hi = hi;
      if (vrank > partner_v) std::swap(keep_lo, give_lo), std::swap(keep_hi, give_hi);
      std::span<T> in(tmp.data(), keep_hi - keep_lo);
      c.sendrecv(partner, as_const(data.subspan(give_lo, give_hi - give_lo)), partner, in);
      reduce(data.subspan(keep_lo, keep_hi - keep_lo), as_const(in), op);
      lo = keep_lo;
      hi = keep_hi;
    }
    finalize_range(data.subspan(lo, hi - lo), op, contributions);
    for (int mask = 1; mask < pp; mask *= 2, ++step) {
      c.phase("recursive doubling", step);
      const int partner = real(vrank ^ mask);
      const range before = history.back();
      history.pop_back();
      const bool lower_half = lo == before.lo;
      const std::size_t other_lo = lower_half ? hi : before.lo, other_hi = lower_half ? before.hi : lo;
      c.sendrecv(partner, as_const(data.subspan(lo, hi - lo)), partner, data.subspan(other_lo, other_hi - other_lo));
      lo = before.lo;
      hi = before.hi;
    }
  }
  if (r < 2 * rem) {
    c.phase("halving-doubling unfold");
    if (r % 2 == 0)
      c.recv(r + 1, data);
    else
      c.send(r - 1, as_const(data));
  }
}

}  // namespace detail

/// Reduces `data` element-wise over all ranks with `op`, in place; every rank ends with the same
/// bits. `opt.algo` picks the algorithm (automatic: choose_allreduce with opt.model); the
/// hierarchical algorithm needs opt.hosts (a host id per rank). Every rank must call it with the
/// same count, dtype, op and options; a disagreement is errc::mismatch on the rank that sees it and
/// errc::aborted on the others (on abortable transports), a silent peer errc::timeout.
/// Cost: see docs/comm.md (ring: 2(p-1) steps moving 2(p-1)/p·n bytes). Blocking; thread-safe as
/// far as the transport is (distinct channels). Throws errc::invalid_argument for a zero timeout or
/// segment size, a host map of the wrong length.
template <transport Tr, element_type T, class Op = op::sum>
requires reduce_op<Op, T>
void allreduce(Tr& t, std::span<T> data, Op op = {}, const options& opt = {}) {
  constexpr const char* where = "weft::comm::allreduce";
  const int p = static_cast<int>(t.size());
  expects(opt.timeout.count() > 0, errc::invalid_argument, where, "timeout must be positive, got ", opt.timeout.count(),
          " ms");
  expects(opt.segment_bytes > 0, errc::invalid_argument, where, "segment_bytes must be positive");
  algorithm algo = opt.algo;
  if (algo == algorithm::automatic)
    algo = choose_allreduce(data.size_bytes(), p, opt.segment_bytes, opt.model ? *opt.model : cost_model{});
  if (algo == algorithm::hierarchical)
    expects(opt.hosts.size() == static_cast<std::size_t>(p), errc::invalid_argument, where,
            "hierarchical allreduce needs a host id for each of the ", p, " ranks, got ", opt.hosts.size());
  const msg_tag tag{
      opt.channel, make_check(collective::allreduce, dtype_of<T>, algo, data.size(), op_name<Op>(), opt.segment_bytes)};
  const deadline until = clock_type::now() + opt.timeout;
  const std::size_t seg = detail::segment_elems(opt.segment_bytes, sizeof(T));
  const auto P = static_cast<std::size_t>(p);
  switch (algo) {
    case algorithm::ring: {
      detail::call_context c(t, "weft::comm::allreduce[ring]", tag, until);
      detail::ring_allreduce(c, data, op, P, seg);
      break;
    }
    case algorithm::tree: {
      detail::call_context c(t, "weft::comm::allreduce[tree]", tag, until);
      detail::tree_allreduce(c, data, op, P, seg);
      break;
    }
    case algorithm::star: {
      detail::call_context c(t, "weft::comm::allreduce[star]", tag, until);
      detail::star_reduce(c, data, op, P, seg);
      detail::star_broadcast(c, data, seg);
      break;
    }
    case algorithm::halving_doubling: {
      detail::call_context c(t, "weft::comm::allreduce[halving_doubling]", tag, until);
      detail::halving_doubling_allreduce(c, data, op, P);
      break;
    }
    case algorithm::hierarchical: {
      // Local groups in rank order; the leader of a host is its smallest rank.
      const int r = static_cast<int>(t.rank());
      const int my_host = opt.hosts[static_cast<std::size_t>(r)];
      std::vector<int> local, leaders;
      for (int q = 0; q < p; ++q) {
        const int h = opt.hosts[static_cast<std::size_t>(q)];
        if (h == my_host) local.push_back(q);
        bool first_of_host = true;
        for (int e = 0; e < q; ++e)
          if (opt.hosts[static_cast<std::size_t>(e)] == h) first_of_host = false;
        if (first_of_host) leaders.push_back(q);
      }
      group_view<Tr> host(t, local);
      {
        detail::call_context c(host, "weft::comm::allreduce[hierarchical intra-host reduce]", tag, until);
        detail::star_reduce(c, data, op, 0, seg);  // no final step yet: the leaders finish the sum
      }
      if (local.front() == r) {
        group_view<Tr> inter(t, leaders);
        detail::call_context c(inter, "weft::comm::allreduce[hierarchical inter-host ring]", tag, until);
        detail::ring_allreduce(c, data, op, P, seg);
      }
      {
        detail::call_context c(host, "weft::comm::allreduce[hierarchical intra-host broadcast]", tag, until);
        detail::star_broadcast(c, data, seg);
      }
      break;
    }
    case algorithm::automatic:
      break;
  }
}

}  // namespace weft::comm

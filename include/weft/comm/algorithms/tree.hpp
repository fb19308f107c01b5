// Double binary tree allreduce (Sanders, Speck & Träff, "Two-tree algorithms for full bandwidth
// broadcast, reduction and scan", Parallel Computing 2009; as in NCCL 2.4): half the data goes up
// and down each of two trees whose inner nodes are the other's leaves, pipelined in segments.
#pragma once

#include <weft/comm/detail/context.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <vector>

namespace weft::comm::detail {

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
  scratch<T> tmp(std::min(seg, longest));
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

}  // namespace weft::comm::detail

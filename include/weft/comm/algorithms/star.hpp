// Star reduce and broadcast: every rank sends to rank 0, which reduces in rank order and sends the
// result back, segment by segment. Two message times at p = 2; the building block of the
// hierarchical algorithm's intra-host phases.
#pragma once

#include <weft/comm/detail/context.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <vector>

namespace weft::comm::detail {

/// Star reduce: rank 0 receives every other rank's data in rank order and reduces it, segment
/// by segment, so rank 0 needs one segment of scratch.
template <class Ctx, class T, class Op>
void star_reduce(Ctx& c, std::span<T> data, const Op& op, std::size_t contributions, std::size_t seg) {
  const int p = c.size(), r = c.rank();
  const std::size_t n = data.size();
  const std::size_t segs = std::max<std::size_t>(1, (n + seg - 1) / seg);
  scratch<T> tmp(r == 0 ? std::min(seg, n) : 0);
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

}  // namespace weft::comm::detail

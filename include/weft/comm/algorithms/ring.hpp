// Ring allreduce (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
// workstations", JPDC 2009): a reduce-scatter then an allgather around the ring, p-1 steps each,
// pipelined in segments. Bandwidth-optimal: every rank sends 2(p-1)/p of the data.
#pragma once

#include <weft/comm/detail/context.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <vector>

namespace weft::comm::detail {

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
  scratch<T> tmp(std::min(seg, max_chunk));
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

}  // namespace weft::comm::detail

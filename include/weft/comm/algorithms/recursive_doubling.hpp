// Recursive doubling allreduce (Thakur, Rabenseifner & Gropp, "Optimization of collective
// communication operations in MPICH", IJHPCA 2005, §4.4 for short messages): log2(p') rounds, in
// each of which partners v and v^2^k swap their whole vectors and both reduce, the lower rank's
// partial on the left, so both hold the same bits. The latency-optimal schedule for small messages
// (fewest message rounds); non-powers of two fold their extra ranks in first, as halving-doubling does.
#pragma once

#include <weft/comm/detail/context.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace weft::comm::detail {

/// Recursive doubling among the largest power of two p' <= p ranks; ranks below 2(p - p') fold
/// pairwise first (even into odd) and get the result back at the end. Scratch: n elements.
/// Time: (ceil(log2 p') + 2[p != p'])·(alpha + n·beta) + log2(p')·n·gamma.
template <class Ctx, class T, class Op>
void recursive_doubling_allreduce(Ctx& c, std::span<T> data, const Op& op, std::size_t contributions) {
  const int p = c.size(), r = c.rank();
  const std::size_t n = data.size();
  if (p == 1) {
    finalize_range(data, op, contributions);
    return;
  }
  int pp = 1;
  while (pp * 2 <= p) pp *= 2;
  const int rem = p - pp;
  scratch<T> tmp(n);
  std::span<T> in(tmp.data(), n);
  int vrank;
  if (r < 2 * rem) {
    c.phase("recursive doubling fold");
    if (r % 2 == 0) {
      c.send(r + 1, as_const(data));
      vrank = -1;
    } else {
      c.recv(r - 1, in);
      reduce_from_left(data, as_const(in), op);  // op(even, odd): the lower rank on the left
      vrank = r / 2;
    }
  } else {
    vrank = r - rem;
  }
  auto real = [&](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  if (vrank >= 0) {
    int step = 0;
    for (int mask = 1; mask < pp; mask <<= 1, ++step) {
      c.phase("recursive doubling", step);
      const int partner_v = vrank ^ mask;
      const int partner = real(partner_v);
      c.sendrecv(partner, as_const(data), partner, in);
      if (vrank < partner_v)
        reduce(data, as_const(in), op);
      else
        reduce_from_left(data, as_const(in), op);
    }
    finalize_range(data, op, contributions);
  }
  if (r < 2 * rem) {
    c.phase("recursive doubling unfold");
    if (r % 2 == 0)
      c.recv(r + 1, data);
    else
      c.send(r - 1, as_const(data));
  }
}

}  // namespace weft::comm::detail

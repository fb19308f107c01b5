// Recursive halving-doubling allreduce (Rabenseifner, "Optimization of collective reduction
// operations", ICCS 2004; Thakur, Rabenseifner & Gropp, IJHPCA 2005 §4.4): a reduce-scatter by
// recursive halving then an allgather by recursive doubling, with the non-power-of-two fold.
#pragma once

#include <weft/comm/detail/context.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <vector>

namespace weft::comm::detail {

/// Recursive halving (reduce-scatter) then recursive doubling (allgather) among the largest
/// power of two p' <= p ranks (scratch: n/2 elements); the first 2(p - p') ranks first fold pairwise (even into odd)
/// and get the result back at the end, so any p works.
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
  // Scratch for half the data: the largest piece received (the first halving step's; the fold
  // sends its data in two halves).
  const std::size_t half = n - n / 2;
  scratch<T> tmp(half);
  int vrank;
  if (r < 2 * rem) {
    c.phase("halving-doubling fold");
    const std::array<std::span<T>, 2> halves{data.first(half), data.subspan(half)};
    if (r % 2 == 0) {
      for (auto h : halves) c.send(r + 1, as_const(h));
      vrank = -1;
    } else {
      for (auto h : halves) {
        std::span<T> in(tmp.data(), h.size());
        c.recv(r - 1, in);
        reduce(h, as_const(in), op);
      }
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

}  // namespace weft::comm::detail

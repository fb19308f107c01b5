// The other collectives over any weft::comm transport: reduce_scatter and allgather (ring,
// Patarasuk & Yuan 2009), broadcast and reduce (segmented binomial trees, Thakur et al. IJHPCA 2005
// §4.1/§4.3), barrier (dissemination, Hensgen, Finkel & Manber 1988), alltoall and alltoallv
// (pairwise exchange, Thakur et al. §4.6) — the last two are MoE expert dispatch.
#pragma once

#include <weft/comm/allreduce.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/comm/detail/agreement.hpp>
#include <weft/comm/detail/context.hpp>
#include <weft/comm/options.hpp>
#include <weft/core/dtype.hpp>
#include <weft/core/reduce_ops.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <span>
#include <vector>

namespace weft::comm {
namespace detail {

template <class A, class B>
bool overlap(std::span<A> a, std::span<B> b) noexcept {
  if (a.empty() || b.empty()) return false;
  const auto a0 = reinterpret_cast<std::uintptr_t>(a.data()), a1 = a0 + a.size_bytes();
  const auto b0 = reinterpret_cast<std::uintptr_t>(b.data()), b1 = b0 + b.size_bytes();
  return a0 < b1 && b0 < a1;
}

inline void check_root(const char* where, int root, int p) {
  expects(root >= 0 && root < p, errc::out_of_range, where, "root ", root, " is not a rank in [0, ", p, ")");
}

/// Binomial tree rooted at `root`: the parent of virtual rank v is v without its lowest set bit;
/// its children are v + 2^k for every 2^k below that bit.
struct binomial_links {
  int parent = -1;
  std::vector<int> children;  // nearest first
};
inline binomial_links binomial(int p, int r, int root) {
  binomial_links l;
  const int v = mod(r - root, p);
  int low = 1;
  while (low < p && (v & low) == 0) low <<= 1;
  if (v != 0) l.parent = mod((v & ~low) + root, p);
  for (int k = 1; k < low && v + k < p; k <<= 1) l.children.push_back(mod(v + k + root, p));
  return l;
}

}  // namespace detail

/// Reduce-scatter (block form): `in` holds p blocks of out.size() elements; rank r ends with block
/// r reduced over all ranks in `out`. Ring: p-1 steps moving (p-1)·out.size() elements per rank.
/// Throws errc::invalid_argument unless in.size() == p·out.size() and in, out do not overlap.
/// Blocking; O(in.size()) extra memory.
template <transport Tr, element_type T, class Op = op::sum>
requires reduce_op<Op, T>
void reduce_scatter(Tr& t, std::span<const T> in, std::span<T> out, Op op = {}, const options& opt = {}) {
  constexpr const char* where = "weft::comm::reduce_scatter";
  const int p = static_cast<int>(t.size()), r = static_cast<int>(t.rank());
  const auto P = static_cast<std::size_t>(p);
  detail::proposal call(where, opt);
  call.desc =
      detail::describe_call(collective::reduce_scatter, dtype_of<T>, out.size(), op_name<Op>(), p, opt.segment_bytes);
  call.require([&] {
    expects(in.size() == P * out.size(), errc::invalid_argument, where, "input has ", in.size(),
            " elements; it must hold ", p, " blocks of the output's ", out.size());
    expects(!detail::overlap(in, out), errc::invalid_argument, where, "input and output overlap");
  });
  detail::agree(t, call);
  const msg_tag tag{opt.channel, make_check(collective::reduce_scatter, dtype_of<T>, algorithm::ring, out.size(),
                                            op_name<Op>(), opt.segment_bytes)};
  detail::call_context c(t, where, tag, call.until());
  c.begin(call.desc);
  const std::size_t b = out.size();
  std::vector<T> work(in.begin(), in.end());
  std::vector<T> tmp(b);
  std::span<T> w(work);
  const int next = detail::mod(r + 1, p), prev = detail::mod(r - 1, p);
  for (int s = 0; s < p - 1; ++s) {
    c.phase("ring reduce-scatter", s);
    const auto send_c = static_cast<std::size_t>(detail::mod(r - s - 1, p));
    const auto recv_c = static_cast<std::size_t>(detail::mod(r - s - 2, p));
    c.sendrecv(next, detail::as_const(w.subspan(send_c * b, b)), prev, std::span<T>(tmp));
    detail::reduce(w.subspan(recv_c * b, b), std::span<const T>(tmp), op);
  }
  auto mine = w.subspan(static_cast<std::size_t>(r) * b, b);
  detail::finalize_range(mine, op, P);
  std::copy(mine.begin(), mine.end(), out.begin());
}

/// Allgather: out (p·in.size() elements) receives every rank's `in`, rank r's at block r. Ring:
/// p-1 steps. Throws errc::invalid_argument unless out.size() == p·in.size() and they do not
/// overlap. Blocking.
template <transport Tr, element_type T>
void allgather(Tr& t, std::span<const T> in, std::span<T> out, const options& opt = {}) {
  constexpr const char* where = "weft::comm::allgather";
  const int p = static_cast<int>(t.size()), r = static_cast<int>(t.rank());
  const auto P = static_cast<std::size_t>(p);
  detail::proposal call(where, opt);
  call.desc = detail::describe_call(collective::allgather, dtype_of<T>, in.size(), "", p, opt.segment_bytes);
  call.require([&] {
    expects(out.size() == P * in.size(), errc::invalid_argument, where, "output has ", out.size(),
            " elements; it must hold ", p, " blocks of the input's ", in.size());
    expects(!detail::overlap(in, out), errc::invalid_argument, where, "input and output overlap");
  });
  detail::agree(t, call);
  const msg_tag tag{opt.channel,
                    make_check(collective::allgather, dtype_of<T>, algorithm::ring, in.size(), "", opt.segment_bytes)};
  detail::call_context c(t, where, tag, call.until());
  c.begin(call.desc);
  const std::size_t b = in.size();
  std::copy(in.begin(), in.end(), out.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * b));
  const int next = detail::mod(r + 1, p), prev = detail::mod(r - 1, p);
  for (int s = 0; s < p - 1; ++s) {
    c.phase("ring allgather", s);
    const auto send_c = static_cast<std::size_t>(detail::mod(r - s, p));
    const auto recv_c = static_cast<std::size_t>(detail::mod(r - s - 1, p));
    c.sendrecv(next, detail::as_const(out.subspan(send_c * b, b)), prev, out.subspan(recv_c * b, b));
  }
}

/// Broadcast of root's `data` to every rank, over a binomial tree, segment by segment (log2 p
/// rounds per segment, pipelined). Throws errc::out_of_range for a root outside [0, p). Blocking.
template <transport Tr, element_type T>
void broadcast(Tr& t, std::span<T> data, int root, const options& opt = {}) {
  constexpr const char* where = "weft::comm::broadcast";
  const int p = static_cast<int>(t.size()), r = static_cast<int>(t.rank());
  detail::proposal call(where, opt);
  call.desc = detail::describe_call(collective::broadcast, dtype_of<T>, data.size(), "", p, opt.segment_bytes, root,
                                    algorithm::tree);
  call.require([&] { detail::check_root(where, root, p); });
  detail::agree(t, call);
  const msg_tag tag{opt.channel, make_check(collective::broadcast, dtype_of<T>, algorithm::tree, data.size(), "",
                                            opt.segment_bytes + static_cast<std::size_t>(root))};
  detail::call_context c(t, where, tag, call.until());
  c.begin(call.desc);
  const auto links = detail::binomial(p, r, root);
  const std::size_t n = data.size(), seg = detail::segment_elems(opt.segment_bytes, sizeof(T));
  const std::size_t segs = std::max<std::size_t>(1, (n + seg - 1) / seg);
  for (std::size_t j = 0; j < segs; ++j) {
    c.phase("binomial broadcast", static_cast<int>(j));
    const std::size_t lo = std::min(n, j * seg), hi = std::min(n, lo + seg);
    auto part = data.subspan(lo, hi - lo);
    if (links.parent >= 0) c.recv(links.parent, part);
    for (auto it = links.children.rbegin(); it != links.children.rend(); ++it) c.send(*it, detail::as_const(part));
  }
}

/// Reduce to `root`: root's `data` becomes the reduction over all ranks (others' data is left as
/// it was). Binomial tree; each node combines own, then children nearest first. Throws
/// errc::out_of_range for a bad root. Blocking; O(data) scratch on inner nodes.
template <transport Tr, element_type T, class Op = op::sum>
requires reduce_op<Op, T>
void reduce(Tr& t, std::span<T> data, int root, Op op = {}, const options& opt = {}) {
  constexpr const char* where = "weft::comm::reduce";
  const int p = static_cast<int>(t.size()), r = static_cast<int>(t.rank());
  detail::proposal call(where, opt);
  call.desc = detail::describe_call(collective::reduce, dtype_of<T>, data.size(), op_name<Op>(), p, opt.segment_bytes,
                                    root, algorithm::tree);
  call.require([&] { detail::check_root(where, root, p); });
  detail::agree(t, call);
  const msg_tag tag{opt.channel, make_check(collective::reduce, dtype_of<T>, algorithm::tree, data.size(),
                                            op_name<Op>(), opt.segment_bytes + static_cast<std::size_t>(root))};
  detail::call_context c(t, where, tag, call.until());
  c.begin(call.desc);
  const auto links = detail::binomial(p, r, root);
  std::vector<T> own;
  std::span<T> acc = data;
  if (r != root) {
    own.assign(data.begin(), data.end());
    acc = std::span<T>(own);
  }
  std::vector<T> tmp(links.children.empty() ? 0 : data.size());
  c.phase("binomial reduce");
  for (int child : links.children) {
    c.recv(child, std::span<T>(tmp));
    detail::reduce(acc, std::span<const T>(tmp), op);
  }
  if (links.parent >= 0)
    c.send(links.parent, detail::as_const(acc));
  else
    detail::finalize_range(acc, op, static_cast<std::size_t>(p));
}

/// Returns once every rank has entered it. Dissemination: ceil(log2 p) rounds of zero-byte
/// messages. Blocking.
template <transport Tr>
void barrier(Tr& t, const options& opt = {}) {
  constexpr const char* where = "weft::comm::barrier";
  const int p = static_cast<int>(t.size()), r = static_cast<int>(t.rank());
  detail::proposal call(where, opt);
  call.desc = detail::describe_call(collective::barrier, dtype::u8, 0, "", p);
  detail::agree(t, call);
  const msg_tag tag{opt.channel, make_check(collective::barrier, dtype::u8, algorithm::ring, 0, "", 0)};
  detail::call_context c(t, where, tag, call.until());
  c.begin(call.desc);
  int round = 0;
  for (int k = 1; k < p; k <<= 1, ++round) {
    c.phase("dissemination", round);
    c.sendrecv(detail::mod(r + k, p), std::span<const std::byte>(), detail::mod(r - k, p), std::span<std::byte>());
  }
}

/// Alltoall: block q of `in` goes to rank q, block q of `out` comes from rank q (blocks of
/// in.size()/p elements). Pairwise exchange in p-1 steps (step s: send to r+s, receive from r-s).
/// Throws errc::invalid_argument unless in.size() == out.size(), divisible by p, no overlap.
template <transport Tr, element_type T>
void alltoall(Tr& t, std::span<const T> in, std::span<T> out, const options& opt = {}) {
  constexpr const char* where = "weft::comm::alltoall";
  const int p = static_cast<int>(t.size()), r = static_cast<int>(t.rank());
  const auto P = static_cast<std::size_t>(p);
  detail::proposal call(where, opt);
  call.desc = detail::describe_call(collective::alltoall, dtype_of<T>, in.size(), "", p);
  call.require([&] {
    expects(in.size() == out.size() && in.size() % P == 0, errc::invalid_argument, where, "input (", in.size(),
            ") and output (", out.size(), ") must have equal sizes divisible by the rank count ", p);
    expects(!detail::overlap(in, out), errc::invalid_argument, where, "input and output overlap");
  });
  detail::agree(t, call);
  const msg_tag tag{opt.channel, make_check(collective::alltoall, dtype_of<T>, algorithm::ring, in.size(), "", 0)};
  detail::call_context c(t, where, tag, call.until());
  c.begin(call.desc);
  const std::size_t b = in.size() / P;
  const auto R = static_cast<std::size_t>(r);
  std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(R * b), b, out.begin() + static_cast<std::ptrdiff_t>(R * b));
  for (int s = 1; s < p; ++s) {
    c.phase("pairwise exchange", s);
    const int dst = detail::mod(r + s, p), src = detail::mod(r - s, p);
    c.sendrecv(dst, in.subspan(static_cast<std::size_t>(dst) * b, b), src,
               out.subspan(static_cast<std::size_t>(src) * b, b));
  }
}

/// Alltoallv: send_counts[q] elements of `in` (consecutive, in rank order) go to rank q;
/// recv_counts[q] elements arrive from rank q into `out` (consecutive, in rank order). A rank's
/// send count to q must equal q's receive count from it (otherwise errc::mismatch at q).
/// Throws errc::invalid_argument when the counts do not have p entries, do not sum to the buffer
/// sizes, the self counts differ, or the buffers overlap. Pairwise exchange; blocking.
template <transport Tr, element_type T>
void alltoallv(Tr& t, std::span<const T> in, std::span<const std::size_t> send_counts, std::span<T> out,
               std::span<const std::size_t> recv_counts, const options& opt = {}) {
  constexpr const char* where = "weft::comm::alltoallv";
  const int p = static_cast<int>(t.size()), r = static_cast<int>(t.rank());
  const auto P = static_cast<std::size_t>(p);
  const auto R = static_cast<std::size_t>(r);
  detail::proposal call(where, opt);
  call.desc = detail::describe_call(collective::alltoallv, dtype_of<T>, 0, "", p);  // counts differ by rank
  call.require([&] {
    expects(send_counts.size() == P && recv_counts.size() == P, errc::invalid_argument, where,
            "send_counts and recv_counts need one entry per rank (", p, "), got ", send_counts.size(), " and ",
            recv_counts.size());
    const std::size_t send_total = std::accumulate(send_counts.begin(), send_counts.end(), std::size_t{0});
    const std::size_t recv_total = std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0});
    expects(send_total == in.size(), errc::invalid_argument, where, "send_counts sum to ", send_total,
            " but the input has ", in.size(), " elements");
    expects(recv_total == out.size(), errc::invalid_argument, where, "recv_counts sum to ", recv_total,
            " but the output has ", out.size(), " elements");
    expects(send_counts[R] == recv_counts[R], errc::invalid_argument, where, "this rank sends ", send_counts[R],
            " elements to itself but expects to receive ", recv_counts[R]);
    expects(!detail::overlap(in, out), errc::invalid_argument, where, "input and output overlap");
  });
  // Each pair's counts are compared in the agreement (as a balance that cancels out over the group),
  // so a rank that only sends to a rank expecting another count fails too, not only the receiver.
  call.balance = detail::count_balance(r, send_counts, recv_counts);
  call.sends = send_counts;
  call.recvs = recv_counts;
  detail::agree(t, call);
  const msg_tag tag{opt.channel, make_check(collective::alltoallv, dtype_of<T>, algorithm::ring, 0, "", 0)};
  detail::call_context c(t, where, tag, call.until());
  c.begin(call.desc);
  std::vector<std::size_t> send_off(P + 1, 0), recv_off(P + 1, 0);
  for (std::size_t q = 0; q < P; ++q) {
    send_off[q + 1] = send_off[q] + send_counts[q];
    recv_off[q + 1] = recv_off[q] + recv_counts[q];
  }
  std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(send_off[R]), send_counts[R],
              out.begin() + static_cast<std::ptrdiff_t>(recv_off[R]));
  for (int s = 1; s < p; ++s) {
    c.phase("pairwise exchange", s);
    const auto dst = static_cast<std::size_t>(detail::mod(r + s, p));
    const auto src = static_cast<std::size_t>(detail::mod(r - s, p));
    c.sendrecv(static_cast<int>(dst), in.subspan(send_off[dst], send_counts[dst]), static_cast<int>(src),
               out.subspan(recv_off[src], recv_counts[src]));
  }
}

}  // namespace weft::comm

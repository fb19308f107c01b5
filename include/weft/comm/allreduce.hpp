// Allreduce over any weft::comm transport, and the umbrella of its algorithms (one header each
// under weft/comm/algorithms/): ring (Patarasuk & Yuan, JPDC 2009), double binary tree (Sanders,
// Speck & Träff 2009), star, recursive halving-doubling (Rabenseifner, ICCS 2004), recursive
// doubling (Thakur, Rabenseifner & Gropp, IJHPCA 2005 §4.4) and hierarchical.
#pragma once

#include <weft/comm/algorithms/halving_doubling.hpp>
#include <weft/comm/algorithms/hierarchical.hpp>
#include <weft/comm/algorithms/recursive_doubling.hpp>
#include <weft/comm/algorithms/ring.hpp>
#include <weft/comm/algorithms/star.hpp>
#include <weft/comm/algorithms/tree.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/comm/detail/agreement.hpp>
#include <weft/comm/detail/context.hpp>
#include <weft/comm/group_view.hpp>
#include <weft/comm/options.hpp>
#include <weft/comm/tuner.hpp>
#include <weft/core/dtype.hpp>
#include <weft/core/reduce_ops.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace weft::comm {

/// Frees the scratch buffer the calling thread keeps for collectives (up to 16 MiB, grown to the
/// largest segment or half-message it needed), e.g. after the last collective of a thread that
/// lives on. The next collective on this thread allocates it again. O(1). Thread-safe (per thread).
inline void release_scratch() noexcept {
  auto& p = detail::scratch_pool::mine();
  if (!p.busy) {
    p.bytes.reset();
    p.capacity = 0;
  }
}

namespace detail {
/// "weft::comm::allreduce[<algorithm>]", the name errors give an allreduce running `a`.
constexpr const char* allreduce_name(algorithm a) noexcept {
  switch (a) {
    case algorithm::automatic:
      break;
    case algorithm::ring:
      return "weft::comm::allreduce[ring]";
    case algorithm::tree:
      return "weft::comm::allreduce[tree]";
    case algorithm::star:
      return "weft::comm::allreduce[star]";
    case algorithm::halving_doubling:
      return "weft::comm::allreduce[halving_doubling]";
    case algorithm::hierarchical:
      return "weft::comm::allreduce[hierarchical]";
    case algorithm::recursive_doubling:
      return "weft::comm::allreduce[recursive_doubling]";
  }
  return "weft::comm::allreduce";
}
}  // namespace detail

/// Reduces `data` element-wise over all ranks with `op`, in place; every rank ends with the same
/// bits. `opt.algo` picks the algorithm (automatic: opt.table when it was measured for this rank
/// count, else choose_allreduce with opt.model); the hierarchical algorithm needs opt.hosts (a host
/// id per rank). Every rank must call it with the same count, dtype, op and options: the ranks
/// first agree on the call (count, dtype, op, algorithm, segment size and host map; see
/// docs/comm.md, "Agreement"), and when they disagree every rank throws errc::mismatch naming the
/// rank that differs, before any data moves, leaving the transport usable. A silent peer is
/// errc::timeout. Cost: see docs/comm.md (ring: 2(p-1) steps moving 2(p-1)/p·n bytes) plus the
/// agreement's ceil(log2 p) sendrecvs of 24·p bytes. Blocking; thread-safe as far as the transport
/// is (distinct channels). Throws errc::invalid_argument (on this rank; errc::mismatch on the
/// others) for a zero timeout or segment size, an algorithm value outside the enumeration, or a
/// host map of the wrong length.
template <transport Tr, element_type T, class Op = op::sum>
requires reduce_op<Op, T>
void allreduce(Tr& t, std::span<T> data, Op op = {}, const options& opt = {}) {
  constexpr const char* where = "weft::comm::allreduce";
  const int p = static_cast<int>(t.size());
  const auto P = static_cast<std::size_t>(p);
  detail::proposal call(where, opt);
  call.require([&] { detail::check_algorithm(where, opt.algo); });
  algorithm algo = opt.algo;
  if (algo == algorithm::automatic) call.require([&] { algo = resolve_automatic(data.size_bytes(), p, opt); });
  call.rename(detail::allreduce_name(algo));
  call.desc = detail::describe_call(collective::allreduce, dtype_of<T>, data.size(), op_name<Op>(), p,
                                    opt.segment_bytes, -1, algo, opt.algo == algorithm::automatic);
  if (algo == algorithm::hierarchical) {
    call.require([&] {
      expects(opt.hosts.size() == P, errc::invalid_argument, where,
              "hierarchical allreduce needs a host id for each of the ", p, " ranks, got ", opt.hosts.size());
    });
    call.desc.hosts = detail::hash_hosts(opt.hosts);
  }
  detail::agree(t, call);
  const msg_tag tag{
      opt.channel, make_check(collective::allreduce, dtype_of<T>, algo, data.size(), op_name<Op>(), opt.segment_bytes)};
  const deadline until = call.until();
  const std::size_t seg = detail::segment_elems(opt.segment_bytes, sizeof(T));
  switch (algo) {
    case algorithm::ring: {
      detail::call_context c(t, detail::allreduce_name(algorithm::ring), tag, until);
      c.begin(call.desc);
      detail::ring_allreduce(c, data, op, P, seg);
      return;
    }
    case algorithm::tree: {
      detail::call_context c(t, detail::allreduce_name(algorithm::tree), tag, until);
      c.begin(call.desc);
      detail::tree_allreduce(c, data, op, P, seg);
      return;
    }
    case algorithm::star: {
      detail::call_context c(t, detail::allreduce_name(algorithm::star), tag, until);
      c.begin(call.desc);
      detail::star_reduce(c, data, op, P, seg);
      detail::star_broadcast(c, data, seg);
      return;
    }
    case algorithm::halving_doubling: {
      detail::call_context c(t, detail::allreduce_name(algorithm::halving_doubling), tag, until);
      c.begin(call.desc);
      detail::halving_doubling_allreduce(c, data, op, P);
      return;
    }
    case algorithm::recursive_doubling: {
      detail::call_context c(t, detail::allreduce_name(algorithm::recursive_doubling), tag, until);
      c.begin(call.desc);
      detail::recursive_doubling_allreduce(c, data, op, P);
      return;
    }
    case algorithm::hierarchical: {
      {
        detail::call_context c(t, detail::allreduce_name(algorithm::hierarchical), tag, until);
        c.begin(call.desc);
      }
      detail::hierarchical_allreduce(t, data, op, opt.hosts, tag, until, seg);
      return;
    }
    case algorithm::automatic:
      break;  // resolved above
  }
  // Unreachable: the agreement refused every value the cases above do not run. Kept so that no
  // value can ever make allreduce return having done nothing.
  weft::detail::raise(errc::invalid_argument, where, "algorithm ", static_cast<unsigned>(algo), " cannot be run");
}

}  // namespace weft::comm

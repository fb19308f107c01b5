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

/// Reduces `data` element-wise over all ranks with `op`, in place; every rank ends with the same
/// bits. `opt.algo` picks the algorithm (automatic: opt.table when it was measured for this rank
/// count, else choose_allreduce with opt.model); the
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
  detail::check_call_options(where, opt);
  algorithm algo = opt.algo;
  if (algo == algorithm::automatic) algo = resolve_automatic(data.size_bytes(), p, opt);
  if (algo == algorithm::hierarchical)
    expects(opt.hosts.size() == static_cast<std::size_t>(p), errc::invalid_argument, where,
            "hierarchical allreduce needs a host id for each of the ", p, " ranks, got ", opt.hosts.size());
  const msg_tag tag{
      opt.channel, make_check(collective::allreduce, dtype_of<T>, algo, data.size(), op_name<Op>(), opt.segment_bytes)};
  const deadline until = clock_type::now() + opt.timeout;
  const std::size_t seg = detail::segment_elems(opt.segment_bytes, sizeof(T));
  const auto P = static_cast<std::size_t>(p);
  const collective_descriptor desc =
      detail::describe_call(collective::allreduce, dtype_of<T>, data.size(), op_name<Op>(), p, opt.segment_bytes, -1,
                            algo, opt.algo == algorithm::automatic);
  switch (algo) {
    case algorithm::ring: {
      detail::call_context c(t, "weft::comm::allreduce[ring]", tag, until);
      c.begin(desc);
      detail::ring_allreduce(c, data, op, P, seg);
      break;
    }
    case algorithm::tree: {
      detail::call_context c(t, "weft::comm::allreduce[tree]", tag, until);
      c.begin(desc);
      detail::tree_allreduce(c, data, op, P, seg);
      break;
    }
    case algorithm::star: {
      detail::call_context c(t, "weft::comm::allreduce[star]", tag, until);
      c.begin(desc);
      detail::star_reduce(c, data, op, P, seg);
      detail::star_broadcast(c, data, seg);
      break;
    }
    case algorithm::halving_doubling: {
      detail::call_context c(t, "weft::comm::allreduce[halving_doubling]", tag, until);
      c.begin(desc);
      detail::halving_doubling_allreduce(c, data, op, P);
      break;
    }
    case algorithm::recursive_doubling: {
      detail::call_context c(t, "weft::comm::allreduce[recursive_doubling]", tag, until);
      c.begin(desc);
      detail::recursive_doubling_allreduce(c, data, op, P);
      break;
    }
    case algorithm::hierarchical: {
      {
        detail::call_context c(t, "weft::comm::allreduce[hierarchical]", tag, until);
        c.begin(desc);
      }
      detail::hierarchical_allreduce(t, data, op, opt.hosts, tag, until, seg);
      break;
    }
    case algorithm::automatic:
      break;
  }
}

}  // namespace weft::comm

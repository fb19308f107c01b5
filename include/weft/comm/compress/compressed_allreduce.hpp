// Allreduce through a compressor, three ways: (1) summable compressors (fp16/bf16 casts) run any
// weft::comm allreduce algorithm on the wire type; (2) the quantized ring: reduce-scatter with
// decode-add-re-encode at each hop, then the owner of each reduced chunk encodes it ONCE and the
// allgather forwards those bytes unchanged, so every rank decodes the same bytes and holds the
// same bits (as in Streaming DiLoCo, Douillard et al. 2025, and PCCL's quantized ring);
// (3) allgather of each rank's encoding, decoded and summed in rank order (best for top-k/random-k).
#pragma once

#include <weft/comm/allreduce.hpp>
#include <weft/comm/compress/concepts.hpp>
#include <weft/comm/compress/error_feedback.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/comm/detail/agreement.hpp>
#include <weft/comm/detail/context.hpp>
#include <weft/comm/options.hpp>
#include <weft/core/error.hpp>
#include <weft/core/reduce_ops.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace weft::comm::compress {

/// How compressed_allreduce moves the encoded bytes.
enum class strategy : std::uint8_t {
  automatic,  ///< native for summable compressors, allgather for sparse ones, ring otherwise
  native,     ///< the ordinary allreduce (base.algo) on the wire type; summable compressors only
  ring,       ///< quantized ring: 2(p-1) steps, each moving encoded_bytes(n/p); bit parity by owner encoding
  allgather,  ///< ring allgather of every rank's encoding: (p-1)·encoded_bytes(n) sent per rank
};

constexpr std::string_view to_string(strategy s) noexcept {
  switch (s) {
    case strategy::automatic:
      return "automatic";
    case strategy::native:
      return "native";
    case strategy::ring:
      return "ring";
    case strategy::allgather:
      return "allgather";
  }
  return "?";
}

/// Options of one compressed allreduce. `feedback`, when set, is this rank's residual for the
/// tensor: it is added before compressing and replaced by what this rank's compression dropped.
/// A plain aggregate; every rank passes the same values except `feedback`.
struct compress_options {
  options base{};  ///< channel, deadline, and for strategy::native the algorithm
  strategy how = strategy::automatic;
  error_feedback* feedback = nullptr;
};

namespace detail {
using comm::detail::chunk_begin;
using comm::detail::chunk_size;
using comm::detail::mod;

template <class Ctx, class C>
void quantized_ring(Ctx& c, std::span<float> data, C& comp, bool average) {
  const int p = c.size(), r = c.rank();
  const std::size_t n = data.size(), P = static_cast<std::size_t>(p);
  auto chunk = [&](int i) {
    const auto ci = static_cast<std::size_t>(i);
    return data.subspan(chunk_begin(n, P, ci), chunk_size(n, P, ci));
  };
  const std::size_t max_len = chunk_size(n, P, 0);
  std::vector<std::byte> out(comp.encoded_bytes(max_len)), in(comp.encoded_bytes(max_len));
  std::vector<float> tmp(max_len);
  const int next = mod(r + 1, p), prev = mod(r - 1, p);
  for (int s = 0; s < p - 1; ++s) {  // reduce-scatter: partial sums travel encoded
    c.phase("quantized ring reduce-scatter", s);
    auto send = chunk(mod(r - s - 1, p));
    auto acc = chunk(mod(r - s - 2, p));
    const std::span<std::byte> o(out.data(), comp.encoded_bytes(send.size()));
    const std::span<std::byte> i(in.data(), comp.encoded_bytes(acc.size()));
    comp.encode(std::span<const float>(send), o);
    c.sendrecv(next, std::span<const std::byte>(o), prev, i);
    comp.decode(std::span<const std::byte>(i), std::span<float>(tmp.data(), acc.size()));
    for (std::size_t k = 0; k < acc.size(); ++k) acc[k] += tmp[k];
  }
  // Every chunk's bytes, at fixed offsets: the owner fills its own, the allgather the rest.
  std::vector<std::size_t> offset(P + 1, 0);
  for (std::size_t q = 0; q < P; ++q) offset[q + 1] = offset[q] + comp.encoded_bytes(chunk_size(n, P, q));
  std::vector<std::byte> all(offset[P]);
  auto slot = [&](int q) {
    const auto i = static_cast<std::size_t>(q);
    return std::span<std::byte>(all.data() + offset[i], offset[i + 1] - offset[i]);
  };
  auto mine = chunk(r);
  if (average)
    for (auto& x : mine) x /= static_cast<float>(p);
  comp.encode(std::span<const float>(mine), slot(r));  // the one quantization of this chunk
  for (int s = 0; s < p - 1; ++s) {
    c.phase("quantized ring allgather", s);
    c.sendrecv(next, std::span<const std::byte>(slot(mod(r - s, p))), prev, slot(mod(r - s - 1, p)));
  }
  for (int q = 0; q < p; ++q) comp.decode(std::span<const std::byte>(slot(q)), chunk(q));
}

template <class Ctx, class C>
void gather_allreduce(Ctx& c, std::span<float> data, C& comp, bool average, error_feedback* fb) {
  const int p = c.size(), r = c.rank();
  const std::size_t n = data.size(), P = static_cast<std::size_t>(p), e = comp.encoded_bytes(n);
  std::vector<std::byte> all(P * e);
  auto slot = [&](int q) { return std::span<std::byte>(all.data() + static_cast<std::size_t>(q) * e, e); };
  comp.encode(std::span<const float>(data), slot(r));
  std::vector<float> tmp(n);
  if (fb) {
    comp.decode(std::span<const std::byte>(slot(r)), std::span<float>(tmp));
    fb->record(std::span<const float>(data), std::span<const float>(tmp));
  }
  const int next = mod(r + 1, p), prev = mod(r - 1, p);
  for (int s = 0; s < p - 1; ++s) {
    c.phase("compressed allgather", s);
    c.sendrecv(next, std::span<const std::byte>(slot(mod(r - s, p))), prev, slot(mod(r - s - 1, p)));
  }
  std::fill(data.begin(), data.end(), 0.0f);
  for (int q = 0; q < p; ++q) {  // rank order: the same additions in the same order everywhere
    comp.decode(std::span<const std::byte>(slot(q)), std::span<float>(tmp));
    for (std::size_t k = 0; k < n; ++k) data[k] += tmp[k];
  }
  if (average)
    for (auto& x : data) x /= static_cast<float>(p);
}
}  // namespace detail

/// The strategy `how` resolves to for compressor C. O(1).
template <compressor C>
constexpr strategy resolve(strategy how) noexcept {
  if (how != strategy::automatic) return how;
  if constexpr (summable_compressor<C>) return strategy::native;
  if constexpr (sparse_compressor<C>) return strategy::allgather;
  return strategy::ring;
}

/// Sums (op::sum) or averages (op::avg) `data` over all ranks through compressor `comp`, in place.
/// Every rank ends with bit-identical data (native: as the wrapped algorithm guarantees; ring and
/// allgather: every rank decodes the same bytes / sums the same decodings in rank order). Every
/// rank must pass the same count, compressor (type and parameters) and options; the ranks agree on
/// the call first (its count, strategy, operator and compressor name, encoded size), and a
/// disagreement is errc::mismatch on every rank, before data moves. On failure the error names rank,
/// peer, strategy and phase, and `data` is unspecified (wrap it in fault::restoring to get it back).
/// Blocking; thread-safe as far as the transport and compressor are. Cost: see strategy.
/// Throws errc::invalid_argument (errc::mismatch on the other ranks) for strategy::native with a
/// non-summable compressor, a zero timeout, or a feedback residual of another length.
template <transport Tr, compressor C, class Op = op::sum>
requires(std::is_same_v<Op, op::sum> ||
         std::is_same_v<Op, op::avg>) void compressed_allreduce(Tr& t, std::span<float> data, C& comp, Op op = {},
                                                                const compress_options& opt = {}) {
  constexpr const char* where = "weft::comm::compress::compressed_allreduce";
  const strategy how = resolve<C>(opt.how);
  constexpr bool average = std::is_same_v<Op, op::avg>;
  const std::string op_name = std::string(Op::name) + "/" + std::string(comp.name());
  // Every rank agrees on the call first (count, strategy, operator and compressor, its encoded
  // size), so a rank with bad arguments or another compressor fails every rank at once.
  comm::detail::proposal call(where, opt.base);
  call.desc = comm::detail::describe_call(collective::allreduce, dtype::f32, data.size(), op_name,
                                          static_cast<int>(t.size()), comp.encoded_bytes(data.size()), -1,
                                          how == strategy::ring        ? algorithm::ring
                                          : how == strategy::allgather ? algorithm::star
                                                                       : algorithm::automatic);
  call.require([&] {
    if (opt.feedback)
      expects(opt.feedback->size() == data.size(), errc::invalid_argument, where, "error feedback residual has ",
              opt.feedback->size(), " elements but the tensor has ", data.size());
    if constexpr (!summable_compressor<C>)
      expects(how != strategy::native, errc::invalid_argument, where,
              "strategy native needs a summable compressor (fp16, bf16); ", comp.name(), " is not");
  });
  comm::detail::agree(t, call);
  if (how == strategy::native) {
    if constexpr (summable_compressor<C>) {
      using W = typename C::wire_type;
      if (opt.feedback) opt.feedback->compensate(data);
      std::vector<W> wire(data.size());
      for (std::size_t i = 0; i < data.size(); ++i) wire[i] = comp.to_wire(data[i]);
      if (opt.feedback) {
        std::vector<float> back(data.size());
        for (std::size_t i = 0; i < data.size(); ++i) back[i] = comp.from_wire(wire[i]);
        opt.feedback->record(std::span<const float>(data), std::span<const float>(back));
      }
      allreduce(t, std::span<W>(wire), op, opt.base);
      for (std::size_t i = 0; i < data.size(); ++i) data[i] = comp.from_wire(wire[i]);
    }
    return;
  }
  const msg_tag tag{opt.base.channel, make_check(collective::allreduce, dtype::u8,
                                                 how == strategy::ring ? algorithm::ring : algorithm::star, data.size(),
                                                 op_name, comp.encoded_bytes(data.size()))};
  const deadline until = call.until();
  if (opt.feedback) opt.feedback->compensate(data);
  if (how == strategy::ring) {
    if (opt.feedback) {  // the loss of compressing this rank's contribution on its own
      std::vector<std::byte> enc(comp.encoded_bytes(data.size()));
      std::vector<float> back(data.size());
      comp.encode(std::span<const float>(data), std::span<std::byte>(enc));
      comp.decode(std::span<const std::byte>(enc), std::span<float>(back));
      opt.feedback->record(std::span<const float>(data), std::span<const float>(back));
    }
    comm::detail::call_context c(t, "weft::comm::compress::compressed_allreduce[ring]", tag, until);
    detail::quantized_ring(c, data, comp, average);
  } else {
    comm::detail::call_context c(t, "weft::comm::compress::compressed_allreduce[allgather]", tag, until);
    detail::gather_allreduce(c, data, comp, average, opt.feedback);
  }
}

}  // namespace weft::comm::compress

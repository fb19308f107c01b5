// The compressor concept of weft::comm::compress: what a gradient compressor must provide for
// compressed_allreduce to run it (fixed-size encoding, decode into floats). Compressors after
// Seide et al. (1-bit SGD, Interspeech 2014), Alistarh et al. (QSGD, NeurIPS 2017) and Stich et al.
// (sparsified SGD with memory, NeurIPS 2018).
#pragma once

#include <weft/core/dtype.hpp>

#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>

namespace weft::comm::compress {

/// A compressor turns n floats into exactly encoded_bytes(n) bytes and back.
///  - encoded_bytes(n): the size of the encoding of n elements; a function of n only, so the
///    receiver of an encoded message knows its length (weft's transports match exact lengths).
///  - encode(in, out): writes encoded_bytes(in.size()) bytes to out (may advance internal state,
///    e.g. random-k's generator, hence non-const).
///  - decode(bytes, out): writes out.size() floats; decode must be a pure function of the bytes,
///    which is what lets peers that forward the same bytes hold bit-identical results.
///  - name(): a short label for reports ("int8-absmax/256").
template <class C>
concept compressor = std::move_constructible<C> &&
    requires(C& c, const C& cc, std::size_t n, std::span<const float> in, std::span<std::byte> out,
             std::span<const std::byte> enc, std::span<float> dec) {
  { cc.encoded_bytes(n) } -> std::same_as<std::size_t>;
  c.encode(in, out);
  cc.decode(enc, dec);
  { cc.name() } -> std::convertible_to<std::string_view>;
};

/// A compressor whose encoding is an array of an element type that weft::comm::allreduce can sum
/// directly (fp16, bf16 casts). compressed_allreduce then runs the ordinary allreduce, any
/// algorithm, on the wire type: that is the "wrap any allreduce" path.
template <class C>
concept summable_compressor = compressor<C> && element_type<typename C::wire_type> && requires(const C& c) {
  { c.to_wire(0.0f) } -> std::same_as<typename C::wire_type>;
  { c.from_wire(typename C::wire_type{}) } -> std::same_as<float>;
};

/// A compressor whose encoding keeps only some coordinates (top-k, random-k). For these the
/// allgather strategy is preferred: summing sparse vectors hop by hop would densify them.
template <class C>
concept sparse_compressor = compressor<C> && C::is_sparse;

}  // namespace weft::comm::compress

// Cast compressors: send floats as IEEE binary16 (fp16) or bfloat16, halving the bytes on the
// wire (Micikevicius et al., "Mixed precision training", ICLR 2018). Summable in the wire type,
// so compressed_allreduce runs any weft::comm allreduce algorithm on them.
#pragma once

#include <weft/comm/compress/concepts.hpp>
#include <weft/core/error.hpp>
#include <weft/core/half.hpp>

#include <cstddef>
#include <cstring>
#include <span>
#include <string_view>

namespace weft::comm::compress {

/// Rounds each float to W (round to nearest even) and back. W is weft::half or weft::bfloat16.
/// A plain value, stateless: thread-safe. encode/decode O(n); encoded_bytes O(1).
template <class W>
class cast_compressor {
 public:
  using wire_type = W;

  std::size_t encoded_bytes(std::size_t n) const noexcept { return n * sizeof(W); }

  /// Throws errc::invalid_argument when out is not encoded_bytes(in.size()) long.
  void encode(std::span<const float> in, std::span<std::byte> out) const {
    expects(out.size() == encoded_bytes(in.size()), errc::invalid_argument, "weft::comm::compress::cast::encode",
            "output has ", out.size(), " bytes, the encoding of ", in.size(), " floats needs ",
            encoded_bytes(in.size()));
    for (std::size_t i = 0; i < in.size(); ++i) {
      const W w(in[i]);
      std::memcpy(out.data() + i * sizeof(W), &w, sizeof(W));
    }
  }
  /// Throws errc::invalid_argument when bytes is not encoded_bytes(out.size()) long.
  void decode(std::span<const std::byte> bytes, std::span<float> out) const {
    expects(bytes.size() == encoded_bytes(out.size()), errc::invalid_argument, "weft::comm::compress::cast::decode",
            "input has ", bytes.size(), " bytes, ", out.size(), " floats need ", encoded_bytes(out.size()));
    for (std::size_t i = 0; i < out.size(); ++i) {
      W w;
      std::memcpy(&w, bytes.data() + i * sizeof(W), sizeof(W));
      out[i] = static_cast<float>(w);
    }
  }
  W to_wire(float x) const noexcept { return W(x); }
  float from_wire(W w) const noexcept { return static_cast<float>(w); }
  std::string_view name() const noexcept { return std::is_same_v<W, half> ? "fp16" : "bf16"; }
};

using fp16_compressor = cast_compressor<half>;
using bf16_compressor = cast_compressor<bfloat16>;

/// No compression: floats as they are. The reference point of every report.
class identity_compressor {
 public:
  using wire_type = float;
  std::size_t encoded_bytes(std::size_t n) const noexcept { return n * sizeof(float); }
  void encode(std::span<const float> in, std::span<std::byte> out) const {
    expects(out.size() == encoded_bytes(in.size()), errc::invalid_argument, "weft::comm::compress::identity::encode",
            "output has ", out.size(), " bytes, need ", encoded_bytes(in.size()));
    if (!in.empty()) std::memcpy(out.data(), in.data(), out.size());
  }
  void decode(std::span<const std::byte> bytes, std::span<float> out) const {
    expects(bytes.size() == encoded_bytes(out.size()), errc::invalid_argument, "weft::comm::compress::identity::decode",
            "input has ", bytes.size(), " bytes, need ", encoded_bytes(out.size()));
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  }
  float to_wire(float x) const noexcept { return x; }
  float from_wire(float w) const noexcept { return w; }
  std::string_view name() const noexcept { return "none"; }
};

static_assert(summable_compressor<fp16_compressor> && summable_compressor<bf16_compressor> &&
              summable_compressor<identity_compressor>);

}  // namespace weft::comm::compress

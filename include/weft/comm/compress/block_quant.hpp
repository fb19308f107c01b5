// Block-wise int8 / int4 quantization with a per-block scale: min-max (asymmetric, scale and
// offset per block) or absmax (symmetric, scale only), as in Dettmers et al., "8-bit optimizers
// via block-wise quantization" (ICLR 2022) and QSGD's bucketing (Alistarh et al., NeurIPS 2017).
#pragma once

#include <weft/comm/compress/concepts.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace weft::comm::compress {

/// How a block is mapped onto the integer grid.
enum class quant_scheme : std::uint8_t {
  minmax,  ///< codes 0..2^b-1 over [min, max]: best for skewed blocks; 8 header bytes per block
  absmax,  ///< codes -(2^(b-1)-1)..2^(b-1)-1 over [-absmax, absmax]: zero is exact; 4 header bytes
};

/// Quantizes each block of `block` floats to Bits-bit codes (Bits is 8 or 4) with round to nearest.
/// Layout per block: float scale, [float offset for minmax], then ceil(len·Bits/8) code bytes.
/// Error per element is at most half a grid step: (max-min)/(2(2^b-1)) or absmax/(2(2^(b-1)-1)).
/// Non-finite inputs give unspecified (but deterministic) codes. A plain value, stateless:
/// thread-safe. encode/decode O(n); encoded_bytes O(1).
template <int Bits>
class block_quantizer {
  static_assert(Bits == 8 || Bits == 4, "block_quantizer supports 8 and 4 bit codes");

 public:
  /// Throws errc::invalid_argument for block == 0 (the block size is the unit a scale covers).
  explicit block_quantizer(quant_scheme scheme = quant_scheme::absmax, std::size_t block = 256)
      : scheme_(scheme), block_(block) {
    expects(block > 0, errc::invalid_argument, "weft::comm::compress::block_quantizer",
            "block size must be positive, got ", block);
    name_ = std::string(Bits == 8 ? "int8-" : "int4-") + (scheme == quant_scheme::minmax ? "minmax/" : "absmax/") +
            std::to_string(block);
  }

  quant_scheme scheme() const noexcept { return scheme_; }
  std::size_t block() const noexcept { return block_; }
  std::string_view name() const noexcept { return name_; }

  std::size_t encoded_bytes(std::size_t n) const noexcept {
    const std::size_t full = n / block_, rest = n % block_;
    return full * block_bytes(block_) + (rest ? block_bytes(rest) : 0);
  }

  void encode(std::span<const float> in, std::span<std::byte> out) const {
    expects(out.size() == encoded_bytes(in.size()), errc::invalid_argument,
            "weft::comm::compress::block_quantizer::encode", "output has ", out.size(), " bytes, the encoding of ",
            in.size(), " floats needs ", encoded_bytes(in.size()));
    std::byte* o = out.data();
    for (std::size_t lo = 0; lo < in.size(); lo += block_) {
      const auto blk = in.subspan(lo, std::min(block_, in.size() - lo));
      o = encode_block(blk, o);
    }
  }

  void decode(std::span<const std::byte> bytes, std::span<float> out) const {
    expects(bytes.size() == encoded_bytes(out.size()), errc::invalid_argument,
            "weft::comm::compress::block_quantizer::decode", "input has ", bytes.size(), " bytes, ", out.size(),
            " floats need ", encoded_bytes(out.size()));
    const std::byte* b = bytes.data();
    for (std::size_t lo = 0; lo < out.size(); lo += block_) {
      auto blk = out.subspan(lo, std::min(block_, out.size() - lo));
      b = decode_block(b, blk);
    }
  }

 private:
  static constexpr int levels_minmax = (1 << Bits) - 1;        // 255 or 15
  static constexpr int levels_absmax = (1 << (Bits - 1)) - 1;  // 127 or 7

  std::size_t header_bytes() const noexcept { return scheme_ == quant_scheme::minmax ? 8 : 4; }
  std::size_t block_bytes(std::size_t len) const noexcept { return header_bytes() + (len * Bits + 7) / 8; }

  static void put_code(std::byte* codes, std::size_t i, unsigned q) noexcept {
    if constexpr (Bits == 8) {
      codes[i] = static_cast<std::byte>(q);
    } else {
      auto& slot = codes[i / 2];
      slot = (i % 2 == 0) ? static_cast<std::byte>(q & 0xfu) : (slot | static_cast<std::byte>((q & 0xfu) << 4));
    }
  }
  static unsigned get_code(const std::byte* codes, std::size_t i) noexcept {
    if constexpr (Bits == 8)
      return static_cast<unsigned>(codes[i]);
    else
      return (static_cast<unsigned>(codes[i / 2]) >> ((i % 2) * 4)) & 0xfu;
  }

  std::byte* encode_block(std::span<const float> blk, std::byte* o) const {
    float lo = blk[0], hi = blk[0], amax = 0.0f;
    for (float x : blk) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      amax = std::max(amax, std::fabs(x));
    }
    std::byte* codes = o + header_bytes();
    if (scheme_ == quant_scheme::minmax) {
      const float scale = (hi - lo) / static_cast<float>(levels_minmax);
      std::memcpy(o, &scale, 4);
      std::memcpy(o + 4, &lo, 4);
      const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
      for (std::size_t i = 0; i < blk.size(); ++i) {
        const float q = std::nearbyint((blk[i] - lo) * inv);
        put_code(codes, i, static_cast<unsigned>(std::clamp(q, 0.0f, static_cast<float>(levels_minmax))));
      }
    } else {
      const float scale = amax / static_cast<float>(levels_absmax);
      std::memcpy(o, &scale, 4);
      const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
      for (std::size_t i = 0; i < blk.size(); ++i) {
        const float q = std::clamp(std::nearbyint(blk[i] * inv), -static_cast<float>(levels_absmax),
                                   static_cast<float>(levels_absmax));
        put_code(codes, i, static_cast<unsigned>(static_cast<int>(q) + levels_absmax));
      }
    }
    return o + block_bytes(blk.size());
  }

  const std::byte* decode_block(const std::byte* b, std::span<float> blk) const {
    float scale = 0.0f;
    std::memcpy(&scale, b, 4);
    const std::byte* codes = b + header_bytes();
    if (scheme_ == quant_scheme::minmax) {
      float lo = 0.0f;
      std::memcpy(&lo, b + 4, 4);
      for (std::size_t i = 0; i < blk.size(); ++i) blk[i] = lo + static_cast<float>(get_code(codes, i)) * scale;
    } else {
      for (std::size_t i = 0; i < blk.size(); ++i)
        blk[i] = static_cast<float>(static_cast<int>(get_code(codes, i)) - levels_absmax) * scale;
    }
    return b + block_bytes(blk.size());
  }

  quant_scheme scheme_;
  std::size_t block_;
  std::string name_;
};

using int8_quantizer = block_quantizer<8>;
using int4_quantizer = block_quantizer<4>;

static_assert(compressor<int8_quantizer> && compressor<int4_quantizer>);

}  // namespace weft::comm::compress

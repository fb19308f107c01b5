// A type-erased compressor, for when the compressor is chosen at run time (a command-line flag,
// a config file): any_compressor holds any type satisfying compress::compressor, and
// make_compressor("int8-absmax", 256) builds the built-in ones by name.
#pragma once

#include <weft/comm/compress/block_quant.hpp>
#include <weft/comm/compress/cast.hpp>
#include <weft/comm/compress/concepts.hpp>
#include <weft/comm/compress/sparsify.hpp>
#include <weft/core/error.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace weft::comm::compress {

/// Owns one compressor behind a virtual call per encode/decode (not per element). Move-only.
/// Thread-safety: that of the held compressor. Every operation costs the held one's plus O(1).
class any_compressor {
 public:
  // The same-type test comes first: it keeps the compressor check from recursing into itself.
  template <class C>
  requires(!std::is_same_v<std::remove_cvref_t<C>, any_compressor> && compressor<C>) any_compressor(C c)
      : impl_(std::make_unique<model<C>>(std::move(c))) {}

  std::size_t encoded_bytes(std::size_t n) const { return impl_->encoded_bytes(n); }
  void encode(std::span<const float> in, std::span<std::byte> out) { impl_->encode(in, out); }
  void decode(std::span<const std::byte> bytes, std::span<float> out) const { impl_->decode(bytes, out); }
  std::string_view name() const { return impl_->name(); }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::size_t encoded_bytes(std::size_t n) const = 0;
    virtual void encode(std::span<const float> in, std::span<std::byte> out) = 0;
    virtual void decode(std::span<const std::byte> bytes, std::span<float> out) const = 0;
    virtual std::string_view name() const = 0;
  };
  template <class C>
  struct model final : concept_t {
    explicit model(C c) : held(std::move(c)) {}
    std::size_t encoded_bytes(std::size_t n) const override { return held.encoded_bytes(n); }
    void encode(std::span<const float> in, std::span<std::byte> out) override { held.encode(in, out); }
    void decode(std::span<const std::byte> bytes, std::span<float> out) const override { held.decode(bytes, out); }
    std::string_view name() const override { return held.name(); }
    C held;
  };
  std::unique_ptr<concept_t> impl_;
};

static_assert(compressor<any_compressor>);

/// Builds a built-in compressor by name: "none", "fp16", "bf16", "int8-minmax", "int8-absmax",
/// "int4-minmax", "int4-absmax" (param: block size, default 256), "top-k", "random-k" (param:
/// density, default 0.01; random-k is seeded with `seed`). Throws errc::invalid_argument for an
/// unknown name (the message lists the known ones) or a bad parameter.
inline any_compressor make_compressor(std::string_view name, double param = 0, std::uint64_t seed = 1) {
  const auto block = param > 0 ? static_cast<std::size_t>(param) : std::size_t{256};
  const double density = param > 0 ? param : 0.01;
  if (name == "none") return identity_compressor{};
  if (name == "fp16") return fp16_compressor{};
  if (name == "bf16") return bf16_compressor{};
  if (name == "int8-minmax") return int8_quantizer(quant_scheme::minmax, block);
  if (name == "int8-absmax") return int8_quantizer(quant_scheme::absmax, block);
  if (name == "int4-minmax") return int4_quantizer(quant_scheme::minmax, block);
  if (name == "int4-absmax") return int4_quantizer(quant_scheme::absmax, block);
  if (name == "top-k") return top_k(density);
  if (name == "random-k") return random_k(density, seed);
  weft::detail::raise(errc::invalid_argument, "weft::comm::compress::make_compressor", "unknown compressor '", name,
                      "'; known: none, fp16, bf16, int8-minmax, int8-absmax, int4-minmax, int4-absmax, top-k, "
                      "random-k");
}

}  // namespace weft::comm::compress

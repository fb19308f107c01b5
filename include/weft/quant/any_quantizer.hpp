// weft::quant::any_quantizer: a range rule chosen at run time (a flag, a config value), for
// engines that pick absmax or min-max (or their own rule) without a template parameter. One
// indirect call per group on top of the rule's own cost.
#pragma once

#include <weft/quant/concepts.hpp>

#include <concepts>
#include <functional>
#include <span>
#include <type_traits>

namespace weft::quant {

/// A quantizer chosen at run time (a flag or config value). Thread-safety: like the wrapped
/// quantizer. choose() costs one indirect call plus the wrapped rule.
class any_quantizer {
 public:
  template <quantizer Q>
  requires(!std::same_as<std::remove_cvref_t<Q>, any_quantizer>)
      any_quantizer(Q q)  // NOLINT: implicit by design, like std::function
      : choose_([q](std::span<const float> g, int bits) { return q.choose(g, bits); }), symmetric_(q.symmetric()) {}

  group_params choose(std::span<const float> group, int bits) const { return choose_(group, bits); }
  bool symmetric() const noexcept { return symmetric_; }

 private:
  std::function<group_params(std::span<const float>, int)> choose_;
  bool symmetric_;
};

static_assert(quantizer<any_quantizer>);

}  // namespace weft::quant

// A type-erased gradient code, for when the code is chosen at run time (a command-line flag, a
// config file): any_gradient_code holds any type satisfying gradient_code, and
// make_gradient_code("hybrid", n, s) builds the built-in ones by name.
#pragma once

#include <weft/coding/approximate.hpp>
#include <weft/coding/concepts.hpp>
#include <weft/coding/cyclic_repetition.hpp>
#include <weft/coding/decoder.hpp>
#include <weft/coding/fractional_repetition.hpp>
#include <weft/core/error.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace weft::coding {

/// Holds one gradient code behind a virtual call per operation. Gradient codes are immutable, so
/// copies share the held code. Thread-safety: that of the held code's const operations (weft's
/// codes are thread-safe). Every operation costs the held one's plus O(1).
class any_gradient_code {
 public:
  // The same-type test comes first: it keeps the gradient_code check from recursing into itself.
  template <class C>
  requires(!std::is_same_v<std::remove_cvref_t<C>, any_gradient_code> && gradient_code<C>) any_gradient_code(C code)
      : impl_(std::make_shared<const model<C>>(std::move(code))) {}

  std::size_t num_workers() const { return impl_->num_workers(); }
  [[deprecated("use num_workers()")]] std::size_t n_workers() const { return num_workers(); }
  std::size_t n_partitions() const { return impl_->n_partitions(); }
  std::size_t stragglers() const { return impl_->stragglers(); }
  std::span<const std::size_t> assignment(std::size_t worker) const { return impl_->assignment(worker); }
  double coefficient(std::size_t worker, std::size_t partition) const { return impl_->coefficient(worker, partition); }
  std::shared_ptr<const decoder> try_decoder(std::span<const std::size_t> survivors) const {
    return impl_->try_decoder(survivors);
  }
  /// The held code's name() when it has one, else "custom".
  std::string name() const { return impl_->name(); }
  /// The held code's kind() when it has one, else code_kind::exact (what aggregate assumes of a code
  /// without kind()), so an approximate code chosen at run time is still aggregated as approximate.
  code_kind kind() const { return impl_->kind(); }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::size_t num_workers() const = 0;
    virtual std::size_t n_partitions() const = 0;
    virtual std::size_t stragglers() const = 0;
    virtual std::span<const std::size_t> assignment(std::size_t worker) const = 0;
    virtual double coefficient(std::size_t worker, std::size_t partition) const = 0;
    virtual std::shared_ptr<const decoder> try_decoder(std::span<const std::size_t> survivors) const = 0;
    virtual std::string name() const = 0;
    virtual code_kind kind() const = 0;
  };
  template <class C>
  struct model final : concept_t {
    explicit model(C c) : held(std::move(c)) {}
    std::size_t num_workers() const override { return detail::num_workers_of(held); }
    std::size_t n_partitions() const override { return held.n_partitions(); }
    std::size_t stragglers() const override { return held.stragglers(); }
    std::span<const std::size_t> assignment(std::size_t worker) const override { return held.assignment(worker); }
    double coefficient(std::size_t worker, std::size_t partition) const override {
      return static_cast<double>(held.coefficient(worker, partition));
    }
    std::shared_ptr<const decoder> try_decoder(std::span<const std::size_t> survivors) const override {
      return held.try_decoder(survivors);
    }
    std::string name() const override {
      if constexpr (reports_code_name<C>)
        return std::string(held.name());
      else
        return "custom";
    }
    code_kind kind() const override {
      if constexpr (reports_code_kind<C>)
        return held.kind();
      else
        return code_kind::exact;
    }
    C held;
  };
  std::shared_ptr<const concept_t> impl_;  // never null
};

static_assert(gradient_code<any_gradient_code>);

/// Builds a built-in code by name for n workers: "fractional" (needs (s+1) | n), "cyclic"
/// (cyclic MDS), "cyclic-random" (Tandon et al.'s random construction, seeded), "hybrid",
/// "approximate" (degree d = s + 1, seeded), "uncoded" (s must be 0) and "ignore" (ignore
/// stragglers; s must be 0). Throws weft::error(invalid_argument) for an unknown name (the message
/// lists the known ones) and whatever the named code's factory throws for n and s.
inline any_gradient_code make_gradient_code(std::string_view name, std::size_t n, std::size_t s,
                                            std::uint64_t seed = 1) {
  constexpr const char* where = "weft::coding::make_gradient_code";
  if (name == "fractional") return fractional_repetition(n, s);
  if (name == "cyclic") return cyclic_repetition(n, s);
  if (name == "cyclic-random") return cyclic_repetition(n, s, cyclic_construction::random, seed);
  if (name == "hybrid") return hybrid_repetition(n, s);
  if (name == "approximate") return approximate_code(n, s + 1, seed);
  if (name == "uncoded" || name == "ignore") {
    expects(s == 0, errc::invalid_argument, where, "code '", std::string(name),
            "' tolerates no stragglers; got s = ", s);
    return name == "uncoded" ? uncoded(n) : ignore_stragglers(n);
  }
  weft::detail::raise(errc::invalid_argument, where, "unknown code '", std::string(name),
                      "' (known: fractional, cyclic, cyclic-random, hybrid, approximate, uncoded, ignore)");
}

}  // namespace weft::coding

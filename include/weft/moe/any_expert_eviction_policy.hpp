// weft::moe::any_expert_eviction_policy: a type-erased eviction policy, for engines that choose the
// policy at run time (a flag, a config file). One virtual call per event on top of the policy's own
// cost; use the template parameter of expert_cache directly where the policy is known at compile time.
#pragma once

#include <weft/core/error.hpp>
#include <weft/moe/concepts.hpp>
#include <weft/moe/types.hpp>

#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

namespace weft::moe {

/// Holds any expert_eviction_policy by value. Copying clones the held policy. Itself an expert_eviction_policy.
/// Not thread-safe (as the policies it holds). Every call: the held policy's cost plus O(1).
class any_expert_eviction_policy {
 public:
  // The self-type test comes first so copying an any_expert_eviction_policy never asks whether
  // any_expert_eviction_policy is itself a policy (which would recurse).
  template <class P>
  requires(!std::is_same_v<std::remove_cvref_t<P>, any_expert_eviction_policy>) &&
      expert_eviction_policy<std::remove_cvref_t<P>> any_expert_eviction_policy(
          P&& policy)  // NOLINT: implicit, so any policy converts where one is expected
      : self_(std::make_unique<model<std::remove_cvref_t<P>>>(std::forward<P>(policy))) {}

  any_expert_eviction_policy(const any_expert_eviction_policy& other) : self_(other.self_->clone()) {}
  any_expert_eviction_policy(any_expert_eviction_policy&&) noexcept = default;
  any_expert_eviction_policy& operator=(const any_expert_eviction_policy& other) {
    if (this != &other) self_ = other.self_->clone();
    return *this;
  }
  any_expert_eviction_policy& operator=(any_expert_eviction_policy&&) noexcept = default;
  ~any_expert_eviction_policy() = default;

  void bind(const model_shape& shape) { self_->bind(shape); }
  void on_access(expert_key k, const access_info& info) { self_->on_access(k, info); }
  void on_insert(expert_key k, const access_info& info) { self_->on_insert(k, info); }
  void on_remove(expert_key k) { self_->on_remove(k); }
  std::optional<expert_key> victim(const access_info& info) const { return self_->victim(info); }

  /// The held policy if it is a P, else nullptr. O(1).
  template <class P>
  P* target() noexcept {
    auto* m = dynamic_cast<model<P>*>(self_.get());
    return m ? &m->policy : nullptr;
  }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::unique_ptr<concept_t> clone() const = 0;
    virtual void bind(const model_shape&) = 0;
    virtual void on_access(expert_key, const access_info&) = 0;
    virtual void on_insert(expert_key, const access_info&) = 0;
    virtual void on_remove(expert_key) = 0;
    virtual std::optional<expert_key> victim(const access_info&) const = 0;
  };
  template <class P>
  struct model final : concept_t {
    explicit model(P p) : policy(std::move(p)) {}
    std::unique_ptr<concept_t> clone() const override { return std::make_unique<model>(policy); }
    void bind(const model_shape& s) override { policy.bind(s); }
    void on_access(expert_key k, const access_info& i) override { policy.on_access(k, i); }
    void on_insert(expert_key k, const access_info& i) override { policy.on_insert(k, i); }
    void on_remove(expert_key k) override { policy.on_remove(k); }
    std::optional<expert_key> victim(const access_info& i) const override { return policy.victim(i); }
    P policy;
  };
  std::unique_ptr<concept_t> self_;  // never null (moved-from objects may only be assigned or destroyed)
};

static_assert(expert_eviction_policy<any_expert_eviction_policy>);

/// The old name, kept for one release (it clashed with weft::kv::any_eviction_policy).
using any_eviction_policy [[deprecated("renamed weft::moe::any_expert_eviction_policy")]] = any_expert_eviction_policy;

}  // namespace weft::moe

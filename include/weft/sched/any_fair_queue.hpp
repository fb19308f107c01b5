// any_fair_queue: a fair queue chosen at run time (a command-line flag, a config file), by type
// erasure over any type satisfying weft::sched::fair_queue.
#pragma once

#include <weft/sched/concepts.hpp>
#include <weft/sched/request.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

namespace weft::sched {

/// Owns one fair queue of any type; itself satisfies fair_queue. One virtual call per operation on
/// top of the wrapped queue's cost. Not thread-safe. Move-only.
class any_fair_queue {
 public:
  template <fair_queue Q>
  requires(!std::is_same_v<std::remove_cvref_t<Q>, any_fair_queue>) explicit any_fair_queue(Q q)
      : self_(std::make_unique<model<Q>>(std::move(q))) {}

  void push(const request& r, double now) { self_->push(r, now); }
  const request* peek(double now) { return self_->peek(now); }
  request pop(double now) { return self_->pop(now); }
  void on_admit(const request& r) { self_->on_admit(r); }
  void on_tokens(const request& r, std::int64_t n) { self_->on_tokens(r, n); }
  void on_finish(const request& r, std::int64_t n) { self_->on_finish(r, n); }
  std::size_t size() const { return self_->size(); }
  bool empty() const { return self_->size() == 0; }
  /// Forwards to the wrapped queue's bind_prefix_probe when it has one (binds_prefix_probe).
  static constexpr bool provides_prefix_probe = true;
  void bind_prefix_probe(prefix_probe p) { self_->bind(std::move(p)); }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual void push(const request&, double) = 0;
    virtual const request* peek(double) = 0;
    virtual request pop(double) = 0;
    virtual void on_admit(const request&) = 0;
    virtual void on_tokens(const request&, std::int64_t) = 0;
    virtual void on_finish(const request&, std::int64_t) = 0;
    virtual std::size_t size() const = 0;
    virtual void bind(prefix_probe) = 0;
  };
  template <class Q>
  struct model final : concept_t {
    explicit model(Q queue) : q(std::move(queue)) {}
    void push(const request& r, double now) override { q.push(r, now); }
    const request* peek(double now) override { return q.peek(now); }
    request pop(double now) override { return q.pop(now); }
    void on_admit(const request& r) override { q.on_admit(r); }
    void on_tokens(const request& r, std::int64_t n) override { q.on_tokens(r, n); }
    void on_finish(const request& r, std::int64_t n) override { q.on_finish(r, n); }
    std::size_t size() const override { return q.size(); }
    void bind(prefix_probe p) override {
      if constexpr (binds_prefix_probe<Q>) q.bind_prefix_probe(std::move(p));
    }
    Q q;
  };
  std::unique_ptr<concept_t> self_;
};

}  // namespace weft::sched

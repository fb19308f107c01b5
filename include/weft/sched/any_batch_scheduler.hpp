// any_batch_scheduler: a batch scheduler chosen at run time (a command-line flag, a config file), by
// type erasure over any type satisfying weft::sched::batch_scheduler.
#pragma once

#include <weft/sched/batch.hpp>
#include <weft/sched/concepts.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>

namespace weft::sched {

/// Owns one scheduler (held by unique_ptr, since schedulers need not be movable); itself satisfies
/// batch_scheduler. One virtual call per operation on top of the wrapped scheduler's cost.
/// Not thread-safe. Move-only.
class any_batch_scheduler {
 public:
  template <batch_scheduler S>
  explicit any_batch_scheduler(std::unique_ptr<S> s) {
    expects(s != nullptr, errc::invalid_argument, "weft::sched::any_batch_scheduler", "scheduler pointer is null");
    self_ = std::make_unique<model<S>>(std::move(s));
  }

  bool submit(const request& r, double now) { return self_->submit(r, now); }
  const batch& schedule(double now) { return self_->schedule(now); }
  void complete(std::span<const request_id> finished, std::span<const decoded_token> decoded = {}) {
    self_->complete(finished, decoded);
  }
  std::size_t waiting() const { return self_->waiting(); }
  std::size_t running() const { return self_->running(); }
  bool idle() const { return self_->idle(); }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual bool submit(const request&, double) = 0;
    virtual const batch& schedule(double) = 0;
    virtual void complete(std::span<const request_id>, std::span<const decoded_token>) = 0;
    virtual std::size_t waiting() const = 0;
    virtual std::size_t running() const = 0;
    virtual bool idle() const = 0;
  };
  template <class S>
  struct model final : concept_t {
    explicit model(std::unique_ptr<S> p) : s(std::move(p)) {}
    bool submit(const request& r, double now) override { return s->submit(r, now); }
    const batch& schedule(double now) override { return s->schedule(now); }
    void complete(std::span<const request_id> f, std::span<const decoded_token> d) override { s->complete(f, d); }
    std::size_t waiting() const override { return s->waiting(); }
    std::size_t running() const override { return s->running(); }
    bool idle() const override { return s->idle(); }
    std::unique_ptr<S> s;
  };
  std::unique_ptr<concept_t> self_;
};

}  // namespace weft::sched

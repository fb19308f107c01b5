// Type-erased transport, for programs that pick inproc/shm/tcp/mpi at run time (a command-line
// flag): any_transport owns or borrows a concrete transport and satisfies the same concepts.
#pragma once

#include <weft/comm/comm_error.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/comm/descriptor.hpp>
#include <weft/core/error.hpp>

#include <memory>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

namespace weft::comm {

/// Holds any transport (by value, or by pointer when constructed from std::reference_wrapper).
/// Satisfies transport and abortable_transport (abort is a no-op for transports without one);
/// thread_safe_channels is true, but concurrent use is safe only when the held transport is a
/// concurrent_transport (check with is_concurrent()). One virtual call per operation. Move-only.
class any_transport {
 public:
  static constexpr bool thread_safe_channels = true;

  template <transport T>
  requires(!std::is_same_v<std::remove_cvref_t<T>, any_transport>) explicit any_transport(T&& t)
      : impl_(std::make_unique<model<std::remove_cvref_t<T>>>(std::forward<T>(t))) {}

  template <transport T>
  explicit any_transport(std::reference_wrapper<T> t) : impl_(std::make_unique<model<T*>>(&t.get())) {}

  int rank() const { return impl_->rank(); }
  int size() const { return impl_->size(); }
  void send(int peer, msg_tag tag, std::span<const std::byte> b, deadline until) { impl_->send(peer, tag, b, until); }
  void recv(int peer, msg_tag tag, std::span<std::byte> b, deadline until) { impl_->recv(peer, tag, b, until); }
  void sendrecv(int dst, std::span<const std::byte> out, int src, std::span<std::byte> in, msg_tag tag,
                deadline until) {
    impl_->sendrecv(dst, out, src, in, tag, until);
  }
  void abort(std::string_view why) { impl_->abort(why); }
  /// abort(why) with the failure's fields, where the held transport carries them.
  void abort(const comm_error& e) { impl_->abort(e); }
  /// Declares a collective to the held transport when it checks descriptors (descriptor.hpp);
  /// otherwise does nothing.
  void begin_collective(std::uint32_t channel, const collective_descriptor& d, std::span<const int> members) {
    impl_->begin_collective(channel, d, members);
  }
  bool is_concurrent() const { return impl_->concurrent(); }

 private:
  struct base {
    virtual ~base() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual void send(int, msg_tag, std::span<const std::byte>, deadline) = 0;
    virtual void recv(int, msg_tag, std::span<std::byte>, deadline) = 0;
    virtual void sendrecv(int, std::span<const std::byte>, int, std::span<std::byte>, msg_tag, deadline) = 0;
    virtual void abort(std::string_view) = 0;
    virtual void abort(const comm_error&) = 0;
    virtual void begin_collective(std::uint32_t, const collective_descriptor&, std::span<const int>) = 0;
    virtual bool concurrent() const = 0;
  };
  template <class T>
  struct model final : base {
    template <class U>
    explicit model(U&& u) : t(std::forward<U>(u)) {}
    auto& get() {
      if constexpr (std::is_pointer_v<T>)
        return *t;
      else
        return t;
    }
    const auto& get() const {
      if constexpr (std::is_pointer_v<T>)
        return *t;
      else
        return t;
    }
    using concrete = std::remove_pointer_t<T>;
    int rank() const override { return static_cast<int>(get().rank()); }
    int size() const override { return static_cast<int>(get().size()); }
    void send(int p, msg_tag tag, std::span<const std::byte> b, deadline u) override { get().send(p, tag, b, u); }
    void recv(int p, msg_tag tag, std::span<std::byte> b, deadline u) override { get().recv(p, tag, b, u); }
    void sendrecv(int d, std::span<const std::byte> o, int s, std::span<std::byte> i, msg_tag tag,
                  deadline u) override {
      get().sendrecv(d, o, s, i, tag, u);
    }
    void abort(std::string_view why) override {
      if constexpr (abortable_transport<concrete>) get().abort(why);
    }
    void abort(const comm_error& e) override {
      if constexpr (failure_carrying_transport<concrete>)
        get().abort(e);
      else if constexpr (abortable_transport<concrete>)
        get().abort(std::string_view(e.what()));
    }
    void begin_collective(std::uint32_t channel, const collective_descriptor& d,
                          std::span<const int> members) override {
      if constexpr (descriptor_checking_transport<concrete>) get().begin_collective(channel, d, members);
    }
    bool concurrent() const override { return concurrent_transport<concrete>; }
    T t;
  };
  std::unique_ptr<base> impl_;
};

}  // namespace weft::comm

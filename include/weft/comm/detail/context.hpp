// Internal: the state one collective call carries through its phases (transport, tag, deadline,
// name, phase), so every failure names rank, peer, operation and phase, and aborts the group.
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/comm/options.hpp>
#include <weft/core/dtype.hpp>
#include <weft/core/error.hpp>
#include <weft/core/reduce_ops.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>

namespace weft::comm::detail {

using weft::detail::concat;

template <transport Tr>
class call_context {
 public:
  call_context(Tr& t, const char* name, msg_tag tag, deadline until)
      : t_(t),
        name_(name),
        tag_(tag),
        until_(until),
        rank_(static_cast<int>(t.rank())),
        size_(static_cast<int>(t.size())) {}

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  Tr& transport() noexcept { return t_; }
  const char* name() const noexcept { return name_; }

  /// Names the phase for error messages; cheap (a pointer and an int).
  void phase(const char* what, int step = -1) noexcept {
    phase_ = what;
    step_ = step;
  }

  template <class T>
  void send(int peer, std::span<const T> data) {
    guarded([&] { t_.send(peer, tag_, std::as_bytes(data), until_); }, peer);
  }
  template <class T>
  void recv(int peer, std::span<T> data) {
    guarded([&] { t_.recv(peer, tag_, std::as_writable_bytes(data), until_); }, peer);
  }
  template <class T>
  void sendrecv(int dst, std::span<const T> out, int src, std::span<T> in) {
    guarded([&] { t_.sendrecv(dst, std::as_bytes(out), src, std::as_writable_bytes(in), tag_, until_); }, src);
  }

  /// Raises (and aborts the group with) an error found by the algorithm itself.
  [[noreturn]] void fail(errc code, const std::string& what) {
    const std::string msg = concat("rank ", rank_, " of ", size_, ", phase '", phase_, "'", step_suffix(), ": ", what);
    abort_group(msg);
    throw error(code, name_, msg);
  }

 private:
  std::string step_suffix() const { return step_ >= 0 ? concat(" step ", step_) : std::string(); }

  template <class Fn>
  void guarded(Fn&& fn, int peer) {
    try {
      fn();
    } catch (const error& e) {
      const std::string msg = concat("rank ", rank_, " of ", size_, ", phase '", phase_, "'", step_suffix(), ", peer ",
                                     peer, ": ", e.what());
      abort_group(msg);
      throw error(static_cast<errc>(e.code().value()), name_, msg);
    }
  }
  void abort_group(const std::string& msg) {
    if constexpr (abortable_transport<Tr>) {
      try {
        t_.abort(msg);
      } catch (...) {  // the group is already failing; the original error is the one to report
      }
    }
  }

  Tr& t_;
  const char* name_;
  msg_tag tag_;
  deadline until_;
  int rank_;
  int size_;
  const char* phase_ = "start";
  int step_ = -1;
};

/// Start of chunk i when n elements are split into p nearly equal chunks (the first n % p get one
/// more). O(1).
constexpr std::size_t chunk_begin(std::size_t n, std::size_t p, std::size_t i) noexcept {
  return i * (n / p) + std::min(i, n % p);
}
constexpr std::size_t chunk_size(std::size_t n, std::size_t p, std::size_t i) noexcept {
  return n / p + (i < n % p ? 1 : 0);
}
constexpr int mod(int a, int p) noexcept { return ((a % p) + p) % p; }

/// Applies the operator's final step (avg divides) to a fully reduced range; contributions == 0
/// means "not final yet" (the hierarchical algorithm's first phase). O(n).
template <class T, class Op>
void finalize_range(std::span<T> data, const Op& op, std::size_t contributions) {
  if constexpr (finalizing_reduce_op<Op, accumulator_t<T>>) {
    if (contributions == 0) return;
    using A = accumulator_t<T>;
    for (auto& x : data) x = static_cast<T>(op.finalize(static_cast<A>(x), contributions));
  } else {
    (void)data;
    (void)op;
    (void)contributions;
  }
}

/// acc[i] = op(acc[i], in[i]); the fixed operand order is what makes the result reproducible.
template <class T, class Op>
void reduce(std::span<T> acc, std::span<const T> in, const Op& op) {
  weft::reduce_into(acc.data(), in.data(), acc.size(), op);
}

}  // namespace weft::comm::detail

// Internal: the state one collective call carries through its phases (transport, tag, deadline,
// name, phase), so every failure is a comm_error naming rank, peer, collective and phase as fields,
// and aborts the group.
#pragma once

#include <weft/comm/comm_error.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/comm/descriptor.hpp>
#include <weft/comm/options.hpp>
#include <weft/core/dtype.hpp>
#include <weft/core/error.hpp>
#include <weft/core/reduce_ops.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <memory>
#include <span>
#include <string>

namespace weft::comm::detail {

using weft::detail::concat;

/// The comm_error for a failure inside collective `name` at (phase, step) on `peer`: a comm_error
/// from the transport keeps its facts (blamed rank, origin, mismatch values, waits) and gains the
/// collective and phase; any other weft::error becomes one, blaming `peer` where the code says the
/// peer failed, stalled or disagreed (for a sendrecv with two peers the caller passes which one it
/// cannot tell: blame_peer = false).
inline comm_error make_comm_error(const error& e, const char* name, int rank, int size, const char* phase, int step,
                                  int peer, msg_tag tag, bool blame_peer = true) {
  failure_info info;
  const auto code = static_cast<errc>(e.code().value());
  if (const auto* ce = dynamic_cast<const comm_error*>(&e)) {
    info = ce->info();
  } else {
    info.peer = peer;
    info.detail = e.what();
    if (blame_peer && (code == errc::peer_failure || code == errc::timeout || code == errc::mismatch))
      info.blamed = peer;
    info.origin = code == errc::aborted ? -1 : rank;
  }
  info.rank = rank;
  info.size = size;
  if (info.peer < 0) info.peer = peer;
  info.collective = name;
  info.channel = tag.channel;
  info.check = tag.check;
  info.phase = phase;
  info.step = step;
  return comm_error(code, name, std::move(info));
}

/// Rank r of transport t as the whole group numbers it: through every view (group_view's parent()
/// and parent_rank()) down to the transport that is no view, so an error's rank numbers always
/// mean the same processes, however deep inside a composite algorithm it happened. -1 stays -1.
template <class Tr>
int global_rank(const Tr& t, int r) {
  if constexpr (requires {
                  t.parent();
                  t.parent_rank(r);
                }) {
    if (r < 0 || r >= static_cast<int>(t.size())) return r;
    return global_rank(t.parent(), t.parent_rank(r));
  } else {
    return r;
  }
}
/// The size of the whole group t is a view of (t's own size when it is no view).
template <class Tr>
int global_size(const Tr& t) {
  if constexpr (requires { t.parent(); })
    return global_size(t.parent());
  else
    return static_cast<int>(t.size());
}

template <transport Tr>
class call_context {
 public:
  call_context(Tr& t, const char* name, msg_tag tag, deadline until)
      : t_(t),
        name_(name),
        tag_(tag),
        until_(until),
        rank_(static_cast<int>(t.rank())),
        size_(static_cast<int>(t.size())),
        global_rank_(global_rank(t, rank_)),
        global_size_(global_size(t)) {}

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  Tr& transport() noexcept { return t_; }
  const char* name() const noexcept { return name_; }
  msg_tag tag() const noexcept { return tag_; }
  deadline until() const noexcept { return until_; }

  /// Names the phase for error messages; cheap (a pointer and an int).
  void phase(const char* what, int step = -1) noexcept {
    phase_ = what;
    step_ = step;
  }

  /// Declares the collective to the transport before its first message (descriptor_checking_
  /// transport), so ranks that disagree about it fail at once. Once per collective call, by the
  /// entry point (not by the phases of a composite algorithm).
  void begin(const collective_descriptor& d) {
    if constexpr (descriptor_checking_transport<Tr>) {
      phase_ = "begin";
      guarded([&] { t_.begin_collective(tag_.channel, d, std::span<const int>()); }, -1);
    } else {
      (void)d;
    }
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
    guarded([&] { t_.sendrecv(dst, std::as_bytes(out), src, std::as_writable_bytes(in), tag_, until_); }, src,
            dst == src);
  }

  /// Raises (and aborts the group with) an error found by the algorithm itself.
  [[noreturn]] void fail(errc code, const std::string& what) {
    failure_info info;
    info.rank = global_rank_;
    info.size = global_size_;
    info.origin = global_rank_;
    info.collective = name_;
    info.channel = tag_.channel;
    info.check = tag_.check;
    info.phase = phase_;
    info.step = step_;
    info.detail = what;
    comm_error err(code, name_, std::move(info));
    abort_group(err);
    throw err;
  }

 private:
  template <class Fn>
  void guarded(Fn&& fn, int peer, bool blame_peer = true) {
    try {
      fn();
    } catch (const error& e) {
      comm_error err =
          make_comm_error(e, name_, global_rank_, global_size_, phase_, step_, global_rank(t_, peer), tag_, blame_peer);
      abort_group(err);
      throw err;
    }
  }
  void abort_group(const comm_error& err) {
    try {
      if constexpr (failure_carrying_transport<Tr>)
        t_.abort(err);
      else if constexpr (abortable_transport<Tr>)
        t_.abort(std::string_view(err.what()));
    } catch (...) {  // the group is already failing; the original error is the one to report
    }
  }

  Tr& t_;
  const char* name_;
  msg_tag tag_;
  deadline until_;
  int rank_;
  int size_;
  int global_rank_;  // rank_ and size_ as errors report them (global_rank)
  int global_size_;
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

/// acc[i] = op(in[i], acc[i]): the mirror of reduce, so two partners that each hold one operand
/// compute op(lower, higher) alike and end with the same bits (recursive doubling).
template <class T, class Op>
void reduce_from_left(std::span<T> acc, std::span<const T> in, const Op& op) {
  using A = accumulator_t<T>;
  for (std::size_t i = 0; i < acc.size(); ++i)
    acc[i] = static_cast<T>(op(static_cast<A>(in[i]), static_cast<A>(acc[i])));
}

/// Scratch space for received data, from a buffer each thread keeps (grown to the largest need up
/// to 16 MiB, so a collective neither allocates nor page-faults on every call); a larger need, or a
/// second scratch alive at once, comes from the heap. Contents are unspecified until written. The
/// kept buffer is released by release_scratch(). Not copyable; O(1) unless it allocates.
struct scratch_pool {
  static constexpr std::size_t max_bytes = std::size_t{16} << 20;
  std::unique_ptr<std::byte[]> bytes;
  std::size_t capacity = 0;
  bool busy = false;
  static scratch_pool& mine() {
    static thread_local scratch_pool p;
    return p;
  }
};

template <class T>
class scratch {
 public:
  explicit scratch(std::size_t n) : n_(n) {
    auto& s = scratch_pool::mine();
    const std::size_t need = n * sizeof(T);
    if (need <= scratch_pool::max_bytes && !s.busy) {
      if (s.capacity < need) {
        const std::size_t grown = std::min(scratch_pool::max_bytes, std::bit_ceil(std::max<std::size_t>(need, 4096)));
        s.bytes = std::make_unique_for_overwrite<std::byte[]>(grown);
        s.capacity = grown;
      }
      s.busy = true;
      pooled_ = &s;
      data_ = reinterpret_cast<T*>(s.bytes.get());  // implicit-lifetime element types (arithmetic, half, bf16)
    } else {
      heap_ = std::make_unique_for_overwrite<T[]>(n);
      data_ = heap_.get();
    }
  }
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;
  ~scratch() {
    if (pooled_) pooled_->busy = false;
  }
  std::span<T> span() noexcept { return {data_, n_}; }
  T* data() noexcept { return data_; }

 private:
  std::size_t n_;
  T* data_ = nullptr;
  scratch_pool* pooled_ = nullptr;
  std::unique_ptr<T[]> heap_;
};

template <class T>
std::span<const T> as_const(std::span<T> s) noexcept {
  return {s.data(), s.size()};
}

/// Elements per pipelining segment (at least one).
inline std::size_t segment_elems(std::size_t segment_bytes, std::size_t elem) {
  return std::max<std::size_t>(1, segment_bytes / elem);
}

/// The descriptor of a collective call (descriptor.hpp) from its parts.
inline collective_descriptor describe_call(collective kind, dtype type, std::uint64_t count, std::string_view op,
                                           int group_size, std::uint64_t segment_bytes = 0, int root = -1,
                                           algorithm algo = algorithm::ring, bool automatic = false) {
  collective_descriptor d;
  d.kind = kind;
  d.type = type;
  d.count = count;
  d.set_op(op);
  d.group_size = static_cast<std::uint32_t>(group_size);
  d.segment_bytes = segment_bytes;
  d.root = root;
  d.algo = algo;
  d.automatic = automatic;
  return d;
}

}  // namespace weft::comm::detail

// A transport decorator that counts the bytes and messages this rank sends: how the compression
// reports measure "bytes on the wire" without trusting formulas.
#pragma once

#include <weft/comm/concepts.hpp>

#include <atomic>
#include <cstdint>
#include <span>
#include <string_view>

namespace weft::comm::compress {

/// Forwards every call to the wrapped transport (borrowed; it must outlive this) and counts what
/// was handed to send/sendrecv. Satisfies transport, and abortable_/concurrent_transport when the
/// wrapped one does. Counters are atomic: thread-safe. O(1) per call on top of the wrapped one.
template <transport Tr>
class metered_transport {
 public:
  static constexpr bool thread_safe_channels = concurrent_transport<Tr>;

  explicit metered_transport(Tr& inner) : inner_(&inner) {}

  int rank() const { return static_cast<int>(inner_->rank()); }
  int size() const { return static_cast<int>(inner_->size()); }

  void send(int peer, msg_tag tag, std::span<const std::byte> bytes, deadline until) {
    inner_->send(peer, tag, bytes, until);
    count(bytes.size());
  }
  void recv(int peer, msg_tag tag, std::span<std::byte> bytes, deadline until) {
    inner_->recv(peer, tag, bytes, until);
  }
  void sendrecv(int dst, std::span<const std::byte> out, int src, std::span<std::byte> in, msg_tag tag,
                deadline until) {
    inner_->sendrecv(dst, out, src, in, tag, until);
    count(out.size());
  }
  void abort(std::string_view why) requires abortable_transport<Tr> { inner_->abort(why); }

  std::uint64_t bytes_sent() const noexcept { return bytes_.load(std::memory_order_relaxed); }
  std::uint64_t messages_sent() const noexcept { return messages_.load(std::memory_order_relaxed); }
  void reset() noexcept {
    bytes_.store(0, std::memory_order_relaxed);
    messages_.store(0, std::memory_order_relaxed);
  }

 private:
  void count(std::size_t b) noexcept {
    bytes_.fetch_add(b, std::memory_order_relaxed);
    messages_.fetch_add(1, std::memory_order_relaxed);
  }
  Tr* inner_;
  std::atomic<std::uint64_t> bytes_{0};
  std::atomic<std::uint64_t> messages_{0};
};

}  // namespace weft::comm::compress

// A transport decorator that confines an abort to the channel (tag) whose collective failed, so
// one failed collective does not poison unrelated collectives in flight on other tags. (Plain
// weft::comm transports abort the whole group, which is right when one collective is in flight.)
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/core/error.hpp>

#include <cstdint>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>

namespace weft::comm::fault {

/// abort(why) marks only the channel the calling thread last used as aborted, locally: later
/// calls on that channel throw errc::aborted, other channels carry on. The abort is not sent to
/// the peers: they fail on that channel at their own deadline or when they hear of the failure
/// themselves (the price of isolation, see docs/comm-elastic.md). clear(channel) re-opens a channel
/// for a retry; retrying on a fresh channel is safer (stale messages of the failed call may still
/// be queued on the old one). Satisfies abortable_transport (concurrent when the wrapped one is).
/// Thread-safe when the wrapped transport is; O(log aborted channels) per call on top of it.
template <transport Tr>
class tag_isolating_transport {
 public:
  static constexpr bool thread_safe_channels = concurrent_transport<Tr>;

  explicit tag_isolating_transport(Tr inner) : inner_(std::move(inner)) {}

  int rank() const { return static_cast<int>(inner_.rank()); }
  int size() const { return static_cast<int>(inner_.size()); }
  Tr& inner() noexcept { return inner_; }

  void send(int peer, msg_tag tag, std::span<const std::byte> bytes, deadline until) {
    enter(tag, peer, "send");
    inner_.send(peer, tag, bytes, until);
  }
  void recv(int peer, msg_tag tag, std::span<std::byte> bytes, deadline until) {
    enter(tag, peer, "recv");
    inner_.recv(peer, tag, bytes, until);
  }
  void sendrecv(int dst, std::span<const std::byte> out, int src, std::span<std::byte> in, msg_tag tag,
                deadline until) {
    enter(tag, src, "sendrecv");
    inner_.sendrecv(dst, out, src, in, tag, until);
  }
  void abort(std::string_view why) {
    std::lock_guard lock(m_);
    if (last_.owner == this) aborted_.insert(last_.channel);
    reason_ = std::string(why);
  }
  /// Whether channel was aborted on this rank. Thread-safe.
  bool aborted(std::uint32_t channel) const {
    std::lock_guard lock(m_);
    return aborted_.count(channel) != 0;
  }
  /// Re-opens channel. Thread-safe.
  void clear(std::uint32_t channel) {
    std::lock_guard lock(m_);
    aborted_.erase(channel);
  }

 private:
  struct last_use {
    const void* owner = nullptr;
    std::uint32_t channel = 0;
  };
  // The channel each thread last used on this object: abort() comes from the thread whose
  // collective failed, right after its failing call.
  inline static thread_local last_use last_{};

  void enter(msg_tag tag, int peer, const char* what) {
    last_ = {this, tag.channel};
    std::lock_guard lock(m_);
    if (aborted_.count(tag.channel))
      weft::detail::raise(errc::aborted, "weft::comm::fault::tag_isolating_transport", "rank ", rank(), " ", what,
                          " peer ", peer, " channel ", tag.channel, ": this channel was aborted: ", reason_);
  }

  Tr inner_;
  mutable std::mutex m_;
  std::set<std::uint32_t> aborted_;
  std::string reason_;
};

}  // namespace weft::comm::fault

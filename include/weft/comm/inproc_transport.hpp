// In-process transport: the ranks are threads of one process and share an inproc_world. Sends
// copy the message into the receiver's mailbox and return (eager protocol), so no schedule can
// deadlock on it; receivers block on a condition variable until the message or the deadline.
#pragma once

#include <weft/comm/comm_error.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/comm/options.hpp>
#include <weft/core/error.hpp>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace weft::comm {

class inproc_transport;

/// The shared state of `size` in-process ranks: one mailbox per rank. Create one world, then hand
/// `world.transport(r)` to the thread that plays rank r. Thread-safe (all members). The world must
/// outlive its transports.
class inproc_world {
 public:
  /// O(size). Throws errc::invalid_argument unless size >= 1.
  explicit inproc_world(int size) : boxes_(checked_size(size)) {}

  int size() const noexcept { return static_cast<int>(boxes_.size()); }

  /// The transport of rank r. Throws errc::out_of_range for r outside [0, size). O(1).
  inline inproc_transport transport(int r);

  /// True once any rank aborted; the reason names it. Thread-safe.
  bool aborted() const {
    std::lock_guard lock(abort_mutex_);
    return aborted_;
  }

 private:
  friend class inproc_transport;
  struct message {
    std::uint32_t check;
    std::vector<std::byte> bytes;
  };
  struct mailbox {
    std::mutex mutex;
    std::condition_variable arrived;
    std::map<std::pair<int, std::uint32_t>, std::deque<message>> queues;  // (source, channel)
  };

  static std::size_t checked_size(int size) {
    expects(size >= 1, errc::invalid_argument, "weft::comm::inproc_world::inproc_world", "size ", size,
            " must be at least 1");
    return static_cast<std::size_t>(size);
  }

  void abort(int by, std::string_view why, const failure_info* info = nullptr) {
    {
      std::lock_guard lock(abort_mutex_);
      if (aborted_) return;
      aborted_ = true;
      abort_reason_ = weft::detail::concat("rank ", by, " aborted the group: ", why);
      abort_by_ = by;
      if (info) abort_info_ = *info;
    }
    for (auto& box : boxes_) {
      std::lock_guard lock(box.mutex);  // pairs with the waiters' predicate check
      box.arrived.notify_all();
    }
  }
  std::string abort_reason() const {
    std::lock_guard lock(abort_mutex_);
    return abort_reason_;
  }
  // The failure every rank reports once the world is aborted: the aborting rank's facts.
  failure_info abort_facts(int rank, int peer) const {
    std::lock_guard lock(abort_mutex_);
    failure_info f;
    f.rank = rank;
    f.size = size();
    f.peer = peer;
    f.origin = abort_by_;
    f.blamed = abort_info_.blamed;
    f.field = abort_info_.field;
    f.here = abort_info_.here;
    f.there = abort_info_.there;
    f.channel = abort_info_.channel;
    f.detail = abort_reason_;
    return f;
  }

  std::vector<mailbox> boxes_;
  mutable std::mutex abort_mutex_;
  bool aborted_ = false;
  std::string abort_reason_;
  int abort_by_ = -1;
  failure_info abort_info_;
};

/// Rank r's end of an inproc_world. Satisfies concurrent_transport: several threads may use one
/// inproc_transport at once on different channels. send is O(bytes) (one copy) and never blocks;
/// recv is O(bytes) plus the wait for the message.
class inproc_transport {
 public:
  static constexpr bool thread_safe_channels = true;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return world_->size(); }

  void send(int peer, msg_tag tag, std::span<const std::byte> bytes, deadline until) {
    (void)until;  // eager: a send never waits
    check_peer(peer, "send");
    check_abort(peer, "send");
    auto& box = world_->boxes_[static_cast<std::size_t>(peer)];
    inproc_world::message m{tag.check, std::vector<std::byte>(bytes.begin(), bytes.end())};
    {
      std::lock_guard lock(box.mutex);
      box.queues[{rank_, tag.channel}].push_back(std::move(m));
    }
    box.arrived.notify_all();
  }

  void recv(int peer, msg_tag tag, std::span<std::byte> bytes, deadline until) {
    check_peer(peer, "recv");
    auto& box = world_->boxes_[static_cast<std::size_t>(rank_)];
    std::unique_lock lock(box.mutex);
    auto& queue = box.queues[{peer, tag.channel}];
    const bool arrived = box.arrived.wait_until(lock, until, [&] { return !queue.empty() || world_->aborted(); });
    if (!queue.empty()) {
      inproc_world::message m = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      expects(m.check == tag.check, errc::mismatch, "weft::comm::inproc_transport::recv", describe(peer, "recv", tag),
              ": the ranks disagree about the operation: ", explain_check_difference(tag.check, m.check));
      expects(m.bytes.size() == bytes.size(), errc::mismatch, "weft::comm::inproc_transport::recv",
              describe(peer, "recv", tag), ": the peer sent ", m.bytes.size(), " bytes but this rank expects ",
              bytes.size());
      if (!bytes.empty()) std::memcpy(bytes.data(), m.bytes.data(), bytes.size());
      return;
    }
    lock.unlock();
    check_abort(peer, "recv");
    expects(arrived, errc::timeout, "weft::comm::inproc_transport::recv", describe(peer, "recv", tag),
            ": no message of ", bytes.size(), " bytes arrived before the deadline");
  }

  void sendrecv(int dst, std::span<const std::byte> out, int src, std::span<std::byte> in, msg_tag tag,
                deadline until) {
    send(dst, tag, out, until);
    recv(src, tag, in, until);
  }

  /// Fails every current and future operation of every rank with errc::aborted. Thread-safe.
  void abort(std::string_view why) { world_->abort(rank_, why); }
  /// abort(why) that also carries the failure's fields (blamed rank, disagreement) to every rank.
  void abort(const comm_error& e) { world_->abort(rank_, e.what(), &e.info()); }

 private:
  friend class inproc_world;
  inproc_transport(inproc_world* world, int rank) : world_(world), rank_(rank) {}

  std::string describe(int peer, const char* what, msg_tag tag) const {
    return weft::detail::concat("rank ", rank_, " ", what, " peer ", peer, " channel ", tag.channel);
  }
  void check_peer(int peer, const char* what) const {
    expects(peer >= 0 && peer < size() && peer != rank_, errc::invalid_argument, "weft::comm::inproc_transport",
            "rank ", rank_, " ", what, ": peer ", peer, " must be another rank in [0, ", size(), ")");
  }
  void check_abort(int peer, const char* what) const {
    if (world_->aborted()) [[unlikely]] {
      failure_info f = world_->abort_facts(rank_, peer);
      f.operation = what;
      throw comm_error(errc::aborted, "weft::comm::inproc_transport", std::move(f));
    }
  }

  inproc_world* world_;
  int rank_;
};

inproc_transport inproc_world::transport(int r) {
  expects(r >= 0 && r < size(), errc::out_of_range, "weft::comm::inproc_world::transport", "rank ", r,
          " is outside [0, ", size(), ")");
  return inproc_transport(this, r);
}

}  // namespace weft::comm

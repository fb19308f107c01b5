// A transport decorator that injects the faults of a fault_plan (delay, dropped connection,
// killed rank) into any weft::comm transport, so failure handling is tested deterministically
// in one process (the fault-injection approach of Jepsen-style testing, applied to collectives).
#pragma once

#include <weft/comm/comm_error.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/comm/fault/fault_plan.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <span>
#include <string_view>
#include <thread>

namespace weft::comm::fault {

/// Rank rank()'s end, decorated. Before each send the plan may delay it, fail it (errc::peer_failure
/// for a dropped connection or a peer killed in reset mode, errc::aborted when this rank itself was
/// killed) or swallow it (peer killed in silent mode). A recv waits on the wrapped transport in
/// slices of `poll`, re-checking the plan between slices, so a peer killed while this rank waits is
/// noticed within `poll`; slicing needs a wrapped transport whose recv either takes a whole message
/// or nothing (inproc_transport); pass poll = 0 to disable it for other transports. A killed rank's
/// abort() is swallowed: dead processes do not announce their death.
/// Satisfies transport, abortable_transport, and concurrent_transport when the wrapped one does.
/// Thread-safety: that of the wrapped transport (the plan is thread-safe). Cost per call: the
/// wrapped one's plus O(rules).
template <transport Tr>
class fault_transport {
 public:
  static constexpr bool thread_safe_channels = concurrent_transport<Tr>;

  /// Throws errc::invalid_argument for a null plan or a negative poll.
  fault_transport(Tr inner, std::shared_ptr<fault_plan> plan,
                  std::chrono::milliseconds poll = std::chrono::milliseconds(5))
      : inner_(std::move(inner)), plan_(std::move(plan)), poll_(poll) {
    expects(plan_ != nullptr, errc::invalid_argument, "weft::comm::fault::fault_transport", "plan must not be null");
    expects(poll.count() >= 0, errc::invalid_argument, "weft::comm::fault::fault_transport", "poll ", poll.count(),
            " ms must be non-negative");
  }

  int rank() const { return static_cast<int>(inner_.rank()); }
  int size() const { return static_cast<int>(inner_.size()); }
  Tr& inner() noexcept { return inner_; }
  fault_plan& plan() noexcept { return *plan_; }

  void send(int peer, msg_tag tag, std::span<const std::byte> bytes, deadline until) {
    if (!before_send(peer, tag, until)) return;
    inner_.send(peer, tag, bytes, until);
  }
  void recv(int peer, msg_tag tag, std::span<std::byte> bytes, deadline until) {
    if (poll_.count() == 0) {
      raise_if(plan_->on_recv(rank(), peer), peer, tag, "recv");
      inner_.recv(peer, tag, bytes, until);
      return;
    }
    for (;;) {
      raise_if(plan_->on_recv(rank(), peer), peer, tag, "recv");
      const deadline slice = std::min(until, clock_type::now() + poll_);
      try {
        inner_.recv(peer, tag, bytes, slice);
        return;
      } catch (const error& e) {
        if (static_cast<errc>(e.code().value()) != errc::timeout || slice >= until) throw;
      }
    }
  }
  void sendrecv(int dst, std::span<const std::byte> out, int src, std::span<std::byte> in, msg_tag tag,
                deadline until) {
    if (poll_.count() == 0) {
      if (before_send(dst, tag, until)) {
        raise_if(plan_->on_recv(rank(), src), src, tag, "recv");
        inner_.sendrecv(dst, out, src, in, tag, until);
      } else {
        recv(src, tag, in, until);
      }
      return;
    }
    send(dst, tag, out, until);
    recv(src, tag, in, until);
  }
  void abort(std::string_view why) {
    if (plan_->on_recv(rank(), -1).self_killed) return;
    if constexpr (abortable_transport<Tr>) inner_.abort(why);
  }
  /// abort(why) with the failure's fields, forwarded when the wrapped transport carries them.
  void abort(const comm_error& e) {
    if (plan_->on_recv(rank(), -1).self_killed) return;
    if constexpr (failure_carrying_transport<Tr>)
      inner_.abort(e);
    else if constexpr (abortable_transport<Tr>)
      inner_.abort(std::string_view(e.what()));
  }

 private:
  // False: the message is swallowed (the peer is silently dead).
  bool before_send(int peer, msg_tag tag, deadline until) {
    const auto v = plan_->on_send(rank(), peer);
    raise_if(v, peer, tag, "send");
    if (v.wait.count() > 0) {
      const auto wake = std::min(until, clock_type::now() + v.wait);
      std::this_thread::sleep_until(wake);
      expects(clock_type::now() < until, errc::timeout, "weft::comm::fault::fault_transport", "rank ", rank(),
              " send peer ", peer, " channel ", tag.channel, ": the injected delay ran past the deadline");
    }
    return !plan_->swallows(peer);
  }
  void raise_if(const fault_plan::verdict& v, int peer, msg_tag tag, const char* what) const {
    if (!v.fail) return;
    failure_info info;  // the facts as fields, so callers never read them back from the text
    info.rank = rank();
    info.size = size();
    info.peer = peer;
    info.blamed = v.self_killed ? rank() : peer;
    info.origin = rank();
    info.channel = tag.channel;
    info.check = tag.check;
    info.operation = what;
    info.detail = *v.fail;
    throw comm_error(v.self_killed ? errc::aborted : errc::peer_failure, "weft::comm::fault::fault_transport",
                     std::move(info));
  }

  Tr inner_;
  std::shared_ptr<fault_plan> plan_;
  std::chrono::milliseconds poll_;
};

}  // namespace weft::comm::fault

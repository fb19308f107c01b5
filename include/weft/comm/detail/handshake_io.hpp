// Internal: runs handshakes (handshake.hpp) over POSIX sockets. drive() finishes one on a
// connected socket (the connecting side); handshake_pool accepts on a listening socket and runs
// every pending handshake concurrently in one poll(2) loop, each with its own short deadline, so
// idle, slow or hostile connections are dropped (and logged once) without delaying real peers.
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/comm/detail/handshake.hpp>
#include <weft/comm/detail/sockets.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace weft::comm::detail {

/// One non-blocking pass of I/O for `hs` on `fd`: sends what it can, reads at most want() bytes.
/// Returns the poll(2) events the handshake waits for next (0 once finished). A closed or broken
/// connection fails the handshake (errc::peer_failure).
inline short handshake_step(int fd, handshake& hs) {
  for (;;) {
    bool progressed = false;
    auto out = hs.output();
    if (!out.empty()) {
      const ssize_t w = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        hs.sent(static_cast<std::size_t>(w));
        progressed = true;
      } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        hs.abandon(errc::peer_failure,
                   std::string("the connection broke during the handshake: ") + std::strerror(errno));
        hs.sent(out.size());  // nothing more can go out
        return 0;
      }
    }
    if (const std::size_t want = hs.want(); want > 0) {
      std::byte buf[512];
      const ssize_t r = ::recv(fd, buf, std::min(want, sizeof buf), MSG_DONTWAIT);
      if (r > 0) {
        hs.consume(std::span<const std::byte>(buf, static_cast<std::size_t>(r)));
        progressed = true;
      } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        hs.abandon(errc::peer_failure,
                   r == 0 ? std::string("the peer closed the connection during the handshake")
                          : std::string("the connection broke during the handshake: ") + std::strerror(errno));
        hs.sent(hs.output().size());
        return 0;
      }
    }
    if (hs.finished()) return 0;
    if (!progressed) return static_cast<short>((hs.want() > 0 ? POLLIN : 0) | (hs.output().empty() ? 0 : POLLOUT));
  }
}

/// Runs `hs` on a connected socket until it finishes or `until` (then it fails with errc::timeout).
/// Leaves the outcome in hs. O(handshake bytes).
inline void drive(int fd, handshake& hs, deadline until) {
  for (;;) {
    const short ev = handshake_step(fd, hs);
    if (hs.finished()) return;
    if (clock_type::now() >= until) {
      hs.abandon(errc::timeout, "the handshake did not complete before its deadline");
      return;
    }
    pollfd p{fd, ev, 0};
    ::poll(&p, 1, millis_until(until, 100));
  }
}

/// Connections a component refused or dropped: each is logged once to stderr (the first
/// `max_lines`, then only counted), and the count and first reason go into later error messages.
/// Not thread-safe.
class connection_log {
 public:
  explicit connection_log(std::string who, std::size_t max_lines = 16) : who_(std::move(who)), max_lines_(max_lines) {}
  connection_log(const connection_log&) = delete;
  connection_log& operator=(const connection_log&) = delete;
  ~connection_log() {
    if (count_ > max_lines_)
      std::fprintf(stderr, "%s: dropped %zu connections in all (%zu not logged)\n", who_.c_str(), count_,
                   count_ - max_lines_);
  }

  void dropped(const std::string& from, const std::string& why) {
    if (count_ == 0) first_ = from + ": " + why;
    if (++count_ <= max_lines_) {
      std::fprintf(stderr, "%s: dropped a connection from %s: %s%s\n", who_.c_str(), from.c_str(), why.c_str(),
                   count_ == max_lines_ ? " (further drops are only counted)" : "");
    }
  }
  std::size_t count() const noexcept { return count_; }
  /// " (N connections were dropped; the first, from a:p: why)" or "" — for error messages.
  std::string summary() const {
    if (count_ == 0) return {};
    return weft::detail::concat(" (", count_, " connection", count_ == 1 ? " was" : "s were",
                                " dropped; the first, from ", first_, ")");
  }

 private:
  std::string who_;
  std::size_t max_lines_;
  std::size_t count_ = 0;
  std::string first_;
};

/// Accepts connections on a listening socket and runs their server-side handshakes concurrently.
/// Each accepted connection gets `limits.handshake_timeout` to finish; at most
/// `limits.max_pending_handshakes` wait at once (a new one evicts the oldest). Refused, failed and
/// timed-out connections are closed and logged. Not thread-safe. Each next() call: one poll over
/// the pending connections per wake-up, O(pending).
class handshake_pool {
 public:
  using factory = std::function<std::unique_ptr<handshake>()>;
  /// An admitted connection (fd >= 0), or an authenticated peer the check refused (fd == -1,
  /// `refused` says why): the caller decides whether that misconfiguration is fatal.
  struct accepted {
    int fd;
    peer_identity peer;
    std::string refused;
  };

  /// listen_fd is borrowed (non-blocking); make() builds the server side of one handshake.
  handshake_pool(int listen_fd, factory make, const wire_limits& limits, connection_log& log)
      : listen_fd_(listen_fd), make_(std::move(make)), limits_(limits), log_(&log) {}
  handshake_pool(const handshake_pool&) = delete;
  handshake_pool& operator=(const handshake_pool&) = delete;
  ~handshake_pool() {
    for (auto& p : pending_) ::close(p.fd);
  }

  /// The next admitted connection (the caller owns its fd; it is non-blocking) or refused
  /// authenticated peer, or nullopt when `until` passed first.
  std::optional<accepted> next(deadline until) {
    std::vector<pollfd> polls;
    for (;;) {
      accept_ready();
      const auto now = clock_type::now();
      for (std::size_t i = 0; i < pending_.size();) {
        auto& p = pending_[i];
        p.events = handshake_step(p.fd, *p.hs);
        const bool expired = now >= p.until;
        if (p.hs->state() == handshake::status::running && expired)
          p.hs->abandon(errc::timeout, weft::detail::concat("no complete handshake within ",
                                                            limits_.handshake_timeout.count(), " ms"));
        // Running, or a verdict still to flush (a refusal tells an honest peer why): keep it.
        if (p.hs->state() == handshake::status::running || (!p.hs->finished() && !expired)) {
          ++i;
          continue;
        }
        if (p.hs->state() == handshake::status::done && p.hs->finished()) {
          accepted a{p.fd, p.hs->peer(), {}};
          pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
          return a;
        }
        log_->dropped(p.from, p.hs->state() == handshake::status::done ? std::string("the verdict could not be sent")
                                                                       : p.hs->failure());
        ::close(p.fd);
        std::optional<accepted> misconfigured;
        if (p.hs->refused_authenticated_peer()) misconfigured = accepted{-1, p.hs->peer(), p.hs->failure()};
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        if (misconfigured) return misconfigured;
      }
      if (clock_type::now() >= until) return std::nullopt;
      polls.clear();
      deadline wake = until;
      if (accept_paused_until_ <= clock_type::now())
        polls.push_back({listen_fd_, POLLIN, 0});
      else
        wake = std::min(wake, accept_paused_until_);
      for (const auto& p : pending_) {
        polls.push_back({p.fd, static_cast<short>(p.events ? p.events : POLLOUT), 0});
        wake = std::min(wake, p.until);
      }
      ::poll(polls.data(), polls.size(), millis_until(wake, 100));
    }
  }

  /// Connections still in their handshake.
  std::size_t pending() const noexcept { return pending_.size(); }

 private:
  struct entry {
    int fd;
    std::unique_ptr<handshake> hs;
    deadline until;
    std::string from;
    short events = POLLIN;
  };

  void accept_ready() {
    if (accept_paused_until_ > clock_type::now()) return;
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: wait for pending handshakes to end instead of spinning on poll.
          accept_paused_until_ = clock_type::now() + std::chrono::milliseconds(20);
          if (!fd_warning_) log_->dropped("(not accepted)", std::string("accept failed: ") + std::strerror(errno));
          fd_warning_ = true;
        }
        return;  // EAGAIN and transient errors (ECONNABORTED...) are retried on the next wake-up
      }
      if (pending_.size() >= std::max<std::size_t>(limits_.max_pending_handshakes, 1)) {
        auto& oldest = pending_.front();
        log_->dropped(oldest.from, "evicted: too many connections in their handshake at once");
        ::close(oldest.fd);
        pending_.pop_front();
      }
      entry e{fd, make_(), clock_type::now() + limits_.handshake_timeout, remote_of(fd)};
      pending_.push_back(std::move(e));
    }
  }

  int listen_fd_;
  factory make_;
  wire_limits limits_;
  connection_log* log_;
  std::deque<entry> pending_;
  deadline accept_paused_until_{};
  bool fd_warning_ = false;
};

}  // namespace weft::comm::detail

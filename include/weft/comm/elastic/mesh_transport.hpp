// A minimal tcp full-mesh transport for one membership epoch of an elastic group: every pair of
// members holds one connection, frames carry (channel, check, length), and every wait polls all
// peers, so a peer that dies (connection closed) or aborts is noticed wherever this rank waits.
// POSIX sockets + poll(2); used by elastic_group until weft::comm's tcp transport can be rebuilt per epoch.
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/comm/options.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace weft::comm::elastic {

/// Where a member listens for its peers' data connections. A plain value.
struct peer_address {
  std::string name;  ///< the member's name (unique in the group; appears in every error)
  std::string host;  ///< numeric IPv4 address
  int port = 0;
};

namespace detail {
using weft::detail::concat;

inline int remaining_ms(deadline until) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}
inline void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }
inline void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}
inline sockaddr_in make_addr(const std::string& host, int port, const char* where) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  expects(::inet_pton(AF_INET, host.c_str(), &a.sin_addr) == 1, errc::invalid_argument, where, "host '", host,
          "' is not a numeric IPv4 address");
  return a;
}

/// A listening socket on host:port (port 0: any free port). Returns the fd; port is updated.
inline int listen_on(const std::string& host, int& port, const char* where) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  expects(fd >= 0, errc::io, where, "socket() failed: ", std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = make_addr(host, port, where);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 128) != 0) {
    const int e = errno;
    ::close(fd);
    weft::detail::raise(errc::io, where, "cannot listen on ", host, ":", port, ": ", std::strerror(e));
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  set_nonblocking(fd);
  return fd;
}

/// Connects to host:port before `until` (retrying refused connections: the peer may not listen yet).
inline int connect_to(const std::string& host, int port, deadline until, const char* where, std::string_view whom) {
  const sockaddr_in a = make_addr(host, port, where);
  for (;;) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    expects(fd >= 0, errc::io, where, "socket() failed: ", std::strerror(errno));
    set_nonblocking(fd);
    int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, remaining_ms(until));
      int err = 0;
      socklen_t len = sizeof err;
      if (rc == 1) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = (rc == 1 && err == 0) ? 0 : -1;
      if (rc != 0) errno = err ? err : ETIMEDOUT;
    }
    if (rc == 0) {
      set_nodelay(fd);
      return fd;
    }
    const int e = errno;
    ::close(fd);
    expects(clock_type::now() < until, errc::timeout, where, "cannot connect to ", whom, " at ", host, ":", port,
            " before the deadline: ", std::strerror(e));
    ::poll(nullptr, 0, 5);
  }
}

/// Writes all bytes (non-blocking fd) before `until`. False when the peer closed the connection.
inline bool write_all(int fd, const void* data, std::size_t n, deadline until) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<std::size_t>(w);
      continue;
    }
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      pollfd q{fd, POLLOUT, 0};
      if (::poll(&q, 1, remaining_ms(until)) <= 0 && clock_type::now() >= until) return false;
      continue;
    }
    return false;
  }
  return true;
}
/// Reads exactly n bytes before `until`; false on close, error or deadline.
inline bool read_all(int fd, void* data, std::size_t n, deadline until) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<std::size_t>(r);
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      pollfd q{fd, POLLIN, 0};
      if (::poll(&q, 1, remaining_ms(until)) <= 0 && clock_type::now() >= until) return false;
      continue;
    }
    return false;
  }
  return true;
}
}  // namespace detail

/// One epoch's connections among `members` (in ring order); this process is members[me]. The
/// constructor connects to every lower index and accepts every higher one on `listen_fd` (borrowed,
/// non-blocking, reused across epochs; a handshake carries the epoch, so stale connections from an
/// earlier epoch's attempt are refused). Messages on one (peer, channel) arrive in order; frames of
/// other channels are kept until asked for. Errors name this member, the peer (index and name),
/// the channel and the epoch: errc::peer_failure for a closed connection, errc::timeout at the
/// deadline, errc::aborted when a peer aborted, errc::mismatch for a frame of another length/check.
/// Satisfies abortable_transport. Not thread-safe (one collective at a time). Send/recv cost
/// O(bytes) plus one poll over all peers per wake-up; construction O(members) connections.
class mesh_transport {
 public:
  static constexpr bool thread_safe_channels = false;
  static constexpr std::uint32_t abort_channel = 0xffffffffu;

  mesh_transport(std::vector<peer_address> members, int me, int listen_fd, std::uint64_t epoch, deadline until)
      : members_(std::move(members)), me_(me), epoch_(epoch) {
    constexpr const char* where = "weft::comm::elastic::mesh_transport";
    const int n = size();
    expects(me >= 0 && me < n, errc::out_of_range, where, "member index ", me, " is outside [0, ", n, ")");
    fds_.assign(static_cast<std::size_t>(n), -1);
    rx_.resize(static_cast<std::size_t>(n));
    try {
      for (int j = 0; j < me; ++j) {
        const int fd = detail::connect_to(members_[idx(j)].host, members_[idx(j)].port, until, where, who(j));
        const hello h{epoch_, magic, static_cast<std::uint32_t>(me)};
        if (!detail::write_all(fd, &h, sizeof h, until)) {
          ::close(fd);
          fail(errc::peer_failure, j, 0, "handshake", "the peer closed the connection during the handshake");
        }
        fds_[idx(j)] = fd;
      }
      int missing = n - 1 - me;
      while (missing > 0) {
        pollfd p{listen_fd, POLLIN, 0};
        const int rc = ::poll(&p, 1, detail::remaining_ms(until));
        if (rc <= 0 && clock_type::now() >= until) {
          std::string who_missing;
          for (int j = me + 1; j < n; ++j)
            if (fds_[idx(j)] < 0) who_missing += " " + who(j);
          weft::detail::raise(errc::timeout, where, label(),
                              ": members did not connect before the deadline:", who_missing);
        }
        const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) continue;
        hello h{};
        const bool ok =
            detail::read_all(fd, &h, sizeof h, std::min(until, clock_type::now() + std::chrono::seconds(2)));
        if (!ok || h.magic != magic || h.epoch != epoch_ || static_cast<int>(h.from) <= me ||
            static_cast<int>(h.from) >= n || fds_[h.from] >= 0) {
          ::close(fd);  // a stale attempt of another epoch, or a stranger
          continue;
        }
        detail::set_nodelay(fd);
        fds_[h.from] = fd;
        --missing;
      }
    } catch (...) {
      close_all();
      throw;
    }
  }
  mesh_transport(const mesh_transport&) = delete;
  mesh_transport& operator=(const mesh_transport&) = delete;
  ~mesh_transport() { close_all(); }

  int rank() const noexcept { return me_; }
  int size() const noexcept { return static_cast<int>(members_.size()); }
  std::uint64_t epoch() const noexcept { return epoch_; }
  const std::vector<peer_address>& members() const noexcept { return members_; }

  void send(int peer, msg_tag tag, std::span<const std::byte> bytes, deadline until) {
    check_peer(peer, "send");
    exchange(peer, &bytes, -1, nullptr, tag, until);
  }
  void recv(int peer, msg_tag tag, std::span<std::byte> bytes, deadline until) {
    check_peer(peer, "recv");
    exchange(-1, nullptr, peer, &bytes, tag, until);
  }
  void sendrecv(int dst, std::span<const std::byte> out, int src, std::span<std::byte> in, msg_tag tag,
                deadline until) {
    check_peer(dst, "sendrecv");
    check_peer(src, "sendrecv");
    exchange(dst, &out, src, &in, tag, until);
  }
  /// Tells every peer (best effort) and fails this rank's later calls with errc::aborted.
  void abort(std::string_view why) {
    if (aborted_) return;
    aborted_ = true;
    reason_ = detail::concat(label(), " aborted: ", why);
    const auto until = clock_type::now() + std::chrono::milliseconds(200);
    for (int j = 0; j < size(); ++j) {
      if (j == me_ || fds_[idx(j)] < 0) continue;
      const frame_hdr h{abort_channel, 0, reason_.size()};
      if (detail::write_all(fds_[idx(j)], &h, sizeof h, until))
        detail::write_all(fds_[idx(j)], reason_.data(), reason_.size(), until);
    }
  }

 private:
  static constexpr std::uint32_t magic = 0x77656674;  // "weft"
  struct hello {                                      // no padding: every byte sent is initialised
    std::uint64_t epoch;
    std::uint32_t magic;
    std::uint32_t from;
  };
  struct frame_hdr {
    std::uint32_t channel;
    std::uint32_t check;
    std::uint64_t len;
  };
  struct frame {
    std::uint32_t check;
    std::vector<std::byte> bytes;
  };
  struct rx_state {
    frame_hdr h{};
    std::size_t hdr_got = 0;
    std::vector<std::byte> body;
    std::size_t body_got = 0;
    std::string closed;  // non-empty once the connection ended: why
  };

  static std::size_t idx(int i) noexcept { return static_cast<std::size_t>(i); }
  std::string who(int j) const { return detail::concat("member ", j, " (", members_[idx(j)].name, ")"); }
  std::string label() const {
    return detail::concat("member ", me_, " (", members_[idx(me_)].name, ") epoch ", epoch_);
  }

  [[noreturn]] void fail(errc code, int peer, std::uint32_t channel, const char* what, const std::string& why) const {
    weft::detail::raise(code, "weft::comm::elastic::mesh_transport", label(), " ", what, " peer ", peer, " (",
                        members_[idx(peer)].name, ") channel ", channel, ": ", why);
  }
  void check_peer(int peer, const char* what) const {
    expects(peer >= 0 && peer < size() && peer != me_, errc::invalid_argument, "weft::comm::elastic::mesh_transport",
            label(), " ", what, ": peer ", peer, " must be another member in [0, ", size(), ")");
    if (aborted_) weft::detail::raise(errc::aborted, "weft::comm::elastic::mesh_transport", reason_);
  }

  // Reads what peer j has available; completed frames go to the stash. A closed connection is
  // recorded, not thrown: it fails only the calls that need that peer (frames it sent before
  // closing are still delivered), so a member that finished a collective and left does not break
  // the others still completing it. An abort frame throws.
  void pump(int j, std::uint32_t channel) {
    auto& s = rx_[idx(j)];
    while (s.closed.empty()) {
      std::byte* dst;
      std::size_t want;
      if (s.hdr_got < sizeof(frame_hdr)) {
        dst = reinterpret_cast<std::byte*>(&s.h) + s.hdr_got;
        want = sizeof(frame_hdr) - s.hdr_got;
      } else {
        dst = s.body.data() + s.body_got;
        want = s.body.size() - s.body_got;
      }
      if (want > 0) {
        const ssize_t r = ::recv(fds_[idx(j)], dst, want, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          s.closed = r == 0 ? std::string("the connection was closed by the peer (it died or left)")
                            : std::string("connection error: ") + std::strerror(errno);
          return;
        }
        if (r < 0) return;
        if (s.hdr_got < sizeof(frame_hdr)) {
          s.hdr_got += static_cast<std::size_t>(r);
          if (s.hdr_got == sizeof(frame_hdr)) s.body.assign(s.h.len, std::byte{0});
        } else {
          s.body_got += static_cast<std::size_t>(r);
        }
      }
      if (s.hdr_got == sizeof(frame_hdr) && s.body_got == s.body.size()) {
        if (s.h.channel == abort_channel) {
          const std::string why(reinterpret_cast<const char*>(s.body.data()), s.body.size());
          fail(errc::aborted, j, channel, "recv", "the peer aborted the group: " + why);
        }
        stash_[{j, s.h.channel}].push_back(frame{s.h.check, std::move(s.body)});
        s = rx_state{};
      }
    }
  }

  // Sends *out to dst and/or receives *in from src, pumping every peer while it waits.
  void exchange(int dst, const std::span<const std::byte>* out, int src, std::span<std::byte>* in, msg_tag tag,
                deadline until) {
    const frame_hdr h{tag.channel, tag.check, out ? out->size() : 0};
    std::size_t sent = 0;
    const std::size_t total = out ? sizeof h + out->size() : 0;
    std::vector<pollfd> polls;
    for (;;) {
      if (in && sent == total) {
        auto it = stash_.find({src, tag.channel});
        if (it != stash_.end() && !it->second.empty()) {
          frame f = std::move(it->second.front());
          it->second.pop_front();
          if (f.check != tag.check)
            fail(errc::mismatch, src, tag.channel, "recv",
                 "the members disagree about the operation: " + explain_check_difference(tag.check, f.check));
          if (f.bytes.size() != in->size())
            fail(errc::mismatch, src, tag.channel, "recv",
                 detail::concat("the peer sent ", f.bytes.size(), " bytes but this member expects ", in->size()));
          if (!f.bytes.empty()) std::memcpy(in->data(), f.bytes.data(), f.bytes.size());
          return;
        }
      }
      if (!in && sent == total) return;
      if (in && sent == total && !rx_[idx(src)].closed.empty())
        fail(errc::peer_failure, src, tag.channel, "recv", rx_[idx(src)].closed);
      if (sent < total && !rx_[idx(dst)].closed.empty())
        fail(errc::peer_failure, dst, tag.channel, "send", rx_[idx(dst)].closed);
      polls.clear();
      for (int j = 0; j < size(); ++j) {
        if (j == me_ || (!rx_[idx(j)].closed.empty() && j != dst)) continue;
        short ev = POLLIN;
        if (j == dst && sent < total) ev |= POLLOUT;
        polls.push_back({fds_[idx(j)], ev, 0});
      }
      const int rc = ::poll(polls.data(), polls.size(), detail::remaining_ms(until));
      if (rc <= 0) {
        if (clock_type::now() < until) continue;
        const int blamed = (sent < total) ? dst : src;
        fail(errc::timeout, blamed, tag.channel, sent < total ? "send" : "recv",
             detail::concat("nothing arrived before the deadline (", sent, " of ", total,
                            " bytes sent); the peer is stopped, overloaded or partitioned"));
      }
      for (const auto& p : polls) {
        const int j = peer_of(p.fd);
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) pump(j, tag.channel);
        if (j == dst && (p.revents & POLLOUT) && sent < total) {
          while (sent < total) {
            const std::byte* from;
            std::size_t n;
            if (sent < sizeof h) {
              from = reinterpret_cast<const std::byte*>(&h) + sent;
              n = sizeof h - sent;
            } else {
              from = out->data() + (sent - sizeof h);
              n = total - sent;
            }
            const ssize_t w = ::send(p.fd, from, n, MSG_NOSIGNAL);
            if (w > 0) {
              sent += static_cast<std::size_t>(w);
              continue;
            }
            if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
            fail(errc::peer_failure, dst, tag.channel, "send",
                 std::string("the connection broke (the peer died or left): ") + std::strerror(errno));
          }
        }
      }
    }
  }
  int peer_of(int fd) const {
    for (int j = 0; j < size(); ++j)
      if (fds_[idx(j)] == fd) return j;
    return -1;
  }
  void close_all() noexcept {
    for (int& fd : fds_)
      if (fd >= 0) ::close(fd), fd = -1;
  }

  std::vector<peer_address> members_;
  int me_;
  std::uint64_t epoch_;
  std::vector<int> fds_;
  std::vector<rx_state> rx_;
  std::map<std::pair<int, std::uint32_t>, std::deque<frame>> stash_;
  bool aborted_ = false;
  std::string reason_;
};

static_assert(abortable_transport<mesh_transport>);

}  // namespace weft::comm::elastic

// A minimal tcp full-mesh transport for one membership epoch of an elastic group: every pair of
// members holds one connection (authenticated by weft's handshake), frames carry (channel, check,
// length) with bounded lengths, and every wait polls all peers, so a peer that dies (connection
// closed) or aborts is noticed wherever this rank waits.
// POSIX sockets + poll(2); used by elastic_group until weft::comm's tcp transport can be rebuilt per epoch.
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/comm/detail/handshake.hpp>
#include <weft/comm/detail/handshake_io.hpp>
#include <weft/comm/detail/sockets.hpp>
#include <weft/comm/detail/wire.hpp>
#include <weft/comm/options.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <new>
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
  /// Random per member process (0: unknown): a connection claiming this member must carry it.
  std::uint64_t instance = 0;
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
  expects(port >= 0 && port <= 65535, errc::invalid_argument, where, "port ", port, " is outside [0, 65535]");
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

/// Members one epoch may have (a count read from the coordinator above it is refused).
inline constexpr int max_members = 1 << 16;
/// Longest abort reason a peer may send.
inline constexpr std::size_t max_abort_reason_bytes = 4096;

/// "" when `a` is a usable member address (a name without spaces, a numeric IPv4 host, a port in
/// [1, 65535]), else why not.
inline std::string check_member_address(const peer_address& a, const comm::detail::wire_limits& limits = {}) {
  if (a.name.empty() || a.name.size() > limits.max_name_bytes || !comm::detail::is_token(a.name))
    return "member name '" + a.name.substr(0, 64) + "' must be 1 to 255 printable characters without spaces";
  if (!comm::detail::parse_ipv4(a.host)) return "host '" + a.host.substr(0, 64) + "' is not a numeric IPv4 address";
  if (a.port < 1 || a.port > 65535) return detail::concat("port ", a.port, " is outside [1, 65535]");
  return {};
}

/// "" when `p` is member j of epoch `epoch` as `members` lists it (index, group size, name and, when
/// known, instance), else why not: both sides of a mesh connection check this of each other.
inline std::string mesh_admission(const comm::detail::peer_identity& p, int j, const std::vector<peer_address>& members,
                                  std::uint64_t epoch) {
  if (p.epoch != epoch) return detail::concat("epoch ", p.epoch, ", this mesh is epoch ", epoch);
  if (p.size != static_cast<int>(members.size()))
    return detail::concat("a group of ", p.size, " members, this epoch has ", members.size());
  if (j < 0 || j >= static_cast<int>(members.size())) return detail::concat("member index ", j, " is out of range");
  const auto& m = members[static_cast<std::size_t>(j)];
  if (p.rank != j || p.name != m.name || (m.instance != 0 && p.instance != m.instance))
    return detail::concat("'", p.name.substr(0, 64), "' (index ", p.rank, ") is not member ", j, " (", m.name,
                          ") of this epoch");
  return {};
}

/// One epoch's connections among `members` (in ring order); this process is members[me]. The
/// constructor connects to every lower index and accepts every higher one on `listen_fd` (borrowed,
/// non-blocking, reused across epochs). Every connection runs weft's handshake (authenticated with
/// `secret` when it is not empty) naming the epoch, the member index, name and instance, so stale
/// attempts of another epoch and strangers are refused; accepted handshakes run concurrently, each
/// with its own deadline, so idle connections cannot stop an epoch from forming. Messages on one
/// (peer, channel) arrive in order; a frame for the receive being waited on lands straight in its
/// buffer, frames of other channels are kept (bounded: limits.max_unexpected_bytes per peer) until
/// asked for. Errors name this member, the peer (index and name), the channel and the epoch:
/// errc::peer_failure for a closed connection, errc::timeout at the deadline, errc::aborted when a
/// peer aborted, errc::mismatch for a frame of another length/check, errc::capacity for a frame
/// above the limits (that connection is then closed). Satisfies abortable_transport. Not
/// thread-safe (one collective at a time). Send/recv cost O(bytes) plus one poll over all peers per
/// wake-up; construction O(members) connections.
class mesh_transport {
 public:
  static constexpr bool thread_safe_channels = false;
  static constexpr std::uint32_t abort_channel = 0xffffffffu;

  mesh_transport(std::vector<peer_address> members, int me, int listen_fd, std::uint64_t epoch, deadline until,
                 const comm::detail::job_secret& secret = {}, const comm::detail::wire_limits& limits = {})
      : members_(std::move(members)), me_(me), epoch_(epoch), limits_(limits) {
    constexpr const char* where = "weft::comm::elastic::mesh_transport";
    const int n = size();
    expects(n >= 1 && n <= max_members, errc::out_of_range, where, "member count ", n, " is outside [1, ", max_members,
            "]");
    expects(me >= 0 && me < n, errc::out_of_range, where, "member index ", me, " is outside [0, ", n, ")");
    for (const auto& m : members_) {
      const std::string bad = check_member_address(m, limits_);
      expects(bad.empty(), errc::invalid_argument, where, bad);
    }
    fds_.assign(static_cast<std::size_t>(n), -1);
    rx_.resize(static_cast<std::size_t>(n));
    stashed_.assign(static_cast<std::size_t>(n), 0);
    comm::detail::connection_log log(label());
    try {
      for (int j = 0; j < me; ++j) connect_member(j, secret, until);
      accept_members(listen_fd, secret, until, log);
    } catch (...) {
      close_all();
      throw;
    }
  }
  /// Adopts connections that are already up and authenticated: fds[j] is the socket to member j
  /// (-1 for this member), and the mesh owns them from now on. For tests and fuzzing, and for
  /// callers that form connections their own way.
  mesh_transport(std::vector<peer_address> members, int me, std::uint64_t epoch, std::vector<int> fds,
                 const comm::detail::wire_limits& limits = {})
      : members_(std::move(members)), me_(me), epoch_(epoch), limits_(limits), fds_(std::move(fds)) {
    constexpr const char* where = "weft::comm::elastic::mesh_transport";
    const int n = size();
    const bool ok = n >= 1 && n <= max_members && me >= 0 && me < n && fds_.size() == members_.size();
    if (!ok) close_all();
    expects(ok, errc::invalid_argument, where, "member index ", me, " of ", n, " members with ", fds_.size(),
            " sockets");
    for (int& fd : fds_)
      if (fd >= 0) detail::set_nonblocking(fd);
    rx_.resize(static_cast<std::size_t>(n));
    stashed_.assign(static_cast<std::size_t>(n), 0);
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
    if (reason_.size() > max_abort_reason_bytes) reason_.resize(max_abort_reason_bytes);
    const auto until = clock_type::now() + std::chrono::milliseconds(200);
    for (int j = 0; j < size(); ++j) {
      if (j == me_ || fds_[idx(j)] < 0) continue;
      const frame_hdr h{abort_channel, 0, reason_.size()};
      if (detail::write_all(fds_[idx(j)], &h, sizeof h, until))
        detail::write_all(fds_[idx(j)], reason_.data(), reason_.size(), until);
    }
  }

 private:
  struct frame_hdr {
    std::uint32_t channel;
    std::uint32_t check;
    std::uint64_t len;
  };
  struct frame {
    std::uint32_t check;
    std::size_t len;
    std::unique_ptr<std::byte[]> bytes;
  };
  struct rx_state {
    frame_hdr h{};
    std::size_t hdr_got = 0;
    std::byte* dst = nullptr;           // the posted receive's buffer, or body
    std::unique_ptr<std::byte[]> body;  // a frame nobody waits for yet
    std::size_t body_got = 0;
    bool direct = false;  // dst is the posted receive's buffer
    std::string closed;   // non-empty once the connection ended: why
  };
  struct posted_recv {  // the receive exchange() waits for
    int src = -1;
    std::uint32_t channel = 0, check = 0;
    std::span<std::byte> buf;
    bool done = false;
  };

  static std::size_t idx(int i) noexcept { return static_cast<std::size_t>(i); }
  std::string who(int j) const { return detail::concat("member ", j, " (", members_[idx(j)].name, ")"); }
  std::string label() const {
    return detail::concat("member ", me_, " (", members_[idx(me_)].name, ") epoch ", epoch_);
  }
  comm::detail::peer_identity identity() const {
    comm::detail::peer_identity id;
    id.rank = me_;
    id.size = size();
    id.epoch = epoch_;
    id.instance = members_[idx(me_)].instance;
    id.name = members_[idx(me_)].name;
    return id;
  }
  std::string is_member(const comm::detail::peer_identity& p, int j) const {
    return mesh_admission(p, j, members_, epoch_);
  }

  void connect_member(int j, const comm::detail::job_secret& secret, deadline until) {
    constexpr const char* where = "weft::comm::elastic::mesh_transport";
    std::string last;
    for (;;) {
      const int fd = detail::connect_to(members_[idx(j)].host, members_[idx(j)].port, until, where, who(j));
      comm::detail::handshake hs(
          comm::detail::handshake::role::client, comm::detail::conn_kind::elastic_mesh, identity(), secret,
          [&](const comm::detail::peer_identity& p) { return is_member(p, j); }, limits_);
      comm::detail::drive(fd, hs, std::min(until, clock_type::now() + limits_.handshake_timeout));
      if (hs.state() == comm::detail::handshake::status::done) {
        fds_[idx(j)] = fd;
        return;
      }
      ::close(fd);
      // The peer may still be in another epoch, or busy: retry until the deadline.
      last = hs.failure();
      if (clock_type::now() >= until)
        fail(errc::timeout, j, 0, "handshake", "no handshake before the deadline: " + last);
      ::poll(nullptr, 0, 5);
    }
  }

  void accept_members(int listen_fd, const comm::detail::job_secret& secret, deadline until,
                      comm::detail::connection_log& log) {
    constexpr const char* where = "weft::comm::elastic::mesh_transport";
    int missing = size() - 1 - me_;
    if (missing == 0) return;
    const auto id = identity();
    comm::detail::handshake_pool pool(
        listen_fd,
        [&] {
          return std::make_unique<comm::detail::handshake>(
              comm::detail::handshake::role::server, comm::detail::conn_kind::elastic_mesh, id, secret,
              [&](const comm::detail::peer_identity& p) -> std::string {
                if (p.rank <= me_ || p.rank >= size())
                  return detail::concat("member index ", p.rank, " may not connect to member ", me_);
                return is_member(p, p.rank);
              },
              limits_);
        },
        limits_, log);
    while (missing > 0) {
      auto a = pool.next(until);
      if (!a) {
        std::string who_missing;
        for (int j = me_ + 1; j < size(); ++j)
          if (fds_[idx(j)] < 0) who_missing += " " + who(j);
        weft::detail::raise(errc::timeout, where, label(),
                            ": members did not connect before the deadline:", who_missing, log.summary());
      }
      if (a->fd < 0) continue;  // an authenticated member of another epoch: it retries when it catches up
      int& slot = fds_[idx(a->peer.rank)];
      if (slot >= 0)
        ::close(slot);  // the same member again: its first attempt timed out after this side admitted it
      else
        --missing;
      detail::set_nodelay(a->fd);
      slot = a->fd;
    }
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

  // Closes the receive side of peer j for good (its bytes can no longer be trusted) and throws.
  [[noreturn]] void poison(int j, errc code, std::uint32_t channel, const std::string& why) {
    auto& s = rx_[idx(j)];
    s = rx_state{};
    s.closed = why;
    ::shutdown(fds_[idx(j)], SHUT_RDWR);
    fail(code, j, channel, "recv", why);
  }

  // A frame header from peer j is complete: bound it, then pick where its body goes.
  void start_body(int j, std::uint32_t channel) {
    auto& s = rx_[idx(j)];
    const std::uint64_t len = s.h.len;
    if (s.h.channel == abort_channel && len > max_abort_reason_bytes)
      poison(j, errc::capacity, channel, detail::concat("an abort frame of ", len, " bytes exceeds the limit"));
    if (len > limits_.max_message_bytes)
      poison(j, errc::capacity, channel,
             detail::concat("a frame of ", len, " bytes exceeds the limit of ", limits_.max_message_bytes));
    const auto key = std::make_pair(j, s.h.channel);
    const auto it = stash_.find(key);
    if (posted_.buf.data() != nullptr && !posted_.done && posted_.src == j && posted_.channel == s.h.channel &&
        posted_.check == s.h.check && posted_.buf.size() == len && (it == stash_.end() || it->second.empty())) {
      s.dst = posted_.buf.data();
      s.direct = true;
      return;
    }
    if (stashed_[idx(j)] + len > limits_.max_unexpected_bytes)
      poison(j, errc::capacity, channel,
             detail::concat("the peer sent ", stashed_[idx(j)] + len,
                            " bytes that no receive asked for yet, above the limit of ", limits_.max_unexpected_bytes));
    try {
      s.body = std::make_unique_for_overwrite<std::byte[]>(static_cast<std::size_t>(len));
    } catch (const std::bad_alloc&) {
      poison(j, errc::capacity, channel, detail::concat("cannot buffer a frame of ", len, " bytes"));
    }
    s.dst = s.body.get();
  }

  // Reads what peer j has available; a completed frame lands in the posted receive or the stash. A
  // closed connection is recorded, not thrown: it fails only the calls that need that peer (frames
  // it sent before closing are still delivered), so a member that finished a collective and left
  // does not break the others still completing it. An abort frame throws.
  void pump(int j, std::uint32_t channel) {
    auto& s = rx_[idx(j)];
    while (s.closed.empty()) {
      std::byte* dst;
      std::size_t want;
      const bool in_header = s.hdr_got < sizeof(frame_hdr);
      if (in_header) {
        dst = reinterpret_cast<std::byte*>(&s.h) + s.hdr_got;
        want = sizeof(frame_hdr) - s.hdr_got;
      } else {
        dst = s.dst + s.body_got;
        want = static_cast<std::size_t>(s.h.len) - s.body_got;
      }
      if (want > 0) {
        const ssize_t r = ::recv(fds_[idx(j)], dst, want, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          s.closed = r == 0 ? std::string("the connection was closed by the peer (it died or left)")
                            : std::string("connection error: ") + std::strerror(errno);
          return;
        }
        if (r < 0) return;
        if (in_header) {
          s.hdr_got += static_cast<std::size_t>(r);
          if (s.hdr_got == sizeof(frame_hdr)) start_body(j, channel);
        } else {
          s.body_got += static_cast<std::size_t>(r);
        }
      }
      if (s.hdr_got == sizeof(frame_hdr) && s.body_got == s.h.len) {
        if (s.h.channel == abort_channel) {
          const std::string why(reinterpret_cast<const char*>(s.dst), s.body_got);
          fail(errc::aborted, j, channel, "recv", "the peer aborted the group: " + why);
        }
        if (s.direct) {
          posted_.done = true;
        } else {
          stashed_[idx(j)] += s.h.len;
          stash_[{j, s.h.channel}].push_back(frame{s.h.check, static_cast<std::size_t>(s.h.len), std::move(s.body)});
        }
        s = rx_state{};
      }
    }
  }

  // A receive that ends (returns or throws) while its frame is half-read into the caller's buffer
  // moves the part read so far into a buffer of its own, so later bytes never land in memory the
  // caller took back.
  void unpost() noexcept {
    for (auto& s : rx_) {
      if (!s.direct) continue;
      try {
        s.body = std::make_unique_for_overwrite<std::byte[]>(static_cast<std::size_t>(s.h.len));
        std::memcpy(s.body.get(), s.dst, s.body_got);
        s.dst = s.body.get();
        s.direct = false;
      } catch (...) {
        s = rx_state{};
        s.closed = "a receive was abandoned and its frame could not be buffered";
      }
    }
    posted_ = posted_recv{};
  }

  // Sends *out to dst and/or receives *in from src, pumping every peer while it waits.
  void exchange(int dst, const std::span<const std::byte>* out, int src, std::span<std::byte>* in, msg_tag tag,
                deadline until) {
    const frame_hdr h{tag.channel, tag.check, out ? out->size() : 0};
    std::size_t sent = 0;
    const std::size_t total = out ? sizeof h + out->size() : 0;
    if (in) {
      posted_ = posted_recv{src, tag.channel, tag.check, *in, false};
      // A frame of src on this channel may be half-read into a stash buffer already; it keeps going there.
    }
    struct unposter {
      mesh_transport* m;
      ~unposter() {
        if (m) m->unpost();
      }
    } guard{in ? this : nullptr};
    std::vector<pollfd> polls;
    for (;;) {
      if (in && sent == total) {
        if (posted_.done) return;
        auto it = stash_.find({src, tag.channel});
        if (it != stash_.end() && !it->second.empty()) {
          frame f = std::move(it->second.front());
          it->second.pop_front();
          stashed_[idx(src)] -= f.len;
          if (f.check != tag.check)
            fail(errc::mismatch, src, tag.channel, "recv",
                 "the members disagree about the operation: " + explain_check_difference(tag.check, f.check));
          if (f.len != in->size())
            fail(errc::mismatch, src, tag.channel, "recv",
                 detail::concat("the peer sent ", f.len, " bytes but this member expects ", in->size()));
          if (f.len > 0) std::memcpy(in->data(), f.bytes.get(), f.len);
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
  comm::detail::wire_limits limits_;
  std::vector<int> fds_;
  std::vector<rx_state> rx_;
  std::vector<std::uint64_t> stashed_;  // bytes of stashed frames per peer
  std::map<std::pair<int, std::uint32_t>, std::deque<frame>> stash_;
  posted_recv posted_;
  bool aborted_ = false;
  std::string reason_;
};

static_assert(abortable_transport<mesh_transport>);

}  // namespace weft::comm::elastic

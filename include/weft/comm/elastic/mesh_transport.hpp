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
#include <array>
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
#include <sys/uio.h>
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

/// How a mesh uses its connections. Every member of an epoch must use the same `connections`
/// (the handshake checks it); `stripe_min` may differ (each frame says how it was split).
struct mesh_options {
  int connections = 2;                            ///< K connections per pair of members, in [1, 16]
  std::size_t stripe_min = std::size_t{1} << 18;  ///< messages at least this big are split over the K connections
};

/// "" when `p` is connection `p.index` of member j of epoch `epoch` as `members` lists it (index,
/// group size, name, connections and, when known, instance), else why not: both sides of a mesh
/// connection check this of each other.
inline std::string mesh_admission(const comm::detail::peer_identity& p, int j, const std::vector<peer_address>& members,
                                  std::uint64_t epoch, int connections = 1) {
  if (p.epoch != epoch) return detail::concat("epoch ", p.epoch, ", this mesh is epoch ", epoch);
  if (p.size != static_cast<int>(members.size()))
    return detail::concat("a group of ", p.size, " members, this epoch has ", members.size());
  if (p.count != connections) return detail::concat(p.count, " connections per pair, this member uses ", connections);
  if (p.index < 0 || p.index >= connections)
    return detail::concat("connection index ", p.index, " is outside [0, ", connections, ")");
  if (j < 0 || j >= static_cast<int>(members.size())) return detail::concat("member index ", j, " is out of range");
  const auto& m = members[static_cast<std::size_t>(j)];
  if (p.rank != j || p.name != m.name || (m.instance != 0 && p.instance != m.instance))
    return detail::concat("'", p.name.substr(0, 64), "' (index ", p.rank, ") is not member ", j, " (", m.name,
                          ") of this epoch");
  return {};
}

/// One epoch's connections among `members` (in ring order); this process is members[me]. The
/// constructor connects K times to every lower index and accepts K connections from every higher
/// one on `listen_fd` (borrowed, non-blocking, reused across epochs). Every connection runs weft's
/// handshake (authenticated with `secret` when it is not empty) naming the epoch, the member
/// index, name and instance, so stale attempts of another epoch and strangers are refused;
/// accepted handshakes run concurrently, each with its own deadline, so idle connections cannot
/// stop an epoch from forming. A message of at least stripe_min bytes is split into K pieces, one
/// per connection (Gloo's and NCCL's multi-socket striping); a piece of the message a receive
/// waits for lands straight in its buffer, other messages are kept (bounded:
/// limits.max_unexpected_bytes per peer) until asked for; messages on one (peer, channel) arrive
/// in order. Errors name this member, the peer (index and name), the channel and the epoch:
/// errc::peer_failure for a closed connection, errc::timeout at the deadline, errc::aborted when a
/// peer aborted, errc::mismatch for a message of another length/check, errc::capacity or
/// errc::parse for frames above the limits or out of order (that peer's connections are then
/// closed). Satisfies abortable_transport. Not thread-safe (one collective at a time). Send/recv
/// cost O(bytes) plus one poll over all connections per wake-up; construction O(members · K)
/// connections.
class mesh_transport {
 public:
  static constexpr bool thread_safe_channels = false;
  static constexpr std::uint32_t abort_channel = 0xffffffffu;

  mesh_transport(std::vector<peer_address> members, int me, int listen_fd, std::uint64_t epoch, deadline until,
                 const comm::detail::job_secret& secret = {}, const comm::detail::wire_limits& limits = {},
                 const mesh_options& opt = {})
      : members_(std::move(members)), me_(me), epoch_(epoch), limits_(limits), opt_(opt) {
    constexpr const char* where = "weft::comm::elastic::mesh_transport";
    validate(where);
    fds_.assign(static_cast<std::size_t>(size() * K()), -1);
    init_state();
    comm::detail::connection_log log(label());
    try {
      for (int j = 0; j < me; ++j)
        for (int k = 0; k < K(); ++k) connect_member(j, k, secret, until);
      accept_members(listen_fd, secret, until, log);
    } catch (...) {
      close_all();
      throw;
    }
  }
  /// Adopts connections that are already up and authenticated: fds[j * K + k] is connection k to
  /// member j (-1 for this member), and the mesh owns them from now on. For tests and fuzzing,
  /// and for callers that form connections their own way.
  mesh_transport(std::vector<peer_address> members, int me, std::uint64_t epoch, std::vector<int> fds,
                 const comm::detail::wire_limits& limits = {}, const mesh_options& opt = {})
      : members_(std::move(members)), me_(me), epoch_(epoch), limits_(limits), opt_(opt), fds_(std::move(fds)) {
    constexpr const char* where = "weft::comm::elastic::mesh_transport";
    try {
      validate(where);
      expects(fds_.size() == members_.size() * static_cast<std::size_t>(K()), errc::invalid_argument, where,
              fds_.size(), " sockets for ", members_.size(), " members with ", K(), " connections each");
    } catch (...) {
      close_all();
      throw;
    }
    for (int& fd : fds_)
      if (fd >= 0) detail::set_nonblocking(fd);
    init_state();
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
      const int fd = fds_[slot(j, 0)];
      if (j == me_ || fd < 0) continue;
      const frame_hdr h{abort_channel, 0, reason_.size(), 0, 1, 0};
      if (detail::write_all(fd, &h, sizeof h, until)) detail::write_all(fd, reason_.data(), reason_.size(), until);
    }
  }

 private:
  // On the wire before every piece (little-endian hosts; docs/comm-elastic.md): the message's
  // channel, check and total bytes, its sequence number from this sender, how many pieces it was
  // split into (1 or K); the connection a piece arrives on is its index.
  struct frame_hdr {
    std::uint32_t channel;
    std::uint32_t check;
    std::uint64_t total;
    std::uint64_t seq;
    std::uint32_t pieces;
    std::uint32_t reserved;
  };
  static_assert(sizeof(frame_hdr) == 32);
  struct message {  // a message being received, or received and not yet asked for
    std::uint32_t channel = 0, check = 0, pieces = 1, done = 0;
    std::uint64_t total = 0;
    std::byte* base = nullptr;          // the posted receive's buffer, or heap
    std::unique_ptr<std::byte[]> heap;  // when nobody waited for it yet
    bool complete() const noexcept { return done == pieces; }
  };
  struct rx_state {  // per connection
    frame_hdr h{};
    std::size_t hdr_got = 0;
    message* target = nullptr;  // the message this piece belongs to (null: an abort reason)
    std::uint64_t off = 0, len = 0, got = 0;
    std::string abort_text;
    std::string closed;  // non-empty once the connection ended: why
  };
  struct posted_recv {  // the receive exchange() waits for
    int src = -1;
    std::uint32_t channel = 0, check = 0;
    std::span<std::byte> buf;
    message* direct = nullptr;  // the message being received straight into buf
  };
  // Messages of one sender still being received or waiting to be asked for, by sequence number;
  // at most this many at once (a peer's own window, far above what collectives keep in flight).
  static constexpr std::size_t max_pending_messages = 4096;

  static std::size_t idx(int i) noexcept { return static_cast<std::size_t>(i); }
  int K() const noexcept { return opt_.connections; }
  std::size_t slot(int j, int k) const noexcept { return idx(j) * idx(K()) + idx(k); }
  std::string who(int j) const { return detail::concat("member ", j, " (", members_[idx(j)].name, ")"); }
  std::string label() const {
    return detail::concat("member ", me_, " (", members_[idx(me_)].name, ") epoch ", epoch_);
  }

  void validate(const char* where) const {
    const int n = size();
    expects(n >= 1 && n <= max_members, errc::out_of_range, where, "member count ", n, " is outside [1, ", max_members,
            "]");
    expects(me_ >= 0 && me_ < n, errc::out_of_range, where, "member index ", me_, " is outside [0, ", n, ")");
    expects(opt_.connections >= 1 && opt_.connections <= 16, errc::invalid_argument, where, "connections ",
            opt_.connections, " must be in [1, 16]");
    for (const auto& m : members_) {
      const std::string bad = check_member_address(m, limits_);
      expects(bad.empty(), errc::invalid_argument, where, bad);
    }
  }
  void init_state() {
    rx_.resize(fds_.size());
    inbox_.resize(idx(size()));
    known_.assign(idx(size()), 0);
    next_seq_.assign(idx(size()), 0);
    stashed_.assign(idx(size()), 0);
  }
  comm::detail::peer_identity identity(int k) const {
    comm::detail::peer_identity id;
    id.rank = me_;
    id.size = size();
    id.index = k;
    id.count = K();
    id.epoch = epoch_;
    id.instance = members_[idx(me_)].instance;
    id.name = members_[idx(me_)].name;
    return id;
  }

  void connect_member(int j, int k, const comm::detail::job_secret& secret, deadline until) {
    constexpr const char* where = "weft::comm::elastic::mesh_transport";
    for (;;) {
      const int fd = detail::connect_to(members_[idx(j)].host, members_[idx(j)].port, until, where, who(j));
      comm::detail::handshake hs(
          comm::detail::handshake::role::client, comm::detail::conn_kind::elastic_mesh, identity(k), secret,
          [&](const comm::detail::peer_identity& p) {
            auto q = p;
            q.index = k;  // the server answers with its own identity; its index means nothing here
            return mesh_admission(q, j, members_, epoch_, K());
          },
          limits_);
      comm::detail::drive(fd, hs, std::min(until, clock_type::now() + limits_.handshake_timeout));
      if (hs.state() == comm::detail::handshake::status::done) {
        detail::set_nodelay(fd);
        fds_[slot(j, k)] = fd;
        return;
      }
      ::close(fd);
      // The peer may still be in another epoch, or busy: retry until the deadline.
      if (clock_type::now() >= until)
        fail(errc::timeout, j, 0, "handshake", "no handshake before the deadline: " + hs.failure());
      ::poll(nullptr, 0, 5);
    }
  }

  void accept_members(int listen_fd, const comm::detail::job_secret& secret, deadline until,
                      comm::detail::connection_log& log) {
    constexpr const char* where = "weft::comm::elastic::mesh_transport";
    int missing = (size() - 1 - me_) * K();
    if (missing == 0) return;
    const auto id = identity(0);
    comm::detail::handshake_pool pool(
        listen_fd,
        [&] {
          return std::make_unique<comm::detail::handshake>(
              comm::detail::handshake::role::server, comm::detail::conn_kind::elastic_mesh, id, secret,
              [&](const comm::detail::peer_identity& p) -> std::string {
                if (p.rank <= me_ || p.rank >= size())
                  return detail::concat("member index ", p.rank, " may not connect to member ", me_);
                return mesh_admission(p, p.rank, members_, epoch_, K());
              },
              limits_);
        },
        limits_, log);
    while (missing > 0) {
      auto a = pool.next(until);
      if (!a) {
        std::string who_missing;
        for (int j = me_ + 1; j < size(); ++j)
          for (int k = 0; k < K(); ++k)
            if (fds_[slot(j, k)] < 0) {
              who_missing += " " + who(j);
              break;
            }
        weft::detail::raise(errc::timeout, where, label(),
                            ": members did not connect before the deadline:", who_missing, log.summary());
      }
      if (a->fd < 0) continue;  // an authenticated member of another epoch: it retries when it catches up
      int& s = fds_[slot(a->peer.rank, a->peer.index)];
      if (s >= 0)
        ::close(s);  // the same member again: its first attempt timed out after this side admitted it
      else
        --missing;
      detail::set_nodelay(a->fd);
      s = a->fd;
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
  // Why peer j can no longer deliver ("" while all its connections are open).
  const std::string& closed(int j) const {
    for (int k = 0; k < K(); ++k)
      if (!rx_[slot(j, k)].closed.empty()) return rx_[slot(j, k)].closed;
    static const std::string open;
    return open;
  }

  // Closes every connection of peer j for good (its bytes can no longer be trusted) and throws.
  [[noreturn]] void poison(int j, errc code, std::uint32_t channel, const std::string& why) {
    for (int k = 0; k < K(); ++k) {
      auto& s = rx_[slot(j, k)];
      s = rx_state{};
      s.closed = why;
      ::shutdown(fds_[slot(j, k)], SHUT_RDWR);
    }
    for (auto& [seq, m] : inbox_[idx(j)])
      if (posted_.direct == &m) posted_.direct = nullptr;
    inbox_[idx(j)].clear();
    stashed_[idx(j)] = 0;
    fail(code, j, channel, "recv", why);
  }

  // The receive waiting for (src, channel) may take message `seq` straight into its buffer when it
  // matches and no earlier message of that channel from src is pending or unknown yet.
  bool can_take_directly(int j, std::uint64_t seq, const frame_hdr& h) const {
    if (posted_.buf.data() == nullptr || posted_.direct != nullptr || posted_.src != j ||
        posted_.channel != h.channel || posted_.check != h.check || posted_.buf.size() != h.total ||
        seq > known_[idx(j)])
      return false;
    for (const auto& [s, m] : inbox_[idx(j)])
      if (s < seq && m.channel == h.channel) return false;
    return true;
  }

  // A piece header arrived on connection k of peer j: bound it, then find where its bytes go.
  void start_piece(int j, int k, std::uint32_t waiting_channel) {
    auto& r = rx_[slot(j, k)];
    const frame_hdr h = r.h;
    if (h.channel == abort_channel) {
      if (k != 0 || h.total > max_abort_reason_bytes)
        poison(j, errc::capacity, waiting_channel, detail::concat("an abort frame of ", h.total, " bytes"));
      r.target = nullptr;
      r.off = 0;
      r.len = h.total;
      r.abort_text.assign(static_cast<std::size_t>(h.total), '\0');
      return;
    }
    if (h.total > limits_.max_message_bytes)
      poison(j, errc::capacity, waiting_channel,
             detail::concat("a message of ", h.total, " bytes exceeds the limit of ", limits_.max_message_bytes));
    if ((h.pieces != 1 && h.pieces != static_cast<std::uint32_t>(K())) || static_cast<std::uint32_t>(k) >= h.pieces ||
        h.reserved != 0)
      poison(j, errc::parse, waiting_channel,
             detail::concat("a frame in ", h.pieces, " pieces arrived on connection ", k, " of ", K()));
    auto& box = inbox_[idx(j)];
    if (k == 0) {  // connection 0 carries piece 0 of every message, in sequence
      if (h.seq != known_[idx(j)])
        poison(j, errc::parse, waiting_channel,
               detail::concat("message ", h.seq, " arrived where message ", known_[idx(j)], " was due"));
      ++known_[idx(j)];
    } else {
      // A later piece belongs to a message whose piece 0 arrived (and which is still pending), or
      // to one a little ahead of connection 0.
      const bool seen = h.seq < known_[idx(j)];
      if (seen ? box.count(h.seq) == 0 : h.seq - known_[idx(j)] >= max_pending_messages)
        poison(j, errc::parse, waiting_channel, detail::concat("piece ", k, " of message ", h.seq, " is out of order"));
    }
    auto it = box.find(h.seq);
    if (it == box.end()) {
      if (box.size() >= max_pending_messages)
        poison(j, errc::capacity, waiting_channel, "too many messages nobody asked for");
      message m;
      m.channel = h.channel;
      m.check = h.check;
      m.total = h.total;
      m.pieces = h.pieces;
      if (can_take_directly(j, h.seq, h)) {
        m.base = posted_.buf.data();
      } else {
        if (stashed_[idx(j)] + h.total > limits_.max_unexpected_bytes)
          poison(j, errc::capacity, waiting_channel,
                 detail::concat("the peer sent ", stashed_[idx(j)] + h.total,
                                " bytes that no receive asked for yet, above the limit of ",
                                limits_.max_unexpected_bytes));
        try {
          m.heap = std::make_unique_for_overwrite<std::byte[]>(static_cast<std::size_t>(h.total));
        } catch (const std::bad_alloc&) {
          poison(j, errc::capacity, waiting_channel, detail::concat("cannot buffer a message of ", h.total, " bytes"));
        }
        m.base = m.heap.get();
        stashed_[idx(j)] += h.total;
      }
      it = box.emplace(h.seq, std::move(m)).first;
      if (it->second.heap == nullptr) posted_.direct = &it->second;
    } else if (it->second.channel != h.channel || it->second.check != h.check || it->second.total != h.total ||
               it->second.pieces != h.pieces) {
      poison(j, errc::parse, waiting_channel, detail::concat("the pieces of message ", h.seq, " disagree"));
    }
    const std::uint64_t chunk = h.total / h.pieces;
    r.target = &it->second;
    r.off = chunk * static_cast<std::uint64_t>(k);
    r.len = static_cast<std::uint32_t>(k) + 1 == h.pieces ? h.total - r.off : chunk;
  }

  // Reads what connection k of peer j has available. A closed connection is recorded, not
  // thrown: it fails only the calls that need that peer (messages it sent before closing are
  // still delivered), so a member that finished a collective and left does not break the others
  // still completing it. An abort frame throws.
  void pump(int j, int k, std::uint32_t waiting_channel) {
    auto& r = rx_[slot(j, k)];
    while (r.closed.empty()) {
      std::byte* dst;
      std::size_t want;
      const bool in_header = r.hdr_got < sizeof(frame_hdr);
      if (in_header) {
        dst = reinterpret_cast<std::byte*>(&r.h) + r.hdr_got;
        want = sizeof(frame_hdr) - r.hdr_got;
      } else {
        dst = (r.target ? r.target->base + r.off : reinterpret_cast<std::byte*>(r.abort_text.data())) + r.got;
        want = static_cast<std::size_t>(r.len - r.got);
      }
      if (want > 0) {
        const ssize_t n = ::recv(fds_[slot(j, k)], dst, want, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          r.closed = n == 0 ? std::string("the connection was closed by the peer (it died or left)")
                            : std::string("connection error: ") + std::strerror(errno);
          return;
        }
        if (n < 0) return;
        if (in_header) {
          r.hdr_got += static_cast<std::size_t>(n);
          if (r.hdr_got == sizeof(frame_hdr)) start_piece(j, k, waiting_channel);
        } else {
          r.got += static_cast<std::uint64_t>(n);
        }
      }
      if (r.hdr_got == sizeof(frame_hdr) && r.got == r.len) {
        if (r.target == nullptr)
          fail(errc::aborted, j, waiting_channel, "recv", "the peer aborted the group: " + r.abort_text);
        ++r.target->done;
        const std::string keep = std::move(r.closed);
        r = rx_state{};
        r.closed = keep;
      }
    }
  }

  // The oldest message of `channel` from `src` (it is next in order), or null.
  message* oldest(int src, std::uint32_t channel, std::uint64_t* seq_out) {
    for (auto& [seq, m] : inbox_[idx(src)])
      if (m.channel == channel) {
        *seq_out = seq;
        return &m;
      }
    return nullptr;
  }

  // A receive that ends (returns or throws) while its message is half-read into the caller's
  // buffer moves the part read so far into a buffer of its own, so later bytes never land in
  // memory the caller took back.
  void unpost() noexcept {
    if (message* m = posted_.direct) {
      try {
        m->heap = std::make_unique_for_overwrite<std::byte[]>(static_cast<std::size_t>(m->total));
        if (m->total > 0) std::memcpy(m->heap.get(), m->base, static_cast<std::size_t>(m->total));
        m->base = m->heap.get();
        stashed_[idx(posted_.src)] += m->total;
      } catch (...) {
        for (int k = 0; k < K(); ++k) {  // cannot keep it: that peer's stream is lost
          auto& r = rx_[slot(posted_.src, k)];
          r = rx_state{};
          r.closed = "a receive was abandoned and its message could not be buffered";
          ::shutdown(fds_[slot(posted_.src, k)], SHUT_RDWR);
        }
        inbox_[idx(posted_.src)].clear();
      }
    }
    posted_ = posted_recv{};
  }

  // Sends *out to dst and/or receives *in from src, pumping every connection while it waits.
  void exchange(int dst, const std::span<const std::byte>* out, int src, std::span<std::byte>* in, msg_tag tag,
                deadline until) {
    // The outgoing message: one piece, or K for a large one.
    std::uint32_t pieces = 0;
    std::uint64_t chunk = 0, total = 0;
    std::array<std::uint64_t, 16> sent{};  // bytes of piece k sent, header included
    frame_hdr h{};
    if (out) {
      total = out->size();
      pieces = (K() > 1 && total >= opt_.stripe_min) ? static_cast<std::uint32_t>(K()) : 1;
      chunk = total / pieces;
      h = frame_hdr{tag.channel, tag.check, total, next_seq_[idx(dst)]++, pieces, 0};
    }
    auto piece_len = [&](std::uint32_t k) { return k + 1 == pieces ? total - chunk * k : chunk; };
    auto all_sent = [&] {
      for (std::uint32_t k = 0; k < pieces; ++k)
        if (sent[k] < sizeof h + piece_len(k)) return false;
      return true;
    };
    if (in) posted_ = posted_recv{src, tag.channel, tag.check, *in, nullptr};
    struct unposter {
      mesh_transport* m;
      ~unposter() {
        if (m) m->unpost();
      }
    } guard{in ? this : nullptr};
    std::vector<pollfd> polls;
    std::vector<std::pair<int, int>> who_polled;
    for (;;) {
      const bool sent_all = all_sent();
      if (in && sent_all) {
        std::uint64_t seq = 0;
        if (message* m = oldest(src, tag.channel, &seq); m != nullptr && m->complete()) {
          const bool direct = m == posted_.direct;
          posted_.direct = nullptr;
          if (!direct) {
            stashed_[idx(src)] -= m->total;
            if (m->check != tag.check) {
              const auto theirs = m->check;
              inbox_[idx(src)].erase(seq);
              fail(errc::mismatch, src, tag.channel, "recv",
                   "the members disagree about the operation: " + explain_check_difference(tag.check, theirs));
            }
            if (m->total != in->size()) {
              const auto theirs = m->total;
              inbox_[idx(src)].erase(seq);
              fail(errc::mismatch, src, tag.channel, "recv",
                   detail::concat("the peer sent ", theirs, " bytes but this member expects ", in->size()));
            }
            if (m->total > 0) std::memcpy(in->data(), m->base, static_cast<std::size_t>(m->total));
          }
          inbox_[idx(src)].erase(seq);
          return;
        }
      }
      if (!in && sent_all) return;
      if (in && sent_all && !closed(src).empty()) fail(errc::peer_failure, src, tag.channel, "recv", closed(src));
      if (!sent_all && !closed(dst).empty()) fail(errc::peer_failure, dst, tag.channel, "send", closed(dst));
      polls.clear();
      who_polled.clear();
      for (int j = 0; j < size(); ++j)
        for (int k = 0; k < K(); ++k) {
          if (j == me_ || (!rx_[slot(j, k)].closed.empty() && j != dst)) continue;
          short ev = POLLIN;
          if (j == dst && static_cast<std::uint32_t>(k) < pieces &&
              sent[idx(k)] < sizeof h + piece_len(static_cast<std::uint32_t>(k)))
            ev |= POLLOUT;
          polls.push_back({fds_[slot(j, k)], ev, 0});
          who_polled.emplace_back(j, k);
        }
      const int rc = ::poll(polls.data(), polls.size(), detail::remaining_ms(until));
      if (rc <= 0) {
        if (clock_type::now() < until) continue;
        const int blamed = !sent_all ? dst : src;
        std::uint64_t done = 0, want = 0;
        for (std::uint32_t k = 0; k < pieces; ++k) done += sent[k], want += sizeof h + piece_len(k);
        fail(errc::timeout, blamed, tag.channel, !sent_all ? "send" : "recv",
             detail::concat("nothing arrived before the deadline (", done, " of ", want,
                            " bytes sent); the peer is stopped, overloaded or partitioned"));
      }
      for (std::size_t i = 0; i < polls.size(); ++i) {
        const auto [j, k] = who_polled[i];
        const short re = polls[i].revents;
        if (re & (POLLIN | POLLHUP | POLLERR)) pump(j, k, tag.channel);
        if (j == dst && (re & POLLOUT) && static_cast<std::uint32_t>(k) < pieces)
          send_piece(polls[i].fd, h, *out, static_cast<std::uint32_t>(k), chunk,
                     piece_len(static_cast<std::uint32_t>(k)), sent[idx(k)], dst, tag.channel);
      }
    }
  }

  // Writes as much of piece k (its header, then its bytes) as the socket takes.
  void send_piece(int fd, frame_hdr h, std::span<const std::byte> bytes, std::uint32_t k, std::uint64_t chunk,
                  std::uint64_t len, std::uint64_t& sent, int dst, std::uint32_t channel) {
    const std::byte* body = bytes.data() + chunk * k;
    while (sent < sizeof h + len) {
      iovec iov[2];
      int n = 0;
      if (sent < sizeof h) {
        iov[n++] = {reinterpret_cast<std::byte*>(&h) + sent, sizeof h - static_cast<std::size_t>(sent)};
        if (len > 0) iov[n++] = {const_cast<std::byte*>(body), static_cast<std::size_t>(len)};
      } else {
        iov[n++] = {const_cast<std::byte*>(body) + (sent - sizeof h), static_cast<std::size_t>(sizeof h + len - sent)};
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<std::size_t>(n);
      const ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
      if (w > 0) {
        sent += static_cast<std::uint64_t>(w);
        continue;
      }
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      fail(errc::peer_failure, dst, channel, "send",
           std::string("the connection broke (the peer died or left): ") + std::strerror(errno));
    }
  }

  void close_all() noexcept {
    for (int& fd : fds_)
      if (fd >= 0) ::close(fd), fd = -1;
  }

  std::vector<peer_address> members_;
  int me_;
  std::uint64_t epoch_;
  comm::detail::wire_limits limits_;
  mesh_options opt_;
  std::vector<int> fds_;                                 // (member, connection) -> socket
  std::vector<rx_state> rx_;                             // (member, connection) -> what is being read
  std::vector<std::map<std::uint64_t, message>> inbox_;  // per member: messages by sequence number
  std::vector<std::uint64_t> known_;                     // per member: messages whose piece 0 arrived
  std::vector<std::uint64_t> next_seq_;                  // per member: the next message's number
  std::vector<std::uint64_t> stashed_;                   // per member: bytes buffered for nobody yet
  posted_recv posted_;
  bool aborted_ = false;
  std::string reason_;
};

static_assert(abortable_transport<mesh_transport>);

}  // namespace weft::comm::elastic

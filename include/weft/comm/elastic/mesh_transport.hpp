// The data plane of one membership epoch of an elastic group: a tcp full mesh among the epoch's
// members, formed on each member's persistent listening socket and authenticated by weft's
// handshake, then run by the one stream engine of weft::comm (the same frames, matching, limits,
// agreement and blame as tcp_transport), rebuilt from scratch every epoch. Also the members'
// address type and the socket helpers the elastic group shares. POSIX sockets + poll(2).
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/comm/detail/handshake.hpp>
#include <weft/comm/detail/handshake_io.hpp>
#include <weft/comm/detail/sockets.hpp>
#include <weft/comm/detail/stream_engine.hpp>
#include <weft/comm/detail/tcp_link.hpp>
#include <weft/comm/detail/wire.hpp>
#include <weft/comm/options.hpp>
#include <weft/comm/stream_security.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
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
/// (the handshake checks it) and the same `stripe_min` (a message split differently fails with
/// errc::mismatch, field "message split"), as tcp_options' must. A plain value.
struct mesh_options {
  int connections = 2;                            ///< K connections per pair of members, in [1, 16]
  std::size_t stripe_min = std::size_t{1} << 18;  ///< messages at least this big are split over the K connections
  /// How a blocked member waits (tcp_options::waiting has the details; automatic spins when the
  /// epoch's members fit this process's cores, as if they all ran on this host, and yields otherwise).
  wait_options waiting{};
  /// What secures every data connection after weft's handshake (TLS: weft::comm::tls_security in
  /// weft/comm/tls.hpp); null: the bytes travel in the clear. Every member of an epoch must use it
  /// or none (the handshake refuses a peer that differs, naming TLS).
  std::shared_ptr<const stream_security> security{};
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

/// One epoch's data plane among `members` (in ring order); this process is members[me]. The
/// constructor connects K times to every lower index and accepts K connections from every higher
/// one on `listen_fd` (borrowed, non-blocking, reused across epochs). Every connection runs weft's
/// handshake (authenticated with `secret` when it is not empty) naming the epoch, the member
/// index, name and instance, so stale attempts of another epoch and strangers are refused;
/// accepted handshakes run concurrently, each with its own deadline, so idle connections cannot
/// stop an epoch from forming. Then the connections carry weft::comm's data frames through the
/// stream engine that tcp_transport runs on (detail/stream_engine.hpp over detail/tcp_link.hpp):
/// the same matching, limits, striping (a message of at least stripe_min bytes is split into K
/// pieces, one per connection), collective descriptors, abort frames and blame, so every check of
/// docs/comm.md holds here too. Errors are comm_errors whose words also name the members involved
/// ("[members: 0 (w0), 2 (w2)]"): errc::peer_failure for a closed connection, errc::timeout at the
/// deadline, errc::aborted when a peer aborted, errc::mismatch when members disagree about a
/// message or a collective, errc::capacity or errc::parse for frames above the limits or malformed
/// (a failure other than a quiet point-to-point timeout fails the epoch's mesh; the elastic group
/// then asks for a new epoch). Satisfies concurrent_transport, abortable_transport and
/// descriptor_checking_transport; thread-safe across channels. Send/recv cost O(bytes) through the
/// kernel; construction O(members · K) connections. With opt.security (TLS), every connection then
/// runs its TLS handshake (the member that connected is the client; all of a member's handshakes
/// run at once, so no order of members can deadlock) and carries only TLS records: a failed TLS
/// handshake (a different key, an untrusted certificate) is errc::mismatch naming the member.
class mesh_transport : public comm::detail::engine_front<comm::detail::tcp_link> {
 public:
  static constexpr bool thread_safe_channels = true;

  mesh_transport(std::vector<peer_address> members, int me, int listen_fd, std::uint64_t epoch, deadline until,
                 const comm::detail::job_secret& secret = {}, const comm::detail::wire_limits& limits = {},
                 const mesh_options& opt = {})
      : members_(std::move(members)), me_(me), epoch_(epoch), limits_(limits), opt_(opt) {
    constexpr const char* where = "weft::comm::elastic::mesh_transport";
    validate(where);
    fds_.assign(static_cast<std::size_t>(size() * K()), -1);
    comm::detail::connection_log log(label());
    try {
      for (int j = 0; j < me; ++j)
        for (int k = 0; k < K(); ++k) connect_member(j, k, secret, until);
      accept_members(listen_fd, secret, until, log);
      secure_streams(until);
      start_engine();
    } catch (...) {
      close_all();
      throw;
    }
  }
  /// Adopts connections that are already up and authenticated: fds[j * K + k] is connection k to
  /// member j (-1 for this member), and the mesh owns them from now on (even when this throws).
  /// For tests and fuzzing, and for callers that form connections their own way.
  mesh_transport(std::vector<peer_address> members, int me, std::uint64_t epoch, std::vector<int> fds,
                 const comm::detail::wire_limits& limits = {}, const mesh_options& opt = {})
      : members_(std::move(members)), me_(me), epoch_(epoch), limits_(limits), opt_(opt), fds_(std::move(fds)) {
    constexpr const char* where = "weft::comm::elastic::mesh_transport";
    try {
      validate(where);
      expects(fds_.size() == members_.size() * static_cast<std::size_t>(K()), errc::invalid_argument, where,
              fds_.size(), " sockets for ", members_.size(), " members with ", K(), " connections each");
      for (int j = 0; j < size(); ++j)
        for (int k = 0; k < K(); ++k)
          expects((fds_[slot(j, k)] >= 0) == (j != me_), errc::invalid_argument, where, "socket ", slot(j, k),
                  (j == me_ ? " (this member's own) must be -1" : " must be an open connection"));
      for (int fd : fds_)
        if (fd >= 0) detail::set_nonblocking(fd);
      secure_streams(clock_type::now() + limits_.handshake_timeout);  // the higher index is the client
      start_engine();
    } catch (...) {
      close_all();
      throw;
    }
  }
  mesh_transport(const mesh_transport&) = delete;
  mesh_transport& operator=(const mesh_transport&) = delete;
  ~mesh_transport() {
    engine_.reset();  // the engine uses the link, the link the sockets
    link_.reset();
    secured_.clear();
    close_all();
  }

  int rank() const noexcept { return me_; }
  int size() const noexcept { return static_cast<int>(members_.size()); }
  std::uint64_t epoch() const noexcept { return epoch_; }
  const std::vector<peer_address>& members() const noexcept { return members_; }

 private:
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
  // Runs the TLS handshake of every connection (the member that connected, the higher index, is
  // the client), all at once: a member meets its peers' handshakes in whatever order they come.
  void secure_streams(deadline until) {
    constexpr const char* where = "weft::comm::elastic::mesh_transport";
    if (!opt_.security) return;
    secured_.resize(fds_.size());
    std::vector<short> events(fds_.size(), 0);
    std::vector<bool> done(fds_.size(), false);
    for (int j = 0; j < size(); ++j)
      for (int k = 0; k < K(); ++k)
        if (j != me_) secured_[slot(j, k)] = opt_.security->open(fds_[slot(j, k)], j < me_, who(j));
    std::vector<pollfd> pfds;
    for (;;) {
      pfds.clear();
      std::string waiting_for;
      for (int j = 0; j < size(); ++j)
        for (int k = 0; k < K(); ++k) {
          const std::size_t i = slot(j, k);
          if (j == me_ || done[i]) continue;
          try {
            done[i] = secured_[i]->handshake(events[i]);
          } catch (const error& e) {
            weft::detail::raise(static_cast<errc>(e.code().value()), where, label(), " connection ", k, " to ", who(j),
                                ": ", e.what());
          }
          if (done[i]) continue;
          pfds.push_back({fds_[i], events[i], 0});
          if (waiting_for.find(who(j)) == std::string::npos) waiting_for += " " + who(j);
        }
      if (pfds.empty()) return;
      if (clock_type::now() >= until)
        weft::detail::raise(errc::timeout, where, label(), ": TLS handshakes did not finish before the deadline with",
                            waiting_for);
      ::poll(pfds.data(), pfds.size(), std::min(detail::remaining_ms(until), 50));
    }
  }

  // The connections are up: the stream engine takes them over.
  void start_engine() {
    link_ = std::make_unique<comm::detail::tcp_link>(me_, size(), K(), "weft::comm::elastic::mesh_transport");
    for (int j = 0; j < size(); ++j)
      for (int k = 0; k < K(); ++k)
        if (j != me_) {
          link_->fd(j, k) = fds_[slot(j, k)];
          if (!secured_.empty()) link_->secure(j, k, std::move(secured_[slot(j, k)]));
        }
    comm::detail::engine_config cfg;
    cfg.limits = limits_;
    cfg.waiting = opt_.waiting;
    for (const auto& m : members_) cfg.rank_names.push_back(m.name);
    engine_ = std::make_unique<comm::detail::stream_engine<comm::detail::tcp_link>>(
        *link_, me_, size(), K(), opt_.stripe_min, "weft::comm::elastic::mesh_transport (" + label() + ")",
        std::move(cfg));
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
    id.tls = opt_.security != nullptr;
    return id;
  }

  void connect_member(int j, int k, const comm::detail::job_secret& secret, deadline until) {
    constexpr const char* where = "weft::comm::elastic::mesh_transport";
    std::string refused;  // the last refusal, by the peer or by this side's checks
    for (;;) {
      int fd = -1;
      try {
        fd = detail::connect_to(members_[idx(j)].host, members_[idx(j)].port, until, where, who(j));
      } catch (const error&) {
        if (refused.empty()) throw;  // the peer refused before: that, not the closed port, is the news
        weft::detail::raise(errc::timeout, where, label(), " handshake with ", who(j),
                            ": no handshake before the deadline: ", refused);
      }
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
      // A refusal (or a check that failed here) says what is wrong; a close or a timeout does not.
      if (hs.failure_code() == errc::mismatch || hs.failure_code() == errc::parse) refused = hs.failure();
      // The peer may still be in another epoch, or busy: retry until the deadline.
      if (clock_type::now() >= until)
        weft::detail::raise(errc::timeout, where, label(), " handshake with ", who(j),
                            ": no handshake before the deadline: ", refused.empty() ? hs.failure() : refused);
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

  void close_all() noexcept {
    for (int& fd : fds_)
      if (fd >= 0) ::close(fd), fd = -1;
  }

  std::vector<peer_address> members_;
  int me_;
  std::uint64_t epoch_;
  comm::detail::wire_limits limits_;
  mesh_options opt_;
  std::vector<int> fds_;                                 // (member, connection) -> socket, owned
  std::vector<std::unique_ptr<secure_stream>> secured_;  // TLS sessions, until the link takes them
  std::unique_ptr<comm::detail::tcp_link> link_;
};

static_assert(comm::concurrent_transport<mesh_transport>);
static_assert(comm::descriptor_checking_transport<mesh_transport>);
static_assert(abortable_transport<mesh_transport>);

}  // namespace weft::comm::elastic

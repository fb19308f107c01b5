// TCP transport on Boost.Asio: ranks on any hosts, a full mesh of K connections per pair with
// large messages striped over them (Gloo's and NCCL's multi-socket trick), after a rendezvous
// through rank 0 (host:port) or a shared directory. Sockets are tuned (TCP_NODELAY, buffer sizes)
// and the data path is non-blocking send/recv driven by poll(2) through the stream engine.
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/comm/detail/stream_engine.hpp>
#include <weft/core/error.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <climits>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

namespace weft::comm {

/// Where the ranks find each other. rank0(host, port): rank 0 listens there and tells everyone
/// the others' addresses; file_store(dir): each rank writes its address to dir/rank-<r> (a fresh
/// directory per job on a filesystem every rank sees). A plain value.
struct tcp_rendezvous {
  std::string host;        ///< rank 0's address (rank0 mode)
  std::uint16_t port = 0;  ///< rank 0's port (rank0 mode)
  std::string directory;   ///< file-store directory (file mode when not empty)

  static tcp_rendezvous rank0(std::string host, std::uint16_t port) { return {std::move(host), port, {}}; }
  static tcp_rendezvous file_store(std::string dir) { return {{}, 0, std::move(dir)}; }
};

/// Options of a TCP group; every rank must pass the same connections and stripe_min.
struct tcp_options {
  int connections = 2;                            ///< K sockets per peer pair
  std::size_t stripe_min = std::size_t{1} << 18;  ///< messages at least this big are split over the K sockets
  std::string bind = {};  ///< IPv4 address or interface name (e.g. "eth0") for data sockets; "" = any
  int send_buffer = 0;    ///< SO_SNDBUF in bytes; 0 leaves the kernel's autotuning
  int recv_buffer = 0;    ///< SO_RCVBUF in bytes; 0 leaves the kernel's autotuning
  std::chrono::milliseconds connect_timeout{30'000};
  /// How a blocked rank waits (spin: poll the sockets without sleeping; yield: sched_yield(2)
  /// between polls; then poll(2) with a timeout). automatic spins when `size` ranks fit the cores
  /// this process may run on (as if every rank ran on this host) and yields otherwise.
  wait_options waiting{};
};

namespace detail {

inline constexpr std::uint32_t tcp_magic = 0x77656674u;  // "weft"

/// Writes/reads all of a small handshake buffer before `until` on a non-blocking socket.
inline void write_all(int fd, const void* data, std::size_t n, deadline until, const char* what) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<std::size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      weft::detail::raise(errc::peer_failure, "weft::comm::tcp_transport", what,
                          ": send failed: ", std::strerror(errno));
    expects(clock_type::now() < until, errc::timeout, "weft::comm::tcp_transport", what, ": timed out sending");
    pollfd pfd{fd, POLLOUT, 0};
    ::poll(&pfd, 1, 10);
  }
}
inline void read_all(int fd, void* data, std::size_t n, deadline until, const char* what) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) weft::detail::raise(errc::peer_failure, "weft::comm::tcp_transport", what, ": connection closed");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      weft::detail::raise(errc::peer_failure, "weft::comm::tcp_transport", what,
                          ": recv failed: ", std::strerror(errno));
    expects(clock_type::now() < until, errc::timeout, "weft::comm::tcp_transport", what, ": timed out receiving");
    pollfd pfd{fd, POLLIN, 0};
    ::poll(&pfd, 1, 10);
  }
}

/// Resolves an interface name (via getifaddrs) or an address literal to an IPv4 address.
inline boost::asio::ip::address bind_address(const std::string& bind) {
  if (bind.empty()) return boost::asio::ip::address_v4::any();
  boost::system::error_code ec;
  auto a = boost::asio::ip::make_address(bind, ec);
  if (!ec) return a;
  ifaddrs* list = nullptr;
  expects(::getifaddrs(&list) == 0, errc::io, "weft::comm::tcp_transport", "getifaddrs failed");
  boost::asio::ip::address found;
  bool ok = false;
  for (ifaddrs* i = list; i; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && bind == i->ifa_name) {
      const auto* sin = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      found = boost::asio::ip::address_v4(ntohl(sin->sin_addr.s_addr));
      ok = true;
      break;
    }
  ::freeifaddrs(list);
  expects(ok, errc::invalid_argument, "weft::comm::tcp_transport", "bind '", bind,
          "' is neither an IP address nor an interface with an IPv4 address");
  return found;
}

/// Connects to host:port, retrying refused connections (the peer may not listen yet) until `until`.
inline boost::asio::ip::tcp::socket connect_until(boost::asio::io_context& io, const boost::asio::ip::tcp::endpoint& to,
                                                  const boost::asio::ip::address& from, deadline until,
                                                  const std::string& what) {
  using boost::asio::ip::tcp;
  for (;;) {
    tcp::socket s(io);
    boost::system::error_code ec;
    s.open(to.protocol(), ec);
    if (!from.is_unspecified()) s.bind(tcp::endpoint(from, 0), ec);
    s.non_blocking(true, ec);
    const int fd = s.native_handle();
    const sockaddr* sa = reinterpret_cast<const sockaddr*>(to.data());
    int rc = ::connect(fd, sa, static_cast<socklen_t>(to.size()));
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd pfd{fd, POLLOUT, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now()).count();
      if (::poll(&pfd, 1, static_cast<int>(std::clamp<long long>(left, 0, 1000))) == 1) {
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
      }
    }
    if (rc == 0) return s;
    expects(clock_type::now() < until, errc::timeout, "weft::comm::tcp_transport", what, ": cannot connect to ",
            to.address().to_string(), ":", to.port(), " before the connect timeout");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

inline boost::asio::ip::tcp::socket accept_until(boost::asio::ip::tcp::acceptor& acc, deadline until,
                                                 const std::string& what) {
  for (;;) {
    boost::system::error_code ec;
    auto s = acc.accept(ec);
    if (!ec) {
      s.non_blocking(true, ec);
      return s;
    }
    expects(ec == boost::asio::error::would_block || ec == boost::asio::error::try_again, errc::io,
            "weft::comm::tcp_transport", what, ": accept failed: ", ec.message());
    expects(clock_type::now() < until, errc::timeout, "weft::comm::tcp_transport", what,
            ": not every peer connected before the connect timeout");
    pollfd pfd{acc.native_handle(), POLLIN, 0};
    ::poll(&pfd, 1, 10);
  }
}

struct peer_address {
  std::string host;
  std::uint16_t port = 0;
};

/// The link of stream_engine over the mesh's sockets. Not for direct use.
class tcp_link {
 public:
  /// One recv(2) takes a frame's header and a small payload (and often the next frames) together.
  static constexpr std::size_t stage_bytes = std::size_t{64} << 10;

  tcp_link(int rank, int size, int conns) : rank_(rank), size_(size), conns_(conns) {
    fds_.assign(static_cast<std::size_t>(size * conns), -1);
  }
  int& fd(int peer, int conn) { return fds_[static_cast<std::size_t>(peer * conns_ + conn)]; }

  /// Header and payload in one sendmsg(2).
  std::size_t write_some(int peer, int conn, const io_part* parts, int count) {
    iovec iov[4];
    int n = 0;
    for (int i = 0; i < count && n < 4; ++i)
      if (parts[i].len > 0) iov[n++] = {const_cast<std::byte*>(parts[i].data), parts[i].len};
    if (n == 0) return 0;
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(n);
    const ssize_t w = ::sendmsg(fd(peer, conn), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w >= 0) return static_cast<std::size_t>(w);
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    weft::detail::raise(errc::peer_failure, "weft::comm::tcp_transport", "send to peer ", peer, " (connection ", conn,
                        ") failed: ", std::strerror(errno));
  }
  std::size_t read_some(int peer, int conn, std::byte* dst, std::size_t n) {
    if (n == 0) return 0;
    const ssize_t r = ::recv(fd(peer, conn), dst, n, MSG_DONTWAIT);
    if (r > 0) return static_cast<std::size_t>(r);
    if (r == 0)
      weft::detail::raise(errc::peer_failure, "weft::comm::tcp_transport", "peer ", peer,
                          " closed the connection (it exited or failed)");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    weft::detail::raise(errc::peer_failure, "weft::comm::tcp_transport", "recv from peer ", peer, " (connection ", conn,
                        ") failed: ", std::strerror(errno));
  }
  void commit_reads(int, int) {}                    // recv(2) hands the room back itself
  std::uint64_t prepare_wait() const { return 0; }  // the kernel keeps socket readiness: nothing to arm
  /// Sleeps in poll(2) until some socket is readable (or `write_peer`'s writable) or `until`.
  void wait(std::uint64_t, deadline until, int write_peer) {
    thread_local std::vector<pollfd> pfds;
    pfds.clear();
    for (int q = 0; q < size_; ++q)
      for (int k = 0; k < conns_; ++k)
        if (q != rank_) pfds.push_back({fd(q, k), static_cast<short>(POLLIN | (q == write_peer ? POLLOUT : 0)), 0});
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(until - clock_type::now()).count();
    if (left <= 0) return;
    ::poll(pfds.data(), pfds.size(), static_cast<int>(std::min<long long>((left + 999) / 1000, 50)));
  }
  void poke() {}            // waiters poll with a short timeout while another thread holds a write lock
  void check_alive(int) {}  // a dead peer's socket reports EOF or a reset by itself
  // No single-copy path between hosts: every payload travels through the socket.
  std::size_t remote_min() const { return SIZE_MAX; }
  [[noreturn]] void remote_read(int, std::uint64_t, std::byte*, std::size_t) {
    weft::detail::raise(errc::unsupported, "weft::comm::tcp_transport", "a peer sent a single-copy piece over tcp");
  }
  void remote_ack(int) {}
  std::uint64_t remote_post(int) { return 0; }
  std::uint64_t remote_acked(int) const { return 0; }
  void on_abort(const std::string&) {
    for (int f : fds_)
      if (f >= 0) ::shutdown(f, SHUT_RDWR);
  }

 private:
  int rank_, size_, conns_;
  std::vector<int> fds_;
};

}  // namespace detail

/// Rank `rank` of `size` processes connected over TCP. The constructor blocks until the whole
/// mesh is up (or connect_timeout). Satisfies concurrent_transport and abortable_transport;
/// thread-safe across channels. Not copyable or movable. Send/recv: O(bytes) through the kernel,
/// one syscall per piece per wake-up.
class tcp_transport : public detail::engine_front<detail::tcp_link> {
 public:
  static constexpr bool thread_safe_channels = true;

  /// Throws errc::invalid_argument for bad rank/size/options, errc::timeout when the rendezvous
  /// or the mesh does not complete in time, errc::mismatch when ranks disagree on size or
  /// connections, errc::io for socket errors.
  tcp_transport(int rank, int size, const tcp_rendezvous& where, tcp_options opt = {}) : rank_(rank), size_(size) {
    using boost::asio::ip::tcp;
    constexpr const char* ctx = "weft::comm::tcp_transport::tcp_transport";
    expects(size >= 1, errc::invalid_argument, ctx, "size ", size, " must be >= 1");
    expects(rank >= 0 && rank < size, errc::invalid_argument, ctx, "rank ", rank, " must be in [0, ", size, ")");
    expects(opt.connections >= 1 && opt.connections <= 64, errc::invalid_argument, ctx, "connections ", opt.connections,
            " must be in [1, 64]");
    expects(!where.directory.empty() || (!where.host.empty() && where.port != 0), errc::invalid_argument, ctx,
            "the rendezvous needs a rank-0 host and non-zero port, or a file-store directory");
    const deadline until = clock_type::now() + opt.connect_timeout;
    const auto bind_ip = detail::bind_address(opt.bind);
    const int K = opt.connections;

    // 1. Listen for data connections on an ephemeral port.
    tcp::acceptor listener(io_);
    listener.open(tcp::v4());
    listener.set_option(tcp::acceptor::reuse_address(true));
    boost::system::error_code ec;
    listener.bind(tcp::endpoint(bind_ip, 0), ec);
    expects(!ec, errc::io, ctx, "rank ", rank, " cannot bind to ", bind_ip.to_string(), ": ", ec.message());
    listener.listen(boost::asio::socket_base::max_listen_connections);
    listener.non_blocking(true);
    const std::uint16_t my_port = listener.local_endpoint().port();

    // 2. Rendezvous: learn every rank's data address.
    std::vector<detail::peer_address> table(static_cast<std::size_t>(size));
    if (size > 1) {
      if (!where.directory.empty())
        table = file_rendezvous(where.directory, bind_ip, my_port, until);
      else
        table = rank0_rendezvous(where, bind_ip, my_port, K, until);
    }

    // 3. Mesh: connect K times to each lower rank, accept K from each higher rank.
    link_ = std::make_unique<detail::tcp_link>(rank, size, K);
    sockets_.reserve(static_cast<std::size_t>((size - 1) * K));
    for (int q = 0; q < rank; ++q)
      for (int k = 0; k < K; ++k) {
        const auto& a = table[static_cast<std::size_t>(q)];
        auto s =
            detail::connect_until(io_, tcp::endpoint(boost::asio::ip::make_address(a.host), a.port), bind_ip, until,
                                  "rank " + std::to_string(rank) + " connecting to rank " + std::to_string(q));
        const std::uint32_t hello[4] = {detail::tcp_magic, static_cast<std::uint32_t>(rank),
                                        static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(K)};
        detail::write_all(s.native_handle(), hello, sizeof(hello), until, "mesh hello");
        adopt(std::move(s), q, k, opt);
      }
    for (int i = 0; i < (size - 1 - rank) * K; ++i) {
      auto s = detail::accept_until(listener, until, "rank " + std::to_string(rank) + " accepting its mesh");
      std::uint32_t hello[4];
      detail::read_all(s.native_handle(), hello, sizeof(hello), until, "mesh hello");
      expects(hello[0] == detail::tcp_magic, errc::mismatch, ctx, "rank ", rank,
              ": a connection that is not a weft rank arrived");
      const int q = static_cast<int>(hello[1]), k = static_cast<int>(hello[2]);
      expects(static_cast<int>(hello[3]) == K, errc::mismatch, ctx, "rank ", rank, " uses ", K,
              " connections per peer but rank ", q, " uses ", hello[3]);
      expects(q > rank && q < size && k >= 0 && k < K && link_->fd(q, k) < 0, errc::mismatch, ctx, "rank ", rank,
              ": unexpected mesh connection from rank ", q, " index ", k);
      adopt(std::move(s), q, k, opt);
    }
    detail::engine_config cfg;
    cfg.waiting = opt.waiting;
    engine_ = std::make_unique<detail::stream_engine<detail::tcp_link>>(*link_, rank, size, K, opt.stripe_min,
                                                                        "weft::comm::tcp_transport", cfg);
  }
  tcp_transport(const tcp_transport&) = delete;
  tcp_transport& operator=(const tcp_transport&) = delete;
  ~tcp_transport() { engine_.reset(); }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

 private:
  void adopt(boost::asio::ip::tcp::socket s, int peer, int conn, const tcp_options& opt) {
    using boost::asio::ip::tcp;
    s.set_option(tcp::no_delay(true));
    if (opt.send_buffer > 0) s.set_option(boost::asio::socket_base::send_buffer_size(opt.send_buffer));
    if (opt.recv_buffer > 0) s.set_option(boost::asio::socket_base::receive_buffer_size(opt.recv_buffer));
    s.non_blocking(true);
    link_->fd(peer, conn) = s.native_handle();
    sockets_.push_back(std::move(s));
  }

  std::vector<detail::peer_address> file_rendezvous(const std::string& dir, const boost::asio::ip::address& bind_ip,
                                                    std::uint16_t port, deadline until) {
    namespace fs = std::filesystem;
    constexpr const char* ctx = "weft::comm::tcp_transport (file store)";
    const std::string me = bind_ip.is_unspecified() ? "127.0.0.1" : bind_ip.to_string();
    std::error_code fec;
    fs::create_directories(dir, fec);
    const fs::path mine = fs::path(dir) / ("rank-" + std::to_string(rank_));
    const fs::path tmp = fs::path(dir) / (".rank-" + std::to_string(rank_) + ".tmp");
    {
      std::ofstream out(tmp);
      out << me << ' ' << port << ' ' << size_ << '\n';
      expects(static_cast<bool>(out), errc::io, ctx, "rank ", rank_, " cannot write ", tmp.string());
    }
    fs::rename(tmp, mine, fec);  // atomic: readers never see half a line
    expects(!fec, errc::io, ctx, "rank ", rank_, " cannot publish ", mine.string(), ": ", fec.message());
    std::vector<detail::peer_address> table(static_cast<std::size_t>(size_));
    for (int q = 0; q < size_; ++q) {
      const fs::path p = fs::path(dir) / ("rank-" + std::to_string(q));
      for (;;) {
        std::ifstream in(p);
        std::string host;
        unsigned port_q = 0;
        int size_q = 0;
        if (in >> host >> port_q >> size_q) {
          expects(size_q == size_, errc::mismatch, ctx, "rank ", rank_, " has size ", size_, " but ", p.string(),
                  " says rank ", q, " has size ", size_q);
          table[static_cast<std::size_t>(q)] = {host, static_cast<std::uint16_t>(port_q)};
          break;
        }
        expects(clock_type::now() < until, errc::timeout, ctx, "rank ", rank_, ": rank ", q,
                " did not publish its address in ", dir, " before the connect timeout");
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    return table;
  }

  std::vector<detail::peer_address> rank0_rendezvous(const tcp_rendezvous& where,
                                                     const boost::asio::ip::address& bind_ip, std::uint16_t port, int K,
                                                     deadline until) {
    using boost::asio::ip::tcp;
    constexpr const char* ctx = "weft::comm::tcp_transport (rank-0 rendezvous)";
    tcp::resolver resolver(io_);
    boost::system::error_code ec;
    auto results = resolver.resolve(tcp::v4(), where.host, std::to_string(where.port), ec);
    expects(!ec && !results.empty(), errc::invalid_argument, ctx, "cannot resolve rendezvous host '", where.host,
            "': ", ec.message());
    const tcp::endpoint store = *results.begin();
    std::vector<detail::peer_address> table(static_cast<std::size_t>(size_));
    auto pack = [](const detail::peer_address& a) {
      std::string s(4, '\0');
      const std::uint16_t len = static_cast<std::uint16_t>(a.host.size());
      std::memcpy(s.data(), &a.port, 2);
      std::memcpy(s.data() + 2, &len, 2);
      return s + a.host;
    };
    if (rank_ == 0) {
      tcp::acceptor acc(io_);
      acc.open(tcp::v4());
      acc.set_option(tcp::acceptor::reuse_address(true));
      acc.bind(store, ec);
      expects(!ec, errc::io, ctx, "rank 0 cannot listen on ", store.address().to_string(), ":", store.port(), ": ",
              ec.message());
      acc.listen();
      acc.non_blocking(true);
      table[0] = {bind_ip.is_unspecified() ? store.address().to_string() : bind_ip.to_string(), port};
      std::vector<tcp::socket> clients;
      for (int i = 1; i < size_; ++i) {
        auto s = detail::accept_until(acc, until, "rank 0 waiting for the other ranks");
        std::uint32_t intro[5];
        detail::read_all(s.native_handle(), intro, sizeof(intro), until, "rendezvous");
        std::string host(intro[4], '\0');
        detail::read_all(s.native_handle(), host.data(), host.size(), until, "rendezvous");
        const int q = static_cast<int>(intro[1]);
        expects(intro[0] == detail::tcp_magic, errc::mismatch, ctx, "a connection that is not a weft rank arrived");
        expects(static_cast<int>(intro[2]) == size_, errc::mismatch, ctx, "rank 0 has size ", size_, " but rank ", q,
                " has size ", intro[2]);
        expects(static_cast<int>(intro[3]) == K, errc::mismatch, ctx, "rank 0 uses ", K,
                " connections per peer but rank ", q, " uses ", intro[3]);
        expects(q > 0 && q < size_ && table[static_cast<std::size_t>(q)].port == 0, errc::mismatch, ctx, "rank ", q,
                " is outside [1, ", size_, ") or joined twice");
        // The address the peer connected from is the one rank 0 and others can reach it at.
        if (host.empty()) host = s.remote_endpoint().address().to_string();
        table[static_cast<std::size_t>(q)] = {host, 0};
        std::uint16_t qport = 0;
        detail::read_all(s.native_handle(), &qport, 2, until, "rendezvous");
        table[static_cast<std::size_t>(q)].port = qport;
        clients.push_back(std::move(s));
      }
      std::string reply;
      for (const auto& a : table) reply += pack(a);
      const std::uint32_t len = static_cast<std::uint32_t>(reply.size());
      for (auto& c : clients) {
        detail::write_all(c.native_handle(), &len, 4, until, "rendezvous reply");
        detail::write_all(c.native_handle(), reply.data(), reply.size(), until, "rendezvous reply");
      }
    } else {
      auto s = detail::connect_until(io_, store, boost::asio::ip::address_v4::any(), until,
                                     "rank " + std::to_string(rank_) + " reaching rank 0");
      const std::string host = bind_ip.is_unspecified() ? std::string() : bind_ip.to_string();
      const std::uint32_t intro[5] = {detail::tcp_magic, static_cast<std::uint32_t>(rank_),
                                      static_cast<std::uint32_t>(size_), static_cast<std::uint32_t>(K),
                                      static_cast<std::uint32_t>(host.size())};
      detail::write_all(s.native_handle(), intro, sizeof(intro), until, "rendezvous");
      detail::write_all(s.native_handle(), host.data(), host.size(), until, "rendezvous");
      detail::write_all(s.native_handle(), &port, 2, until, "rendezvous");
      std::uint32_t len = 0;
      detail::read_all(s.native_handle(), &len, 4, until, "rendezvous reply from rank 0");
      std::string reply(len, '\0');
      detail::read_all(s.native_handle(), reply.data(), len, until, "rendezvous reply from rank 0");
      std::size_t at = 0;
      for (auto& a : table) {
        std::uint16_t hl = 0;
        expects(at + 4 <= reply.size(), errc::parse, ctx, "short reply from rank 0");
        std::memcpy(&a.port, reply.data() + at, 2);
        std::memcpy(&hl, reply.data() + at + 2, 2);
        expects(at + 4 + hl <= reply.size(), errc::parse, ctx, "short reply from rank 0");
        a.host = reply.substr(at + 4, hl);
        at += 4 + hl;
      }
    }
    return table;
  }

  int rank_, size_;
  boost::asio::io_context io_;
  std::unique_ptr<detail::tcp_link> link_;
  std::vector<boost::asio::ip::tcp::socket> sockets_;
};

}  // namespace weft::comm

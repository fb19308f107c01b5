// Internal: how the ranks of a tcp_transport find each other and form their mesh of sockets: a
// rendezvous through rank 0 (host:port) or a shared directory, then K connections per pair of
// ranks, each opened by the higher rank. The data path (tcp_link, stream_engine) lives elsewhere.
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/core/error.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
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
#include <unistd.h>

namespace weft::comm::detail {

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

/// What forming a mesh needs: the parts of tcp_rendezvous and tcp_options that decide how the
/// connections are made. A plain value.
struct tcp_mesh_request {
  int rank = 0;
  int size = 1;
  std::string rendezvous_host;        // rank-0 mode
  std::uint16_t rendezvous_port = 0;  // rank-0 mode
  std::string directory;              // file-store mode when not empty
  int connections = 2;
  std::string bind;
  int send_buffer = 0;
  int recv_buffer = 0;
  std::chrono::milliseconds connect_timeout{30'000};
};

/// The sockets of one rank's full mesh: K connected, tuned, non-blocking sockets to every other
/// rank. The constructor blocks until the whole mesh is up (or the connect timeout). Not copyable
/// or movable (the sockets belong to its io_context). Not thread-safe.
class tcp_mesh {
 public:
  explicit tcp_mesh(const tcp_mesh_request& req) : rank_(req.rank), size_(req.size) {
    using boost::asio::ip::tcp;
    const int rank = req.rank, size = req.size;
    constexpr const char* ctx = "weft::comm::tcp_transport::tcp_transport";
    expects(size >= 1, errc::invalid_argument, ctx, "size ", size, " must be >= 1");
    expects(rank >= 0 && rank < size, errc::invalid_argument, ctx, "rank ", rank, " must be in [0, ", size, ")");
    expects(req.connections >= 1 && req.connections <= 64, errc::invalid_argument, ctx, "connections ", req.connections,
            " must be in [1, 64]");
    expects(!req.directory.empty() || (!req.rendezvous_host.empty() && req.rendezvous_port != 0),
            errc::invalid_argument, ctx,
            "the rendezvous needs a rank-0 host and non-zero port, or a file-store directory");
    const deadline until = clock_type::now() + req.connect_timeout;
    const auto bind_ip = bind_address(req.bind);
    const int K = req.connections;

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
    std::vector<peer_address> table(static_cast<std::size_t>(size));
    if (size > 1) {
      if (!req.directory.empty())
        table = file_rendezvous(req.directory, bind_ip, my_port, until);
      else
        table = rank0_rendezvous(req, bind_ip, my_port, K, until);
    }

    // 3. Mesh: connect K times to each lower rank, accept K from each higher rank.
    conns_ = K;
    fds_.assign(static_cast<std::size_t>(size * K), -1);
    sockets_.reserve(static_cast<std::size_t>((size - 1) * K));
    for (int q = 0; q < rank; ++q)
      for (int k = 0; k < K; ++k) {
        const auto& a = table[static_cast<std::size_t>(q)];
        auto s = connect_until(io_, tcp::endpoint(boost::asio::ip::make_address(a.host), a.port), bind_ip, until,
                               "rank " + std::to_string(rank) + " connecting to rank " + std::to_string(q));
        const std::uint32_t hello[4] = {tcp_magic, static_cast<std::uint32_t>(rank), static_cast<std::uint32_t>(k),
                                        static_cast<std::uint32_t>(K)};
        write_all(s.native_handle(), hello, sizeof(hello), until, "mesh hello");
        adopt(std::move(s), q, k, req);
      }
    for (int i = 0; i < (size - 1 - rank) * K; ++i) {
      auto s = accept_until(listener, until, "rank " + std::to_string(rank) + " accepting its mesh");
      std::uint32_t hello[4];
      read_all(s.native_handle(), hello, sizeof(hello), until, "mesh hello");
      expects(hello[0] == tcp_magic, errc::mismatch, ctx, "rank ", rank,
              ": a connection that is not a weft rank arrived");
      const int q = static_cast<int>(hello[1]), k = static_cast<int>(hello[2]);
      expects(static_cast<int>(hello[3]) == K, errc::mismatch, ctx, "rank ", rank, " uses ", K,
              " connections per peer but rank ", q, " uses ", hello[3]);
      expects(q > rank && q < size && k >= 0 && k < K && fd(q, k) < 0, errc::mismatch, ctx, "rank ", rank,
              ": unexpected mesh connection from rank ", q, " index ", k);
      adopt(std::move(s), q, k, req);
    }
  }
  tcp_mesh(const tcp_mesh&) = delete;
  tcp_mesh& operator=(const tcp_mesh&) = delete;

  /// The socket of connection `conn` to `peer` (-1 for this rank itself).
  int fd(int peer, int conn) const { return fds_[static_cast<std::size_t>(peer * conns_ + conn)]; }

 private:
  int& slot(int peer, int conn) { return fds_[static_cast<std::size_t>(peer * conns_ + conn)]; }
  void adopt(boost::asio::ip::tcp::socket s, int peer, int conn, const tcp_mesh_request& opt) {
    using boost::asio::ip::tcp;
    s.set_option(tcp::no_delay(true));
    if (opt.send_buffer > 0) s.set_option(boost::asio::socket_base::send_buffer_size(opt.send_buffer));
    if (opt.recv_buffer > 0) s.set_option(boost::asio::socket_base::receive_buffer_size(opt.recv_buffer));
    s.non_blocking(true);
    slot(peer, conn) = s.native_handle();
    sockets_.push_back(std::move(s));
  }

  std::vector<peer_address> file_rendezvous(const std::string& dir, const boost::asio::ip::address& bind_ip,
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
    std::vector<peer_address> table(static_cast<std::size_t>(size_));
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

  std::vector<peer_address> rank0_rendezvous(const tcp_mesh_request& where, const boost::asio::ip::address& bind_ip,
                                             std::uint16_t port, int K, deadline until) {
    using boost::asio::ip::tcp;
    constexpr const char* ctx = "weft::comm::tcp_transport (rank-0 rendezvous)";
    tcp::resolver resolver(io_);
    boost::system::error_code ec;
    auto results = resolver.resolve(tcp::v4(), where.rendezvous_host, std::to_string(where.rendezvous_port), ec);
    expects(!ec && !results.empty(), errc::invalid_argument, ctx, "cannot resolve rendezvous host '",
            where.rendezvous_host, "': ", ec.message());
    const tcp::endpoint store = *results.begin();
    std::vector<peer_address> table(static_cast<std::size_t>(size_));
    auto pack = [](const peer_address& a) {
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
        auto s = accept_until(acc, until, "rank 0 waiting for the other ranks");
        std::uint32_t intro[5];
        read_all(s.native_handle(), intro, sizeof(intro), until, "rendezvous");
        std::string host(intro[4], '\0');
        read_all(s.native_handle(), host.data(), host.size(), until, "rendezvous");
        const int q = static_cast<int>(intro[1]);
        expects(intro[0] == tcp_magic, errc::mismatch, ctx, "a connection that is not a weft rank arrived");
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
        read_all(s.native_handle(), &qport, 2, until, "rendezvous");
        table[static_cast<std::size_t>(q)].port = qport;
        clients.push_back(std::move(s));
      }
      std::string reply;
      for (const auto& a : table) reply += pack(a);
      const std::uint32_t len = static_cast<std::uint32_t>(reply.size());
      for (auto& c : clients) {
        write_all(c.native_handle(), &len, 4, until, "rendezvous reply");
        write_all(c.native_handle(), reply.data(), reply.size(), until, "rendezvous reply");
      }
    } else {
      auto s = connect_until(io_, store, boost::asio::ip::address_v4::any(), until,
                             "rank " + std::to_string(rank_) + " reaching rank 0");
      const std::string host = bind_ip.is_unspecified() ? std::string() : bind_ip.to_string();
      const std::uint32_t intro[5] = {tcp_magic, static_cast<std::uint32_t>(rank_), static_cast<std::uint32_t>(size_),
                                      static_cast<std::uint32_t>(K), static_cast<std::uint32_t>(host.size())};
      write_all(s.native_handle(), intro, sizeof(intro), until, "rendezvous");
      write_all(s.native_handle(), host.data(), host.size(), until, "rendezvous");
      write_all(s.native_handle(), &port, 2, until, "rendezvous");
      std::uint32_t len = 0;
      read_all(s.native_handle(), &len, 4, until, "rendezvous reply from rank 0");
      std::string reply(len, '\0');
      read_all(s.native_handle(), reply.data(), len, until, "rendezvous reply from rank 0");
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
  int conns_ = 0;
  boost::asio::io_context io_;
  std::vector<boost::asio::ip::tcp::socket> sockets_;
  std::vector<int> fds_;
};

}  // namespace weft::comm::detail

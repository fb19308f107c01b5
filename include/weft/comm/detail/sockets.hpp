// Internal: the few POSIX socket operations weft::comm's connection layer needs (IPv4 TCP),
// each with a deadline and each failure a weft::error: an owning descriptor, strict address
// parsing, name resolution that never throws a foreign exception, listen, connect with retry.
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace weft::comm::detail {

/// Owns one file descriptor (closed on destruction). Move-only; not thread-safe.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }

  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  explicit operator bool() const noexcept { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

inline int millis_until(deadline until, int cap_ms = 1 << 30) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now()).count();
  return static_cast<int>(std::clamp<long long>(left + 1, 0, cap_ms));
}

/// A dotted-quad IPv4 address, strictly (inet_pton): nullopt for anything else, names included.
inline std::optional<in_addr> parse_ipv4(std::string_view text) {
  if (text.empty() || text.size() > 15) return std::nullopt;
  const std::string s(text);
  in_addr a{};
  if (::inet_pton(AF_INET, s.c_str(), &a) != 1) return std::nullopt;
  return a;
}
inline std::string ipv4_string(in_addr a) {
  char ip[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a, ip, sizeof ip);
  return ip;
}
inline bool is_loopback(in_addr a) noexcept { return (ntohl(a.s_addr) >> 24) == 127; }

/// `host` as an IPv4 address: a literal, or a name resolved with getaddrinfo ("localhost").
/// weft::error(invalid_argument) naming the host when it is longer than 255 bytes or does not
/// resolve. May block on DNS.
inline in_addr resolve_ipv4(const std::string& host, const char* where) {
  expects(!host.empty() && host.size() <= 255, errc::invalid_argument, where, "host '", host.substr(0, 64),
          host.size() > 64 ? "..." : "", "' must have 1 to 255 bytes");
  if (auto a = parse_ipv4(host)) return *a;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  expects(rc == 0 && res != nullptr, errc::invalid_argument, where, "cannot resolve host '", host,
          "': ", rc == 0 ? "no IPv4 address" : ::gai_strerror(rc));
  const in_addr a = reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr;
  ::freeaddrinfo(res);
  return a;
}

/// An interface name (getifaddrs) or an address literal as an IPv4 address; "" is INADDR_ANY.
inline in_addr bind_address(const std::string& bind, const char* where) {
  in_addr any{};
  any.s_addr = htonl(INADDR_ANY);
  if (bind.empty()) return any;
  if (auto a = parse_ipv4(bind)) return *a;
  ifaddrs* list = nullptr;
  expects(::getifaddrs(&list) == 0, errc::io, where, "getifaddrs failed");
  std::optional<in_addr> found;
  for (ifaddrs* i = list; i; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && bind == i->ifa_name) {
      found = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
      break;
    }
  ::freeifaddrs(list);
  expects(found.has_value(), errc::invalid_argument, where, "bind '", bind,
          "' is neither an IP address nor an interface with an IPv4 address");
  return *found;
}

inline sockaddr_in socket_address(in_addr a, std::uint16_t port) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_addr = a;
  s.sin_port = htons(port);
  return s;
}

inline void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }
inline void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}
inline std::uint16_t local_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}
/// "a.b.c.d:port" of a connected socket's peer ("?" when unknown), for logs and errors.
inline std::string remote_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || a.sin_family != AF_INET) return "?";
  return ipv4_string(a.sin_addr) + ":" + std::to_string(ntohs(a.sin_port));
}
/// The address a connected socket's peer connects from.
inline std::optional<in_addr> remote_address(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || a.sin_family != AF_INET) return std::nullopt;
  return a.sin_addr;
}

/// A non-blocking listening socket on addr:port (port 0: any free port; read it with local_port).
inline unique_fd listen_tcp(in_addr addr, std::uint16_t port, const char* where) {
  unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  expects(static_cast<bool>(fd), errc::io, where, "socket() failed: ", std::strerror(errno));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const sockaddr_in s = socket_address(addr, port);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&s), sizeof s) != 0 || ::listen(fd.get(), SOMAXCONN) != 0)
    weft::detail::raise(errc::io, where, "cannot listen on ", ipv4_string(addr), ":", port, ": ", std::strerror(errno));
  return fd;
}

/// One non-blocking connect to addr:port from `from` (INADDR_ANY: the kernel's choice), waiting
/// at most until `until`. Returns the connected socket, or an empty one with errno_out set.
inline unique_fd try_connect(in_addr addr, std::uint16_t port, in_addr from, deadline until, int& errno_out) {
  unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) {
    errno_out = errno;
    return fd;
  }
  if (from.s_addr != htonl(INADDR_ANY)) {
    const sockaddr_in b = socket_address(from, 0);
    ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&b), sizeof b);
  }
  const sockaddr_in s = socket_address(addr, port);
  int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&s), sizeof s);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd.get(), POLLOUT, 0};
    rc = ::poll(&p, 1, millis_until(until, 1000));
    int err = 0;
    socklen_t len = sizeof err;
    if (rc == 1) ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    rc = (rc == 1 && err == 0) ? 0 : -1;
    if (rc != 0) errno = err ? err : ETIMEDOUT;
  }
  if (rc == 0) {
    set_nodelay(fd.get());
    return fd;
  }
  errno_out = errno;
  fd.reset();
  return fd;
}

/// Connects to addr:port, retrying refused connections (the peer may not listen yet) until
/// `until`; then weft::error(timeout) naming `whom` and the last error.
inline unique_fd connect_tcp(in_addr addr, std::uint16_t port, in_addr from, deadline until, const char* where,
                             std::string_view whom) {
  for (;;) {
    int err = 0;
    if (auto fd = try_connect(addr, port, from, until, err)) return fd;
    expects(clock_type::now() < until, errc::timeout, where, "cannot connect to ", whom, " at ", ipv4_string(addr), ":",
            port, " before the deadline: ", std::strerror(err));
    ::poll(nullptr, 0, 5);
  }
}

/// Writes/reads exactly n bytes on a non-blocking socket before `until`; weft::error naming
/// `what` otherwise (peer_failure when the connection closes, timeout at the deadline).
inline void write_exact(int fd, const void* data, std::size_t n, deadline until, const char* where, const char* what) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<std::size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      weft::detail::raise(errc::peer_failure, where, what, ": send failed: ", std::strerror(errno));
    expects(clock_type::now() < until, errc::timeout, where, what, ": timed out sending");
    pollfd pfd{fd, POLLOUT, 0};
    ::poll(&pfd, 1, millis_until(until, 100));
  }
}
inline void read_exact(int fd, void* data, std::size_t n, deadline until, const char* where, const char* what) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) weft::detail::raise(errc::peer_failure, where, what, ": the connection closed");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      weft::detail::raise(errc::peer_failure, where, what, ": recv failed: ", std::strerror(errno));
    expects(clock_type::now() < until, errc::timeout, where, what, ": timed out receiving");
    pollfd pfd{fd, POLLIN, 0};
    ::poll(&pfd, 1, millis_until(until, 100));
  }
}

}  // namespace weft::comm::detail

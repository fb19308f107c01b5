// What the attack suite's strangers do to a listening port: hold idle connections, send random
// bytes, announce huge lengths, speak a well-formed hello claiming to be someone (with or without
// the job's secret), or send text lines. Each runs in its own process (forked by the test), so a
// stranger can never share state with the job it attacks.
#pragma once

#include <weft/comm/detail/handshake.hpp>
#include <weft/comm/detail/handshake_io.hpp>
#include <weft/comm/detail/sockets.hpp>
#include <weft/core/random.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

namespace attack {

namespace wd = weft::comm::detail;
using namespace std::chrono_literals;

inline in_addr loopback() { return *wd::parse_ipv4("127.0.0.1"); }
inline in_addr any() { return in_addr{htonl(INADDR_ANY)}; }

/// A port the kernel just handed out (so parallel runs of the suite do not collide).
inline std::uint16_t free_port() {
  auto fd = wd::listen_tcp(loopback(), 0, "attack");
  return wd::local_port(fd.get());
}

/// Connects to 127.0.0.1:port, retrying until the port listens (at most `patience`); an empty fd
/// when it never did (a port that closed is not an error for a stranger).
inline wd::unique_fd reach(std::uint16_t port, std::chrono::milliseconds patience = 10s) {
  const auto until = weft::comm::clock_type::now() + patience;
  for (;;) {
    int err = 0;
    if (auto fd = wd::try_connect(loopback(), port, any(), until, err)) return fd;
    if (weft::comm::clock_type::now() >= until) return {};
    std::this_thread::sleep_for(2ms);
  }
}

inline void send_all(int fd, const void* p, std::size_t n) {
  const auto* b = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, b, n, MSG_NOSIGNAL);
    if (w <= 0) return;
    b += w;
    n -= static_cast<std::size_t>(w);
  }
}

/// The mix of the attacks on one port: idle connections, random bytes, a hello announcing
/// 64 KiB strings, then `held` more idle connections; all are held open for `hold`.
inline void nuisance(std::uint16_t port, int held, std::chrono::milliseconds hold, std::uint64_t seed = 1,
                     std::chrono::milliseconds patience = 10s) {
  std::vector<wd::unique_fd> fds;
  weft::rng rng(seed);
  // Each connection waits at most `patience` for the port; once one finds it closed, the rest give up.
  auto open = [&]() -> int {
    if (!fds.empty() && !fds.back()) return -1;
    fds.push_back(reach(port, patience));
    return fds.back() ? fds.back().get() : -1;
  };
  for (int i = 0; i < 5; ++i) open();  // idle
  for (int i = 0; i < 5; ++i) {        // random bytes
    std::vector<std::uint8_t> junk(64);
    for (auto& b : junk) b = static_cast<std::uint8_t>(rng.next() & 0xff);
    if (const int fd = open(); fd >= 0) send_all(fd, junk.data(), junk.size());
  }
  for (int i = 0; i < 2; ++i) {  // a valid magic and version, then huge lengths
    wd::peer_identity id;
    auto hello = wd::encode_hello(wd::conn_kind::rendezvous, false, id, {});
    hello[10] = hello[11] = hello[12] = hello[13] = std::byte{0xff};
    if (const int fd = open(); fd >= 0) send_all(fd, hello.data(), hello.size());
  }
  for (int i = 0; i < held; ++i) open();
  if (!fds.empty() && fds.back()) std::this_thread::sleep_for(hold);
}

/// A full handshake of `kind` claiming `id`, with `secret` (empty: none). True when admitted.
inline bool claim(std::uint16_t port, wd::conn_kind kind, const wd::peer_identity& id, const wd::job_secret& secret,
                  wd::unique_fd* keep = nullptr, std::chrono::milliseconds patience = 10s) {
  auto fd = reach(port, patience);
  if (!fd) return false;
  wd::handshake hs(wd::handshake::role::client, kind, id, secret, nullptr);
  wd::drive(fd.get(), hs, weft::comm::clock_type::now() + 5s);
  if (keep) *keep = std::move(fd);
  return hs.state() == wd::handshake::status::done;
}

/// Reads one '\n'-terminated line (at most 1 MiB) or "" when the connection closes or 5 s pass.
inline std::string read_line(int fd) {
  std::string line;
  const auto until = weft::comm::clock_type::now() + 5s;
  while (line.size() < (1u << 20) && weft::comm::clock_type::now() < until) {
    char c;
    const ssize_t r = ::recv(fd, &c, 1, MSG_DONTWAIT);
    if (r == 1) {
      if (c == '\n') return line;
      line += c;
    } else if (r == 0) {
      return {};
    } else {
      std::this_thread::sleep_for(1ms);
    }
  }
  return {};
}

}  // namespace attack

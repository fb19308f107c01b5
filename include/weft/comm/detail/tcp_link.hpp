// Internal: the stream_link (link.hpp) of the stream engine over TCP sockets — non-blocking
// sendmsg/recv, poll(2) to sleep, an eventfd per sleeping thread to wake it. Shared by every TCP
// path that carries data frames: tcp_transport's mesh and each epoch's mesh of an elastic group.
// POSIX only; the sockets are connected and authenticated by whoever builds the link, which may
// also give a stream a secure_stream (TLS: weft/comm/tls.hpp) that every byte then goes through.
#pragma once

#include <weft/comm/detail/stream_engine.hpp>
#include <weft/comm/stream_security.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

namespace weft::comm::detail {

/// The link of stream_engine over K sockets per peer (fd(peer, conn), set by the owner before the
/// engine starts; the link does not own or close them). `name` is the context of its errors (a
/// string that outlives the link). Not for direct use. write_some/read_some of one stream are
/// called under that stream's engine lock (its read or its write lock; a secured stream takes a
/// lock of its own too, since its reads and writes share the session); prepare_wait/wait/poke are
/// thread-safe.
class tcp_link {
 public:
  /// One recv(2) takes a frame's header and a small payload (and often the next frames) together.
  static constexpr std::size_t stage_bytes = std::size_t{64} << 10;

  tcp_link(int rank, int size, int conns, const char* name = "weft::comm::tcp_transport")
      : rank_(rank),
        size_(size),
        conns_(conns),
        name_(name),
        ended_(std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(size * conns))) {
    fds_.assign(static_cast<std::size_t>(size * conns), -1);
  }
  int& fd(int peer, int conn) { return fds_[slot(peer, conn)]; }
  /// Sends the stream's bytes through `s` (its handshake done) from now on; before the engine starts.
  void secure(int peer, int conn, std::unique_ptr<secure_stream> s) {
    if (secured_.empty()) {
      secured_.resize(fds_.size());
      secured_mutex_ = std::make_unique<std::mutex[]>(fds_.size());
      pending_ = std::make_unique<std::atomic<bool>[]>(fds_.size());
    }
    secured_[slot(peer, conn)] = std::move(s);
  }

  /// Header and payload in one sendmsg(2).
  std::size_t write_some(int peer, int conn, const io_part* parts, int count) {
    if (secure_stream* s = secured(peer, conn)) {
      std::span<const std::byte> spans[4];
      const int n = std::min(count, 4);
      for (int i = 0; i < n; ++i) spans[i] = {parts[i].data, parts[i].len};
      std::lock_guard lock(secured_mutex_[slot(peer, conn)]);
      return s->write_some(spans, n);
    }
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
    weft::detail::raise(errc::peer_failure, name_, "send to peer ", peer, " (connection ", conn,
                        ") failed: ", std::strerror(errno));
  }
  std::size_t read_some(int peer, int conn, std::byte* dst, std::size_t n) {
    if (n == 0) return 0;
    if (secure_stream* s = secured(peer, conn)) return read_secured(*s, slot(peer, conn), dst, n);
    const ssize_t r = ::recv(fd(peer, conn), dst, n, MSG_DONTWAIT);
    if (r > 0) return static_cast<std::size_t>(r);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    const int e = errno;
    // The stream has ended: wait() stops watching it (a socket at its end is always readable, and
    // a thread waiting on another peer would spin on it).
    ended_[slot(peer, conn)].store(true, std::memory_order_relaxed);
    if (r == 0)
      weft::detail::raise(errc::peer_failure, name_, "peer ", peer, " closed the connection (it exited or failed)");
    weft::detail::raise(errc::peer_failure, name_, "recv from peer ", peer, " (connection ", conn,
                        ") failed: ", std::strerror(e));
  }
  void commit_reads(int, int) {}  // recv(2) hands the room back itself

  // Waking: the kernel keeps socket readiness, but another thread of this rank may take the bytes
  // a sleeper waits for (and complete its receive), or free a write lock it needs. So each
  // sleeping thread also polls its own eventfd, which poke() signals. Dekker with poke(): a
  // sleeper is listed before the engine looks at everything once more, and poke() looks at the
  // list after its change (a fence), so either the sleeper sees the change or poke() sees it.

  /// Lists this thread's eventfd among the sleepers; returns it plus one (0: none could be made).
  std::uint64_t prepare_wait() {
    const int efd = thread_wakeup_fd();
    if (efd >= 0) {
      std::lock_guard lock(sleepers_mutex_);
      sleeping_.push_back(efd);
    }
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    return static_cast<std::uint64_t>(efd + 1);
  }
  /// Sleeps in poll(2) until some socket is readable (or `write_peer`'s writable), poke() is
  /// called, or `until` (at most 50 ms at a time: a safety net, not the wake-up).
  void wait(std::uint64_t token, deadline until, int write_peer) {
    const int efd = static_cast<int>(token) - 1;
    if (!secured_.empty())  // bytes decrypted but not taken yet: poll(2) cannot see them
      for (std::size_t i = 0; i < secured_.size(); ++i)
        if (pending_[i].load(std::memory_order_relaxed)) until = clock_type::now();
    thread_local std::vector<pollfd> pfds;
    pfds.clear();
    for (int q = 0; q < size_; ++q)
      for (int k = 0; k < conns_; ++k)
        if (q != rank_ && (q == write_peer || !ended_[slot(q, k)].load(std::memory_order_relaxed)))
          pfds.push_back({fd(q, k), static_cast<short>(POLLIN | (q == write_peer ? POLLOUT : 0)), 0});
    if (efd >= 0) pfds.push_back({efd, POLLIN, 0});
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(until - clock_type::now()).count();
    if (left > 0)  // without an eventfd, nothing wakes this thread for the others: poll each ms
      ::poll(pfds.data(), pfds.size(), static_cast<int>(std::min<long long>((left + 999) / 1000, efd >= 0 ? 50 : 1)));
    if (efd >= 0) {
      std::uint64_t count = 0;
      if (::read(efd, &count, sizeof count) < 0) {
      }  // EAGAIN: nobody poked (a poke after this read only makes the next wait return early)
      std::lock_guard lock(sleepers_mutex_);
      const auto it = std::find(sleeping_.begin(), sleeping_.end(), efd);
      if (it != sleeping_.end()) sleeping_.erase(it);
    }
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  }
  /// Wakes this rank's threads asleep in wait(). Nobody asleep (the common case): a fence and a load.
  void poke() {
    full_fence();
    if (sleepers_.load(std::memory_order_relaxed) == 0) return;
    const std::uint64_t one = 1;
    std::lock_guard lock(sleepers_mutex_);
    for (int efd : sleeping_)
      if (::write(efd, &one, sizeof one) < 0) {
      }  // EAGAIN: the counter is full, so that sleeper wakes anyway
  }
  void check_alive(int) {}  // a dead peer's socket reports EOF or a reset by itself
  // No single-copy path between hosts: every payload travels through the socket.
  std::size_t remote_min() const { return SIZE_MAX; }
  [[noreturn]] void remote_read(int, std::uint64_t, std::byte*, std::size_t) {
    weft::detail::raise(errc::unsupported, name_, "a peer sent a single-copy piece over tcp");
  }
  void remote_ack(int) {}
  std::uint64_t remote_post(int) { return 0; }
  std::uint64_t remote_acked(int) const { return 0; }
  void on_abort(const std::string&) {
    for (int f : fds_)
      if (f >= 0) ::shutdown(f, SHUT_RDWR);
    poke();
  }

 private:
  std::size_t slot(int peer, int conn) const noexcept {
    return static_cast<std::size_t>(peer) * static_cast<std::size_t>(conns_) + static_cast<std::size_t>(conn);
  }
  secure_stream* secured(int peer, int conn) const noexcept {
    return secured_.empty() ? nullptr : secured_[slot(peer, conn)].get();
  }
  std::size_t read_secured(secure_stream& s, std::size_t i, std::byte* dst, std::size_t n) {
    std::lock_guard lock(secured_mutex_[i]);
    try {
      const std::size_t got = s.read_some(dst, n);
      pending_[i].store(s.has_pending(), std::memory_order_relaxed);
      return got;
    } catch (...) {
      pending_[i].store(false, std::memory_order_relaxed);
      if (s.ended()) ended_[i].store(true, std::memory_order_relaxed);  // as read_some's end below
      throw;
    }
  }

  // This thread's eventfd (non-blocking), made on first use and again in a forked child (which
  // must not share its parent's counter); closed when the thread ends.
  static int thread_wakeup_fd() {
    struct holder {
      int fd = -1;
      pid_t pid = 0;
      ~holder() {
        if (fd >= 0) ::close(fd);
      }
    };
    thread_local holder h;
    const pid_t pid = ::getpid();
    if (h.fd >= 0 && h.pid == pid) return h.fd;
    if (h.fd >= 0) ::close(h.fd);  // the parent's, inherited through fork(2)
    h.fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    h.pid = pid;
    return h.fd;
  }

  int rank_, size_, conns_;
  const char* name_;
  std::vector<int> fds_;
  std::unique_ptr<std::atomic<bool>[]> ended_;  // per stream: read_some saw its end (EOF or error)
  // Secured streams (all empty when none is): the filter, the lock its reads and writes share, and
  // whether it holds decrypted bytes that nobody has read yet.
  std::vector<std::unique_ptr<secure_stream>> secured_;
  std::unique_ptr<std::mutex[]> secured_mutex_;
  std::unique_ptr<std::atomic<bool>[]> pending_;
  std::atomic<int> sleepers_{0};
  std::mutex sleepers_mutex_;  // guards sleeping_ (a leaf lock)
  std::vector<int> sleeping_;  // eventfds of the threads in wait()
};

}  // namespace weft::comm::detail

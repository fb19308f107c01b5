// TCP transport on POSIX sockets: ranks on any hosts, a full mesh of K connections per pair with
// large messages striped over them (Gloo's and NCCL's multi-socket trick), after a rendezvous
// through rank 0 (host:port) or a shared directory. Sockets are tuned (TCP_NODELAY, buffer sizes)
// and the data path is non-blocking send/recv driven by poll(2) through the stream engine.
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/comm/detail/stream_engine.hpp>
#include <weft/comm/detail/tcp_rendezvous.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <climits>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
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
  /// IPv4 address or interface name (e.g. "eth0") for data sockets; "" = loopback when the job is
  /// on one host (a file store, or a loopback rank-0 address), every interface otherwise.
  std::string bind = {};
  int send_buffer = 0;  ///< SO_SNDBUF in bytes; 0 leaves the kernel's autotuning
  int recv_buffer = 0;  ///< SO_RCVBUF in bytes; 0 leaves the kernel's autotuning
  std::chrono::milliseconds connect_timeout{30'000};
  /// The job secret (16 to 1024 bytes, the same on every rank) that authenticates every
  /// connection; "" reads WEFT_JOB_SECRET (fork_ranks and spawn_ranks set a fresh one for the ranks
  /// they start). Without either, a job of more than one rank refuses to form (errc::invalid_argument)
  /// unless allow_unauthenticated. See docs/comm.md, "Wire format: handshake and authentication".
  std::string secret = {};
  /// Opt in to a job without a secret (or set WEFT_ALLOW_UNAUTHENTICATED=1): anyone who can connect
  /// while it forms may join it as a rank. Said once on stderr when used.
  bool allow_unauthenticated = false;
  /// Each accepted connection must finish its handshake within this, or it is dropped.
  std::chrono::milliseconds handshake_timeout{2'000};
  /// How a blocked rank waits (spin: poll the sockets without sleeping; yield: sched_yield(2)
  /// between polls; then poll(2) with a timeout). automatic spins when `size` ranks fit the cores
  /// this process may run on (as if every rank ran on this host) and yields otherwise.
  wait_options waiting{};
};

namespace detail {

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
    thread_local std::vector<pollfd> pfds;
    pfds.clear();
    for (int q = 0; q < size_; ++q)
      for (int k = 0; k < conns_; ++k)
        if (q != rank_) pfds.push_back({fd(q, k), static_cast<short>(POLLIN | (q == write_peer ? POLLOUT : 0)), 0});
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
    weft::detail::raise(errc::unsupported, "weft::comm::tcp_transport", "a peer sent a single-copy piece over tcp");
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
  std::vector<int> fds_;
  std::atomic<int> sleepers_{0};
  std::mutex sleepers_mutex_;  // guards sleeping_ (a leaf lock)
  std::vector<int> sleeping_;  // eventfds of the threads in wait()
};

}  // namespace detail

/// Rank `rank` of `size` processes connected over TCP. The constructor blocks until the whole
/// mesh is up (or connect_timeout). Satisfies concurrent_transport and abortable_transport;
/// thread-safe across channels. Not copyable or movable. Send/recv: O(bytes) through the kernel,
/// one syscall per piece per wake-up.
class tcp_transport : public detail::engine_front<detail::tcp_link> {
 public:
  static constexpr bool thread_safe_channels = true;

  /// Throws errc::invalid_argument for bad rank/size/options or a job of several ranks with no
  /// secret and no allow_unauthenticated, errc::timeout when the rendezvous
  /// or the mesh does not complete in time, errc::mismatch when ranks disagree on size or
  /// connections, errc::io for socket errors.
  tcp_transport(int rank, int size, const tcp_rendezvous& where, tcp_options opt = {}) : rank_(rank), size_(size) {
    detail::tcp_mesh_request req;
    req.rank = rank;
    req.size = size;
    req.rendezvous_host = where.host;
    req.rendezvous_port = where.port;
    req.directory = where.directory;
    req.connections = opt.connections;
    req.bind = opt.bind;
    req.send_buffer = opt.send_buffer;
    req.recv_buffer = opt.recv_buffer;
    req.connect_timeout = opt.connect_timeout;
    req.secret = opt.secret;
    req.allow_unauthenticated = opt.allow_unauthenticated;
    req.limits.handshake_timeout = opt.handshake_timeout;
    mesh_ = std::make_unique<detail::tcp_mesh>(req);
    const int K = opt.connections;
    link_ = std::make_unique<detail::tcp_link>(rank, size, K);
    for (int q = 0; q < size; ++q)
      for (int k = 0; k < K; ++k)
        if (q != rank) link_->fd(q, k) = mesh_->fd(q, k);
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
  int rank_, size_;
  std::unique_ptr<detail::tcp_mesh> mesh_;  // owns the sockets; destroyed after the link and engine
  std::unique_ptr<detail::tcp_link> link_;
};

}  // namespace weft::comm

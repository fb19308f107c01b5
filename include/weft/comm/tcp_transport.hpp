// TCP transport on POSIX sockets: ranks on any hosts, a full mesh of K connections per pair with
// large messages striped over them (Gloo's and NCCL's multi-socket trick), after a rendezvous
// through rank 0 (host:port) or a shared directory. Sockets are tuned (TCP_NODELAY, buffer sizes)
// and the data path is non-blocking send/recv driven by poll(2) through the stream engine.
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/comm/detail/stream_engine.hpp>
#include <weft/comm/detail/tcp_link.hpp>
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

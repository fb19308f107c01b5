// Internal: how tcp_transport's ranks find each other (rank-0 rendezvous or a file store) and form
// their mesh of K sockets per pair, every connection through the handshake of handshake.hpp, run
// concurrently on the accepting side. The data path (tcp_link, stream_engine) lives elsewhere.
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/comm/detail/env.hpp>
#include <weft/comm/detail/handshake.hpp>
#include <weft/comm/detail/handshake_io.hpp>
#include <weft/comm/detail/sockets.hpp>
#include <weft/comm/detail/wire.hpp>
#include <weft/core/checked.hpp>
#include <weft/core/crypto.hpp>
#include <weft/core/error.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <sys/socket.h>

namespace weft::comm::detail {

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
  std::string secret;  // "" = WEFT_JOB_SECRET when set, else none
  bool allow_unauthenticated = false;
  wire_limits limits;
};

/// Where one rank listens for its mesh connections, as the rendezvous tells every rank. The
/// instance is a random number per transport object: a connecting rank checks the listener it
/// reached is that process, not whatever now listens at a stale address.
struct rank_address {
  std::string host;
  std::uint16_t port = 0;
  std::uint64_t instance = 0;
};

/// Ranks one group may have (a rank or size read from the wire above it is refused).
inline constexpr int max_tcp_ranks = 1 << 16;

/// The rank table rank 0 sends every rank: u32 count, then per rank u16 port, u16 host length,
/// u64 instance and the host's bytes (little-endian).
inline std::vector<std::byte> encode_rank_table(const std::vector<rank_address>& table) {
  std::vector<std::byte> out;
  put_le(out, table.size(), 4);
  for (const auto& a : table) {
    put_le(out, a.port, 2);
    put_le(out, a.host.size(), 2);
    put_le(out, a.instance, 8);
    for (char c : a.host) out.push_back(static_cast<std::byte>(c));
  }
  return out;
}

/// Checks one entry of a rank table: a numeric IPv4 host, a non-zero port and instance.
inline std::string check_rank_address(const rank_address& a) {
  if (!parse_ipv4(a.host)) return "host '" + a.host.substr(0, 64) + "' is not a numeric IPv4 address";
  if (a.port == 0) return "port 0";
  if (a.instance == 0) return "instance 0";
  return {};
}

/// Decodes a whole rank table of `size` ranks (the fuzzer's entry point; the socket reader below
/// checks the same bounds field by field). weft::error(parse) for anything malformed.
inline std::vector<rank_address> decode_rank_table(std::span<const std::byte> b, int size, const wire_limits& limits,
                                                   const char* where) {
  std::size_t at = 0;
  auto take = [&](std::size_t n) {
    expects(b.size() - at >= n, errc::parse, where, "the rank table is truncated");
    const std::byte* p = b.data() + at;
    at += n;
    return p;
  };
  const auto count = get_le(take(4), 4);
  expects(count == static_cast<std::uint64_t>(size), errc::parse, where, "the rank table lists ", count,
          " ranks; this job has ", size);
  std::vector<rank_address> table(static_cast<std::size_t>(size));
  for (auto& a : table) {
    const std::byte* f = take(12);
    a.port = static_cast<std::uint16_t>(get_le(f, 2));
    const auto len = static_cast<std::size_t>(get_le(f + 2, 2));
    a.instance = get_le(f + 4, 8);
    weft::check_limit(len, limits.max_host_bytes, where, "rank table host length");
    a.host.assign(reinterpret_cast<const char*>(take(len)), len);
    const std::string bad = check_rank_address(a);
    expects(bad.empty(), errc::parse, where, "a rank table entry is invalid: ", bad);
  }
  expects(at == b.size(), errc::parse, where, "the rank table has ", b.size() - at, " trailing bytes");
  return table;
}

/// Rank 0's admission rule for a rank registering at the rendezvous: "" or why it is refused.
inline std::string rendezvous_admission(const peer_identity& p, int size, int connections,
                                        const std::vector<rank_address>& table) {
  using weft::detail::concat;
  if (p.size != size) return concat("rank ", p.rank, " has size ", p.size, " but rank 0 has size ", size);
  if (p.count != connections)
    return concat("rank ", p.rank, " uses ", p.count, " connections per peer but rank 0 uses ", connections);
  if (p.rank < 1 || p.rank >= size) return concat("rank ", p.rank, " is outside [1, ", size, ")");
  if (p.port == 0) return concat("rank ", p.rank, " announced data port 0");
  if (p.instance == 0) return concat("rank ", p.rank, " announced instance 0");
  if (!p.host.empty() && !parse_ipv4(p.host))
    return concat("rank ", p.rank, " announced host '", p.host, "', which is not a numeric IPv4 address");
  // The same process may register again (its first attempt timed out after rank 0 admitted it).
  const auto& had = table[static_cast<std::size_t>(p.rank)];
  if (had.port != 0 && had.instance != p.instance) return concat("rank ", p.rank, " has already joined");
  return {};
}

/// The sockets of one rank's full mesh: K connected, tuned, non-blocking sockets to every other
/// rank. The constructor blocks until the whole mesh is up (or the connect timeout). Not copyable
/// or movable. Not thread-safe. Construction: O(size · K) connections and handshakes.
class tcp_mesh {
 public:
  explicit tcp_mesh(const tcp_mesh_request& req)
      : rank_(req.rank), size_(req.size), conns_(req.connections), limits_(req.limits), log_(label(req.rank)) {
    constexpr const char* where = "weft::comm::tcp_transport::tcp_transport";
    expects(size_ >= 1 && size_ <= max_tcp_ranks, errc::invalid_argument, where, "size ", size_, " must be in [1, ",
            max_tcp_ranks, "]");
    expects(rank_ >= 0 && rank_ < size_, errc::invalid_argument, where, "rank ", rank_, " must be in [0, ", size_, ")");
    expects(conns_ >= 1 && conns_ <= 64, errc::invalid_argument, where, "connections ", conns_, " must be in [1, 64]");
    expects(!req.directory.empty() || (!req.rendezvous_host.empty() && req.rendezvous_port != 0),
            errc::invalid_argument, where,
            "the rendezvous needs a rank-0 host and non-zero port, or a file-store directory");
    expects(req.connect_timeout.count() > 0 && limits_.handshake_timeout.count() > 0, errc::invalid_argument, where,
            "connect_timeout and handshake_timeout must be positive");
    secret_ = job_secret::resolve(req.secret, where);
    instance_ = crypto::random_u64() | 1;  // never 0
    directory_ = req.directory;
    fds_.resize(static_cast<std::size_t>(size_ * conns_));
    bind_ip_ = bind_address(req.bind, where);
    if (size_ == 1) return;
    const deadline until = clock_type::now() + req.connect_timeout;

    // 1. Listen for data connections on an ephemeral port. A single-host job (file store, or a
    //    loopback rendezvous) listens on loopback unless told otherwise.
    in_addr store{};
    if (directory_.empty()) store = resolve_ipv4(req.rendezvous_host, where);
    const bool single_host = !directory_.empty() || is_loopback(store);
    if (req.bind.empty() && single_host) bind_ip_ = *parse_ipv4("127.0.0.1");
    // Secure by default: without a secret the job forms only when the user opted in (before
    // anything listens, so a stranger finds no port to connect to).
    require_secret_or_opt_in(secret_, unauthenticated_allowed(req.allow_unauthenticated, where), where,
                             single_host ? std::string("this host's loopback interface")
                                         : "rank 0's rendezvous port and every rank's data port on " +
                                               (bind_ip_.s_addr == htonl(INADDR_ANY) ? std::string("every interface")
                                                                                     : ipv4_string(bind_ip_)),
                             "tcp_options::allow_unauthenticated");
    listener_ = listen_tcp(bind_ip_, 0, where);
    port_ = local_port(listener_.get());

    // 2. Rendezvous: learn every rank's data address and instance.
    table_.resize(static_cast<std::size_t>(size_));
    if (!directory_.empty())
      file_rendezvous(until);
    else if (rank_ == 0)
      rank0_serve(store, req.rendezvous_port, until);
    else
      rank0_register(store, req.rendezvous_port, until);

    // 3. Mesh: connect K times to each lower rank, accept K from each higher rank.
    for (int q = 0; q < rank_; ++q)
      for (int k = 0; k < conns_; ++k) connect_mesh(q, k, req, until);
    accept_mesh(req, until);
    listener_.reset();  // the data port closes: nobody may join a formed mesh
  }
  tcp_mesh(const tcp_mesh&) = delete;
  tcp_mesh& operator=(const tcp_mesh&) = delete;

  /// The socket of connection `conn` to `peer` (-1 for this rank itself).
  int fd(int peer, int conn) const { return fds_[slot(peer, conn)].get(); }
  /// True when the connections were authenticated with a job secret.
  bool authenticated() const noexcept { return !secret_.empty(); }

 private:
  static std::string label(int rank) { return "weft::comm::tcp_transport rank " + std::to_string(rank); }
  std::size_t slot(int peer, int conn) const { return static_cast<std::size_t>(peer * conns_ + conn); }
  peer_identity me() const {
    peer_identity id;
    id.rank = rank_;
    id.size = size_;
    id.count = conns_;
    id.instance = instance_;
    id.port = port_;
    return id;
  }

  void adopt(unique_fd s, int peer, int conn, const tcp_mesh_request& req) {
    set_nodelay(s.get());
    if (req.send_buffer > 0) ::setsockopt(s.get(), SOL_SOCKET, SO_SNDBUF, &req.send_buffer, sizeof(int));
    if (req.recv_buffer > 0) ::setsockopt(s.get(), SOL_SOCKET, SO_RCVBUF, &req.recv_buffer, sizeof(int));
    set_nonblocking(s.get());
    fds_[slot(peer, conn)] = std::move(s);
  }

  // ---- rank-0 rendezvous ----------------------------------------------------------------------

  void rank0_serve(in_addr store, std::uint16_t store_port, deadline until) {
    constexpr const char* where = "weft::comm::tcp_transport (rank-0 rendezvous)";
    unique_fd acc = listen_tcp(store, store_port, where);
    table_[0] = {bind_ip_.s_addr == htonl(INADDR_ANY) ? ipv4_string(store) : ipv4_string(bind_ip_), port_, instance_};
    std::vector<unique_fd> clients(static_cast<std::size_t>(size_));
    const peer_identity id = me();
    handshake_pool pool(
        acc.get(),
        [&] {
          return std::make_unique<handshake>(
              handshake::role::server, conn_kind::rendezvous, id, secret_,
              [&](const peer_identity& p) { return rendezvous_admission(p, size_, conns_, table_); }, limits_);
        },
        limits_, log_);
    for (int joined = 1; joined < size_;) {
      auto a = pool.next(until);
      if (!a) {
        std::string missing;
        for (int q = 1; q < size_; ++q)
          if (table_[static_cast<std::size_t>(q)].port == 0) missing += " " + std::to_string(q);
        weft::detail::raise(errc::timeout, where, "rank 0: ranks", missing,
                            " did not register before the connect timeout", log_.summary());
      }
      if (a->fd < 0)
        weft::detail::raise(errc::mismatch, where, "rank 0 refused a rank that holds the job secret: ", a->refused);
      unique_fd c(a->fd);
      std::string host = a->peer.host;
      if (host.empty()) {  // the address it connected from is the one the others can reach it at
        const auto from = remote_address(c.get());
        host = from ? ipv4_string(*from) : std::string("127.0.0.1");
      }
      auto& entry = table_[static_cast<std::size_t>(a->peer.rank)];
      if (entry.port == 0) ++joined;  // else the same process again: its new connection replaces the old
      entry = {host, a->peer.port, a->peer.instance};
      clients[static_cast<std::size_t>(a->peer.rank)] = std::move(c);
    }
    const auto bytes = encode_rank_table(table_);
    for (int q = 1; q < size_; ++q)
      write_exact(clients[static_cast<std::size_t>(q)].get(), bytes.data(), bytes.size(), until, where,
                  ("rank 0 sending the rank table to rank " + std::to_string(q)).c_str());
  }

  void rank0_register(in_addr store, std::uint16_t store_port, deadline until) {
    constexpr const char* where = "weft::comm::tcp_transport (rank-0 rendezvous)";
    peer_identity id = me();
    if (bind_ip_.s_addr != htonl(INADDR_ANY) && !is_loopback(bind_ip_)) id.host = ipv4_string(bind_ip_);
    const std::string whom = "rank 0's rendezvous at " + ipv4_string(store) + ":" + std::to_string(store_port);
    unique_fd fd;
    for (;;) {
      fd = connect_tcp(store, store_port, in_addr{htonl(INADDR_ANY)}, until, where, whom);
      handshake hs(
          handshake::role::client, conn_kind::rendezvous, id, secret_,
          [&](const peer_identity& p) -> std::string {
            if (p.rank != 0 || p.size != size_ || p.count != conns_)
              return weft::detail::concat("the process at ", whom, " is rank ", p.rank, " of ", p.size, " with ",
                                          p.count, " connections, not rank 0 of ", size_, " with ", conns_);
            return {};
          },
          limits_);
      drive(fd.get(), hs, std::min(until, clock_type::now() + limits_.handshake_timeout));
      if (hs.state() == handshake::status::done) break;
      // A refusal or a disagreement is the job's configuration: fail now. A dropped connection
      // (rank 0 evicted it under a flood) is retried until the deadline.
      expects(hs.failure_code() != errc::mismatch && hs.failure_code() != errc::parse, errc::mismatch, where, "rank ",
              rank_, " registering with ", whom, ": ", hs.failure());
      expects(clock_type::now() < until, errc::timeout, where, "rank ", rank_, " registering with ", whom, ": ",
              hs.failure());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // The table: u32 count, then the entries, each field bounded before it is read.
    std::vector<std::byte> bytes(4);
    read_exact(fd.get(), bytes.data(), 4, until, where, "the rank table from rank 0");
    const auto count = get_le(bytes.data(), 4);
    expects(count == static_cast<std::uint64_t>(size_), errc::parse, where, "rank 0's table lists ", count,
            " ranks; this job has ", size_);
    for (int q = 0; q < size_; ++q) {
      const std::size_t at = bytes.size();
      bytes.resize(at + 12);
      read_exact(fd.get(), bytes.data() + at, 12, until, where, "the rank table from rank 0");
      const auto len = static_cast<std::size_t>(get_le(bytes.data() + at + 2, 2));
      weft::check_limit(len, limits_.max_host_bytes, where, "rank table host length");
      bytes.resize(at + 12 + len);
      read_exact(fd.get(), bytes.data() + at + 12, len, until, where, "the rank table from rank 0");
    }
    table_ = decode_rank_table(bytes, size_, limits_, where);
    const auto& mine = table_[static_cast<std::size_t>(rank_)];
    expects(mine.port == port_ && mine.instance == instance_, errc::mismatch, where,
            "rank 0's table does not list rank ", rank_, " as it registered (another process registered as rank ",
            rank_, "?)");
  }

  // ---- file store -----------------------------------------------------------------------------

  std::filesystem::path rank_file(int q) const {
    return std::filesystem::path(directory_) / ("rank-" + std::to_string(q));
  }

  /// Reads dir/rank-<q>: "weft-tcp-rank 1 <host> <port> <size> <instance>\n", strictly and at most
  /// 1 KiB of it. The entry, or nullopt with `why` set (missing, malformed, another job's size).
  std::optional<rank_address> read_rank_file(int q, std::string& why) const {
    std::ifstream in(rank_file(q), std::ios::binary);
    if (!in) {
      why = "no file " + rank_file(q).string();
      return std::nullopt;
    }
    char buf[1024];
    in.read(buf, sizeof buf);
    const std::string text(buf, static_cast<std::size_t>(in.gcount()));
    why = rank_file(q).string() + " is malformed";
    if (text.empty() || text.size() == sizeof buf || text.back() != '\n') return std::nullopt;
    std::vector<std::string_view> f;
    std::string_view rest(text.data(), text.size() - 1);
    while (!rest.empty()) {
      const auto sp = rest.find(' ');
      f.push_back(rest.substr(0, sp));
      rest = sp == std::string_view::npos ? std::string_view{} : rest.substr(sp + 1);
    }
    if (f.size() != 6 || f[0] != "weft-tcp-rank" || f[1] != "1") return std::nullopt;
    rank_address a;
    a.host = std::string(f[2]);
    long long port = 0, size = 0;
    auto num = [](std::string_view s, auto& out) {
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 10);
      return !s.empty() && ec == std::errc{} && end == s.data() + s.size();
    };
    if (!num(f[3], port) || !num(f[4], size) || !num(f[5], a.instance) || port < 1 || port > 65535) return std::nullopt;
    a.port = static_cast<std::uint16_t>(port);
    if (size != size_) {
      why = weft::detail::concat(rank_file(q).string(), " is for a job of size ", size, ", not ", size_);
      return std::nullopt;
    }
    if (auto bad = check_rank_address(a); !bad.empty()) {
      why = rank_file(q).string() + ": " + bad;
      return std::nullopt;
    }
    return a;
  }

  void file_rendezvous(deadline until) {
    namespace fs = std::filesystem;
    constexpr const char* where = "weft::comm::tcp_transport (file store)";
    const std::string me = bind_ip_.s_addr == htonl(INADDR_ANY) ? "127.0.0.1" : ipv4_string(bind_ip_);
    std::error_code fec;
    fs::create_directories(directory_, fec);
    const fs::path mine = rank_file(rank_);
    const fs::path tmp = fs::path(directory_) / (".rank-" + std::to_string(rank_) + ".tmp");
    {
      std::ofstream out(tmp);
      out << "weft-tcp-rank 1 " << me << ' ' << port_ << ' ' << size_ << ' ' << instance_ << '\n';
      expects(static_cast<bool>(out), errc::io, where, "rank ", rank_, " cannot write ", tmp.string());
    }
    fs::rename(tmp, mine, fec);  // atomic: readers never see half a line
    expects(!fec, errc::io, where, "rank ", rank_, " cannot publish ", mine.string(), ": ", fec.message());
    table_[static_cast<std::size_t>(rank_)] = {me, port_, instance_};
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      std::string why;
      for (;;) {
        if (auto a = read_rank_file(q, why)) {
          table_[static_cast<std::size_t>(q)] = *a;
          break;
        }
        expects(clock_type::now() < until, errc::timeout, where, "rank ", rank_, ": rank ", q,
                " did not publish its address in ", directory_, " before the connect timeout (", why, ")");
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  }

  /// File-store mode: re-reads rank q's file (it may have replaced a stale one since).
  void refresh(int q) {
    std::string why;
    if (!directory_.empty())
      if (auto a = read_rank_file(q, why)) table_[static_cast<std::size_t>(q)] = *a;
  }

  // ---- mesh -----------------------------------------------------------------------------------

  std::string mesh_admission(const peer_identity& p) {
    using weft::detail::concat;
    if (p.size != size_) return concat("rank ", p.rank, " has size ", p.size, " but rank ", rank_, " has ", size_);
    if (p.count != conns_)
      return concat("rank ", p.rank, " uses ", p.count, " connections per peer but rank ", rank_, " uses ", conns_);
    if (p.rank <= rank_ || p.rank >= size_) return concat("rank ", p.rank, " may not connect to rank ", rank_);
    if (p.index < 0 || p.index >= conns_) return concat("connection index ", p.index, " is outside [0, ", conns_, ")");
    if (table_[static_cast<std::size_t>(p.rank)].instance != p.instance) refresh(p.rank);
    if (table_[static_cast<std::size_t>(p.rank)].instance != p.instance)
      return concat("the process claiming rank ", p.rank, " is not the one the rendezvous named");
    // An open connection (q, k) may be replaced by the same process (its first attempt timed out
    // after this side admitted it): the instance check above says it is that process.
    return {};
  }

  void connect_mesh(int q, int k, const tcp_mesh_request& req, deadline until) {
    constexpr const char* where = "weft::comm::tcp_transport::tcp_transport";
    peer_identity id = me();
    id.index = k;
    std::string last = "not tried";
    for (;;) {
      const rank_address a = table_[static_cast<std::size_t>(q)];
      const auto addr = parse_ipv4(a.host);
      int err = 0;
      if (unique_fd fd = addr ? try_connect(*addr, a.port, bind_ip_, until, err) : unique_fd{}) {
        handshake hs(
            handshake::role::client, conn_kind::tcp_mesh, id, secret_,
            [&](const peer_identity& p) -> std::string {
              if (p.rank != q || p.size != size_ || p.count != conns_ || p.instance != a.instance)
                return weft::detail::concat("the process at ", a.host, ":", a.port, " is not rank ", q,
                                            " of this job (a stale address?)");
              return {};
            },
            limits_);
        drive(fd.get(), hs, std::min(until, clock_type::now() + limits_.handshake_timeout));
        if (hs.state() == handshake::status::done) return adopt(std::move(fd), q, k, req);
        last = hs.failure();
        // With a rank-0 table every address is current: a disagreement is the job's configuration.
        // A file store may hold a stale file that its rank is about to replace: re-read and retry.
        expects(!directory_.empty() || (hs.failure_code() != errc::mismatch && hs.failure_code() != errc::parse),
                errc::mismatch, where, "rank ", rank_, " connecting to rank ", q, ": ", last);
      } else {
        last = addr ? std::string(std::strerror(err)) : "no numeric address";
      }
      expects(clock_type::now() < until, errc::timeout, where, "rank ", rank_, " cannot connect to rank ", q, " at ",
              a.host, ":", a.port, " before the connect timeout: ", last);
      refresh(q);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  void accept_mesh(const tcp_mesh_request& req, deadline until) {
    constexpr const char* where = "weft::comm::tcp_transport::tcp_transport";
    int missing = (size_ - 1 - rank_) * conns_;
    if (missing == 0) return;
    const peer_identity id = me();
    handshake_pool pool(
        listener_.get(),
        [&] {
          return std::make_unique<handshake>(
              handshake::role::server, conn_kind::tcp_mesh, id, secret_,
              [&](const peer_identity& p) { return mesh_admission(p); }, limits_);
        },
        limits_, log_);
    while (missing > 0) {
      auto a = pool.next(until);
      if (!a) {
        std::string who;
        for (int q = rank_ + 1; q < size_; ++q)
          for (int k = 0; k < conns_; ++k)
            if (!fds_[slot(q, k)]) {
              who += " " + std::to_string(q);
              break;
            }
        weft::detail::raise(errc::timeout, where, "rank ", rank_, ": ranks", who,
                            " did not connect before the connect timeout", log_.summary());
      }
      if (a->fd < 0)
        weft::detail::raise(errc::mismatch, where, "rank ", rank_,
                            " refused a rank that holds the job secret: ", a->refused);
      if (!fds_[slot(a->peer.rank, a->peer.index)]) --missing;
      adopt(unique_fd(a->fd), a->peer.rank, a->peer.index, req);
    }
  }

  int rank_, size_, conns_;
  wire_limits limits_;
  connection_log log_;
  job_secret secret_;
  std::uint64_t instance_ = 0;
  std::string directory_;
  in_addr bind_ip_{};
  unique_fd listener_;
  std::uint16_t port_ = 0;
  std::vector<rank_address> table_;  // every rank's data address (from the rendezvous)
  std::vector<unique_fd> fds_;       // (peer, connection) -> socket
};

}  // namespace weft::comm::detail

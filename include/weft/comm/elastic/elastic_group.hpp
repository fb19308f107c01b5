// A member of an elastic group: talks to the coordinator (join, heartbeats, rounds), rebuilds its
// tcp mesh whenever the membership epoch changes, and keeps the shared state bit-identical: after
// every round a member whose state hash differs from the majority pulls the state from a member
// that has it and re-verifies the hash (PCCL, Keller et al. 2025; DiLoCo, Douillard et al. 2023).
#pragma once

#include <weft/comm/allreduce.hpp>
#include <weft/comm/detail/handshake.hpp>
#include <weft/comm/detail/handshake_io.hpp>
#include <weft/comm/elastic/line_protocol.hpp>
#include <weft/comm/elastic/mesh_transport.hpp>
#include <weft/comm/elastic/shared_state.hpp>
#include <weft/comm/fault/failure.hpp>
#include <weft/core/crypto.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace weft::comm::elastic {

/// Settings of one member. A plain aggregate.
struct group_options {
  std::string coordinator_host = "127.0.0.1";
  int coordinator_port = 0;
  std::string name;                ///< unique in the group; appears in every error
  std::string host = "127.0.0.1";  ///< where this member listens for its peers (numeric IPv4)
  int port = 0;                    ///< 0: any free port
  std::chrono::milliseconds heartbeat_interval{200};
  std::chrono::milliseconds round_timeout{30'000};      ///< waiting for the other members at a step boundary
  std::chrono::milliseconds connect_timeout{3'000};     ///< building the mesh of a new epoch
  std::chrono::milliseconds collective_timeout{5'000};  ///< each collective and each state transfer
  bool accept_joins = true;  ///< this member's vote on admitting joiners at the next boundary
  /// The job secret (16 to 1024 bytes) shared with the coordinator and every member; "" reads
  /// WEFT_JOB_SECRET. Without either the member refuses to join (errc::invalid_argument) unless
  /// allow_unauthenticated.
  std::string secret;
  /// Opt in to a group without a secret (or set WEFT_ALLOW_UNAUTHENTICATED=1): the coordinator and
  /// the members are not authenticated. Said once on stderr when used.
  bool allow_unauthenticated = false;
  /// A handshake (with the coordinator or a member) must finish within this, or it is retried
  /// (members) or fails (the coordinator).
  std::chrono::milliseconds handshake_timeout{2'000};
  /// Data connections per pair of members and the message size from which a message is split over
  /// them; both the same in every member (mesh_options).
  int connections = 2;
  std::size_t stripe_min = std::size_t{1} << 18;
  /// TLS 1.3 on this member's connection to the coordinator and on its data connections to the
  /// other members, after weft's handshake (opt-in; the same in the coordinator
  /// (coordinator_options::tls) and every member, or the handshake refuses the connection, naming
  /// TLS): weft::comm::tls_security::with_psk(secret) or ::with_certificates(files) from
  /// weft/comm/tls.hpp (link OpenSSL::SSL). Null: after the handshake the membership lines and
  /// the data travel in the clear.
  std::shared_ptr<const stream_security> tls{};
};

/// What a round decided. A plain value.
struct epoch_info {
  std::uint64_t epoch = 0;
  int rank = 0;  ///< this member's index in the ring order
  int size = 0;
  std::vector<std::string> members;   ///< names in ring order
  std::vector<std::string> departed;  ///< members of this member's previous epoch that are gone (died, stalled, left)
  std::vector<std::string> joined;    ///< members new since this member's previous epoch
  bool pulled_state = false;          ///< this member's state was replaced by the majority's
  int sent_state_to = 0;              ///< members this one sent the state to
};

/// One member. Construction connects to the coordinator and says HELLO with the state's spec
/// (a different shape or dtype than the group's is refused: errc::mismatch naming both specs).
/// sync() is the step boundary; transport() the current epoch's mesh; allreduce() a collective on
/// it that restores its input on failure. With opt.tls the coordinator connection runs TLS after
/// the handshake (a failed TLS handshake is errc::mismatch naming TLS). Not thread-safe (one thread
/// drives it; an internal thread sends heartbeats). Destruction leaves gracefully.
class elastic_group {
 public:
  elastic_group(shared_state& state, group_options opt) : state_(&state), opt_(std::move(opt)) {
    constexpr const char* where = "weft::comm::elastic::elastic_group";
    expects(!opt_.name.empty() && opt_.name.find(' ') == std::string::npos, errc::invalid_argument, where, "name '",
            opt_.name, "' must be non-empty without spaces");
    expects(opt_.heartbeat_interval.count() > 0 && opt_.round_timeout.count() > 0 && opt_.connect_timeout.count() > 0 &&
                opt_.collective_timeout.count() > 0,
            errc::invalid_argument, where, "every interval and timeout must be positive");
    expects(!state.tensors().empty(), errc::invalid_argument, where, "the shared state has no tensors");
    expects(opt_.handshake_timeout.count() > 0, errc::invalid_argument, where, "handshake_timeout must be positive");
    const std::string bad_name = check_member_address({opt_.name, opt_.host, 1, 0});
    expects(bad_name.empty(), errc::invalid_argument, where, bad_name);
    secret_ = comm::detail::job_secret::resolve(opt_.secret, where);
    limits_.handshake_timeout = opt_.handshake_timeout;
    instance_ = crypto::random_u64() | 1;
    comm::detail::require_secret_or_opt_in(
        secret_, comm::detail::unauthenticated_allowed(opt_.allow_unauthenticated, where), where,
        weft::detail::concat("this member's port on ", opt_.host, " and the coordinator"),
        "group_options::allow_unauthenticated");
    listen_fd_ = detail::listen_on(opt_.host, opt_.port, where);
    try {
      const auto until = clock_type::now() + opt_.connect_timeout;
      ctl_ = detail::connect_to(opt_.coordinator_host, opt_.coordinator_port, until, where, "the coordinator");
      comm::detail::peer_identity id;
      id.name = opt_.name;
      id.instance = instance_;
      id.tls = opt_.tls != nullptr;
      comm::detail::handshake hs(
          comm::detail::handshake::role::client, comm::detail::conn_kind::coordinator, id, secret_,
          [](const comm::detail::peer_identity& p) {
            return p.name == "coordinator" ? std::string() : std::string("the peer is not an elastic coordinator");
          },
          limits_);
      comm::detail::drive(ctl_, hs, std::min(until, clock_type::now() + opt_.handshake_timeout));
      if (hs.state() != comm::detail::handshake::status::done)
        weft::detail::raise(hs.failure_code() == errc::timeout ? errc::timeout : errc::mismatch, where, opt_.name,
                            ": the handshake with the coordinator failed: ", hs.failure());
      if (opt_.tls) secure_control(std::min(until, clock_type::now() + opt_.handshake_timeout));
      send_line(to_line(hello_line{opt_.name, opt_.host, opt_.port, state.spec(), instance_}));
      const std::string reply = read_line(until);
      if (reply.rfind("REFUSED ", 0) == 0)
        weft::detail::raise(errc::mismatch, where, "the coordinator refused ", opt_.name, ": ", reply.substr(8));
      expects(reply == "WELCOME", errc::io, where, "unexpected reply to HELLO: '", reply.substr(0, 64), "'");
    } catch (...) {
      close_sockets();
      throw;
    }
    heartbeat_ = std::thread([this] { beat(); });
  }
  elastic_group(const elastic_group&) = delete;
  elastic_group& operator=(const elastic_group&) = delete;
  ~elastic_group() { leave(); }

  /// The step boundary: reports this member's revision and hash, waits for the round's decision,
  /// rebuilds the mesh when the epoch changed (or after a failed collective), and pulls or serves
  /// the state so every member ends the call holding the majority's bits. Throws errc::timeout
  /// (round or transfer deadline), errc::peer_failure (coordinator gone, or a member died during
  /// the transfer: call sync() again), errc::mismatch (a pulled state failed verification).
  epoch_info sync() {
    constexpr const char* where = "weft::comm::elastic::elastic_group::sync";
    expects(ctl_ >= 0, errc::precondition, where, opt_.name, " has left the group");
    send_line(to_line(ready_line{state_->revision(), state_->hash(), opt_.accept_joins, broken_}));
    const std::string line = read_line(clock_type::now() + opt_.round_timeout);
    if (line.rfind("REFUSED ", 0) == 0) {
      lost_ = true;
      weft::detail::raise(errc::mismatch, where, "the coordinator refused ", opt_.name, ": ", line.substr(8));
    }
    const epoch_line ep = parse_epoch_line(line, limits_);
    const std::uint64_t e = ep.epoch, win_rev = ep.revision, win_hash = ep.hash;
    const int me = ep.index, n = static_cast<int>(ep.members.size()), source = ep.source;
    const auto& self = ep.members[idx(me)].address;
    expects(self.name == opt_.name && self.instance == instance_, errc::parse, where, opt_.name,
            ": the coordinator's EPOCH line puts '", self.name, "' at this member's index");
    std::vector<peer_address> members(static_cast<std::size_t>(n));
    std::vector<std::uint64_t> hashes(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      members[idx(i)] = ep.members[idx(i)].address;
      hashes[idx(i)] = ep.members[idx(i)].hash;
    }
    epoch_info info;
    info.epoch = e;
    info.rank = me;
    info.size = n;
    for (auto& m : members) info.members.push_back(m.name);
    if (!info_.members.empty()) {
      for (const auto& old : info_.members)
        if (std::find(info.members.begin(), info.members.end(), old) == info.members.end())
          info.departed.push_back(old);
      for (const auto& now : info.members)
        if (std::find(info_.members.begin(), info_.members.end(), now) == info_.members.end())
          info.joined.push_back(now);
    }
    if (!mesh_ || mesh_->epoch() != e || broken_) {
      mesh_.reset();
      broken_ = true;  // until the new mesh stands
      mesh_ = std::make_unique<mesh_transport>(members, me, listen_fd_, e, clock_type::now() + opt_.connect_timeout,
                                               secret_, limits_,
                                               mesh_options{opt_.connections, opt_.stripe_min, {}, opt_.tls});
      broken_ = false;
      channel_ = 1;
    }
    try {
      transfer_state(info, hashes, win_rev, win_hash, source);
    } catch (...) {
      broken_ = true;
      throw;
    }
    info_ = info;
    return info;
  }

  /// The current epoch's mesh (errc::precondition before the first sync()).
  mesh_transport& transport() {
    expects(mesh_ != nullptr, errc::precondition, "weft::comm::elastic::elastic_group::transport", "call sync() first");
    return *mesh_;
  }
  const epoch_info& info() const noexcept { return info_; }
  const std::string& name() const noexcept { return opt_.name; }
  /// False once the coordinator connection is gone: the coordinator stopped, or it declared this
  /// member dead (missed heartbeats) and closed it. Such a member must rejoin as a new member.
  bool connected() const noexcept { return !lost_; }
  /// This member's vote on admitting joiners at the next boundaries.
  void set_accept_joins(bool accept) noexcept { opt_.accept_joins = accept; }

  /// allreduce on the current epoch (a fresh channel per call, the group's collective timeout
  /// unless opt.timeout is shorter). On failure `data` is restored and fault::collective_failure
  /// thrown; the mesh is then marked broken, so the next sync() asks for a new epoch.
  template <element_type T, class Op = op::sum>
  requires reduce_op<Op, T>
  void allreduce(std::span<T> data, Op op = {}, options opt = {}) {
    opt.channel = channel_++;
    opt.timeout = std::min(opt.timeout, opt_.collective_timeout);
    run_collective(
        data, [&] { comm::allreduce(transport(), data, op, opt); }, opt.channel);
  }
  /// Runs fn(transport(), channel) as one collective with restore-on-failure semantics.
  template <class T, class Fn>
  void run_collective(std::span<T> data, Fn&& fn, std::uint32_t channel) {
    try {
      fault::restoring(data, transport().rank(), channel, fn);
    } catch (...) {
      broken_ = true;
      throw;
    }
  }
  /// A fresh channel of the current epoch for a user-driven collective.
  std::uint32_t next_channel() noexcept { return channel_++; }

  /// Leaves gracefully (the coordinator drops this member at once). Idempotent.
  void leave() noexcept {
    if (ctl_ >= 0) {
      try {
        send_line("LEAVE");
      } catch (...) {  // the coordinator may be gone; leaving is best effort
      }
    }
    stop_heartbeat();
    mesh_.reset();
    close_sockets();
  }
  /// Leaves abruptly, as a crashed process would: closes every socket without a word. For tests.
  void crash() noexcept {
    stop_heartbeat();
    mesh_.reset();
    close_sockets();
  }

 private:
  static std::size_t idx(int i) noexcept { return static_cast<std::size_t>(i); }

  void transfer_state(epoch_info& info, const std::vector<std::uint64_t>& hashes, std::uint64_t win_rev,
                      std::uint64_t win_hash, int source) {
    constexpr const char* where = "weft::comm::elastic::elastic_group::sync";
    const std::uint32_t ch = 0x7fff0000u;  // state transfers never share a channel with collectives
    const msg_tag tag{ch, static_cast<std::uint32_t>(win_hash)};
    const auto until = clock_type::now() + opt_.collective_timeout;
    const bool stale = state_->hash() != win_hash || state_->revision() != win_rev;
    if (info.rank == source) {
      for (int j = 0; j < info.size; ++j) {
        if (j == source || hashes[idx(j)] == win_hash) continue;
        std::uint64_t rev = state_->revision();
        mesh_->send(j, tag, std::as_bytes(std::span<const std::uint64_t>(&rev, 1)), until);
        for (const auto& t : state_->tensors()) mesh_->send(j, tag, std::span<const std::byte>(t.bytes), until);
        ++info.sent_state_to;
      }
    } else if (stale) {
      std::uint64_t rev = 0;
      mesh_->recv(source, tag, std::as_writable_bytes(std::span<std::uint64_t>(&rev, 1)), until);
      for (const auto& t : state_->tensors()) mesh_->recv(source, tag, t.bytes, until);
      state_->set_revision(rev);
      expects(state_->hash() == win_hash, errc::mismatch, where, opt_.name, " pulled revision ", rev, " from ",
              info.members[idx(source)], " but it hashes to ", state_->hash(), ", not the majority's ", win_hash);
      info.pulled_state = true;
    }
  }

  // Runs the TLS handshake on the coordinator connection (this member is the client).
  void secure_control(deadline until) {
    constexpr const char* where = "weft::comm::elastic::elastic_group";
    ctl_tls_ = opt_.tls->open(ctl_, true, "the coordinator");
    for (;;) {
      short events = 0;
      try {
        if (ctl_tls_->handshake(events)) return;
      } catch (const error& e) {
        weft::detail::raise(static_cast<errc>(e.code().value()), where, opt_.name, ": ", e.what());
      }
      expects(clock_type::now() < until, errc::timeout, where, opt_.name,
              ": the TLS handshake with the coordinator did not finish before the deadline");
      pollfd p{ctl_, events, 0};
      ::poll(&p, 1, detail::remaining_ms(until));
    }
  }

  // Writes all of `line` before `until` (under ctl_mutex_). False when the connection failed.
  bool write_control(const std::string& line, deadline until) {
    if (!ctl_tls_) return detail::write_all(ctl_, line.data(), line.size(), until);
    std::size_t done = 0;
    while (done < line.size()) {
      // A record TLS could not send whole is offered again with the same bytes (done stays).
      const std::span<const std::byte> rest(reinterpret_cast<const std::byte*>(line.data()) + done, line.size() - done);
      std::size_t n = 0;
      try {
        n = ctl_tls_->write_some(&rest, 1);
      } catch (const error&) {
        return false;
      }
      done += n;
      if (n > 0) continue;
      pollfd q{ctl_, POLLOUT, 0};
      if (::poll(&q, 1, detail::remaining_ms(until)) <= 0 && clock_type::now() >= until) return false;
    }
    return true;
  }

  void send_line(const std::string& s) {
    std::lock_guard lock(ctl_mutex_);
    const std::string line = s + "\n";
    const bool ok = ctl_ >= 0 && write_control(line, clock_type::now() + opt_.round_timeout);
    if (!ok) lost_ = true;
    expects(ok, errc::peer_failure, "weft::comm::elastic::elastic_group", opt_.name,
            ": the coordinator connection is closed (the coordinator died, or dropped this member)");
  }
  std::string read_line(deadline until) {
    for (;;) {
      const auto nl = inbox_.find('\n');
      if (nl != std::string::npos) {
        std::string line = inbox_.substr(0, nl);
        inbox_.erase(0, nl + 1);
        return line;
      }
      char buf[4096];
      const std::size_t r = receive_control(buf, sizeof buf);
      if (r == 0) {
        pollfd p{ctl_, POLLIN, 0};
        const int rc = ::poll(&p, 1, detail::remaining_ms(until));
        expects(rc > 0 || clock_type::now() < until, errc::timeout, "weft::comm::elastic::elastic_group", opt_.name,
                ": no decision from the coordinator before the deadline (a member is stalled, or the group waits "
                "for min_members)");
        continue;
      }
      inbox_.append(buf, r);
      if (inbox_.find('\n') == std::string::npos && inbox_.size() > max_coordinator_line_bytes) {
        lost_ = true;
        weft::detail::raise(errc::parse, "weft::comm::elastic::elastic_group", opt_.name,
                            ": the coordinator sent a line longer than ", max_coordinator_line_bytes, " bytes");
      }
    }
  }
  // What the coordinator sent that is here now, without waiting (0: nothing yet). Throws
  // errc::peer_failure once the connection closed or failed.
  std::size_t receive_control(char* buf, std::size_t n) {
    constexpr const char* where = "weft::comm::elastic::elastic_group";
    if (ctl_tls_) {
      std::lock_guard lock(ctl_mutex_);  // the heartbeat thread writes through the same TLS session
      try {
        return ctl_tls_->read_some(reinterpret_cast<std::byte*>(buf), n);
      } catch (const error& e) {
        lost_ = true;
        weft::detail::raise(errc::peer_failure, where, opt_.name,
                            ": the coordinator connection closed or failed (it stopped, or declared this member "
                            "dead): ",
                            e.what());
      }
    }
    const ssize_t r = ::recv(ctl_, buf, n, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    if (r <= 0) lost_ = true;
    expects(r > 0, errc::peer_failure, where, opt_.name,
            ": the coordinator closed the connection (it stopped, or declared this member dead)");
    return static_cast<std::size_t>(r);
  }
  void beat() {
    std::unique_lock lock(hb_mutex_);
    while (!hb_stop_) {
      hb_cv_.wait_for(lock, opt_.heartbeat_interval, [this] { return hb_stop_; });
      if (hb_stop_) break;
      try {
        send_line("HB");
      } catch (...) {
        break;  // the next sync() reports the closed connection
      }
    }
  }
  void stop_heartbeat() noexcept {
    {
      std::lock_guard lock(hb_mutex_);
      hb_stop_ = true;
    }
    hb_cv_.notify_all();
    if (heartbeat_.joinable()) heartbeat_.join();
  }
  void close_sockets() noexcept {
    std::lock_guard lock(ctl_mutex_);
    ctl_tls_.reset();  // borrows ctl_
    if (ctl_ >= 0) ::close(ctl_), ctl_ = -1;
    if (listen_fd_ >= 0) ::close(listen_fd_), listen_fd_ = -1;
  }

  shared_state* state_;
  group_options opt_;
  comm::detail::job_secret secret_;
  comm::detail::wire_limits limits_;
  std::uint64_t instance_ = 0;
  int listen_fd_ = -1;
  int ctl_ = -1;
  std::unique_ptr<secure_stream> ctl_tls_;  // with opt.tls: the coordinator connection's TLS session
  std::mutex ctl_mutex_;  // heartbeat thread and driver both write the control socket (and share ctl_tls_)
  std::string inbox_;
  std::atomic<bool> lost_{false};
  std::unique_ptr<mesh_transport> mesh_;
  bool broken_ = false;
  std::uint32_t channel_ = 1;
  epoch_info info_;
  std::thread heartbeat_;
  std::mutex hb_mutex_;
  std::condition_variable hb_cv_;
  bool hb_stop_ = false;
};

}  // namespace weft::comm::elastic

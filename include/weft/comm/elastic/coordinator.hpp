// The coordinator of an elastic group (Boost.Asio, one never-blocking thread): admits
// authenticated peers whose state spec matches, watches heartbeats and rounds, and publishes
// membership epochs with the majority state hash, as PCCL's master node and torchelastic do.
// With coordinator_options::tls every connection runs TLS 1.3 after weft's handshake.
#pragma once

#include <weft/comm/detail/handshake.hpp>
#include <weft/comm/detail/handshake_io.hpp>
#include <weft/comm/detail/wire.hpp>
#include <weft/comm/elastic/line_protocol.hpp>
#include <weft/comm/stream_security.hpp>
#include <weft/core/error.hpp>

#include <boost/asio.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <variant>
#include <vector>

namespace weft::comm::elastic {

/// Settings of a coordinator. A plain aggregate.
struct coordinator_options {
  std::string host = "127.0.0.1";  ///< interface to listen on (numeric IPv4)
  int port = 0;                    ///< 0: any free port (read it back with port())
  int min_members = 1;             ///< members needed before the first epoch is published (only the first)
  std::chrono::milliseconds heartbeat_timeout{1500};  ///< silence after which a member is declared dead
  /// The state spec every member must match. Empty: the spec of the first epoch's members (the
  /// largest group of joiners that agree), released when the group empties. Give it (or a secret)
  /// so that a stranger cannot decide it.
  std::string spec;
  /// Optional ring order: given the members' names (in admission order), a permutation of
  /// [0, n) (e.g. plan_ring over measured bandwidths). Empty: admission order.
  std::function<std::vector<int>(const std::vector<std::string>&)> ring_planner;
  /// The job secret every member must prove it holds (16 to 1024 bytes); "" reads
  /// WEFT_JOB_SECRET. Without either the coordinator refuses to start (errc::invalid_argument)
  /// unless allow_unauthenticated.
  std::string secret;
  /// Opt in to a group without a secret (or set WEFT_ALLOW_UNAUTHENTICATED=1): anyone who can
  /// connect may join it. Said once on stderr when used.
  bool allow_unauthenticated = false;
  /// A new connection must finish its handshake and say HELLO within this, or it is dropped.
  std::chrono::milliseconds handshake_timeout{2'000};
  /// Once some member is ready at a step boundary, how long the others have to get there; a
  /// member that misses max_missed_rounds such deadlines in a row (its heartbeat may still run) is
  /// dropped, so one hung member cannot stall the group.
  std::chrono::milliseconds round_timeout{10'000};
  int max_missed_rounds = 2;
  /// Connections open at once (members, joiners and handshakes); more are closed at once.
  std::size_t max_connections = 512;
  /// TLS 1.3 on every member connection, after weft's handshake (opt-in; members must set the same
  /// group_options::tls, or the handshake refuses them, naming TLS): weft::comm::tls_security::
  /// with_psk(secret) or ::with_certificates(files) from weft/comm/tls.hpp (link OpenSSL::SSL).
  /// Null: the membership lines travel in the clear, authenticated only by the handshake.
  std::shared_ptr<const stream_security> tls{};
};

/// Runs the membership protocol over a line-based tcp protocol (see docs/comm-elastic.md):
///   peer → coordinator: HELLO name host port spec instance | READY revision hash accept rebuild | HB | LEAVE
///   coordinator → peer: WELCOME | REFUSED reason | EPOCH e index n rev hash source {name host port hash instance}*
/// A round completes when every member sent READY; then joiners are admitted if every member
/// accepted, dead, departed or stalled members are dropped, and if anything changed (or a member
/// asked for a rebuild after a failed collective) the epoch number grows. Only the reports of
/// members that hold the group's state (they reported the state agreed at their last round)
/// decide which state is the majority, every member's while none does; a tie goes to the
/// longest-standing member (with a job secret: the highest revision, then the longest-standing). Thread-safe: the
/// public functions may be called from any thread; the protocol runs on the coordinator's own thread, which never
/// blocks. Costs per round: O(members · log members) plus one line per member. With opt.tls each
/// connection's TLS handshake follows weft's (driven on the socket without blocking, like it) and
/// every line then travels in TLS records; a connection whose TLS handshake fails is dropped and
/// logged, naming TLS.
class coordinator {
 public:
  /// Binds the listening socket (so port() is known before start()). Throws errc::invalid_argument
  /// for min_members < 1, non-positive timeouts, max_missed_rounds < 1 or a bad secret, errc::io
  /// when the address is taken.
  explicit coordinator(coordinator_options opt) : opt_(std::move(opt)), acceptor_(io_) {
    constexpr const char* where = "weft::comm::elastic::coordinator";
    expects(opt_.min_members >= 1, errc::invalid_argument, where, "min_members ", opt_.min_members,
            " must be at least 1");
    expects(opt_.heartbeat_timeout.count() > 0 && opt_.handshake_timeout.count() > 0 && opt_.round_timeout.count() > 0,
            errc::invalid_argument, where, "heartbeat_timeout, handshake_timeout and round_timeout must be positive");
    expects(opt_.max_missed_rounds >= 1 && opt_.max_connections >= 1, errc::invalid_argument, where,
            "max_missed_rounds and max_connections must be at least 1");
    expects(opt_.port >= 0 && opt_.port <= 65535, errc::invalid_argument, where, "port ", opt_.port,
            " is outside [0, 65535]");
    expects(opt_.spec.empty() || comm::detail::is_token(opt_.spec), errc::invalid_argument, where,
            "spec must be printable ASCII without spaces");
    secret_ = comm::detail::job_secret::resolve(opt_.secret, where);
    limits_.handshake_timeout = opt_.handshake_timeout;
    const auto addr = comm::detail::parse_ipv4(opt_.host);
    expects(addr.has_value(), errc::invalid_argument, where, "host '", opt_.host, "' is not a numeric IPv4 address");
    comm::detail::require_secret_or_opt_in(
        secret_, comm::detail::unauthenticated_allowed(opt_.allow_unauthenticated, where), where,
        weft::detail::concat(opt_.host, ":", opt_.port == 0 ? std::string("<port>") : std::to_string(opt_.port),
                             opt_.spec.empty() ? " (and with no spec it may decide the state spec)" : ""),
        "coordinator_options::allow_unauthenticated");
    boost::system::error_code ec;
    const tcp::endpoint ep(boost::asio::ip::make_address_v4(opt_.host, ec), static_cast<unsigned short>(opt_.port));
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(boost::asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(boost::asio::socket_base::max_listen_connections, ec);
    expects(!ec, errc::io, where, "cannot listen on ", opt_.host, ":", opt_.port, ": ", ec.message());
    port_ = acceptor_.local_endpoint(ec).port();
    spec_ = opt_.spec;
  }
  coordinator(const coordinator&) = delete;
  coordinator& operator=(const coordinator&) = delete;
  ~coordinator() { stop(); }

  /// Starts serving on a new thread. Call once (errc::precondition otherwise).
  void start() {
    std::lock_guard lock(life_);
    expects(!started_, errc::precondition, "weft::comm::elastic::coordinator::start", "already started");
    started_ = true;
    accept();
    tick();
    thread_ = std::thread([this] { io_.run(); });
  }
  /// Stops serving and closes every connection (members then fail their next round). Idempotent;
  /// always returns (the io thread never blocks, and stopping does not wait for pending work).
  void stop() {
    std::lock_guard lock(life_);
    if (!thread_.joinable()) return;
    boost::asio::post(io_, [this] {
      stopping_ = true;
      boost::system::error_code ec;
      acceptor_.close(ec);
      timer_.cancel();
      accept_timer_.cancel();
      for (auto& [id, p] : peers_) p->sock.close(ec);
      peers_.clear();
      io_.stop();  // whatever is still queued (a tick that already fired) must not keep run() alive
    });
    thread_.join();
  }

  int port() const noexcept { return port_; }
  /// The last published epoch (0 before the first).
  std::uint64_t epoch() const {
    std::lock_guard lock(m_);
    return epoch_;
  }
  /// Names of the members of the last published epoch, in ring order, less those dropped since.
  std::vector<std::string> members() const {
    std::lock_guard lock(m_);
    return members_;
  }
  /// What happened, one line per event ("admitted w3 in epoch 4", "w1 missed heartbeats").
  /// Refused and dropped connections are counted after the first 1000 events.
  std::vector<std::string> events() const {
    std::lock_guard lock(m_);
    return events_;
  }

 private:
  using tcp = boost::asio::ip::tcp;
  using clock = std::chrono::steady_clock;
  enum class stage { handshake, secure, greeting, candidate, member };
  struct peer {
    explicit peer(tcp::socket s) : sock(std::move(s)) {}
    tcp::socket sock;
    std::uint64_t id = 0;
    stage at = stage::handshake;
    std::unique_ptr<comm::detail::handshake> hs;
    std::unique_ptr<secure_stream> tls;  // from stage::secure on, with opt.tls: every byte goes through it
    bool waiting = false;                // an async_wait of a handshake (weft's, then TLS's) is outstanding
    std::string in;                      // bytes of the line being read (bounded)
    std::array<char, 4096> buf{};
    std::deque<std::string> out;  // lines to write, oldest first
    std::size_t out_bytes = 0;
    std::size_t out_done = 0;  // bytes of out.front() written (TLS writes it a record at a time)
    bool writing = false, closing = false;
    std::string name, host, spec, from;
    int port = 0;
    std::uint64_t instance = 0;
    bool ready = false, accept = true, rebuild = false;
    // It reported the state the group agreed on at a round (so it carries it): only such members
    // vote on the next one, while any is left.
    bool holds_state = false;
    std::uint64_t revision = 0, hash = 0;
    int missed_rounds = 0;
    clock::time_point connected, last_seen;
  };
  using peer_ptr = std::shared_ptr<peer>;
  static constexpr std::size_t max_events = 1000;
  static constexpr std::size_t max_queued_bytes = std::size_t{4} << 20;  // a peer that does not read is dropped

  void log(std::string line) {
    std::lock_guard lock(m_);
    if (events_.size() < max_events)
      events_.push_back(std::move(line));
    else
      ++events_dropped_;
  }

  // ---- accepting and handshakes ------------------------------------------------------------------

  void accept() {
    if (stopping_) return;
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket s) {
      if (stopping_ || ec == boost::asio::error::operation_aborted) return;
      if (ec) {
        // Out of descriptors (or a transient error): never stop accepting; retry shortly, once
        // silent connections have been reaped.
        if (!accept_error_logged_) log("accept failed (" + ec.message() + "); retrying");
        accept_error_logged_ = true;
        accept_timer_.expires_after(std::chrono::milliseconds(50));
        accept_timer_.async_wait([this](boost::system::error_code e) {
          if (!e) accept();
        });
        return;
      }
      accept_error_logged_ = false;
      if (peers_.size() >= opt_.max_connections) {
        boost::system::error_code ignore;
        s.close(ignore);
        log("refused a connection: " + std::to_string(peers_.size()) + " connections are open");
      } else {
        start_peer(std::move(s));
      }
      accept();
    });
  }

  void start_peer(tcp::socket s) {
    auto p = std::make_shared<peer>(std::move(s));
    p->id = next_id_++;
    p->connected = p->last_seen = clock::now();
    boost::system::error_code ignore;
    p->sock.set_option(tcp::no_delay(true), ignore);
    p->sock.non_blocking(true, ignore);
    p->from = comm::detail::remote_of(p->sock.native_handle());
    comm::detail::peer_identity id;
    id.name = "coordinator";
    id.port = static_cast<std::uint16_t>(port_);
    id.tls = opt_.tls != nullptr;
    p->hs = std::make_unique<comm::detail::handshake>(
        comm::detail::handshake::role::server, comm::detail::conn_kind::coordinator, id, secret_, nullptr, limits_);
    peers_[p->id] = p;
    step_handshake(p);
  }

  void step_handshake(const peer_ptr& p) {
    if (!alive(p)) return;
    const short ev = comm::detail::handshake_step(p->sock.native_handle(), *p->hs);
    if (p->hs->finished()) {
      if (p->hs->state() != comm::detail::handshake::status::done)
        return drop(p, "handshake failed: " + p->hs->failure());
      p->name = p->hs->peer().name;
      p->hs.reset();
      if (opt_.tls) return start_tls(p);
      p->at = stage::greeting;
      return read(p);
    }
    wait_then(p, ev, "handshake", &coordinator::step_handshake);
  }
  // Waits (without blocking the thread) until p's socket can do what a handshake step asked for
  // (ev: POLLIN or POLLOUT), then takes the next step.
  void wait_then(const peer_ptr& p, short ev, const char* during, void (coordinator::*next)(const peer_ptr&)) {
    if (p->waiting) return;
    p->waiting = true;
    const auto what = (ev & POLLOUT) ? tcp::socket::wait_write : tcp::socket::wait_read;
    p->sock.async_wait(what, [this, p, during, next](boost::system::error_code ec) {
      p->waiting = false;
      if (!alive(p)) return;
      if (ec) return drop(p, std::string("connection error during the ") + during);
      (this->*next)(p);
    });
  }

  // TLS after weft's handshake: the session is driven on the socket's descriptor like the handshake
  // above (a step, then async_wait for what it needs), so this thread never blocks.
  void start_tls(const peer_ptr& p) {
    p->at = stage::secure;
    try {
      p->tls = opt_.tls->open(p->sock.native_handle(), false, "member '" + p->name + "' at " + p->from);
    } catch (const weft::error& e) {
      return drop(p, std::string("cannot start TLS: ") + e.what());
    }
    step_tls(p);
  }
  void step_tls(const peer_ptr& p) {
    if (!alive(p)) return;
    short ev = 0;
    try {
      if (p->tls->handshake(ev)) {
        p->at = stage::greeting;
        return read(p);
      }
    } catch (const weft::error& e) {
      return drop(p, e.what());  // names TLS, the member and why (a different key, an untrusted certificate)
    }
    wait_then(p, ev, "TLS handshake", &coordinator::step_tls);
  }

  // ---- lines in and out --------------------------------------------------------------------------

  void read(const peer_ptr& p) {
    if (p->tls) return read_secured(p);
    p->sock.async_read_some(boost::asio::buffer(p->buf), [this, p](boost::system::error_code ec, std::size_t n) {
      if (!alive(p)) return;
      if (ec) return drop(p, p->at >= stage::candidate ? "its connection closed (the process died or left)" : "");
      if (take(p, n)) read(p);
    });
  }
  // Decrypts what has arrived and handles it, then comes back (after the other connections had
  // their turn) until nothing is left: TLS may hold decrypted bytes that the socket no longer
  // shows, so only then does it wait for the socket to become readable.
  void read_secured(const peer_ptr& p) {
    std::size_t n = 0;
    try {
      n = p->tls->read_some(reinterpret_cast<std::byte*>(p->buf.data()), p->buf.size());
    } catch (const weft::error& e) {
      // The end of the stream, or a record that fails authentication (forged or corrupted).
      return drop(p, std::string(p->at >= stage::candidate ? "its connection closed or failed: " : "") + e.what());
    }
    if (n > 0) {
      if (take(p, n))
        boost::asio::post(io_, [this, p] {
          if (alive(p)) read_secured(p);
        });
      return;
    }
    p->sock.async_wait(tcp::socket::wait_read, [this, p](boost::system::error_code ec) {
      if (!alive(p)) return;
      if (ec) return drop(p, p->at >= stage::candidate ? "its connection closed (the process died or left)" : "");
      read_secured(p);
    });
  }
  // Handles the n bytes that arrived in p->buf, line by line; false when p was dropped meanwhile.
  bool take(const peer_ptr& p, std::size_t n) {
    p->last_seen = clock::now();
    std::size_t at = 0;
    while (alive(p) && at < n) {
      const char* start = p->buf.data() + at;
      const char* nl = static_cast<const char*>(std::memchr(start, '\n', n - at));
      const std::size_t len = nl ? static_cast<std::size_t>(nl - start) : n - at;
      if (p->in.size() + len > limits_.max_line_bytes) {
        drop(p, "sent a line longer than " + std::to_string(limits_.max_line_bytes) + " bytes");
        return false;
      }
      p->in.append(start, len);
      at += len + (nl ? 1 : 0);
      if (nl) {
        std::string line = std::move(p->in);
        p->in.clear();
        handle(p, line);
      }
    }
    return alive(p);
  }

  void write(const peer_ptr& p, std::string line) {
    if (!alive(p) || p->closing) return;
    line += '\n';
    p->out_bytes += line.size();
    p->out.push_back(std::move(line));
    if (p->out_bytes > max_queued_bytes) return drop(p, "does not read what the coordinator sends");
    flush(p);
  }
  void flush(const peer_ptr& p) {
    if (p->writing || p->out.empty()) return;
    if (p->tls) return flush_secured(p);
    p->writing = true;
    boost::asio::async_write(p->sock, boost::asio::buffer(p->out.front()),
                             [this, p](boost::system::error_code ec, std::size_t) {
                               p->writing = false;
                               if (!alive(p)) return;
                               if (ec) return drop(p, p->at >= stage::candidate ? "its connection broke" : "");
                               p->out_bytes -= p->out.front().size();
                               p->out.pop_front();
                               if (!p->out.empty()) return flush(p);
                               if (p->closing) close_now(p);
                             });
  }
  // Writes queued lines through TLS until the socket is full, then waits until it is writable. A
  // record TLS could not send whole is offered again with the same bytes (out_done stays).
  void flush_secured(const peer_ptr& p) {
    while (!p->out.empty()) {
      const std::string& front = p->out.front();
      const std::span<const std::byte> part(reinterpret_cast<const std::byte*>(front.data()) + p->out_done,
                                            front.size() - p->out_done);
      std::size_t n = 0;
      try {
        n = p->tls->write_some(&part, 1);
      } catch (const weft::error&) {
        return drop(p, p->at >= stage::candidate ? "its connection broke" : "");
      }
      if (n == 0) {
        p->writing = true;
        p->sock.async_wait(tcp::socket::wait_write, [this, p](boost::system::error_code ec) {
          p->writing = false;
          if (!alive(p)) return;
          if (ec) return drop(p, p->at >= stage::candidate ? "its connection broke" : "");
          flush(p);
        });
        return;
      }
      p->out_done += n;
      if (p->out_done == front.size()) {
        p->out_bytes -= front.size();
        p->out.pop_front();
        p->out_done = 0;
      }
    }
    if (p->closing) close_now(p);
  }

  // ---- the protocol ------------------------------------------------------------------------------

  void handle(const peer_ptr& p, const std::string& text) {
    member_line line;
    try {
      line = parse_member_line(text, limits_);
    } catch (const weft::error& e) {
      return drop(p, std::string(e.what()));
    }
    if (auto* h = std::get_if<hello_line>(&line)) {
      if (p->at != stage::greeting) return drop(p, "said HELLO twice");
      return on_hello(p, *h);
    }
    if (p->at == stage::greeting) return drop(p, "sent a message before HELLO");
    if (auto* r = std::get_if<ready_line>(&line)) {
      p->ready = true;
      p->revision = r->revision;
      p->hash = r->hash;
      p->accept = r->accept;
      p->rebuild = r->rebuild;
      p->missed_rounds = 0;
      if (!round_open_ && has_members()) {
        round_open_ = true;
        round_deadline_ = clock::now() + opt_.round_timeout;
      }
      return try_round();
    }
    if (std::holds_alternative<leave_line>(line)) return drop(p, "left gracefully");
    // HB: last_seen was refreshed when the bytes arrived.
  }

  void on_hello(const peer_ptr& p, const hello_line& h) {
    if (h.name != p->name)
      return refuse(p, "the HELLO names '" + h.name + "' but the handshake named '" + p->name + "'");
    for (auto& [id, q] : peers_)
      if (q != p && q->at >= stage::candidate && q->name == h.name)
        return refuse(p, "the name '" + h.name + "' is taken");
    if (!spec_.empty() && h.spec != spec_) {
      // The group's spec is never disclosed: the refused peer learns only its own.
      log("refused " + h.name + ": its state spec '" + h.spec + "' differs from the group's '" + spec_ + "'");
      return refuse(p,
                    "the state spec '" + h.spec + "' of peer " + h.name +
                        " differs from the group's (shapes and dtypes must match exactly)",
                    false);
    }
    p->host = h.host;
    p->port = h.port;
    p->spec = h.spec;
    p->instance = h.instance;
    p->at = stage::candidate;
    write(p, "WELCOME");
    log("hello from " + p->name);
  }

  void refuse(const peer_ptr& p, const std::string& why, bool log_it = true) {
    if (log_it) log("refused " + (p->name.empty() ? p->from : p->name) + ": " + why);
    write(p, "REFUSED " + why);
    if (!alive(p)) return;
    p->closing = true;  // closed once the refusal is written
    if (!p->writing && p->out.empty()) close_now(p);
    remove_from_group(p, "");
  }

  bool alive(const peer_ptr& p) const { return !stopping_ && peers_.count(p->id) != 0; }

  void close_now(const peer_ptr& p) {
    boost::system::error_code ec;
    p->sock.close(ec);
    peers_.erase(p->id);
  }

  // Takes p out of the group's bookkeeping (it stays connected while a refusal is written).
  void remove_from_group(const peer_ptr& p, const std::string& why) {
    const bool was_member = p->at == stage::member;
    p->at = stage::greeting;
    p->ready = false;
    if (was_member) {
      changed_ = true;
      std::lock_guard lock(m_);
      if (events_.size() < max_events) events_.push_back(p->name + " dropped: " + why);
      members_.erase(std::remove(members_.begin(), members_.end(), p->name), members_.end());
    }
    if (!has_members() && opt_.spec.empty() && was_member) spec_.clear();  // the group emptied: release its spec
  }

  void drop(const peer_ptr& p, const std::string& why) {
    if (peers_.count(p->id) == 0) return;
    if (p->at < stage::candidate && !why.empty()) log("dropped a connection from " + p->from + ": " + why);
    remove_from_group(p, why);
    close_now(p);
    try_round();
  }

  bool has_members() const {
    for (auto& [id, p] : peers_)
      if (p->at == stage::member) return true;
    return false;
  }

  void tick() {
    if (stopping_) return;
    timer_.expires_after(
        std::max(std::chrono::milliseconds(1), std::min(opt_.heartbeat_timeout, opt_.handshake_timeout) / 4));
    timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || stopping_) return;
      const auto now = clock::now();
      std::vector<std::pair<peer_ptr, std::string>> dead;
      for (auto& [id, p] : peers_) {
        if (p->at < stage::candidate && now - p->connected > opt_.handshake_timeout)
          dead.emplace_back(p,
                            "no handshake and HELLO within " + std::to_string(opt_.handshake_timeout.count()) + " ms");
        else if (p->at >= stage::candidate && now - p->last_seen > opt_.heartbeat_timeout)
          dead.emplace_back(p, "missed heartbeats for " + std::to_string(opt_.heartbeat_timeout.count()) + " ms");
      }
      if (round_open_ && now >= round_deadline_) {
        for (auto& [id, p] : peers_)
          if (p->at == stage::member && !p->ready && ++p->missed_rounds >= opt_.max_missed_rounds)
            dead.emplace_back(p, "missed " + std::to_string(p->missed_rounds) + " rounds (no READY within " +
                                     std::to_string(opt_.round_timeout.count()) + " ms each)");
        round_deadline_ = now + opt_.round_timeout;
      }
      for (auto& [p, why] : dead) drop(p, why);
      tick();
    });
  }

  void try_round() {
    if (stopping_) return;
    std::vector<peer_ptr> members, joiners;
    for (auto& [id, p] : peers_) {  // map order = connection order
      if (p->at == stage::member)
        members.push_back(p);
      else if (p->at == stage::candidate && p->ready)
        joiners.push_back(p);
    }
    for (auto& p : members)
      if (!p->ready) return;
    if (members.empty() && spec_.empty() && !joiners.empty()) {
      // No spec yet: the largest group of joiners that agree decides it (a tie: the earliest).
      std::map<std::string, int> count;
      for (auto& p : joiners) ++count[p->spec];
      std::string best = joiners.front()->spec;
      for (auto& p : joiners)
        if (count[p->spec] > count[best]) best = p->spec;
      if (count[best] < opt_.min_members && epoch() == 0) return;
      spec_ = best;
      std::vector<peer_ptr> keep;
      for (auto& [id, p] : std::map<std::uint64_t, peer_ptr>(peers_))
        if (p->at == stage::candidate && p->spec != spec_)
          refuse(p, "the state spec '" + p->spec + "' of peer " + p->name +
                        " differs from the group's (shapes and dtypes must match exactly)");
      for (auto& p : joiners)
        if (p->spec == spec_) keep.push_back(p);
      joiners = keep;
    }
    bool admit = false;
    if (members.empty())  // min_members gates only the first epoch; later a lone joiner restarts the group
      admit = !joiners.empty() && (static_cast<int>(joiners.size()) >= opt_.min_members || epoch() > 0);
    else
      admit = !joiners.empty() && std::all_of(members.begin(), members.end(), [](auto& p) { return p->accept; });
    if (members.empty() && !admit) return;
    // The majority (revision, hash) among the members that hold the group's state (every member
    // when none does; the joiners being admitted at bootstrap). A member admitted but not yet
    // synced still reports the state it came with: fresh joiners whose state transfer failed
    // would otherwise outvote the members that carry the training, and wipe it (several joiners
    // start from one identical state). Claims never win a tie unless every peer proved it holds
    // the job secret.
    std::vector<peer_ptr> holders;
    for (auto& p : members)
      if (p->holds_state) holders.push_back(p);
    const auto& voters = members.empty() ? joiners : holders.empty() ? members : holders;
    std::map<std::pair<std::uint64_t, std::uint64_t>, std::pair<int, std::size_t>> votes;  // -> (count, first voter)
    for (std::size_t i = 0; i < voters.size(); ++i) {
      auto [it, fresh] = votes.try_emplace({voters[i]->revision, voters[i]->hash}, 0, i);
      ++it->second.first;
    }
    auto best = votes.begin();
    for (auto it = votes.begin(); it != votes.end(); ++it) {
      const bool more = it->second.first > best->second.first;
      const bool tie = it->second.first == best->second.first;
      const bool wins_tie = !secret_.empty() ? std::tie(it->first.first, best->second.second) >
                                                   std::tie(best->first.first, it->second.second)
                                             : it->second.second < best->second.second;
      if (more || (tie && wins_tie)) best = it;
    }
    const auto [win_rev, win_hash] = best->first;
    bool rebuild = changed_;
    for (auto& p : members) rebuild = rebuild || p->rebuild;
    if (admit) {
      for (auto& p : joiners) {
        p->at = stage::member;
        members.push_back(p);
      }
      rebuild = true;
    }
    std::vector<std::string> names;
    for (auto& p : members) names.push_back(p->name);
    std::vector<int> order(members.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    if (opt_.ring_planner) {
      auto planned = opt_.ring_planner(names);
      auto sorted = planned;
      std::sort(sorted.begin(), sorted.end());
      if (sorted == order)
        order = planned;  // an invalid plan is ignored (and logged)
      else
        log("ring_planner returned an invalid permutation; using admission order");
    }
    std::vector<peer_ptr> ring;
    for (int i : order) ring.push_back(members[static_cast<std::size_t>(i)]);
    epoch_line line;
    line.revision = win_rev;
    line.hash = win_hash;
    line.source = -1;
    for (std::size_t i = 0; i < ring.size(); ++i) {
      if (line.source < 0 && ring[i]->hash == win_hash && ring[i]->revision == win_rev)
        line.source = static_cast<int>(i);  // the first member in ring order that holds the majority's state
      line.members.push_back({{ring[i]->name, ring[i]->host, ring[i]->port, ring[i]->instance}, ring[i]->hash});
    }
    line.source = std::max(line.source, 0);
    {
      std::lock_guard lock(m_);
      if (rebuild || epoch_ == 0) ++epoch_;
      line.epoch = epoch_;
      members_.clear();
      for (auto& p : ring) members_.push_back(p->name);
      if (admit)
        for (auto& p : joiners)
          if (events_.size() < max_events)
            events_.push_back("admitted " + p->name + " in epoch " + std::to_string(epoch_));
    }
    changed_ = false;
    round_open_ = false;
    for (std::size_t i = 0; i < ring.size(); ++i) {
      line.index = static_cast<int>(i);
      ring[i]->holds_state = ring[i]->revision == win_rev && ring[i]->hash == win_hash;
      ring[i]->ready = false;
      ring[i]->rebuild = false;
      ring[i]->missed_rounds = 0;
      write(ring[i], to_line(line));
    }
  }

  coordinator_options opt_;
  comm::detail::job_secret secret_;
  comm::detail::wire_limits limits_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer timer_{io_};
  boost::asio::steady_timer accept_timer_{io_};
  std::thread thread_;
  std::mutex life_;  // start() and stop() against each other
  bool started_ = false;
  int port_ = 0;
  // io thread only:
  bool stopping_ = false;
  bool accept_error_logged_ = false;
  std::string spec_;
  std::map<std::uint64_t, peer_ptr> peers_;
  std::uint64_t next_id_ = 1;
  bool changed_ = false;
  bool round_open_ = false;
  clock::time_point round_deadline_{};
  // Published snapshot:
  mutable std::mutex m_;
  std::uint64_t epoch_ = 0;
  std::vector<std::string> members_;
  std::vector<std::string> events_;
  std::size_t events_dropped_ = 0;
};

}  // namespace weft::comm::elastic

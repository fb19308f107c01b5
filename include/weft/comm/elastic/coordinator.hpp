// The coordinator of an elastic group (Boost.Asio, one thread): admits peers whose state spec
// matches, watches heartbeats, and at each step boundary ("round") publishes a numbered membership
// epoch in ring order with the majority state hash, the way PCCL's master node and torchelastic's
// rendezvous do. Any rank's process or a separate process can run it.
#pragma once

#include <weft/core/error.hpp>

#include <boost/asio.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <istream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace weft::comm::elastic {

/// Settings of a coordinator. A plain aggregate.
struct coordinator_options {
  std::string host = "127.0.0.1";  ///< interface to listen on (numeric IPv4)
  int port = 0;                    ///< 0: any free port (read it back with port())
  int min_members = 1;             ///< members needed before the first epoch is published (only the first)
  std::chrono::milliseconds heartbeat_timeout{1500};  ///< silence after which a member is declared dead
  std::string spec;  ///< the state spec every member must match; empty: the first member's spec
  /// Optional ring order: given the members' names (in admission order), a permutation of
  /// [0, n) (e.g. plan_ring over measured bandwidths). Empty: admission order.
  std::function<std::vector<int>(const std::vector<std::string>&)> ring_planner;
};

/// Runs the membership protocol over a line-based tcp protocol (see docs/comm-elastic.md):
///   peer → coordinator: HELLO name host port spec | READY revision hash accept rebuild | HB | LEAVE
///   coordinator → peer: WELCOME | REFUSED reason | EPOCH e index n rev hash source {name host port hash}*
/// A round completes when every member sent READY; then joiners are admitted if every member
/// accepted, dead or departed members are dropped, and if anything changed (or a member asked for
/// a rebuild after a failed collective) the epoch number grows. Thread-safe: the public functions
/// may be called from any thread; the protocol runs on the coordinator's own thread.
/// Costs per round: O(members · log members) plus one line per member.
class coordinator {
 public:
  /// Binds the listening socket (so port() is known before start()). Throws errc::invalid_argument
  /// for min_members < 1 or a non-positive heartbeat timeout, errc::io when the address is taken.
  explicit coordinator(coordinator_options opt) : opt_(std::move(opt)), acceptor_(io_) {
    constexpr const char* where = "weft::comm::elastic::coordinator";
    expects(opt_.min_members >= 1, errc::invalid_argument, where, "min_members ", opt_.min_members,
            " must be at least 1");
    expects(opt_.heartbeat_timeout.count() > 0, errc::invalid_argument, where, "heartbeat_timeout must be positive");
    boost::system::error_code ec;
    const auto addr = boost::asio::ip::make_address(opt_.host, ec);
    expects(!ec, errc::invalid_argument, where, "host '", opt_.host, "' is not an IP address");
    boost::asio::ip::tcp::endpoint ep(addr, static_cast<unsigned short>(opt_.port));
    acceptor_.open(ep.protocol());
    acceptor_.set_option(boost::asio::socket_base::reuse_address(true));
    acceptor_.bind(ep, ec);
    expects(!ec, errc::io, where, "cannot listen on ", opt_.host, ":", opt_.port, ": ", ec.message());
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    spec_ = opt_.spec;
  }
  coordinator(const coordinator&) = delete;
  coordinator& operator=(const coordinator&) = delete;
  ~coordinator() { stop(); }

  /// Starts serving on a new thread. Call once (errc::precondition otherwise).
  void start() {
    expects(!thread_.joinable(), errc::precondition, "weft::comm::elastic::coordinator::start", "already started");
    accept();
    tick();
    thread_ = std::thread([this] { io_.run(); });
  }
  /// Stops serving and closes every connection (members then fail their next round). Idempotent.
  void stop() {
    if (!thread_.joinable()) return;
    boost::asio::post(io_, [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      timer_.cancel();
      for (auto& [id, p] : peers_) p->sock.close(ec);
      peers_.clear();
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
  std::vector<std::string> events() const {
    std::lock_guard lock(m_);
    return events_;
  }

 private:
  using tcp = boost::asio::ip::tcp;
  struct peer {
    explicit peer(tcp::socket s) : sock(std::move(s)) {}
    tcp::socket sock;
    boost::asio::streambuf in;
    std::uint64_t id = 0;
    std::string name, host;
    int port = 0;
    bool hello = false, member = false, ready = false, accept = true, rebuild = false;
    std::uint64_t revision = 0, hash = 0;
    std::chrono::steady_clock::time_point last_seen;
  };
  using peer_ptr = std::shared_ptr<peer>;

  void log(std::string line) {
    std::lock_guard lock(m_);
    events_.push_back(std::move(line));
  }

  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket s) {
      if (ec) return;
      auto p = std::make_shared<peer>(std::move(s));
      p->id = next_id_++;
      p->last_seen = std::chrono::steady_clock::now();
      boost::system::error_code ignore;
      p->sock.set_option(tcp::no_delay(true), ignore);
      peers_[p->id] = p;
      read(p);
      accept();
    });
  }

  void read(const peer_ptr& p) {
    boost::asio::async_read_until(p->sock, p->in, '\n', [this, p](boost::system::error_code ec, std::size_t) {
      if (peers_.count(p->id) == 0) return;
      if (ec) {
        drop(p, p->hello ? "its connection closed (the process died or left)" : "");
        return;
      }
      std::istream is(&p->in);
      std::string line;
      std::getline(is, line);
      p->last_seen = std::chrono::steady_clock::now();
      handle(p, line);
      if (peers_.count(p->id)) read(p);
    });
  }

  void write(const peer_ptr& p, const std::string& line) {
    boost::system::error_code ec;
    boost::asio::write(p->sock, boost::asio::buffer(line + "\n"), ec);  // small lines: the kernel buffers them
  }

  void handle(const peer_ptr& p, const std::string& line) {
    std::istringstream in(line);
    std::string verb;
    in >> verb;
    if (verb == "HELLO" && !p->hello) {
      std::string spec;
      in >> p->name >> p->host >> p->port >> spec;
      if (!in || p->name.empty()) return refuse(p, "malformed HELLO '" + line + "'");
      if (spec_.empty()) spec_ = spec;
      if (spec != spec_)
        return refuse(p, "state spec '" + spec + "' of peer " + p->name + " differs from the group's '" + spec_ +
                             "' (shapes and dtypes must match exactly)");
      for (auto& [id, q] : peers_)
        if (q != p && q->hello && q->name == p->name) return refuse(p, "the name '" + p->name + "' is taken");
      p->hello = true;
      write(p, "WELCOME");
      log("hello from " + p->name);
    } else if (verb == "READY" && p->hello) {
      int accept = 1, rebuild = 0;
      in >> p->revision >> p->hash >> accept >> rebuild;
      p->ready = true;
      p->accept = accept != 0;
      p->rebuild = rebuild != 0;
      try_round();
    } else if (verb == "LEAVE") {
      drop(p, "left gracefully");
    }  // HB and anything else only refresh last_seen
  }

  void refuse(const peer_ptr& p, const std::string& why) {
    write(p, "REFUSED " + why);
    log("refused: " + why);
    boost::system::error_code ec;
    p->sock.close(ec);
    peers_.erase(p->id);
  }

  void drop(const peer_ptr& p, const std::string& why) {
    boost::system::error_code ec;
    p->sock.close(ec);
    peers_.erase(p->id);
    if (p->member) {
      changed_ = true;
      std::lock_guard lock(m_);
      events_.push_back(p->name + " dropped: " + why);
      members_.erase(std::remove(members_.begin(), members_.end(), p->name), members_.end());
    }
    try_round();
  }

  void tick() {
    timer_.expires_after(opt_.heartbeat_timeout / 4);
    timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      const auto now = std::chrono::steady_clock::now();
      std::vector<peer_ptr> dead;
      for (auto& [id, p] : peers_)
        if (p->hello && now - p->last_seen > opt_.heartbeat_timeout) dead.push_back(p);
      for (auto& p : dead) drop(p, "missed heartbeats for " + std::to_string(opt_.heartbeat_timeout.count()) + " ms");
      tick();
    });
  }

  void try_round() {
    std::vector<peer_ptr> members, joiners;
    for (auto& [id, p] : peers_) {  // map order = admission order
      if (p->member)
        members.push_back(p);
      else if (p->hello && p->ready)
        joiners.push_back(p);
    }
    for (auto& p : members)
      if (!p->ready) return;
    bool admit = false;
    if (members.empty())  // min_members gates only the first epoch; later a lone joiner restarts the group
      admit = !joiners.empty() && (static_cast<int>(joiners.size()) >= opt_.min_members || epoch() > 0);
    else
      admit = !joiners.empty() && std::all_of(members.begin(), members.end(), [](auto& p) { return p->accept; });
    if (members.empty() && !admit) return;
    // The majority (revision, hash) among the current members (all admitted ones at bootstrap).
    std::map<std::pair<std::uint64_t, std::uint64_t>, int> votes;
    for (auto& p : members.empty() ? joiners : members) ++votes[{p->revision, p->hash}];
    auto best = votes.begin();
    for (auto it = votes.begin(); it != votes.end(); ++it)
      if (it->second > best->second || (it->second == best->second && it->first.first > best->first.first)) best = it;
    const auto [win_rev, win_hash] = best->first;
    bool rebuild = changed_;
    for (auto& p : members) rebuild = rebuild || p->rebuild;
    if (admit) {
      for (auto& p : joiners) {
        p->member = true;
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
    int source = 0;
    for (std::size_t i = 0; i < ring.size(); ++i)
      if (ring[i]->hash == win_hash && ring[i]->revision == win_rev) {
        source = static_cast<int>(i);
        break;
      }
    std::uint64_t e;
    {
      std::lock_guard lock(m_);
      if (rebuild || epoch_ == 0) ++epoch_;
      e = epoch_;
      members_.clear();
      for (auto& p : ring) members_.push_back(p->name);
      if (admit)
        for (auto& p : joiners) events_.push_back("admitted " + p->name + " in epoch " + std::to_string(e));
    }
    changed_ = false;
    std::ostringstream tail;
    for (auto& p : ring) tail << ' ' << p->name << ' ' << p->host << ' ' << p->port << ' ' << p->hash;
    for (std::size_t i = 0; i < ring.size(); ++i) {
      std::ostringstream line;
      line << "EPOCH " << e << ' ' << i << ' ' << ring.size() << ' ' << win_rev << ' ' << win_hash << ' ' << source
           << tail.str();
      ring[i]->ready = false;
      ring[i]->rebuild = false;
      write(ring[i], line.str());
    }
  }

  coordinator_options opt_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer timer_{io_};
  std::thread thread_;
  int port_ = 0;
  std::string spec_;
  std::map<std::uint64_t, peer_ptr> peers_;  // io thread only
  std::uint64_t next_id_ = 1;
  bool changed_ = false;
  mutable std::mutex m_;  // guards the published snapshot below
  std::uint64_t epoch_ = 0;
  std::vector<std::string> members_;
  std::vector<std::string> events_;
};

}  // namespace weft::comm::elastic

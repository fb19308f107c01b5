// Internal: message matching and progress over byte streams (shm rings, TCP connections). Each
// message travels as framed pieces (one per connection when striped); a receiver's posted buffer
// is filled in place, frames nobody waits for yet are kept aside, and any thread blocked in the
// engine drains every incoming stream, so two ranks sending to each other can never deadlock.
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/comm/detail/context.hpp>
#include <weft/comm/options.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <string>
#include <vector>

namespace weft::comm::detail {

/// The wire header of one piece: channel, check word, whole message bytes, this piece's bytes,
/// and, for a single-copy piece, the sender's address of the payload (0: the payload follows).
struct frame_header {
  std::uint32_t channel;
  std::uint32_t check;
  std::uint64_t total;
  std::uint64_t piece;
  std::uint64_t remote = 0;
};
inline constexpr std::size_t header_bytes = 32;
inline constexpr std::uint32_t abort_channel = 0xffffffffu;

/// Wants from a link (shm_link, tcp_link): non-blocking write_some/read_some per (peer, conn)
/// returning the bytes moved (0 = would block; throws weft::error when the stream failed), a
/// ticket() taken before trying, wait(ticket, until, write_peer) that returns when progress
/// may be possible (or at `until`), poke() that wakes this rank's own waiters, check_alive(peer)
/// (throws when the peer's process is gone), on_abort(why), and
/// the single-copy hooks: remote_min() (pieces at least this big are read by the receiver from the
/// sender's memory), remote_read(peer, addr, dst, n), remote_ack(peer), remote_post(peer) and
/// remote_acked(peer) (counts of such pieces posted to / read by peer).
template <class Link>
class stream_engine {
 public:
  stream_engine(Link& link, int rank, int size, int conns, std::size_t stripe_min, const char* name)
      : link_(link), rank_(rank), size_(size), conns_(conns), stripe_min_(stripe_min), name_(name) {
    for (int i = 0; i < size * conns; ++i) {
      rx_.push_back(std::make_unique<rx_state>());
      tx_.push_back(std::make_unique<tx_state>());
    }
  }

  void send(int peer, msg_tag tag, std::span<const std::byte> bytes, deadline until) {
    check_peer(peer, "send");
    exchange(peer, bytes, true, -1, {}, tag, until, "send");
  }
  void recv(int peer, msg_tag tag, std::span<std::byte> bytes, deadline until) {
    check_peer(peer, "recv");
    exchange(-1, {}, false, peer, bytes, tag, until, "recv");
  }
  void sendrecv(int dst, std::span<const std::byte> out, int src, std::span<std::byte> in, msg_tag tag,
                deadline until) {
    check_peer(dst, "sendrecv");
    check_peer(src, "sendrecv");
    exchange(dst, out, true, src, in, tag, until, "sendrecv");
  }

  /// Marks the group failed, tells every peer why (best effort, bounded), then lets the link shut
  /// down. Idempotent. Thread-safe.
  void abort(std::string_view why) {
    {
      std::lock_guard lock(abort_mutex_);
      if (aborted_.load()) return;
      abort_reason_ = concat("rank ", rank_, " aborted the group: ", why);
      aborted_.store(true);
    }
    const std::string text = abort_reason_.substr(0, 1000);
    const deadline until = clock_type::now() + std::chrono::milliseconds(200);
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      auto& tx = *tx_[index(q, 0)];
      std::unique_lock lock(tx.m, std::defer_lock);
      while (!lock.try_lock() && clock_type::now() < until) pump_all();
      if (!lock.owns_lock() || tx.partial) continue;  // mid-message from another thread: rely on shutdown
      std::array<std::byte, header_bytes> h{};
      const frame_header fh{abort_channel, 0, text.size(), text.size(), 0};
      std::memcpy(h.data(), &fh, header_bytes);
      std::vector<std::byte> frame(h.begin(), h.end());
      for (char ch : text) frame.push_back(static_cast<std::byte>(ch));
      std::size_t off = 0;
      try {
        while (off < frame.size() && clock_type::now() < until) {
          const auto ticket = link_.ticket();
          const std::size_t n = link_.write_some(q, 0, frame.data() + off, frame.size() - off);
          off += n;
          if (n == 0) link_.wait(ticket, std::min(until, clock_type::now() + std::chrono::milliseconds(5)), q);
        }
      } catch (const error&) {  // that peer is gone already
      }
    }
    link_.on_abort(abort_reason_);
  }

  bool aborted() const noexcept { return aborted_.load(); }

 private:
  struct request {
    std::uint32_t channel = 0, check = 0;
    std::uint64_t total = 0;
    std::byte* dst = nullptr;
    std::size_t len = 0;
    int peer = 0, conn = 0;
    bool done = false, failed = false, deferred = false, posted = false;
    errc code = errc::io;
    std::string error;
  };
  struct frame {
    std::uint32_t check;
    std::uint64_t total;
    std::vector<std::byte> bytes;
    bool complete = false;
  };
  struct rx_state {
    std::mutex m;
    std::array<std::byte, header_bytes> hdr{};
    std::size_t hdr_got = 0;
    bool in_payload = false, abort_frame = false;
    std::byte* target = nullptr;
    std::size_t remaining = 0;
    request* cur = nullptr;
    frame* cur_frame = nullptr;
    std::vector<std::byte> discard, abort_text;
    std::deque<request*> posted;
    std::map<std::uint32_t, std::deque<frame>> unexpected;
    bool closed = false;
    errc close_code = errc::peer_failure;
    std::string close_reason;
  };
  struct tx_state {
    std::mutex m;
    bool partial = false;  // a message is half written (abort must not interleave a frame)
  };
  struct piece_out {
    int conn;
    std::array<std::byte, header_bytes> hdr;
    const std::byte* data;
    std::size_t len, off = 0;  // off counts header + payload bytes written
    bool remote = false;       // single copy: the receiver reads len bytes from data itself
    std::uint64_t seq = 0;     // the link's count of remote pieces to dst once this one is posted
  };

  std::size_t index(int peer, int conn) const {
    return static_cast<std::size_t>(peer) * static_cast<std::size_t>(conns_) + static_cast<std::size_t>(conn);
  }
  int pieces_for(std::size_t total) const { return total >= stripe_min_ ? conns_ : 1; }

  void check_peer(int peer, const char* what) const {
    expects(peer >= 0 && peer < size_ && peer != rank_, errc::invalid_argument, name_, "rank ", rank_, " ", what,
            ": peer ", peer, " must be another rank in [0, ", size_, ")");
  }

  static void fail(request& r, errc code, std::string msg) {
    if (r.done) return;
    r.failed = true;
    r.done = true;
    r.code = code;
    r.error = std::move(msg);
  }

  void close_rx(rx_state& rx, errc code, const std::string& reason) {
    rx.closed = true;
    rx.close_code = code;
    rx.close_reason = reason;
    for (request* r : rx.posted) fail(*r, code, reason);
    rx.posted.clear();
    if (rx.cur) fail(*rx.cur, code, reason);
    rx.cur = nullptr;
    if (code == errc::aborted) {  // the whole group is failing: stop everything here too
      std::lock_guard lock(abort_mutex_);
      if (!aborted_.load()) {
        abort_reason_ = reason;
        aborted_.store(true);
      }
    }
  }

  // Validates a frame against a request; returns an empty string when they agree.
  static std::string disagreement(const request& r, std::uint32_t check, std::uint64_t total, std::uint64_t piece) {
    if (check != r.check) return "the ranks disagree about the operation: " + explain_check_difference(r.check, check);
    if (total != r.total || piece != r.len)
      return concat("the peer sent a message of ", total, " bytes but this rank expects ", r.total);
    return {};
  }

  // A single-copy piece: read the payload straight out of the sender's memory into wherever
  // begin_payload chose, then tell the sender its buffer is free.
  void take_remote(rx_state& rx, int peer, std::uint64_t addr) {
    if (rx.remaining > 0) link_.remote_read(peer, addr, rx.target, rx.remaining);
    rx.target += rx.remaining;
    rx.remaining = 0;
    link_.remote_ack(peer);
  }

  void begin_payload(rx_state& rx, const frame_header& h) {
    rx.in_payload = true;
    rx.remaining = static_cast<std::size_t>(h.piece);
    if (h.channel == abort_channel) {
      rx.abort_frame = true;
      rx.abort_text.assign(rx.remaining, std::byte{0});
      rx.target = rx.abort_text.data();
      return;
    }
    for (auto it = rx.posted.begin(); it != rx.posted.end(); ++it) {
      request* r = *it;
      if (r->channel != h.channel) continue;
      rx.posted.erase(it);
      r->posted = false;
      const std::string why = disagreement(*r, h.check, h.total, h.piece);
      if (!why.empty()) {
        fail(*r, errc::mismatch, why);
        rx.discard.assign(rx.remaining, std::byte{0});
        rx.target = rx.discard.data();
        rx.cur = nullptr;
      } else {
        rx.target = r->dst;
        rx.cur = r;
      }
      return;
    }
    auto& q = rx.unexpected[h.channel];
    q.push_back(frame{h.check, h.total, std::vector<std::byte>(rx.remaining), false});
    rx.cur_frame = &q.back();
    rx.target = rx.cur_frame->bytes.data();
  }

  void end_payload(rx_state& rx) {
    rx.in_payload = false;
    if (rx.abort_frame) {
      rx.abort_frame = false;
      std::string text(reinterpret_cast<const char*>(rx.abort_text.data()), rx.abort_text.size());
      close_rx(rx, errc::aborted, text);
      return;
    }
    if (rx.cur) {
      rx.cur->done = true;
      rx.cur = nullptr;
    } else if (rx.cur_frame) {
      rx.cur_frame->complete = true;
      rx.cur_frame = nullptr;
    }
  }

  // Reads whatever the stream (peer, conn) has; rx.m must be held. Returns bytes consumed.
  std::size_t pump(rx_state& rx, int peer, int conn) {
    std::size_t progressed = 0;
    try {
      while (!rx.closed) {
        if (!rx.in_payload) {
          const std::size_t n = link_.read_some(peer, conn, rx.hdr.data() + rx.hdr_got, header_bytes - rx.hdr_got);
          if (n == 0) break;
          progressed += n;
          rx.hdr_got += n;
          if (rx.hdr_got < header_bytes) continue;
          rx.hdr_got = 0;
          frame_header h;
          std::memcpy(&h, rx.hdr.data(), header_bytes);
          begin_payload(rx, h);
          if (h.remote != 0 && h.channel != abort_channel) take_remote(rx, peer, h.remote);
        } else if (rx.remaining > 0) {
          const std::size_t n = link_.read_some(peer, conn, rx.target, rx.remaining);
          if (n == 0) break;
          progressed += n;
          rx.target += n;
          rx.remaining -= n;
        }
        if (rx.in_payload && rx.remaining == 0) end_payload(rx);
      }
    } catch (const error& e) {
      close_rx(rx, static_cast<errc>(e.code().value()), e.what());
      ++progressed;  // something changed: let the caller look at its requests
    }
    return progressed;
  }

  std::size_t pump_all() {
    std::size_t progressed = 0;
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      for (int k = 0; k < conns_; ++k) {
        auto& rx = *rx_[index(q, k)];
        std::unique_lock lock(rx.m, std::try_to_lock);
        if (lock.owns_lock()) progressed += pump(rx, q, k);
      }
    }
    return progressed;
  }

  // Posts r on its stream, or completes it from a frame that arrived earlier. rx.m must be held.
  void post(rx_state& rx, request& r) {
    r.deferred = false;
    auto it = rx.unexpected.find(r.channel);  // frames that arrived before a close still count
    if (it != rx.unexpected.end() && !it->second.empty()) {
      frame& f = it->second.front();
      if (!f.complete) {  // still arriving: take it when complete, to keep the order
        r.deferred = true;
        return;
      }
      const std::string why = disagreement(r, f.check, f.total, f.bytes.size());
      if (!why.empty())
        fail(r, errc::mismatch, why);
      else {
        if (r.len) std::memcpy(r.dst, f.bytes.data(), r.len);
        r.done = true;
      }
      it->second.pop_front();
      return;
    }
    if (rx.closed) {
      fail(r, rx.close_code, rx.close_reason);
      return;
    }
    rx.posted.push_back(&r);
    r.posted = true;
  }

  // Removes r from its stream if it is still referenced there (on the way out with an error).
  void detach(request& r) {
    auto& rx = *rx_[index(r.peer, r.conn)];
    std::lock_guard lock(rx.m);
    if (r.posted) {
      rx.posted.erase(std::remove(rx.posted.begin(), rx.posted.end(), &r), rx.posted.end());
      r.posted = false;
    }
    if (rx.cur == &r) {  // the rest of this piece goes nowhere
      rx.discard.assign(rx.remaining, std::byte{0});
      rx.target = rx.discard.data();
      rx.cur = nullptr;
    }
  }

  [[noreturn]] void raise_op(errc code, const char* op, int dst, int src, msg_tag tag, std::string what) {
    if (code == errc::peer_failure && !aborted_.load()) {
      // A peer that aborts sends its reason, then closes: a write can fail before the reason is
      // read. Drain the incoming streams briefly so the error says why, not just "closed".
      const deadline limit = clock_type::now() + std::chrono::milliseconds(100);
      while (!aborted_.load() && clock_type::now() < limit) {
        const auto ticket = link_.ticket();
        if (pump_all() == 0) link_.wait(ticket, std::min(limit, clock_type::now() + std::chrono::milliseconds(5)), -1);
      }
    }
    if (aborted_.load()) {
      std::lock_guard lock(abort_mutex_);
      code = errc::aborted;
      what = abort_reason_;
    }
    std::string peers;
    if (dst >= 0) peers += concat(" to peer ", dst);
    if (src >= 0) peers += concat(" from peer ", src);
    throw error(code, name_, concat("rank ", rank_, " ", op, peers, " channel ", tag.channel, ": ", what));
  }

  void exchange(int dst, std::span<const std::byte> out, bool sending, int src, std::span<std::byte> in, msg_tag tag,
                deadline until, const char* op) {
    if (aborted_.load()) raise_op(errc::aborted, op, sending ? dst : -1, src, tag, {});  // fills in the reason
    // Receive side: one request per piece.
    std::vector<request> reqs;
    if (src >= 0) {
      const int k = pieces_for(in.size());
      reqs.resize(static_cast<std::size_t>(k));
      for (int i = 0; i < k; ++i) {
        const auto I = static_cast<std::size_t>(i), K = static_cast<std::size_t>(k);
        request& r = reqs[I];
        r.channel = tag.channel;
        r.check = tag.check;
        r.total = in.size();
        r.dst = in.data() + chunk_begin(in.size(), K, I);
        r.len = chunk_size(in.size(), K, I);
        r.peer = src;
        r.conn = i;
        auto& rx = *rx_[index(src, i)];
        std::lock_guard lock(rx.m);
        post(rx, r);
      }
    }
    struct detach_guard {
      stream_engine* e;
      std::vector<request>* reqs;
      ~detach_guard() {
        for (auto& r : *reqs)
          if (!r.done) e->detach(r);
      }
    } guard{this, &reqs};

    // Send side: one piece per connection used; the connections' write locks are held until the
    // whole message is out, so frames of different threads never interleave.
    std::vector<piece_out> pieces;
    std::vector<std::unique_lock<std::mutex>> tx_locks;
    if (sending) {
      const int k = pieces_for(out.size());
      for (int i = 0; i < k; ++i) {
        const auto I = static_cast<std::size_t>(i), K = static_cast<std::size_t>(k);
        piece_out po{i, {}, out.data() + chunk_begin(out.size(), K, I), chunk_size(out.size(), K, I), 0};
        po.remote = po.len >= link_.remote_min();
        const frame_header fh{tag.channel, tag.check, out.size(), po.len,
                              po.remote ? static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(po.data)) : 0};
        std::memcpy(po.hdr.data(), &fh, header_bytes);
        pieces.push_back(po);
        tx_locks.emplace_back(tx_[index(dst, i)]->m, std::defer_lock);
      }
    }
    std::size_t locked = 0;
    bool sent_all = false;
    for (;;) {
      const auto ticket = link_.ticket();
      std::size_t progressed = 0;
      // Take the write locks in connection order (pumping while another thread holds one).
      while (locked < tx_locks.size() && tx_locks[locked].try_lock()) {
        tx_[index(dst, pieces[locked].conn)]->partial = true;
        ++locked;
      }
      bool send_done = true;
      if (sent_all) {
        // nothing left to write
      } else if (locked == tx_locks.size()) {
        for (auto& po : pieces) {
          const std::size_t end = header_bytes + (po.remote ? 0 : po.len);
          try {
            while (po.off < end) {
              std::size_t n;
              if (po.off < header_bytes)
                n = link_.write_some(dst, po.conn, po.hdr.data() + po.off, header_bytes - po.off);
              else
                n = link_.write_some(dst, po.conn, po.data + (po.off - header_bytes), end - po.off);
              if (n == 0) break;
              po.off += n;
              progressed += n;
            }
          } catch (const error& e) {
            raise_op(static_cast<errc>(e.code().value()), op, dst, src, tag, e.what());
          }
          if (po.off < end) {
            send_done = false;
          } else if (po.remote) {  // the buffer is ours again only when the receiver has read it
            if (po.seq == 0) po.seq = link_.remote_post(dst);
            if (link_.remote_acked(dst) < po.seq) send_done = false;
          }
        }
        if (send_done) {
          for (std::size_t i = 0; i < tx_locks.size(); ++i)
            if (tx_locks[i].owns_lock()) {
              tx_[index(dst, pieces[i].conn)]->partial = false;
              tx_locks[i].unlock();
            }
          if (!tx_locks.empty()) link_.poke();  // a thread of ours may wait for these locks
          sent_all = true;
        }
      } else {
        send_done = false;
      }
      progressed += pump_all();
      bool recv_done = true;
      for (auto& r : reqs) {
        if (r.deferred) {
          auto& rx = *rx_[index(r.peer, r.conn)];
          std::lock_guard lock(rx.m);
          post(rx, r);
        }
        if (r.failed) raise_op(r.code, op, sending ? dst : -1, src, tag, r.error);
        if (!r.done) recv_done = false;
      }
      if (send_done && recv_done) return;
      if (aborted_.load()) raise_op(errc::aborted, op, sending ? dst : -1, src, tag, {});
      const auto now = clock_type::now();
      if (now >= until) {
        std::size_t sent = 0, got = 0;
        for (auto& po : pieces)
          sent += po.remote ? (po.seq != 0 && link_.remote_acked(dst) >= po.seq ? po.len : 0)
                            : (po.off >= header_bytes ? po.off - header_bytes : 0);
        for (auto& r : reqs) got += r.done ? r.len : 0;
        raise_op(errc::timeout, op, sending ? dst : -1, src, tag,
                 concat("deadline passed with ", sent, " of ", out.size(), " bytes sent and ", got, " of ", in.size(),
                        " bytes received"));
      }
      if (progressed == 0) {
        try {  // a peer we wait on whose process is gone will never answer
          if (!recv_done && src >= 0) link_.check_alive(src);
          if (!send_done && sending) link_.check_alive(dst);
        } catch (const error& e) {
          // Its last bytes may have landed between our look and its exit: look once more.
          if (pump_all() == 0)
            raise_op(static_cast<errc>(e.code().value()), op, sending ? dst : -1, src, tag, e.what());
          continue;
        }
        if (locked < tx_locks.size())  // another thread of ours is writing to dst: look again soon
          link_.wait(ticket, std::min(until, now + std::chrono::milliseconds(1)), -1);
        else
          link_.wait(ticket, std::min(until, now + std::chrono::milliseconds(50)), send_done ? -1 : dst);
      }
    }
  }

  Link& link_;
  int rank_, size_, conns_;
  std::size_t stripe_min_;
  const char* name_;
  std::vector<std::unique_ptr<rx_state>> rx_;
  std::vector<std::unique_ptr<tx_state>> tx_;
  std::atomic<bool> aborted_{false};
  std::mutex abort_mutex_;
  std::string abort_reason_;
};

/// The transport operations of a byte-stream transport (shm, tcp), forwarded to its stream_engine,
/// so the transport concept's surface is written once. The derived transport creates engine_ in its
/// constructor and resets it first thing in its destructor (the engine uses the derived link).
/// send/recv/sendrecv are thread-safe on distinct channels; abort is thread-safe.
template <class Link>
class engine_front {
 public:
  void send(int peer, msg_tag tag, std::span<const std::byte> bytes, deadline until) {
    engine_->send(peer, tag, bytes, until);
  }
  void recv(int peer, msg_tag tag, std::span<std::byte> bytes, deadline until) {
    engine_->recv(peer, tag, bytes, until);
  }
  void sendrecv(int dst, std::span<const std::byte> out, int src, std::span<std::byte> in, msg_tag tag,
                deadline until) {
    engine_->sendrecv(dst, out, src, in, tag, until);
  }
  /// Fails every operation of every rank with errc::aborted and the reason: the peers are told why,
  /// then the links are shut.
  void abort(std::string_view why) { engine_->abort(why); }

 protected:
  std::unique_ptr<stream_engine<Link>> engine_;
};

}  // namespace weft::comm::detail

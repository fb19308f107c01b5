// Internal: message matching and progress over byte streams (shm rings, TCP connections) on the
// data-frame layer of weft::comm's wire protocol (wire.hpp; docs/comm.md "Wire format"; what the
// bytes mean is frame_codec.hpp, which receive a frame belongs to is receive_matcher.hpp, whom a
// failure blames is blame.hpp). Each
// message travels as framed pieces (one per connection when striped); a receiver's posted buffer
// is filled in place, frames nobody waits for yet are kept aside (bounded), and any thread blocked
// in the engine drains every incoming stream, so two ranks sending to each other never deadlock.
// Every length from the wire is checked before it decides an allocation or a pointer; every
// failure aborts the group, and the abort frames carry what each rank was waiting on, so the rank
// that stalled is the one blamed (a wait-for graph, as in distributed deadlock detection,
// Chandy, Misra & Haas, ACM TOCS 1983).
#pragma once

#include <weft/comm/comm_error.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/comm/descriptor.hpp>
#include <weft/comm/detail/blame.hpp>
#include <weft/comm/detail/context.hpp>
#include <weft/comm/detail/frame_codec.hpp>
#include <weft/comm/detail/link.hpp>
#include <weft/comm/detail/receive_matcher.hpp>
#include <weft/comm/detail/wire.hpp>
#include <weft/comm/options.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <sched.h>

namespace weft::comm::detail {

/// One part of a gathered write (header, then payload).
struct io_part {
  const std::byte* data;
  std::size_t len;
};

/// How an engine is tuned; a plain value.
struct engine_config {
  wire_limits limits{};
  wait_options waiting{};
  int local_ranks = 0;  ///< ranks on this host; 0 means all of them (the size)
  /// Cores those ranks may run on together; 0 means this process's affinity (available_cores()).
  /// shm passes the union of every rank's affinity, so ranks that a launcher bound to one core
  /// each (as mpirun does for as many ranks as cores) are seen to fit.
  int local_cores = 0;
  /// Data frames are padded to a multiple of this (a power of two; shm: 64, a cache line, so each
  /// frame starts on a line of its own and the consumer never reads a line the producer is filling).
  std::size_t frame_align = 1;
  /// Messages of at most this many bytes go eager: one frame, published whole with one store and
  /// one doorbell (0: never; at most max_eager_bytes). Every rank of a group must use the same.
  std::size_t eager_max = 0;
  /// How long a failing rank keeps listening for the other ranks' "waiting on" reports before it
  /// names the rank to blame (only when the failure itself does not name one, e.g. a timeout).
  std::chrono::milliseconds blame_window{300};
  /// How long a rank whose peer's stream broke keeps reading the other streams for that peer's
  /// abort frame (which says why it left) before it reports the broken stream itself.
  std::chrono::milliseconds drain_window{100};
  /// How errors name each rank beside its number (an elastic member's name: "peer 2" is "w2");
  /// empty, or one name per rank.
  std::vector<std::string> rank_names{};
};

/// Cores this process may run on (its affinity mask). O(1).
inline int available_cores() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

/// automatic → spin when the host's ranks fit the cores they may run on (`cores`; 0: this
/// process's affinity), yield otherwise.
inline wait_mode resolve_wait_mode(wait_mode m, int local_ranks, int cores = 0) noexcept {
  if (m != wait_mode::automatic) return m;
  return local_ranks <= (cores > 0 ? cores : available_cores()) ? wait_mode::spin : wait_mode::yield;
}

/// A sequentially consistent fence (the Dekker-style wake-up protocols need one). ThreadSanitizer
/// does not model fences (and g++ refuses them under -fsanitize=thread), so there a read-modify-
/// write of a private atomic, which is a full barrier on the hardware, stands in for it.
inline void full_fence() noexcept {
#if defined(__SANITIZE_THREAD__)
  static std::atomic<int> barrier_word{0};
  barrier_word.fetch_add(0, std::memory_order_seq_cst);
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  static std::atomic<int> barrier_word{0};
  barrier_word.fetch_add(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// A lock for the engine's short critical sections (a stream's parse state, a stream's write
/// side, the collective book): one atomic exchange to take, one store to release, so an
/// uncontended message costs a few nanoseconds per lock; a waiter spins briefly, then yields.
class spin_lock {
 public:
  bool try_lock() noexcept {
    return !busy_.load(std::memory_order_relaxed) && !busy_.exchange(true, std::memory_order_acquire);
  }
  void lock() noexcept {
    for (int i = 0; !try_lock(); ++i) {
      if (i < 64)
        cpu_relax();
      else
        std::this_thread::yield();
    }
  }
  void unlock() noexcept { busy_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> busy_{false};
};

/// A fixed-capacity-first array: N elements inline, more on the heap. Elements are
/// value-initialised. Used so a small message allocates nothing.
template <class T, std::size_t N>
class small_array {
 public:
  explicit small_array(std::size_t n) : n_(n) {
    if (n > N) heap_.reset(new T[n]());
  }
  T* data() noexcept { return n_ > N ? heap_.get() : inline_.data(); }
  std::size_t size() const noexcept { return n_; }
  T& operator[](std::size_t i) noexcept { return data()[i]; }
  T* begin() noexcept { return data(); }
  T* end() noexcept { return data() + n_; }

 private:
  std::size_t n_;
  std::array<T, N> inline_{};
  std::unique_ptr<T[]> heap_;
};

/// Wants from a link (shm_link, tcp_link; tests use fake links):
///  - write_some(peer, conn, const io_part* parts, int count): writes a prefix of the parts'
///    bytes without blocking and returns how many (0 = would block); throws weft::error when the
///    stream failed;
///  - read_some(peer, conn, dst, n): reads up to n bytes without blocking (0 = none yet); throws
///    weft::error when the stream failed or ended; commit_reads(peer, conn) then hands the room
///    back to the writer (once per pump of the stream);
///  - stage_bytes: 0 to read straight into the destination, else the size of a per-stream staging
///    buffer (tcp: one recv(2) takes a header and a small payload together);
///  - prepare_wait() then wait(token, until, write_peer): the engine arms the wake-up, tries
///    everything once more, then waits (returning at once when until has passed) until a peer may
///    have made progress possible (or until) or poke() is called; every prepare_wait is followed by
///    one wait. poke() wakes this rank's own waiters that armed before it (the engine pokes after
///    freeing a write lock and after a pump that finished a request, whose owner may be another
///    thread asleep); check_alive(peer) throws when the peer's process is gone;
///  - the single-copy hooks: remote_min() (pieces at least this big are read by the receiver from
///    the sender's memory; SIZE_MAX: never), remote_read(peer, addr, dst, n), remote_ack(peer),
///    remote_post(peer) and remote_acked(peer) (counts of such pieces posted to / read by peer);
///  - on_abort(why): the group failed; shut the streams.
template <stream_link Link>
class stream_engine {
 public:
  stream_engine(Link& link, int rank, int size, int conns, std::size_t stripe_min, std::string name,
                engine_config cfg = {})
      : link_(link),
        rank_(rank),
        size_(size),
        conns_(conns),
        stripe_min_(stripe_min),
        name_(std::move(name)),
        cfg_(cfg),
        mode_(resolve_wait_mode(cfg.waiting.mode, cfg.local_ranks > 0 ? cfg.local_ranks : size, cfg.local_cores)),
        poll_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(mode_ == wait_mode::yield ? cfg.waiting.yield
                                                                                                : cfg.waiting.spin)
                     .count()),
        book_(static_cast<std::size_t>(size)),
        pending_(static_cast<std::size_t>(size)),
        status_(static_cast<std::size_t>(size)) {
    for (int i = 0; i < size * conns; ++i) {
      rx_.push_back(std::make_unique<rx_state>(cfg.limits));
      tx_.push_back(std::make_unique<tx_state>());
    }
  }

  void send(int peer, msg_tag tag, std::span<const std::byte> bytes, deadline until) {
    check_peer(peer, "send");
    guarded_exchange(peer, bytes, true, -1, {}, tag, until, "send");
  }
  void recv(int peer, msg_tag tag, std::span<std::byte> bytes, deadline until) {
    check_peer(peer, "recv");
    guarded_exchange(-1, {}, false, peer, bytes, tag, until, "recv");
  }
  void sendrecv(int dst, std::span<const std::byte> out, int src, std::span<std::byte> in, msg_tag tag,
                deadline until) {
    check_peer(dst, "sendrecv");
    check_peer(src, "sendrecv");
    guarded_exchange(dst, out, true, src, in, tag, until, "sendrecv");
  }

  /// Starts collective number k+1 on (peer, channel) for every member peer: the descriptor goes
  /// with the first frame to each, and a descriptor that a member already sent for this call is
  /// compared now. Throws comm_error(mismatch) on a difference (and aborts the group).
  void begin_collective(std::uint32_t channel, const collective_descriptor& d, std::span<const int> members) {
    try {
      begin_collective_impl(channel, d, members);
    } catch (const comm_error&) {
      throw;
    } catch (const error& e) {
      if (static_cast<errc>(e.code().value()) == errc::invalid_argument) throw;  // nothing changed
      fault f;
      f.code = static_cast<errc>(e.code().value());
      f.channel = channel;
      f.detail = e.what();
      record_failure(f);
      raise_group("begin", -1, -1, msg_tag{channel, 0}, -1);
    } catch (const std::bad_alloc&) {
      fault f;
      f.code = errc::capacity;
      f.channel = channel;
      f.detail = "out of memory";
      record_failure(f);
      raise_group("begin", -1, -1, msg_tag{channel, 0}, -1);
    }
  }

 private:
  void begin_collective_impl(std::uint32_t channel, const collective_descriptor& d, std::span<const int> members) {
    if (failed_.load(std::memory_order_acquire)) raise_group("begin", -1, -1, msg_tag{channel, 0}, -1);
    std::optional<fault> bad;
    {
      std::lock_guard lock(desc_mutex_);
      for (int q : members)  // every member checked before anything changes
        expects(q >= 0 && q < size_, errc::invalid_argument, name_.c_str(), "rank ", rank_,
                " begin_collective: member ", q, " is not a rank in [0, ", size_, ")");
      auto each = [&](int q) {
        if (q == rank_) return;
        auto& pc = book_[static_cast<std::size_t>(q)][channel];
        if (pc.seq != 0) pc.past[pc.seq % peer_channel::history] = pc.desc;
        ++pc.seq;
        pc.desc = d;
        pc.sent = 0;
        auto& pend = pending_[static_cast<std::size_t>(q)];
        for (auto it = pend.begin(); it != pend.end();) {
          if (it->channel != channel || it->seq > pc.seq) {
            ++it;
            continue;
          }
          if (it->seq == pc.seq && !bad) {
            if (auto diff = first_difference(d, it->desc)) bad = mismatch_fault(q, channel, pc.seq, *diff);
          }
          it = pend.erase(it);
        }
      };
      if (members.empty())
        for (int q = 0; q < size_; ++q) each(q);
      else
        for (int q : members) each(q);
    }
    if (bad) {
      record_failure(*bad);
      raise_group("begin", -1, bad->blamed, msg_tag{channel, 0}, -1);
    }
  }

 public:
  /// Marks the group failed (if it was not), tells every peer why and what this rank waited on
  /// (best effort, bounded), then lets the link shut down. Idempotent. Thread-safe.
  void abort(std::string_view why) {
    fault f;
    f.code = errc::aborted;
    f.detail = concat("rank ", rank_, " aborted the group: ", why.substr(0, abort_max_string_bytes / 2));
    record_failure(f);
    send_status(-1);
    shut_down();
  }

  /// abort(why) with the failure's fields (blamed rank, disagreement), for the other ranks' errors.
  void abort(const comm_error& e) {
    const failure_info& i = e.info();
    fault f;
    f.code = e.code_value();
    f.blamed = i.blamed;
    f.channel = i.channel;
    f.sequence = i.sequence;
    f.field = i.field;
    f.here = i.here;
    f.there = i.there;
    f.detail = std::string(e.what()).substr(0, abort_max_string_bytes / 2);
    record_failure(f);
    send_status(-1);
    shut_down();
  }

  bool aborted() const noexcept { return failed_.load(std::memory_order_acquire); }
  wait_mode waiting() const noexcept { return mode_; }
  /// How long a waiter polls before it sleeps, right now (adapted to how often polling paid off).
  std::chrono::nanoseconds poll_budget() const noexcept {
    return std::chrono::nanoseconds(poll_ns_.load(std::memory_order_relaxed));
  }

 private:
  // Adaptive polling (as adaptive mutexes spin): a wait whose polling ended in progress doubles the
  // budget (up to the configured one), one that had to sleep anyway halves it, down to an eighth of
  // the configured budget — still longer than a futex or poll wake-up, so when two ranks have both
  // fallen back to sleeping, the answer to a woken one lands within the budget and polling recovers.
  // A rank whose peers answer within microseconds keeps polling; one on a busy host polls less.
  void adapt_poll(bool paid_off) noexcept {
    const std::int64_t top = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 mode_ == wait_mode::yield ? cfg_.waiting.yield : cfg_.waiting.spin)
                                 .count();
    const std::int64_t floor = top / 8;
    const std::int64_t cur = poll_ns_.load(std::memory_order_relaxed);
    const std::int64_t next = paid_off ? std::min(top, cur * 2) : std::max(floor, cur / 2);
    if (next != cur) poll_ns_.store(next, std::memory_order_relaxed);
  }

  // ---- failures (the fault record and the blame rule are blame.hpp's) ---------------------------
  using rank_status = rank_report;

  fault mismatch_fault(int peer, std::uint32_t channel, std::uint32_t seq, const descriptor_difference& d) const {
    fault f;
    f.code = errc::mismatch;
    f.blamed = peer;
    f.channel = channel;
    f.sequence = seq;
    f.field = d.field;
    f.here = d.here;
    f.there = d.there;
    f.detail = "the ranks disagree about the collective: " + explain(d, peer);
    return f;
  }

  // Records f as the group's failure unless one is recorded already (the first one wins: it is
  // the cause, later ones are consequences). Returns true when f became the group's failure.
  bool record_failure(const fault& f) {
    std::lock_guard lock(fail_mutex_);
    if (failed_.load(std::memory_order_relaxed)) return false;
    group_ = f;
    if (group_.origin < 0) group_.origin = rank_;
    failed_.store(true, std::memory_order_release);
    return true;
  }

  // ---- per-(peer, channel) collective bookkeeping ------------------------------------------------
  struct peer_channel {
    std::uint32_t seq = 0;
    std::uint64_t sent = 0;  // connections (bits) the descriptor of seq went out on already
    collective_descriptor desc{};
    // The last few collectives' descriptors: a rank whose part only sent (a broadcast root) may
    // have moved on before the peer's descriptor for that call arrives; it is still compared.
    static constexpr std::uint32_t history = 4;
    std::array<collective_descriptor, history> past{};
    const collective_descriptor* at(std::uint32_t s) const {
      if (s == seq) return &desc;
      if (s == 0 || s > seq || seq - s >= history) return nullptr;
      return &past[s % history];
    }
  };
  struct pending_descriptor {
    std::uint32_t channel, seq;
    collective_descriptor desc;
  };

  // A descriptor arrived from `peer`; rx lock held. Returns a protocol fault when the peer has sent
  // more descriptors ahead of this rank than the limit allows.
  std::optional<fault> on_descriptor(int peer, std::uint32_t channel, std::uint32_t seq,
                                     const collective_descriptor& d) {
    std::optional<fault> bad;
    {
      std::lock_guard lock(desc_mutex_);
      auto& chans = book_[static_cast<std::size_t>(peer)];
      const auto it = chans.find(channel);
      const collective_descriptor* mine = it != chans.end() ? it->second.at(seq) : nullptr;
      if (mine) {
        if (auto diff = first_difference(*mine, d)) bad = mismatch_fault(peer, channel, seq, *diff);
      } else if (it == chans.end() || seq > it->second.seq) {
        auto& pend = pending_[static_cast<std::size_t>(peer)];
        if (pend.size() >= cfg_.limits.max_pending_descriptors) {
          fault f;
          f.code = errc::capacity;
          f.blamed = peer;
          f.channel = channel;
          f.detail = concat("peer ", peer, " began more than max_pending_descriptors (",
                            cfg_.limits.max_pending_descriptors, ") collectives this rank has not begun");
          return f;
        }
        pend.push_back({channel, seq, d});
      }  // else a late descriptor of a collective this rank finished: the frame itself still matches
    }
    if (bad) record_failure(*bad);
    return std::nullopt;
  }

  // ---- streams --------------------------------------------------------------------------------
  using request = recv_request;  // receive_matcher.hpp
  enum class rx_phase : std::uint8_t { header, payload };
  // One incoming stream: where its parse stands (header, extensions, payload, pad) and its
  // receive matcher (which receive each frame belongs to, and the frames kept for later).
  struct rx_state {
    explicit rx_state(const wire_limits& l) : match(l.max_unexpected_frames, l.max_unexpected_bytes) {}
    spin_lock m;
    rx_phase phase = rx_phase::header;
    std::array<std::byte, frame_header_bytes + descriptor_wire_bytes + frame_remote_bytes> hdr{};
    std::size_t got = 0, need = frame_header_bytes;
    std::size_t skip = 0;  // pad bytes of the last frame still to read past (frame_align)
    bool parsed = false;   // the fixed header of hdr is decoded (need covers its extensions)
    frame_kind kind = frame_kind::data;
    std::uint8_t flags = 0;
    std::uint32_t channel = 0, seq = 0, check = 0;
    std::uint64_t total = 0, piece = 0;
    std::byte* target = nullptr;  // nullptr while in payload: discard
    std::size_t remaining = 0;
    std::vector<std::byte> abort_body, scratch, stage;
    std::size_t stage_pos = 0, stage_end = 0;
    receive_matcher match;
  };
  struct tx_state {
    spin_lock m;
    bool partial = false;  // a message is half written (nothing else may go on this stream)
    // Threads of ours about to sleep until this stream's write lock is free. The holder pokes on
    // release only when it sees one (so an uncontended message rings no second doorbell); one it
    // misses sleeps at most its 1 ms slice, as such a waiter does (exchange's wait step).
    std::atomic<int> waiters{0};
  };
  struct piece_out {
    int conn = 0;
    std::array<std::byte, frame_header_bytes + descriptor_wire_bytes + frame_remote_bytes> hdr{};
    std::size_t hdr_len = 0;
    const std::byte* data = nullptr;
    std::size_t len = 0, off = 0;  // off counts header + payload + pad bytes written
    std::size_t pad = 0;           // zero bytes after the payload up to the link's frame_align
    bool eager = false;            // published whole (write_whole) or not at all
    bool remote = false;           // single copy: the receiver reads len bytes from data itself
    std::uint64_t seq = 0;         // the link's count of remote pieces to dst once this one is posted
  };

  std::size_t index(int peer, int conn) const {
    return static_cast<std::size_t>(peer) * static_cast<std::size_t>(conns_) + static_cast<std::size_t>(conn);
  }
  int pieces_for(std::size_t total) const { return total >= stripe_min_ ? conns_ : 1; }

  void check_peer(int peer, const char* what) const {
    expects(peer >= 0 && peer < size_ && peer != rank_, errc::invalid_argument, name_.c_str(), "rank ", rank_, " ",
            what, ": peer ", peer, " must be another rank in [0, ", size_, ")");
  }

  static void close_rx(rx_state& rx, const fault& f) { rx.match.close(f); }

  // Reads into dst through the stream's staging buffer (when the link wants one). rx.m held.
  std::size_t rx_fill(rx_state& rx, int peer, int conn, std::byte* dst, std::size_t n) {
    if (n == 0) return 0;
    if constexpr (Link::stage_bytes == 0) {
      return link_.read_some(peer, conn, dst, n);
    } else {
      if (rx.stage_pos == rx.stage_end) {
        if (n >= Link::stage_bytes / 2) return link_.read_some(peer, conn, dst, n);  // big: no extra copy
        if (rx.stage.empty()) rx.stage.resize(Link::stage_bytes);
        rx.stage_pos = 0;
        rx.stage_end = link_.read_some(peer, conn, rx.stage.data(), rx.stage.size());
        if (rx.stage_end == 0) return 0;
      }
      const std::size_t k = std::min(n, rx.stage_end - rx.stage_pos);
      std::memcpy(dst, rx.stage.data() + rx.stage_pos, k);
      rx.stage_pos += k;
      return k;
    }
  }

  // Decodes and bounds the fixed header in rx.hdr (frame_codec.hpp); sets rx.need to header +
  // extensions.
  std::optional<fault> parse_header(rx_state& rx, int peer) {
    const frame_rules rules{cfg_.limits.max_message_bytes, cfg_.limits.max_abort_bytes, link_.remote_min() != SIZE_MAX,
                            cfg_.eager_max};
    frame_header h;
    if (auto bad = check_frame_header(rx.hdr.data(), rules, h)) return protocol_fault(peer, bad->code, bad->what);
    rx.kind = h.kind;
    rx.flags = h.flags;
    rx.channel = h.channel;
    rx.seq = h.seq;
    rx.check = h.check;
    rx.total = h.total;
    rx.piece = h.piece;
    rx.need = frame_prefix_bytes(rx.flags);
    rx.parsed = true;
    return std::nullopt;
  }

  // Header and extensions are in; decide where the payload goes (receive_matcher.hpp). rx.m held.
  std::optional<fault> begin_payload(rx_state& rx, int peer) {
    rx.phase = rx_phase::payload;
    rx.remaining = static_cast<std::size_t>(rx.piece);  // piece <= total <= limits: fits
    rx.target = nullptr;
    if (rx.kind == frame_kind::abort) {
      rx.abort_body.resize(rx.remaining);  // bounded by max_abort_bytes
      rx.target = rx.abort_body.data();
      return std::nullopt;
    }
    if (rx.flags & frame_flag_descriptor) {
      const auto d = decode(
          std::span<const std::byte, descriptor_wire_bytes>(rx.hdr.data() + frame_header_bytes, descriptor_wire_bytes));
      if (auto f = on_descriptor(peer, rx.channel, rx.seq, d)) return f;
    }
    auto l = rx.match.arrive(frame_facts{rx.channel, rx.seq, rx.check, rx.total, rx.piece}, peer);
    if (l.refused) return l.refused;
    if (l.mismatch) record_failure(*l.mismatch);
    rx.target = l.target;
    return std::nullopt;
  }

  // Parses an abort body (frame_codec.hpp): records the sender's status, and the failure if it is
  // the first. rx.m held.
  std::optional<fault> take_abort(rx_state& rx, int peer) {
    detail::abort_body a;
    if (auto bad = decode_abort_body(rx.abort_body, peer, size_, a)) return protocol_fault(peer, bad->code, bad->what);
    {
      std::lock_guard lock(fail_mutex_);
      auto& st = status_[static_cast<std::size_t>(peer)];
      st.reported = true;
      st.waiting_on = a.waiting_on;
      st.blamed = a.blamed;
      st.code = a.code;
    }
    fault f;
    f.code = errc::aborted;
    f.origin = a.first;
    f.blamed = a.blamed;
    f.channel = a.channel;
    f.detail = std::move(a.reason);
    f.field = std::move(a.field);
    f.here = std::move(a.here);
    f.there = std::move(a.there);
    record_failure(f);
    link_.poke();  // a thread of ours may sleep on another stream
    return std::nullopt;
  }

  void end_payload(rx_state& rx, int peer) {
    if (rx.kind == frame_kind::data)  // the pad up to frame_align is read past before the next header
      rx.skip = frame_pad(rx.need + ((rx.flags & frame_flag_remote) ? 0 : static_cast<std::size_t>(rx.piece)),
                          cfg_.frame_align);
    rx.phase = rx_phase::header;
    rx.got = 0;
    rx.need = frame_header_bytes;
    rx.parsed = false;
    if (rx.kind == frame_kind::abort) {
      auto f = take_abort(rx, peer);
      rx.abort_body.clear();
      if (f) {
        record_failure(*f);
        close_rx(rx, *f);
      }
      return;
    }
    rx.match.complete();
  }

  // Reads whatever the stream (peer, conn) has; rx.m must be held. Returns bytes consumed (or 1
  // when the stream failed, so the caller looks at its requests).
  std::size_t pump(rx_state& rx, int peer, int conn) {
    std::size_t progressed = 0;
    struct commit_guard {  // on every way out: hand the consumed room back once, wake owners once
      Link& link;
      int peer, conn;
      std::size_t& progressed;
      const receive_matcher& match;
      std::uint64_t finished_before;
      ~commit_guard() {
        if (progressed > 0) link.commit_reads(peer, conn);
        if (match.finished() != finished_before) link.poke();  // a request's owner may sleep in wait()
      }
    } commit{link_, peer, conn, progressed, rx.match, rx.match.finished()};
    try {
      while (!rx.match.closed()) {
        if (rx.phase == rx_phase::header && rx.skip > 0) {  // the last frame's pad (fewer than 64 bytes)
          std::array<std::byte, 64> sink;
          const std::size_t n = rx_fill(rx, peer, conn, sink.data(), std::min(rx.skip, sink.size()));
          if (n == 0) break;
          progressed += n;
          rx.skip -= n;
        } else if (rx.phase == rx_phase::header) {
          const std::size_t n = rx_fill(rx, peer, conn, rx.hdr.data() + rx.got, rx.need - rx.got);
          if (n == 0) break;
          progressed += n;
          rx.got += n;
          if (rx.got < rx.need) continue;
          if (!rx.parsed) {
            if (auto f = parse_header(rx, peer)) {
              record_failure(*f);
              close_rx(rx, *f);
              break;
            }
            if (rx.got < rx.need) continue;  // extensions follow
          }
          if (auto f = begin_payload(rx, peer)) {
            record_failure(*f);
            close_rx(rx, *f);
            break;
          }
          if (rx.flags & frame_flag_remote) {  // single copy: read the payload from the sender's memory
            const auto addr = get_le<std::uint64_t>(rx.hdr.data() + rx.need - frame_remote_bytes);
            try {
              if (rx.remaining > 0 && rx.target) link_.remote_read(peer, addr, rx.target, rx.remaining);
            } catch (const error& e) {
              // The sender's buffer is gone (it failed and unwound, or exited). Its abort frame
              // may follow in the stream: fail only what this piece was for, and read on.
              fault f;
              f.code = errc::peer_failure;
              f.blamed = peer;
              f.detail = e.what();
              rx.match.lose(f);
            }
            rx.remaining = 0;
            link_.remote_ack(peer);
          }
        } else if (rx.remaining > 0) {
          std::byte* dst = rx.target;
          std::size_t want = rx.remaining;
          if (!dst) {  // discarding: through a bounded scratch buffer
            if (rx.scratch.empty()) rx.scratch.resize(16 * 1024);
            dst = rx.scratch.data();
            want = std::min(want, rx.scratch.size());
          }
          const std::size_t n = rx_fill(rx, peer, conn, dst, want);
          if (n == 0) break;
          progressed += n;
          if (rx.target) rx.target += n;
          rx.remaining -= n;
        }
        if (rx.phase == rx_phase::payload && rx.remaining == 0) end_payload(rx, peer);
      }
    } catch (const error& e) {
      fault f;
      f.code = static_cast<errc>(e.code().value());
      f.blamed = peer;
      f.detail = e.what();
      close_rx(rx, f);
      ++progressed;
    } catch (const std::bad_alloc&) {
      close_rx(rx, protocol_fault(peer, errc::capacity, "out of memory while receiving a frame"));
      ++progressed;
    }
    return progressed;
  }

  // Reads every stream; when nothing came, sleeps until something may have (or until).
  void pump_or_sleep(deadline until, int write_peer = -1) {
    if (pump_all() > 0) return;
    const auto token = link_.prepare_wait();
    const bool moved = pump_all() > 0;
    link_.wait(token, moved ? clock_type::now() : until, write_peer);
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

  // Posts r on its stream, or completes it from a frame that arrived earlier; a kept frame that
  // disagrees with r is the group's failure. rx.m must be held.
  void post(rx_state& rx, request& r) {
    if (auto f = rx.match.post(r)) record_failure(*f);
  }

  // Removes r from its stream if it is still referenced there; rx.m must be held. Afterwards no
  // other thread can complete r. Returns true when part of r's piece had arrived (it is cut off:
  // the rest of that piece is read past).
  static bool detach_locked(rx_state& rx, request& r) {
    if (!rx.match.detach(r)) return false;
    rx.target = nullptr;
    return true;
  }
  // On the way out with an error.
  void detach(request& r) {
    auto& rx = *rx_[index(r.peer, r.conn)];
    std::lock_guard lock(rx.m);
    detach_locked(rx, r);
  }
  // At the deadline, for a request not seen done: under its stream's lock (so a thread that is
  // pumping the stream finishes first), takes a frame that completed meanwhile for a deferred
  // request, then takes r off the stream. r is done afterwards exactly when its message arrived
  // whole: a completion that races the deadline wins, and nothing delivered is thrown away.
  // Returns true when r's piece had partly arrived and is now cut off.
  bool settle_at_deadline(request& r) {
    auto& rx = *rx_[index(r.peer, r.conn)];
    std::lock_guard lock(rx.m);
    if (r.deferred && !r.is_done()) post(rx, r);
    return !r.is_done() && detach_locked(rx, r);
  }

  // ---- abort, status and blame ----------------------------------------------------------------
  // Sends this rank's status (an abort frame: the group's failure and what this rank waited on) to
  // every peer, once. Bounded: a stream another thread is writing, or that stays full, is skipped.
  void send_status(int waiting_on) {
    fault g;
    {
      std::lock_guard lock(fail_mutex_);
      if (status_sent_) return;
      status_sent_ = true;
      g = group_;
      auto& me = status_[static_cast<std::size_t>(rank_)];
      me.reported = true;
      me.waiting_on = waiting_on;
      me.blamed = g.blamed;
      me.code = g.code;
    }
    detail::abort_body a;
    a.origin = rank_;
    a.blamed = g.blamed;
    a.waiting_on = waiting_on;
    a.code = g.code;
    a.channel = g.channel;
    a.first = g.origin;
    a.reason = g.detail;
    a.field = g.field;
    a.here = g.here;
    a.there = g.there;
    const std::vector<std::byte> body = encode_abort_body(a);
    std::array<std::byte, frame_header_bytes> h{};
    encode_frame_header(h.data(), frame_kind::abort, 0, g.channel, 0, 0, body.size(), body.size());
    const deadline until = clock_type::now() + std::chrono::milliseconds(200);
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      for (int k = 0; k < conns_; ++k) {  // the first connection not in use carries it
        auto& tx = *tx_[index(q, k)];
        std::unique_lock lock(tx.m, std::try_to_lock);
        if (!lock.owns_lock() || tx.partial) continue;
        std::size_t off = 0;
        const std::size_t end = h.size() + body.size();
        try {
          while (off < end && clock_type::now() < until) {
            std::size_t n;
            if (off < h.size()) {
              const io_part parts[2] = {{h.data() + off, h.size() - off}, {body.data(), body.size()}};
              n = link_.write_some(q, k, parts, 2);
            } else {
              const io_part part{body.data() + (off - h.size()), end - off};
              n = link_.write_some(q, k, &part, 1);
            }
            off += n;
            if (n == 0) pump_or_sleep(std::min(until, clock_type::now() + std::chrono::milliseconds(5)), q);
          }
        } catch (const error&) {  // that peer is gone already
        }
        if (off > 0 && off < end) tx.partial = true;  // cut off mid-frame: nothing more may follow
        break;
      }
    }
  }

  void shut_down() {
    bool first = false;
    std::string why;
    {
      std::lock_guard lock(fail_mutex_);
      if (!shut_) {
        shut_ = true;
        first = true;
        why = group_.detail;
      }
    }
    if (first) link_.on_abort(why);
  }

  // " [members: 0 (w0), 2 (w2)]": the names of the ranks an error mentions, when the engine was
  // given names (cfg_.rank_names); "" otherwise. Each rank once, in the order given; -1 skipped.
  // (Not "rank 2 (w2)": render() looks for "rank <blamed>" in the words to decide whether to add
  // who is held responsible.)
  std::string name_ranks(std::initializer_list<int> ranks) const {
    if (cfg_.rank_names.size() != static_cast<std::size_t>(size_)) return {};
    std::string out;
    std::vector<int> seen;
    for (int r : ranks) {
      if (r < 0 || r >= size_ || std::find(seen.begin(), seen.end(), r) != seen.end()) continue;
      seen.push_back(r);
      out += concat(out.empty() ? " [members: " : ", ", r, " (", cfg_.rank_names[static_cast<std::size_t>(r)], ")");
    }
    return out.empty() ? out : out + "]";
  }

  // Turns the group's failure into this thread's comm_error: sends this rank's status, resolves
  // whom to blame when the failure does not say, shuts the link, throws. Called with no locks held.
  [[noreturn]] void raise_group(const char* op, int dst, int src, msg_tag tag, int waiting_on) {
    send_status(waiting_on);
    fault g;
    {
      std::lock_guard lock(fail_mutex_);
      g = group_;
    }
    int blamed = g.blamed;
    if (blamed < 0 && waiting_on >= 0) {
      const deadline limit = clock_type::now() + cfg_.blame_window;
      for (;;) {
        std::optional<int> who;
        {
          std::lock_guard lock(fail_mutex_);
          who = follow_waits(std::span<const rank_report>(status_), rank_, waiting_on, clock_type::now() >= limit);
        }
        if (who) {
          blamed = *who;
          break;
        }
        pump_or_sleep(std::min(limit, clock_type::now() + std::chrono::milliseconds(2)));
      }
    }
    shut_down();
    failure_info info;
    info.rank = rank_;
    info.size = size_;
    info.peer = src >= 0 ? src : dst;
    info.blamed = blamed;
    info.origin = g.origin;
    info.channel = tag.channel;
    info.check = tag.check;
    info.sequence = g.sequence;
    info.operation = op;
    info.field = g.field;
    info.here = g.here;
    info.there = g.there;
    {
      std::lock_guard lock(fail_mutex_);
      bool any = false;
      for (const auto& st : status_) any = any || st.reported;
      if (any) {
        info.waiting_on.assign(static_cast<std::size_t>(size_), -1);
        for (int q = 0; q < size_; ++q)
          if (status_[static_cast<std::size_t>(q)].reported)
            info.waiting_on[static_cast<std::size_t>(q)] = status_[static_cast<std::size_t>(q)].waiting_on;
      }
    }
    errc code = g.code;
    if (g.origin != rank_) {
      code = errc::aborted;
      info.detail = concat("rank ", g.origin, " aborted the group: ", g.detail);
    } else {
      info.detail = g.detail;
    }
    if (g.blamed < 0 && blamed >= 0 && blamed != rank_)
      info.detail += concat(" (rank ", blamed, " did not make progress: the others were waiting on it",
                            info.waiting_on.empty() ? "" : ", as they reported", ")");
    info.detail += name_ranks({rank_, info.peer, blamed, g.origin});
    throw comm_error(code, name_, std::move(info));
  }

  // ---- the exchange -----------------------------------------------------------------------------
  void guarded_exchange(int dst, std::span<const std::byte> out, bool sending, int src, std::span<std::byte> in,
                        msg_tag tag, deadline until, const char* op) {
    try {
      exchange(dst, out, sending, src, in, tag, until, op);
    } catch (const comm_error&) {
      throw;
    } catch (const error& e) {
      if (static_cast<errc>(e.code().value()) == errc::invalid_argument) throw;  // nothing happened yet
      fault f;
      f.code = static_cast<errc>(e.code().value());
      f.detail = e.what();
      record_failure(f);
      raise_group(op, dst, src, tag, -1);
    } catch (const std::bad_alloc&) {
      fault f;
      f.code = errc::capacity;
      f.detail = "out of memory";
      record_failure(f);
      raise_group(op, dst, src, tag, -1);
    } catch (const std::exception& e) {
      fault f;
      f.code = errc::io;
      f.detail = e.what();
      record_failure(f);
      raise_group(op, dst, src, tag, -1);
    }
  }

  // One send and/or receive in progress: what exchange's steps below share. Lives on the caller's
  // stack; its requests are posted on streams until they are done or detached.
  struct exchange_state {
    exchange_state(int dst_, std::span<const std::byte> out_, bool sending_, int src_, std::span<std::byte> in_,
                   msg_tag tag_, deadline until_, std::size_t nreq, std::size_t npieces)
        : dst(dst_),
          src(src_),
          sending(sending_),
          out(out_),
          in(in_),
          tag(tag_),
          until(until_),
          reqs(nreq),
          pieces(npieces),
          tx_locks(npieces),
          sent_all(!sending_),
          send_done(!sending_),
          recv_done(nreq == 0) {}
    int dst, src;
    bool sending;
    std::span<const std::byte> out;
    std::span<std::byte> in;
    msg_tag tag;
    deadline until;
    // From the collective book: the sequence the receive expects, the one the send carries, and
    // the descriptor for the connections the send is the collective's first frame on.
    std::uint32_t rseq = 0, sseq = 0;
    std::optional<collective_descriptor> desc;
    std::uint64_t first_on = 0;
    small_array<request, 2> reqs;      // one per piece received
    small_array<piece_out, 2> pieces;  // one per piece sent
    small_array<std::unique_lock<spin_lock>, 2> tx_locks;
    std::size_t locked = 0;  // write locks held, taken in connection order
    bool sent_all, send_done, recv_done;
    std::optional<fault> failure;  // raised once the write locks are released
    int waiting_on = -1;
    bool cut_off = false;  // a receive's piece had partly arrived at the deadline
  };

  // Sends `out` to dst and/or receives `in` from src (either may be absent), progressing every
  // stream of this rank meanwhile (so two ranks that send to each other never deadlock), until
  // both are done, the deadline passes or the group fails. The steps are named below.
  void exchange(int dst, std::span<const std::byte> out, bool sending, int src, std::span<std::byte> in, msg_tag tag,
                deadline until, const char* op) {
    if (failed_.load(std::memory_order_acquire)) raise_group(op, sending ? dst : -1, src, tag, -1);
    const std::size_t nreq = src >= 0 ? static_cast<std::size_t>(pieces_for(in.size())) : 0;
    const std::size_t npieces = sending ? static_cast<std::size_t>(pieces_for(out.size())) : 0;
    exchange_state x(dst, out, sending, src, in, tag, until, nreq, npieces);
    look_up_book(x);
    post_receives(x);
    struct detach_guard {  // on every way out: no stream may keep a pointer to our requests
      stream_engine* e;
      small_array<request, 2>* reqs;
      ~detach_guard() {
        for (auto& r : *reqs)
          if (!r.is_done()) e->detach(r);
      }
    } guard{this, &x.reqs};
    frame_pieces(x);
    if (progress(x)) return;
    // On the way out with a failure: a half-written message stays marked partial on its stream.
    for (std::size_t i = 0; i < x.pieces.size(); ++i)
      if (x.tx_locks[i].owns_lock()) {
        auto& tx = *tx_[index(dst, x.pieces[i].conn)];
        if (x.pieces[i].off == 0) tx.partial = false;  // nothing of it went out
        x.tx_locks[i].unlock();
      }
    fail_exchange(x, op);
  }

  // The collective book, looked at once (one leaf lock per message, not one per piece).
  void look_up_book(exchange_state& x) {
    std::lock_guard lock(desc_mutex_);
    if (x.src >= 0) {
      auto& chans = book_[static_cast<std::size_t>(x.src)];
      const auto it = chans.find(x.tag.channel);
      if (it != chans.end()) x.rseq = it->second.seq;
    }
    if (x.sending) {
      auto& chans = book_[static_cast<std::size_t>(x.dst)];
      const auto it = chans.find(x.tag.channel);
      if (it != chans.end()) {
        const std::size_t npieces = x.pieces.size();
        const std::uint64_t used = npieces >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << npieces) - 1;
        x.sseq = it->second.seq;
        x.first_on = used & ~it->second.sent;
        if (x.first_on != 0) {
          it->second.sent |= x.first_on;
          x.desc = it->second.desc;
        }
      }
    }
  }

  // Receive side: one request per piece, posted on its stream before anything is sent, so a reply
  // that comes back at once lands in place (or completes it from a frame that came earlier).
  void post_receives(exchange_state& x) {
    const std::size_t nreq = x.reqs.size();
    for (std::size_t i = 0; i < nreq; ++i) {
      request& r = x.reqs[i];
      r.channel = x.tag.channel;
      r.check = x.tag.check;
      r.seq = x.rseq;
      r.total = x.in.size();
      r.dst = x.in.data() + chunk_begin(x.in.size(), nreq, i);
      r.len = chunk_size(x.in.size(), nreq, i);
      r.peer = x.src;
      r.conn = static_cast<int>(i);
      r.owner = this_thread_token();
      auto& rx = *rx_[index(x.src, static_cast<int>(i))];
      std::lock_guard lock(rx.m);
      post(rx, r);
    }
  }

  // Send side: one piece per connection used, each with its header built up front (descriptor on
  // a collective's first frame, the sender's address when the receiver reads it by single copy,
  // the pad up to frame_align). A message of at most eager_max bytes goes as one eager frame.
  void frame_pieces(exchange_state& x) {
    const std::size_t npieces = x.pieces.size();
    for (std::size_t i = 0; i < npieces; ++i) {
      piece_out& po = x.pieces[i];
      po.conn = static_cast<int>(i);
      po.data = x.out.data() + chunk_begin(x.out.size(), npieces, i);
      po.len = chunk_size(x.out.size(), npieces, i);
      po.remote = po.len >= link_.remote_min();
      po.eager = !po.remote && npieces == 1 && cfg_.eager_max > 0 && x.out.size() <= cfg_.eager_max;
      std::uint8_t flags = po.eager ? frame_flag_inline : 0;
      std::size_t at = frame_header_bytes;
      if (x.desc && (x.first_on >> i & 1u)) {
        flags |= frame_flag_descriptor;
        encode(*x.desc, std::span<std::byte, descriptor_wire_bytes>(po.hdr.data() + at, descriptor_wire_bytes));
        at += descriptor_wire_bytes;
      }
      if (po.remote) {
        flags |= frame_flag_remote;
        put_le<std::uint64_t>(po.hdr.data() + at,
                              static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(po.data)));
        at += frame_remote_bytes;
      }
      encode_frame_header(po.hdr.data(), frame_kind::data, flags, x.tag.channel, x.sseq, x.tag.check, x.out.size(),
                          po.len);
      po.hdr_len = at;
      po.pad = frame_pad(at + (po.remote ? 0 : po.len), cfg_.frame_align);
      x.tx_locks[i] = std::unique_lock<spin_lock>(tx_[index(x.dst, po.conn)]->m, std::defer_lock);
    }
  }

  // The parts of po not written yet (header and extensions, in-stream payload, pad), in order.
  static int unwritten_parts(const piece_out& po, io_part* parts) noexcept {
    static constexpr std::array<std::byte, 64> zeros{};
    const io_part all[3] = {{po.hdr.data(), po.hdr_len}, {po.data, po.remote ? 0 : po.len}, {zeros.data(), po.pad}};
    std::size_t skip = po.off;
    int n = 0;
    for (const io_part& p : all) {
      if (skip >= p.len) {
        skip -= p.len;
        continue;
      }
      parts[n++] = io_part{p.data + skip, p.len - skip};
      skip = 0;
    }
    return n;
  }

  // Takes the write locks in connection order (so two threads sending to one peer never hold one
  // each). Returns false when a stream cannot carry the message (x.failure says why).
  bool take_write_locks(exchange_state& x) {
    while (x.locked < x.pieces.size() && x.tx_locks[x.locked].try_lock()) {
      auto& tx = *tx_[index(x.dst, x.pieces[x.locked].conn)];
      if (tx.partial) {  // an earlier message was cut off on this stream: it cannot carry more
        x.tx_locks[x.locked].unlock();
        fault f;
        f.code = errc::aborted;
        f.channel = x.tag.channel;
        f.detail = concat("connection ", x.pieces[x.locked].conn, " to peer ", x.dst,
                          " was cut off mid-message by an earlier failure");
        x.failure = f;
        return false;
      }
      tx.partial = true;
      ++x.locked;
    }
    return true;
  }

  // Writes what the streams take; once every piece is out (and single-copy ones read by the
  // receiver), releases the write locks. Returns the progress. An eager frame's first write goes
  // through the link's optional write_whole(peer, conn, parts, count) (all of the parts or none,
  // so the receiver never finds half an eager frame); a link without one writes it as any other.
  std::size_t write_pieces(exchange_state& x) {
    std::size_t progressed = 0;
    x.send_done = true;
    for (auto& po : x.pieces) {
      const std::size_t end = po.hdr_len + (po.remote ? 0 : po.len) + po.pad;
      try {
        while (po.off < end) {
          io_part parts[3];
          const int k = unwritten_parts(po, parts);
          std::size_t n;
          if constexpr (writes_whole<Link>) {
            n = po.eager && po.off == 0 ? link_.write_whole(x.dst, po.conn, parts, k)
                                        : link_.write_some(x.dst, po.conn, parts, k);
          } else {
            n = link_.write_some(x.dst, po.conn, parts, k);
          }
          if (n == 0) break;
          po.off += n;
          progressed += n;
        }
      } catch (const error& e) {  // the stream to dst broke: dst is gone (or aborted and left)
        fault f;
        f.code = static_cast<errc>(e.code().value());
        f.blamed = x.dst;
        f.channel = x.tag.channel;
        f.sequence = x.sseq;
        f.detail = e.what();
        x.failure = f;
        x.send_done = false;
        return progressed + 1;
      }
      if (po.off < end) {
        x.send_done = false;
      } else if (po.remote) {  // the buffer is ours again only when the receiver has read it
        if (po.seq == 0) po.seq = link_.remote_post(x.dst);
        if (link_.remote_acked(x.dst) < po.seq) x.send_done = false;
      }
    }
    if (x.send_done) {
      bool contended = false;
      for (std::size_t i = 0; i < x.pieces.size(); ++i) {
        auto& tx = *tx_[index(x.dst, x.pieces[i].conn)];
        tx.partial = false;
        x.tx_locks[i].unlock();
        contended = contended || tx.waiters.load(std::memory_order_relaxed) > 0;
      }
      if (contended) link_.poke();  // a thread of ours waits for these locks
      x.sent_all = true;
      ++progressed;
    }
    return progressed;
  }

  // Looks at this exchange's receives: re-posts deferred ones, notes completion and failure.
  void poll_receives(exchange_state& x) {
    x.recv_done = true;
    for (auto& r : x.reqs) {
      if (r.deferred) {
        auto& rx = *rx_[index(r.peer, r.conn)];
        std::lock_guard lock(rx.m);
        post(rx, r);
      }
      if (!r.is_done()) {
        x.recv_done = false;
      } else if (r.failed.load(std::memory_order_relaxed) && !x.failure) {
        x.failure = *r.why;
      }
    }
  }

  // One attempt at everything: the write locks, the writes, the single-copy acknowledgements,
  // every incoming stream. Returns the progress made.
  std::size_t step(exchange_state& x) {
    if (!take_write_locks(x)) return 1;
    std::size_t progressed = 0;
    if (!x.sent_all && x.locked == x.pieces.size()) {
      progressed += write_pieces(x);
      if (x.failure) return progressed;
    }
    progressed += pump_all();
    poll_receives(x);
    return progressed;
  }

  // The deadline passed. Another thread may be completing a receive of ours at this very moment:
  // settles each open one under its stream's lock and looks again. Returns true when everything
  // turned out done; else x.failure says what (a timeout with how far it got, or a failure).
  bool on_deadline(exchange_state& x) {
    x.recv_done = true;
    for (auto& r : x.reqs) {
      if (!r.is_done()) x.cut_off = settle_at_deadline(r) || x.cut_off;
      if (!r.is_done()) {
        x.recv_done = false;
      } else if (r.failed.load(std::memory_order_relaxed) && !x.failure) {
        x.failure = *r.why;
      }
    }
    x.waiting_on = !x.recv_done ? x.src : (!x.send_done ? x.dst : -1);
    if (x.failure) return false;
    if (x.send_done && x.recv_done) return true;
    std::size_t sent = 0, got = 0;
    for (auto& po : x.pieces)
      sent += po.remote ? (po.seq != 0 && link_.remote_acked(x.dst) >= po.seq ? po.len : 0)
                        : std::min(po.len, po.off >= po.hdr_len ? po.off - po.hdr_len : 0);
    for (auto& r : x.reqs) got += r.is_done() ? r.len : 0;
    fault f;
    f.code = errc::timeout;
    f.channel = x.tag.channel;
    f.sequence = x.rseq;
    f.detail = concat("not done before the deadline: ", sent, " of ", x.out.size(), " bytes sent and ", got, " of ",
                      x.in.size(), " bytes received (waiting on rank ", x.waiting_on, ")");
    x.failure = f;
    return false;
  }

  // Steps until the exchange is done (true) or failed (false, x.failure set). Between steps that
  // made no progress it polls (spin or yield, for the adaptive poll budget), then sleeps on the
  // link's wake-up; while another thread of ours holds a write lock it sleeps in 1 ms slices.
  bool progress(exchange_state& x) {
    auto idle_since = clock_type::time_point::min();  // set at the first idle turn
    unsigned spins = 0;
    bool polled = false;  // this wait polled (spun or yielded) instead of sleeping at once
    const auto budget = std::chrono::nanoseconds(poll_ns_.load(std::memory_order_relaxed));
    const std::size_t npieces = x.pieces.size();
    for (;;) {
      const std::size_t progressed = step(x);
      x.waiting_on = !x.recv_done ? x.src : (!x.send_done ? x.dst : -1);
      if (x.failure) return false;
      if (x.send_done && x.recv_done) return true;
      if (progressed == 0 && mode_ == wait_mode::spin && x.locked == npieces && (++spins & 15u) != 0) {
        cpu_relax();  // the clock, the deadline and the policy are looked at every 16th idle turn
        continue;
      }
      if (failed_.load(std::memory_order_acquire)) return false;
      const auto now = clock_type::now();
      if (now >= x.until) return on_deadline(x);
      if (progressed > 0 || idle_since == clock_type::time_point::min()) {
        if (progressed > 0 && polled) adapt_poll(true);  // polling paid off: poll as long next time
        polled = false;
        idle_since = now;
        continue;
      }
      try {  // a peer we wait on whose process is gone will never answer
        if (!x.recv_done && x.src >= 0) link_.check_alive(x.src);
        if (!x.send_done && x.sending) link_.check_alive(x.dst);
      } catch (const error& e) {
        // Its last bytes may have landed between our look and its exit: look once more.
        if (pump_all() == 0) {
          fault f;
          f.code = static_cast<errc>(e.code().value());
          f.blamed = x.waiting_on;
          f.channel = x.tag.channel;
          f.sequence = x.rseq;
          f.detail = e.what();
          x.failure = f;
          return false;
        }
        continue;
      }
      const auto idle = now - idle_since;
      if (x.locked == npieces && idle < budget) {  // (else another thread of ours writes to dst: sleep briefly)
        if (mode_ == wait_mode::spin) {
          polled = true;
          continue;
        }
        if (mode_ == wait_mode::yield) {
          polled = true;
          std::this_thread::yield();
          continue;
        }
      }
      if (polled) adapt_poll(false);  // polled in vain: poll less next time (the host may be busy)
      polled = false;
      // Sleep: arm the link's wake-up, try everything once more (so nothing that happened in
      // between is missed), and sleep only if that made no progress. A thread that waits for a
      // write lock says so, so the holder pokes when it lets go.
      const bool lock_wait = x.locked < npieces;
      const auto slice = lock_wait ? std::chrono::milliseconds(1) : std::chrono::milliseconds(50);
      std::atomic<int>* waiters = lock_wait ? &tx_[index(x.dst, x.pieces[x.locked].conn)]->waiters : nullptr;
      if (waiters) waiters->fetch_add(1, std::memory_order_seq_cst);
      const auto token = link_.prepare_wait();
      const bool moved = step(x) > 0 || x.failure.has_value();
      link_.wait(token, moved ? now : std::min(x.until, now + slice), x.send_done ? -1 : x.dst);
      if (waiters) waiters->fetch_sub(1, std::memory_order_relaxed);
      if (moved) idle_since = clock_type::now();
    }
  }

  // True when every stream from `peer` has ended (closed: its end of stream, an error, or a
  // protocol violation). A stream another thread is pumping counts as open.
  bool streams_ended(int peer) {
    if (peer < 0 || peer >= size_ || peer == rank_) return true;
    for (int k = 0; k < conns_; ++k) {
      auto& rx = *rx_[index(peer, k)];
      std::unique_lock lock(rx.m, std::try_to_lock);
      if (!lock.owns_lock() || !rx.match.closed()) return false;
    }
    return true;
  }

  // The exchange failed (write locks released): a quiet timeout of a point-to-point call that moved
  // nothing, else the group's failure on every rank.
  [[noreturn]] void fail_exchange(exchange_state& x, const char* op) {
    if (x.failure && x.failure->code == errc::timeout && x.rseq == 0 && x.sseq == 0) {
      // A point-to-point call outside any collective that timed out before a byte of it moved
      // leaves every stream as it was: a plain timeout (callers poll this way), no abort.
      // (Receives were settled at the deadline: none is still posted; a frame that was arriving
      // for a deferred one stays queued for the next receive on its channel.)
      bool moved = x.cut_off;
      for (auto& po : x.pieces) moved = moved || po.off > 0;
      for (auto& r : x.reqs) moved = moved || r.is_done();
      if (!moved) {
        failure_info info;
        info.rank = rank_;
        info.size = size_;
        info.peer = x.waiting_on;
        info.blamed = x.waiting_on;
        info.origin = rank_;
        info.channel = x.tag.channel;
        info.check = x.tag.check;
        info.operation = op;
        info.detail = x.failure->detail + name_ranks({rank_, x.waiting_on});
        throw comm_error(errc::timeout, name_, std::move(info));
      }
    }
    if (x.failure) {
      if (x.failure->code == errc::peer_failure && x.failure->blamed >= 0) {
        // A peer that aborts sends its reason, then closes: a write can fail before the reason is
        // read. Drain briefly so the report says why, not just "closed" — until every stream from
        // that peer has ended (its reason, if it sent one, came before the end: a peer that
        // crashed or left sent none, and waiting longer would only delay the failure).
        const deadline limit = clock_type::now() + cfg_.drain_window;
        while (!failed_.load(std::memory_order_acquire) && clock_type::now() < limit &&
               !streams_ended(x.failure->blamed))
          pump_or_sleep(std::min(limit, clock_type::now() + std::chrono::milliseconds(2)));
      }
      record_failure(*x.failure);
    }
    raise_group(op, x.sending ? x.dst : -1, x.src, x.tag, x.waiting_on);
  }
  Link& link_;
  int rank_, size_, conns_;
  std::size_t stripe_min_;
  std::string name_;
  engine_config cfg_;
  wait_mode mode_;
  std::atomic<std::int64_t> poll_ns_;
  std::vector<std::unique_ptr<rx_state>> rx_;
  std::vector<std::unique_ptr<tx_state>> tx_;
  // Collective bookkeeping (desc_mutex_, a leaf lock).
  spin_lock desc_mutex_;
  std::vector<std::unordered_map<std::uint32_t, peer_channel>> book_;
  std::vector<std::vector<pending_descriptor>> pending_;
  // The group's failure and the ranks' reports (fail_mutex_, a leaf lock).
  std::atomic<bool> failed_{false};
  std::mutex fail_mutex_;
  fault group_;
  std::vector<rank_status> status_;
  bool status_sent_ = false, shut_ = false;
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
  /// Declares the next collective on `channel` (see descriptor_checking_transport).
  void begin_collective(std::uint32_t channel, const collective_descriptor& d, std::span<const int> members = {}) {
    engine_->begin_collective(channel, d, members);
  }
  /// Fails every operation of every rank with errc::aborted and the reason: the peers are told why,
  /// then the links are shut.
  void abort(std::string_view why) { engine_->abort(why); }
  /// abort(why) that also carries the failure's fields to the other ranks.
  void abort(const comm_error& e) { engine_->abort(e); }
  /// The waiting policy in force (automatic resolved to spin or yield).
  wait_mode waiting() const noexcept { return engine_->waiting(); }

 protected:
  std::unique_ptr<stream_engine<Link>> engine_;
};

}  // namespace weft::comm::detail

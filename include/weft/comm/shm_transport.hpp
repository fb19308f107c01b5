// Shared-memory transport: ranks are processes on one host that map one POSIX shared memory
// segment holding a single-producer/single-consumer byte ring per ordered pair of ranks and a
// doorbell word per rank. A frame's header and payload go into the ring with one copy and one
// publish, padded to whole cache lines; a small message goes eager (header and payload published
// together in one store, one doorbell, taken whole by the receiver); waiters poll (spinning while
// every rank has a core, yielding when the host is oversubscribed), then sleep on the doorbell
// with futex(2) (Drepper, "Futexes are tricky", 2011).
#pragma once

#include <weft/comm/concepts.hpp>
#include <weft/comm/detail/shm_attach.hpp>
#include <weft/comm/detail/stream_engine.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

namespace weft::comm {

/// Options of an shm group; every rank must pass the same values.
struct shm_options {
  /// Per ordered pair; a power of two >= 4096. Small (256 KiB) because only pieces below
  /// single_copy_min pass through it, and a small ring keeps their cache lines hot: with 4 MiB a
  /// 1 KiB message stream walked through 4 MiB of lines (and first-touch page faults) per pair.
  std::size_t ring_bytes = std::size_t{256} << 10;
  std::chrono::milliseconds connect_timeout{30'000};  ///< how long to wait for all ranks to attach
  /// How a blocked rank waits: automatic spins when the ranks fit this host's cores and yields
  /// otherwise, sleeping in futex(2) once nothing happened for wait_options::spin / ::yield.
  wait_options waiting{};
  /// Pieces at least this big are not copied through the ring: the receiver reads them straight
  /// from the sender's buffer with process_vm_readv(2) (one copy instead of two, as OpenMPI's
  /// vader BTL does with CMA). SIZE_MAX turns this off (e.g. where ptrace is restricted).
  std::size_t single_copy_min = std::size_t{64} << 10;
  /// Messages of at most this many bytes go eager: header and payload in whole cache lines of the
  /// ring, published with one store and one doorbell, never split. At most 64 KiB and at most
  /// ring_bytes / 2 (so an eager frame always fits); 0 turns it off.
  std::size_t eager_max = 2048;
};

namespace detail {

inline constexpr std::uint64_t shm_magic = 0x7765667473686d32ull;  // "weftshm2": frames padded to 64 bytes
inline constexpr int shm_max_ranks = 64;

struct alignas(64) shm_doorbell {
  std::atomic<std::uint32_t> seq{0};
  std::atomic<std::uint32_t> sleepers{0};
};
struct shm_ring_ctl {
  alignas(64) std::atomic<std::uint64_t> head{0};            // bytes ever written (producer)
  alignas(64) std::atomic<std::uint64_t> tail{0};            // bytes ever read (consumer)
  alignas(64) std::atomic<std::uint32_t> writer_waiting{0};  // the producer found the ring full
  alignas(64) std::atomic<std::uint64_t> remote_acked{0};    // single-copy pieces the consumer has read
};
struct alignas(64) shm_header {  // a multiple of 64 bytes, so the doorbells after it are aligned
  std::atomic<std::uint64_t> magic{0};
  std::int32_t size = 0;
  std::atomic<std::int32_t> attached{0};
  std::uint64_t ring_bytes = 0;
  std::uint64_t eager_max = 0;  // every rank must agree: a bigger eager frame is a protocol error
  std::int32_t pids[shm_max_ranks] = {};
  // Each rank's CPU affinity (a cpu_set_t's bits), written before it counts itself attached: the
  // union says how many cores the group may use, which the automatic wait mode needs.
  std::uint64_t cpus[shm_max_ranks][sizeof(cpu_set_t) / 8] = {};
};

inline long futex(std::atomic<std::uint32_t>* addr, int op, std::uint32_t val, const timespec* ts) {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(addr), op, val, ts, nullptr, 0);
}

/// The link of stream_engine over the mapped segment. Not for direct use.
class shm_link {
 public:
  static constexpr std::size_t stage_bytes = 0;  // reads copy straight out of the ring

  shm_link(std::byte* base, int rank, int size, std::size_t ring_bytes, std::size_t single_copy_min)
      : base_(base),
        rank_(rank),
        size_(size),
        ring_(ring_bytes),
        remote_min_(single_copy_min),
        remote_posted_(static_cast<std::size_t>(size), 0),
        read_tail_(static_cast<std::size_t>(size), 0),
        seen_tail_(static_cast<std::size_t>(size), 0) {}

  static_assert(sizeof(shm_header) % 64 == 0 && sizeof(shm_doorbell) % 64 == 0 && sizeof(shm_ring_ctl) % 64 == 0);
  static std::size_t layout_bytes(int size, std::size_t ring_bytes) {
    const auto P = static_cast<std::size_t>(size);
    return sizeof(shm_header) + P * sizeof(shm_doorbell) + P * P * sizeof(shm_ring_ctl) + P * P * ring_bytes;
  }
  shm_header& header() const { return *reinterpret_cast<shm_header*>(base_); }
  shm_doorbell& bell(int r) const {
    return reinterpret_cast<shm_doorbell*>(base_ + sizeof(shm_header))[static_cast<std::size_t>(r)];
  }
  std::size_t pair(int from, int to) const {
    return static_cast<std::size_t>(from) * static_cast<std::size_t>(size_) + static_cast<std::size_t>(to);
  }
  shm_ring_ctl& ctl(int from, int to) const {
    auto* first = reinterpret_cast<shm_ring_ctl*>(base_ + sizeof(shm_header) +
                                                  static_cast<std::size_t>(size_) * sizeof(shm_doorbell));
    return first[pair(from, to)];
  }
  std::byte* data(int from, int to) const {
    const auto P = static_cast<std::size_t>(size_);
    return base_ + sizeof(shm_header) + P * sizeof(shm_doorbell) + P * P * sizeof(shm_ring_ctl) +
           pair(from, to) * ring_;
  }

  /// Copies a prefix of the parts into the ring to `peer` and publishes it at once (one release
  /// store, one doorbell). When the ring cannot take everything, marks the ring so the consumer
  /// rings back once it frees room.
  std::size_t write_some(int peer, int, const io_part* parts, int count) { return write(peer, parts, count, false); }
  /// write_some for an eager frame: all of the parts or nothing, so the consumer finds the frame
  /// whole at its first look (one publish, one doorbell, no second wake for the payload).
  std::size_t write_whole(int peer, int, const io_part* parts, int count) { return write(peer, parts, count, true); }
  /// Both of the above: `whole` writes nothing unless every part fits.
  std::size_t write(int peer, const io_part* parts, int count, bool whole) {
    auto& c = ctl(rank_, peer);
    const std::uint64_t head = c.head.load(std::memory_order_relaxed);
    // The consumer's tail as last seen: looking at the real one costs a cache line from the other
    // core, so it is read only when the ring looks too full.
    std::uint64_t& tail = seen_tail_[static_cast<std::size_t>(peer)];
    std::size_t want = 0;
    for (int i = 0; i < count; ++i) want += parts[i].len;
    std::size_t room = ring_ - static_cast<std::size_t>(head - tail);
    if (room < want) {
      tail = c.tail.load(std::memory_order_acquire);
      room = ring_ - static_cast<std::size_t>(head - tail);
    }
    if (room < want) {  // Dekker with commit_reads: either we see its new tail or it sees the flag
      c.writer_waiting.store(1, std::memory_order_seq_cst);
      tail = c.tail.load(std::memory_order_seq_cst);
      room = ring_ - static_cast<std::size_t>(head - tail);
    }
    if (whole && room < want) return 0;  // the consumer rings once it frees room (writer_waiting)
    std::size_t done = 0;
    std::byte* bytes = data(rank_, peer);
    for (int i = 0; i < count && done < room; ++i) {
      const std::size_t len = std::min(parts[i].len, room - done);
      if (len == 0) continue;
      copy_in(bytes, static_cast<std::size_t>((head + done) & (ring_ - 1)), parts[i].data, len);
      done += len;
    }
    if (done == 0) return 0;
    c.head.store(head + done, std::memory_order_release);
    ring(peer);
    return done;
  }
  /// Copies up to n bytes out of the ring from `peer`; the room is handed back to the writer by
  /// commit_reads (once per pump, so a frame's header, descriptor and payload cost one fence).
  std::size_t read_some(int peer, int, std::byte* dst, std::size_t n) {
    auto& c = ctl(peer, rank_);
    std::uint64_t& tail = read_tail_[static_cast<std::size_t>(peer)];
    const std::uint64_t head = c.head.load(std::memory_order_acquire);
    const std::size_t len = std::min(static_cast<std::size_t>(head - tail), n);
    if (len == 0) return 0;
    copy_out(dst, data(peer, rank_), static_cast<std::size_t>(tail & (ring_ - 1)), len);
    tail += len;
    return len;
  }
  /// Publishes what read_some consumed from `peer` and wakes the writer if it waits for room.
  void commit_reads(int peer, int) {
    auto& c = ctl(peer, rank_);
    const std::uint64_t tail = read_tail_[static_cast<std::size_t>(peer)];
    if (c.tail.load(std::memory_order_relaxed) == tail) return;
    c.tail.store(tail, std::memory_order_release);
    detail::full_fence();  // Dekker with write_some's flag
    if (c.writer_waiting.load(std::memory_order_relaxed) != 0) {
      c.writer_waiting.store(0, std::memory_order_relaxed);
      ring(peer);
    }
  }
  /// Announces a sleeper on this rank's doorbell (so peers that change anything ring it from now
  /// on) and returns its sequence; the engine then looks at everything once more before wait().
  std::uint64_t prepare_wait() {
    auto& b = bell(rank_);
    b.sleepers.fetch_add(1, std::memory_order_seq_cst);
    return b.seq.load(std::memory_order_seq_cst);
  }
  /// Sleeps on this rank's doorbell until a peer rings it or `until` (the engine polls first).
  void wait(std::uint64_t token, deadline until, int) {
    auto& b = bell(rank_);
    const auto t = static_cast<std::uint32_t>(token);
    const auto now = clock_type::now();
    if (now < until) {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(until - now).count();
      timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
      if (b.seq.load(std::memory_order_seq_cst) == t) futex(&b.seq, FUTEX_WAIT, t, &ts);
    }
    b.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }

  void poke() { ring(rank_); }

  /// Throws errc::peer_failure when the process of `peer` (which this rank is waiting on, with
  /// nothing left to read from it) no longer exists; looks at most every 200 ms. A peer that
  /// exits after its last message is fine: its bytes stay in the ring.
  void check_alive(int peer) {
    const auto now = clock_type::now().time_since_epoch().count();
    const auto last = last_alive_check_.load(std::memory_order_relaxed);
    if (now - last < std::chrono::duration_cast<clock_type::duration>(std::chrono::milliseconds(200)).count()) return;
    last_alive_check_.store(now, std::memory_order_relaxed);  // several threads may look: any of them will do
    const pid_t pid = header().pids[peer];
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH)
      weft::detail::raise(errc::peer_failure, "weft::comm::shm_transport", "peer ", peer, " (pid ", pid,
                          ") has exited");
  }

  std::size_t remote_min() const { return remote_min_; }
  /// Copies n bytes at the peer's address `addr` into dst (one copy, process_vm_readv(2)).
  void remote_read(int peer, std::uint64_t addr, std::byte* dst, std::size_t n) {
    const pid_t pid = header().pids[peer];
    std::size_t done = 0;
    while (done < n) {
      iovec local{dst + done, n - done};
      iovec remote{reinterpret_cast<void*>(static_cast<std::uintptr_t>(addr) + done), n - done};
      const ssize_t r = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
      if (r <= 0)
        weft::detail::raise(errc::peer_failure, "weft::comm::shm_transport", "single-copy read of ", n,
                            " bytes from peer ", peer, " (pid ", pid, ") failed: ", std::strerror(errno),
                            " (set shm_options::single_copy_min = SIZE_MAX where ptrace is restricted)");
      done += static_cast<std::size_t>(r);
    }
  }
  void remote_ack(int peer) {
    ctl(peer, rank_).remote_acked.fetch_add(1, std::memory_order_acq_rel);
    ring(peer);
  }
  std::uint64_t remote_post(int peer) { return ++remote_posted_[static_cast<std::size_t>(peer)]; }
  std::uint64_t remote_acked(int peer) const { return ctl(rank_, peer).remote_acked.load(std::memory_order_acquire); }

  /// Wakes every rank's waiters, so they see the abort frames at once.
  void on_abort(const std::string&) {
    for (int q = 0; q < size_; ++q) ring(q);
  }

 private:
  // After a change a peer may wait for (data, room, an acknowledgement): wakes r's sleepers. Dekker
  // with prepare_wait: the change is ordered before the look at `sleepers` (the fence), and a
  // sleeper announces itself before it looks at the state, so either it sees the change or we see
  // it; nobody sleeping (the spinning, common case) costs no atomic read-modify-write.
  void ring(int r) {
    auto& b = bell(r);
    detail::full_fence();
    if (b.sleepers.load(std::memory_order_relaxed) > 0) {
      b.seq.fetch_add(1, std::memory_order_seq_cst);
      futex(&b.seq, FUTEX_WAKE, INT_MAX, nullptr);
    }
  }
  void copy_in(std::byte* ring, std::size_t at, const std::byte* src, std::size_t len) const {
    const std::size_t first = std::min(len, ring_ - at);
    std::memcpy(ring + at, src, first);
    if (len > first) std::memcpy(ring, src + first, len - first);
  }
  void copy_out(std::byte* dst, const std::byte* ring, std::size_t at, std::size_t len) const {
    const std::size_t first = std::min(len, ring_ - at);
    std::memcpy(dst, ring + at, first);
    if (len > first) std::memcpy(dst + first, ring, len - first);
  }
  std::byte* base_;
  int rank_, size_;
  std::size_t ring_;
  std::size_t remote_min_;
  std::vector<std::uint64_t> remote_posted_;  // per peer; touched only under the engine's write lock
  std::vector<std::uint64_t> read_tail_;      // per peer: bytes read so far; under the engine's read lock
  std::vector<std::uint64_t> seen_tail_;      // per peer: its tail as last read; under the write lock
  std::atomic<clock_type::rep> last_alive_check_{0};
};

}  // namespace detail

/// Rank `rank` of `size` processes on this host, joined through the shared memory object `name`
/// (e.g. "/myjob-42"; unique per group). Rank 0 creates it and removes the name once every rank
/// has attached, so nothing is left behind; the others wait for it up to connect_timeout.
/// Satisfies concurrent_transport and abortable_transport. Send/recv cost one copy into and one
/// out of the ring, O(bytes). Thread-safe across channels. Not copyable or movable.
class shm_transport : public detail::engine_front<detail::shm_link> {
 public:
  static constexpr bool thread_safe_channels = true;

  /// Throws errc::invalid_argument for bad rank/size/ring size, errc::io when the segment cannot
  /// be created or mapped, errc::timeout when the others do not attach in time.
  shm_transport(const std::string& name, int rank, int size, shm_options opt = {}) : rank_(rank), size_(size) {
    constexpr const char* where = "weft::comm::shm_transport::shm_transport";
    expects(size >= 1 && size <= detail::shm_max_ranks, errc::invalid_argument, where, "size ", size,
            " must be in [1, ", detail::shm_max_ranks, "]");
    expects(rank >= 0 && rank < size, errc::invalid_argument, where, "rank ", rank, " must be in [0, ", size, ")");
    expects(opt.ring_bytes >= 4096 && (opt.ring_bytes & (opt.ring_bytes - 1)) == 0, errc::invalid_argument, where,
            "ring_bytes ", opt.ring_bytes, " must be a power of two >= 4096");
    expects(opt.eager_max <= detail::max_eager_bytes && opt.eager_max <= opt.ring_bytes / 2, errc::invalid_argument,
            where, "eager_max ", opt.eager_max, " must be at most ", detail::max_eager_bytes,
            " and at most ring_bytes / 2 (", opt.ring_bytes / 2, ")");
    expects(!name.empty() && name[0] == '/' && name.find('/', 1) == std::string::npos, errc::invalid_argument, where,
            "name '", name, "' must look like \"/something\"");
    bytes_ = detail::shm_link::layout_bytes(size, opt.ring_bytes);
    const deadline until = clock_type::now() + opt.connect_timeout;
    int fd = -1;
    void* p = nullptr;
    if (rank == 0) {
      ::shm_unlink(name.c_str());  // a segment left by a crashed run of the same name
      fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      expects(fd >= 0, errc::io, where, "rank 0 cannot create shared memory '", name, "': ", std::strerror(errno));
      if (::ftruncate(fd, static_cast<off_t>(bytes_)) != 0) {
        const int e = errno;
        ::close(fd);
        ::shm_unlink(name.c_str());
        weft::detail::raise(errc::io, where, "cannot size shared memory '", name, "' to ", bytes_,
                            " bytes: ", std::strerror(e));
      }
    } else {
      // A segment of this name may be a crashed run's leftover: attach only to rank 0's live one.
      p = detail::shm_attach_current<detail::shm_header>(name, bytes_, detail::shm_magic, rank, until, where);
    }
    if (rank == 0) {
      p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      ::close(fd);
      expects(p != MAP_FAILED, errc::io, where, "cannot map shared memory '", name, "': ", std::strerror(errno));
    }
    base_ = static_cast<std::byte*>(p);
    link_ = std::make_unique<detail::shm_link>(base_, rank, size, opt.ring_bytes, opt.single_copy_min);
    auto& h = link_->header();
    try {
      if (rank == 0) {
        // ftruncate zero-filled the segment, which is every atomic's initial state; publish last.
        h.size = size;
        h.ring_bytes = opt.ring_bytes;
        h.eager_max = opt.eager_max;
        h.pids[0] = static_cast<std::int32_t>(::getpid());  // before the magic: peers check it is alive
        h.magic.store(detail::shm_magic, std::memory_order_release);
      }
      while (h.magic.load(std::memory_order_acquire) != detail::shm_magic) {
        expects(clock_type::now() < until, errc::timeout, where, "rank ", rank, ": shared memory '", name,
                "' was never initialised by rank 0");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      expects(h.size == size && h.ring_bytes == opt.ring_bytes && h.eager_max == opt.eager_max, errc::mismatch, where,
              "rank ", rank, " expects size ", size, ", ring_bytes ", opt.ring_bytes, " and eager_max ", opt.eager_max,
              " but rank 0 created size ", h.size, ", ring_bytes ", h.ring_bytes, " and eager_max ", h.eager_max);
      h.pids[rank] = static_cast<std::int32_t>(::getpid());
      {
        cpu_set_t mine;
        CPU_ZERO(&mine);
        if (::sched_getaffinity(0, sizeof mine, &mine) != 0)
          for (std::size_t c = 0; c < std::thread::hardware_concurrency() && c < std::size_t{CPU_SETSIZE}; ++c)
            CPU_SET(c, &mine);
        std::memcpy(h.cpus[rank], &mine, sizeof mine);
      }
      h.attached.fetch_add(1, std::memory_order_acq_rel);
      while (h.attached.load(std::memory_order_acquire) < size) {
        expects(clock_type::now() < until, errc::timeout, where, "rank ", rank, ": only ", h.attached.load(), " of ",
                size, " ranks attached to '", name, "' within the connect timeout");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (rank == 0) ::shm_unlink(name.c_str());
      cpu_set_t all;  // every rank's mask is in: it wrote it before counting itself attached
      CPU_ZERO(&all);
      for (int q = 0; q < size; ++q) {
        cpu_set_t theirs;
        std::memcpy(&theirs, h.cpus[q], sizeof theirs);
        CPU_OR(&all, &all, &theirs);
      }
      group_cores_ = std::max(1, CPU_COUNT(&all));
    } catch (...) {
      if (rank == 0) ::shm_unlink(name.c_str());
      ::munmap(base_, bytes_);
      throw;
    }
    detail::engine_config cfg;
    cfg.waiting = opt.waiting;
    cfg.local_ranks = size;
    cfg.local_cores = group_cores_;
    cfg.frame_align = 64;
    cfg.eager_max = opt.eager_max;
    engine_ = std::make_unique<detail::stream_engine<detail::shm_link>>(*link_, rank, size, 1, SIZE_MAX,
                                                                        "weft::comm::shm_transport", cfg);
  }
  shm_transport(const shm_transport&) = delete;
  shm_transport& operator=(const shm_transport&) = delete;
  ~shm_transport() {
    engine_.reset();
    if (base_) ::munmap(base_, bytes_);
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

 private:
  int rank_, size_;
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  int group_cores_ = 0;  // cores the ranks may run on together (union of their affinities)
  std::unique_ptr<detail::shm_link> link_;
};

}  // namespace weft::comm

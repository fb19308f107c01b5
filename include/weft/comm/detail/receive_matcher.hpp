// Internal: the receive matcher of the stream engine — where the frames arriving on one stream go.
// A frame goes to the oldest receive posted on its channel, or, when none waits, is kept aside
// (bounded) until a receive on its channel takes it, oldest first: so messages on one (peer,
// channel) are delivered in order, whatever order the receives are posted in (MPI's matching rule,
// MPI-4 §3.5, without wildcards). Each frame's facts (collective sequence, check word, bytes) are
// compared with what its receive expects, and a difference fails that receive with errc::mismatch.
// No I/O, no locks: the engine (stream_engine.hpp) calls it under the stream's lock, so it is
// tested on its own (tests/comm/receive_matcher_test.cpp).
#pragma once

#include <weft/comm/detail/blame.hpp>
#include <weft/comm/options.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace weft::comm::detail {

/// An address unique to the calling thread: a request records its owner with it, so the thread
/// that completes it knows whether the owner may be asleep (another thread) or is itself.
inline const void* this_thread_token() noexcept {
  thread_local const char token = 0;
  return &token;
}

/// What a frame's header says about it, to compare with what a receive expects.
struct frame_facts {
  std::uint32_t channel = 0;
  std::uint32_t seq = 0;    ///< which collective on (sender, receiver, channel); 0 outside collectives
  std::uint32_t check = 0;  ///< the check word
  std::uint64_t total = 0;  ///< bytes of the whole message
  std::uint64_t piece = 0;  ///< bytes of this frame's payload
};

/// A receive of one piece of a message on one stream. Lives on its owner's stack; the matcher
/// refers to it from post() until it is done or detached. Completion is published by whichever
/// thread pumps the stream (under the stream's lock) and read by the owner without it: `done` is
/// stored last, with release.
struct recv_request {
  std::uint32_t channel = 0, check = 0, seq = 0;  ///< what the frame must say (seq 0: any)
  std::uint64_t total = 0;                        ///< bytes of the whole message expected
  std::byte* dst = nullptr;                       ///< where this piece goes
  std::size_t len = 0;                            ///< bytes of this piece
  int peer = 0, conn = 0;
  std::atomic<bool> done{false}, failed{false}, posted{false};
  bool deferred = false;        ///< its frame is still arriving: post it again later (owner only)
  const void* owner = nullptr;  ///< this_thread_token() of the thread that waits for it
  std::optional<fault> why;     ///< written before done when failed
  bool is_done() const noexcept { return done.load(std::memory_order_acquire); }
};

/// Why a frame's facts do not match a receive (errc::mismatch blaming `peer`, with the field and
/// both values), or nothing. O(1).
inline std::optional<fault> check_frame(const recv_request& r, const frame_facts& f, int peer) {
  using weft::detail::concat;
  fault out;
  out.code = errc::mismatch;
  out.blamed = peer;
  out.channel = r.channel;
  out.sequence = r.seq;
  if (r.seq != 0 && f.seq != 0 && r.seq != f.seq) {
    out.field = "collective sequence";
    out.here = std::to_string(r.seq);
    out.there = std::to_string(f.seq);
    out.detail = concat("the ranks call collectives on channel ", r.channel, " in different orders: collective #",
                        r.seq, " here, #", f.seq, " at rank ", peer);
    return out;
  }
  if (f.check != r.check) {
    out.field = "operation";
    out.detail = "the ranks disagree about the operation: " + explain_check_difference(r.check, f.check) + " (rank " +
                 std::to_string(peer) + ")";
    return out;
  }
  if (f.total == r.total && f.piece != r.len) {  // the same message, split another way
    out.field = "message split";
    out.here = std::to_string(r.len);
    out.there = std::to_string(f.piece);
    out.detail = concat("a message of ", r.total, " bytes arrives in pieces of ", f.piece, " bytes from rank ", peer,
                        ", this rank expects ", r.len, " (the ranks' connections or stripe_min differ)");
    return out;
  }
  if (f.total != r.total) {
    out.field = "message bytes";
    out.here = std::to_string(r.total);
    out.there = std::to_string(f.total);
    out.detail = concat("message bytes ", r.total, " here, ", f.total, " at rank ", peer);
    return out;
  }
  return std::nullopt;
}

/// The matching state of one incoming stream (one connection from one peer): receives posted on
/// it, frames kept aside by channel, and the frame being read. Kept frames are bounded by
/// `max_frames` and `max_bytes` (checked before anything is allocated); their buffers are reused.
/// Not thread-safe: one lock (the engine's per-stream lock) guards every call. post, complete and
/// lose are O(1) plus the copy of a kept frame; arrive is O(receives posted on the stream);
/// detach is O(receives posted).
class receive_matcher {
 public:
  receive_matcher(std::uint64_t max_frames, std::uint64_t max_bytes) noexcept
      : max_frames_(max_frames), max_bytes_(max_bytes) {}
  receive_matcher(const receive_matcher&) = delete;
  receive_matcher& operator=(const receive_matcher&) = delete;

  /// Posts r: completes it at once from the oldest frame kept for its channel (which arrived
  /// whole), leaves it `deferred` while that frame is still arriving (post it again once it has),
  /// fails it when the stream is closed and nothing is kept for it, else queues it. Returns the
  /// mismatch when the kept frame disagrees with r (r failed with it; the caller makes it the
  /// group's failure).
  std::optional<fault> post(recv_request& r) {
    r.deferred = false;
    auto it = kept_.find(r.channel);  // frames that arrived before a close still count
    if (it != kept_.end() && !it->second.empty()) {
      kept_frame& f = it->second.front();
      if (!f.complete) {  // still arriving: take it when it is whole, to keep the order
        r.deferred = true;
        return std::nullopt;
      }
      std::optional<fault> mismatch;
      auto why = check_frame(r, frame_facts{r.channel, f.seq, f.check, f.total, f.size}, r.peer);
      if (why) {
        mismatch = why;
      } else if (f.lost) {
        fault lost;
        lost.code = errc::peer_failure;
        lost.blamed = r.peer;
        lost.detail =
            weft::detail::concat("the payload of a message from peer ", r.peer, " could not be read (the peer failed)");
        why = lost;
      }
      if (why) {
        fail(r, *why);
      } else {
        if (r.len) std::memcpy(r.dst, f.buf.bytes.get(), r.len);
        r.done.store(true, std::memory_order_release);
      }
      kept_bytes_ -= f.size;
      reuse(std::move(f.buf));
      kept_frames_ -= 1;
      it->second.pop_front();
      if (it->second.empty()) kept_.erase(it);
      return mismatch;
    }
    if (closed_) {
      fail(r, close_why_);
      return std::nullopt;
    }
    posted_.push_back(&r);
    r.posted.store(true, std::memory_order_relaxed);
    return std::nullopt;
  }

  /// Where a data frame lands, decided when its header arrives.
  struct landing {
    std::byte* target = nullptr;    ///< where its payload goes; null: read past it (discarded)
    std::optional<fault> mismatch;  ///< the receive it was for disagreed (and failed with this)
    std::optional<fault> refused;   ///< it cannot be kept (above the limits): the stream must close
  };
  /// A data frame's header arrived from `peer`: the oldest receive posted on its channel takes it
  /// when the facts agree (target: its buffer; a mismatch fails that receive and the payload is
  /// read past); with none posted it is kept aside (target: a buffer of its own) unless the kept
  /// frames would pass the limits (refused; nothing changed). Until complete() or lose(), it is
  /// the current frame.
  landing arrive(const frame_facts& f, int peer) {
    cur_ = nullptr;
    cur_frame_ = nullptr;
    landing out;
    for (auto it = posted_.begin(); it != posted_.end(); ++it) {
      recv_request* r = *it;
      if (r->channel != f.channel) continue;
      posted_.erase(it);
      r->posted.store(false, std::memory_order_relaxed);
      if (auto bad = check_frame(*r, f, peer)) {
        fail(*r, *bad);
        out.mismatch = bad;
      } else {
        out.target = r->dst;
        cur_ = r;
      }
      return out;
    }
    // Nobody waits for it yet: keep it, within the limits, before allocating anything.
    if (kept_frames_ + 1 > max_frames_ || kept_bytes_ + f.piece > max_bytes_) {
      out.refused = protocol_fault(
          peer, errc::capacity,
          weft::detail::concat("peer ", peer, " sent ", kept_frames_ + 1, " frames / ", kept_bytes_ + f.piece,
                               " bytes that no receive has asked for yet; the limits are max_unexpected_frames ",
                               max_frames_, " and max_unexpected_bytes ", max_bytes_));
      return out;
    }
    const auto n = static_cast<std::size_t>(f.piece);  // piece <= max_bytes: fits
    auto& q = kept_[f.channel];
    q.push_back(kept_frame{f.check, f.seq, f.total, take_buffer(n), n, false, false});
    kept_frames_ += 1;
    kept_bytes_ += f.piece;
    cur_frame_ = &q.back();  // a deque's elements stay where they are when others are added
    out.target = cur_frame_->buf.bytes.get();
    return out;
  }

  /// The current frame's payload is all in: its receive is done, or its kept frame whole.
  void complete() {
    if (cur_) {
      const bool foreign = cur_->owner != this_thread_token();  // read before done: r may go away
      cur_->done.store(true, std::memory_order_release);
      if (foreign) ++finished_;
    } else if (cur_frame_) {
      cur_frame_->complete = true;
    }
    cur_ = nullptr;
    cur_frame_ = nullptr;
  }
  /// The current frame's payload could not be read (a single-copy read failed: the sender is
  /// gone): its receive fails with f, or its kept frame is marked lost, so the receive that takes
  /// it fails. The frame stays current until complete().
  void lose(const fault& f) {
    if (cur_) {
      fail(*cur_, f);
      ++finished_;
    }
    cur_ = nullptr;
    if (cur_frame_) cur_frame_->lost = true;
  }

  /// Takes r off the stream; afterwards nothing completes it. Returns true when r was taking the
  /// current frame (the rest of that frame must be read past: its bytes are cut off).
  bool detach(recv_request& r) {
    if (r.posted.load(std::memory_order_relaxed)) {
      posted_.erase(std::remove(posted_.begin(), posted_.end(), &r), posted_.end());
      r.posted.store(false, std::memory_order_relaxed);
    }
    if (cur_ == &r) {
      cur_ = nullptr;
      return true;
    }
    return false;
  }

  /// The stream ended (or broke the protocol): every receive posted on it and the current one fail
  /// with f; later posts take the frames kept before the close, then fail with f.
  void close(const fault& f) {
    closed_ = true;
    close_why_ = f;
    for (recv_request* r : posted_) {
      r->posted.store(false, std::memory_order_relaxed);
      fail(*r, f);
    }
    finished_ += posted_.size() + (cur_ ? 1 : 0);
    posted_.clear();
    if (cur_) fail(*cur_, f);
    cur_ = nullptr;
  }

  bool closed() const noexcept { return closed_; }
  /// Receives completed or failed here so far that may belong to other threads (a pump that
  /// changes it pokes the link, since their owners may be asleep).
  std::uint64_t finished() const noexcept { return finished_; }
  std::uint64_t kept_frames() const noexcept { return kept_frames_; }
  std::uint64_t kept_bytes() const noexcept { return kept_bytes_; }
  std::size_t posted() const noexcept { return posted_.size(); }

 private:
  // A buffer for a kept frame: not zeroed (it is written before it is read) and reused, so a peer
  // that runs a step ahead costs neither page faults nor clearing per frame.
  struct frame_buffer {
    std::unique_ptr<std::byte[]> bytes;
    std::size_t capacity = 0;
  };
  struct kept_frame {
    std::uint32_t check = 0, seq = 0;
    std::uint64_t total = 0;
    frame_buffer buf;
    std::size_t size = 0;
    bool complete = false;
    bool lost = false;  // its single-copy payload could not be read
  };

  static void fail(recv_request& r, const fault& f) {
    if (r.done.load(std::memory_order_relaxed)) return;
    r.why.emplace(f);
    r.failed.store(true, std::memory_order_relaxed);
    r.done.store(true, std::memory_order_release);
  }

  // A buffer of at least n bytes: a spare one when one is big enough, else a new one (rounded up,
  // so frames of similar sizes share buffers).
  frame_buffer take_buffer(std::size_t n) {
    auto best = spare_.end();
    for (auto it = spare_.begin(); it != spare_.end(); ++it)
      if (it->capacity >= n && (best == spare_.end() || it->capacity < best->capacity)) best = it;
    if (best != spare_.end()) {
      frame_buffer b = std::move(*best);
      spare_.erase(best);
      return b;
    }
    const std::size_t cap = std::max<std::size_t>(64, std::bit_ceil(std::max<std::size_t>(n, 1)));
    return frame_buffer{std::make_unique_for_overwrite<std::byte[]>(cap), cap};
  }
  // Keeps a few buffers (up to 4, up to 64 MiB together) for the next frames.
  void reuse(frame_buffer b) {
    std::size_t kept = b.capacity;
    for (const auto& x : spare_) kept += x.capacity;
    if (spare_.size() < 4 && kept <= (std::size_t{64} << 20)) spare_.push_back(std::move(b));
  }

  std::uint64_t max_frames_, max_bytes_;
  std::deque<recv_request*> posted_;                                // in the order they were posted
  std::unordered_map<std::uint32_t, std::deque<kept_frame>> kept_;  // by channel, in arrival order
  std::uint64_t kept_bytes_ = 0, kept_frames_ = 0;
  std::vector<frame_buffer> spare_;
  recv_request* cur_ = nullptr;      // the receive the current frame lands in
  kept_frame* cur_frame_ = nullptr;  // or the kept frame it lands in
  std::uint64_t finished_ = 0;
  bool closed_ = false;
  fault close_why_;
};

}  // namespace weft::comm::detail

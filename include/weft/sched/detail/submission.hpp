// The parts of submit() every weft batch scheduler shares: the store of the requests it holds (their
// ids, and its own copies of their prompt ids and media, so an engine may free its buffers once
// submit() returned), the checks a new request must pass, the block count its prompt and first output
// token need (overflow-proof), the sample ids of a request with n > 1 held until its samples start.
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/kv/types.hpp>
#include <weft/sched/request.hpp>
#include <weft/sched/scheduler_options.hpp>  // scheduler_stats

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

namespace weft::sched::detail {

/// The requests a batch scheduler holds, by id, each with the scheduler's own copy of its prompt ids
/// and media (shared by a request and its forks). A request held here views those copies, so they
/// live exactly as long as the request is in the scheduler. A request cancelled while it waits inside
/// the Queue (which cannot remove it) stays here, marked, until the scheduler pops and drops it: its
/// copy is still viewed by the Queue, and its id may not be submitted again meanwhile. Not
/// thread-safe. O(1) expected per call, plus the copy of the ids at adopt().
class request_store {
 public:
  bool contains(request_id id) const noexcept { return held_.contains(id); }
  std::size_t size() const noexcept { return held_.size(); }

  /// r, viewing this store's copies of its prompt ids and media; its id is recorded. Strong
  /// guarantee (bad_alloc changes nothing). O(prompt + media).
  /// `keys`: the KV manager's keys of the prompt's full blocks (weft::kv::prompt_keys), kept with the
  /// copy so admission does not hash the prompt (empty when the KV manager does not compute them).
  request adopt(const request& r, weft::kv::prompt_keys keys = {}) {
    entry e;
    if (!r.prompt.empty() || !r.media.empty() || !r.sample_ids.empty()) {
      auto copy = std::make_shared<stored>();
      copy->prompt.assign(r.prompt.begin(), r.prompt.end());
      copy->media.assign(r.media.begin(), r.media.end());
      copy->sample_ids.assign(r.sample_ids.begin(), r.sample_ids.end());
      copy->keys = std::move(keys);
      e.copy = std::move(copy);
    }
    request out = r;
    view(out, e);
    held_.emplace(r.id, std::move(e));
    return out;
  }
  /// Records `child` as sharing `parent`'s copies (a fork); `child` views them too. Strong
  /// guarantee. O(1) expected.
  void share(request_id parent, request& child) {
    entry e;
    e.copy = held_.at(parent).copy;
    view(child, e);
    held_.emplace(child.id, std::move(e));
  }
  /// The prompt keys stored with id's copy, or null (unknown id, none stored). O(1) expected.
  const weft::kv::prompt_keys* keys_of(request_id id) const noexcept {
    const auto it = held_.find(id);
    if (it == held_.end() || !it->second.copy || it->second.copy->keys.tokens == 0) return nullptr;
    return &it->second.copy->keys;
  }
  /// keys_of(r.id) when r views this store's copy of its prompt (a request the scheduler handed out),
  /// else null. O(1) expected.
  const weft::kv::prompt_keys* keys_for(const request& r) const noexcept {
    const weft::kv::prompt_keys* k = keys_of(r.id);
    return k != nullptr && held_.find(r.id)->second.copy->prompt.data() == r.prompt.data() ? k : nullptr;
  }
  /// Forgets id; its copies go when no fork shares them. Unknown ids are ignored. O(1) expected.
  void release(request_id id) noexcept { held_.erase(id); }

  /// Holds the sample ids of request `parent` (request::n > 1) until its samples start, so no other
  /// request can take them meanwhile. Throws weft::error (already_exists), changing nothing, when one
  /// is held already. Strong guarantee. O(n) expected.
  void reserve_samples(request_id parent, const char* where) {
    const entry& p = held_.at(parent);
    if (!p.copy || p.copy->sample_ids.empty()) return;
    for (const request_id c : p.copy->sample_ids)
      expects(!held_.contains(c), errc::already_exists, where, "request ", parent, ": sample id ", c,
              " is already in this scheduler; request ids must be unique");
    std::size_t done = 0;
    try {
      for (const request_id c : p.copy->sample_ids) {
        held_.emplace(c, entry{p.copy, false, false});
        ++done;
      }
    } catch (...) {
      for (std::size_t i = 0; i < done; ++i) held_.erase(p.copy->sample_ids[i]);
      throw;
    }
    held_.at(parent).samples_reserved = true;
  }
  /// The sample ids of `parent` while they are reserved (its samples have not started), else empty.
  /// O(1) expected.
  std::span<const request_id> reserved_samples(request_id parent) const noexcept {
    const auto it = held_.find(parent);
    if (it == held_.end() || !it->second.samples_reserved) return {};
    return it->second.copy->sample_ids;
  }
  /// Parent's samples started: their ids are theirs now. O(1) expected.
  void samples_started(request_id parent) noexcept {
    const auto it = held_.find(parent);
    if (it != held_.end()) it->second.samples_reserved = false;
  }
  /// Frees the sample ids of a parent that ends before its samples started. O(n) expected.
  void release_samples(request_id parent) noexcept {
    const auto it = held_.find(parent);
    if (it == held_.end() || !it->second.samples_reserved) return;
    it->second.samples_reserved = false;
    for (const request_id c : it->second.copy->sample_ids) held_.erase(c);
  }

  /// Marks a request that waits inside the Queue as cancelled (see the class comment). O(1) expected.
  void mark_cancelled(request_id id) noexcept {
    auto it = held_.find(id);
    if (it != held_.end() && !it->second.cancelled) {
      it->second.cancelled = true;
      ++cancelled_;
    }
  }
  /// True when id was cancelled while inside the Queue and waits there to be dropped. O(1) expected.
  bool cancelled(request_id id) const noexcept {
    if (cancelled_ == 0) return false;
    const auto it = held_.find(id);
    return it != held_.end() && it->second.cancelled;
  }
  /// Drops a cancelled request the scheduler popped from the Queue. O(1) expected.
  void drop_cancelled(request_id id) noexcept {
    auto it = held_.find(id);
    if (it == held_.end() || !it->second.cancelled) return;
    release_samples(id);
    it = held_.find(id);
    held_.erase(it);
    --cancelled_;
  }
  /// Cancelled requests still inside the Queue (the scheduler's waiting() leaves them out). O(1).
  std::size_t cancelled_in_queue() const noexcept { return cancelled_; }

 private:
  struct stored {
    std::vector<token_id> prompt;
    std::vector<weft::kv::multimodal_item> media;
    std::vector<request_id> sample_ids;  // request::n > 1: the other samples' ids
    weft::kv::prompt_keys keys;          // tokens == 0: none
  };
  struct entry {
    std::shared_ptr<const stored> copy;  // null for a request with neither ids nor media
    bool cancelled = false;
    bool samples_reserved = false;  // a parent whose sample ids are held for samples not started yet
  };
  static void view(request& r, const entry& e) noexcept {
    r.prompt = e.copy ? std::span<const token_id>(e.copy->prompt) : std::span<const token_id>();
    r.media = e.copy ? std::span<const weft::kv::multimodal_item>(e.copy->media)
                     : std::span<const weft::kv::multimodal_item>();
    r.sample_ids = e.copy ? std::span<const request_id>(e.copy->sample_ids) : std::span<const request_id>();
  }
  std::unordered_map<request_id, entry> held_;
  std::size_t cancelled_ = 0;
};

/// Throws weft::error, naming r, when its id is already held (`where_held` says where a scheduler may
/// hold it), when it has no prompt ids without saying counted_by_length, or when it carries prompt ids
/// together with kv_ready_tokens. O(1) expected.
inline void check_new_request(const request_store& held, const request& r, const char* where, const char* where_held) {
  expects(!held.cancelled(r.id), errc::already_exists, where, "request ", r.id,
          " was cancelled while waiting in the queue, which still holds it until the scheduler reaches it; "
          "submit the new request under another id");
  expects(!held.contains(r.id), errc::already_exists, where, "request ", r.id, " is already in this scheduler (",
          where_held, "); request ids must be unique");
  expects(!r.prompt.empty() || r.counted_by_length, errc::invalid_argument, where, "request ", r.id,
          " has no prompt token ids (prompt is empty) but prompt_tokens is ", r.prompt_tokens,
          "; give its ids, or set counted_by_length = true to schedule it by length alone (no prefix caching, "
          "and kv().tokens(id) holds no prompt ids for an engine to read)");
  expects(r.prompt.empty() || r.kv_ready_tokens == 0, errc::unsupported, where, "request ", r.id,
          ": kv_ready_tokens is supported only for requests counted by length (no prompt ids)");
}

/// ceil((prompt + 1) / block) = prompt / block + 1: the blocks r's prompt and its first output token
/// need, without the overflow of prompt + block (a trace row may say prompt_tokens = INT64_MAX, which
/// is then refused, not wrapped). O(1).
/// `block_size` is whatever integer the KV manager reports (checked, never converted implicitly).
template <std::integral Block>
std::uint64_t blocks_to_first_token(const request& r, Block block_size, const char* where) {
  const auto block = checked_cast<std::uint64_t>(block_size, where);
  return checked_cast<std::uint64_t>(r.prompt_tokens, where) / block + 1;
}

/// True when r's prompt and first output token fit in the whole device cache of `kv`; a scheduler
/// rejects r at submit otherwise, since it could never run. O(1).
template <class KV>
bool fits_device_cache(const request& r, const KV& kv, const char* where) {
  return blocks_to_first_token(r, kv.block_size(), where) <= kv.usable_blocks();
}

/// Counts one admission of r that found `cached` prompt tokens in the prefix cache: a first one, or a
/// re-admission after a recompute preemption (scheduler_stats says why they are kept apart). O(1).
inline void count_admission(scheduler_stats& stats, const request& r, bool readmission, std::int64_t cached) noexcept {
  const auto hit = static_cast<std::uint64_t>(cached);
  stats.cached_prompt_tokens += hit;
  if (readmission) {
    ++stats.readmitted;
    stats.readmission_cached_tokens += hit;
  } else {
    ++stats.admitted;
    stats.first_admission_prompt_tokens += static_cast<std::uint64_t>(r.prompt_tokens - r.kv_ready_tokens);
    stats.first_admission_cached_tokens += hit;
  }
}

/// The next request the Queue would hand out at `now`, after popping and dropping the requests
/// cancelled inside it (they were never admitted: no service is charged). Null when none is left.
/// O(Queue peek + pop per dropped request).
template <class Queue>
const request* peek_live(Queue& queue, request_store& held, double now) {
  const request* next = queue.peek(now);
  while (next != nullptr && held.cancelled(next->id)) {
    const request_id id = next->id;
    (void)queue.pop(now);
    held.drop_cancelled(id);
    next = queue.peek(now);
  }
  return next;
}

}  // namespace weft::sched::detail

// The parts of submit() every weft batch scheduler shares: the checks a new request must pass, the
// block count its prompt and first output token need (overflow-proof), and the all-or-nothing push
// into the scheduler's id set and queue.
#pragma once

#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>
#include <weft/sched/request.hpp>

#include <concepts>
#include <cstdint>
#include <unordered_set>

namespace weft::sched::detail {

/// Throws weft::error, naming r, when its id is already in `ids` (`where_held` says where a scheduler
/// may hold it) or when it carries prompt ids together with kv_ready_tokens. O(1) expected.
template <class Ids>
void check_new_request(const Ids& ids, const request& r, const char* where, const char* where_held) {
  expects(!ids.contains(r.id), errc::already_exists, where, "request ", r.id, " is already in this scheduler (",
          where_held, "); request ids must be unique");
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

/// Records r's id and pushes r into the queue; if the push throws, the id is forgotten again (the
/// scheduler is unchanged). O(queue push).
template <class Ids, class Queue>
void enqueue_new(Ids& ids, Queue& queue, const request& r, double now) {
  ids.insert(r.id);
  try {
    queue.push(r, now);
  } catch (...) {
    ids.erase(r.id);
    throw;
  }
}

}  // namespace weft::sched::detail

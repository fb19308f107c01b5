// Per-client state of the fair queues, found by client id without hashing in the common case.
// The queues look a client up once per output token (on_tokens), so the lookup is on the serving
// loop's hot path: a hash map's find costs a hash, a modulo by the bucket count and a node chase.
// Client ids are usually small integers (tenants numbered from 0), so ids below dense_limit index a
// flat vector; larger ids fall back to a hash map. States sit in one vector found by index, so the
// table copies and moves like any value; adding a client may move the states (a reference taken
// before operator[] adds one is invalid after it).
#pragma once

#include <weft/core/error.hpp>
#include <weft/sched/request.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <unordered_map>
#include <vector>

namespace weft::sched::detail {

template <class State>
class client_table {
 public:
  /// Ids below this index a vector (4 bytes per id up to the largest seen); others are hashed.
  static constexpr std::uint64_t dense_limit = 1u << 16;

  /// The client's state, or nullptr for a client never added. O(1).
  State* find(client_id c) noexcept {
    const std::uint32_t i = index_of(c);
    return i == none ? nullptr : &states_[i];
  }
  const State* find(client_id c) const noexcept {
    const std::uint32_t i = index_of(c);
    return i == none ? nullptr : &states_[i];
  }

  /// The client's state, added (value-initialised) when new. Changes nothing when it throws
  /// (bad_alloc). O(1) amortised; O(c) the first time a dense id beyond the largest seen arrives.
  State& operator[](client_id c) {
    if (State* s = find(c)) return *s;
    const auto i = static_cast<std::uint32_t>(states_.size());
    states_.emplace_back();  // strong guarantee: a throwing move of the states leaves them as they were
    try {
      const std::uint64_t v = c.value();
      if (v < dense_limit) {
        if (v >= dense_.size()) dense_.resize(static_cast<std::size_t>(v) + 1, none);
        dense_[static_cast<std::size_t>(v)] = i;
      } else {
        sparse_.emplace(c, i);
      }
    } catch (...) {
      states_.pop_back();
      throw;
    }
    return states_.back();
  }

  /// The state of a client that queued a request before; throws weft::error(not_found) naming
  /// `where` for one never seen. O(1).
  State& known(client_id c, const char* where) {
    State* s = find(c);
    expects(s != nullptr, errc::not_found, where, "unknown client ", c, " (it never queued a request)");
    return *s;
  }

 private:
  static constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();

  std::uint32_t index_of(client_id c) const noexcept {
    const std::uint64_t v = c.value();
    if (v < dense_.size()) return dense_[static_cast<std::size_t>(v)];
    if (v < dense_limit || sparse_.empty()) return none;
    const auto it = sparse_.find(c);
    return it == sparse_.end() ? none : it->second;
  }

  std::vector<State> states_;
  std::vector<std::uint32_t> dense_;  // dense_[id] indexes states_, or none
  std::unordered_map<client_id, std::uint32_t> sparse_;
};

}  // namespace weft::sched::detail

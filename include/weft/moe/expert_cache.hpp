// weft::moe::expert_cache: which experts of an offloaded MoE model sit in device memory, and the
// asynchronous protocol by which the engine loads the rest. The cache decides (which slot, which
// victim); the engine copies bytes and reports completion. Policies: eviction.hpp; the load protocol
// follows the offloading engines of MoE-Infinity (Xue et al. 2024) and Pre-gated MoE (Hwang et al. 2024).
#pragma once

#include <weft/core/error.hpp>
#include <weft/moe/concepts.hpp>
#include <weft/moe/eviction.hpp>
#include <weft/moe/types.hpp>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace weft::moe {

/// Whether each MoE layer has its own capacity (a pool per layer) or all layers share one pool.
enum class capacity_scope { per_layer, global };

/// The state of one expert in the cache.
enum class entry_state : std::uint8_t {
  absent,   ///< not in device memory and no load under way
  loading,  ///< a load was started (slot reserved) and not yet reported complete
  resident  ///< in device memory, usable
};

/// What a lookup found.
enum class lookup_status : std::uint8_t {
  hit,        ///< resident: use it now
  in_flight,  ///< its load is under way: wait for it, do not start another
  miss        ///< absent: start a load (start_load) or compute elsewhere
};

/// Why a load was started.
enum class load_kind : std::uint8_t { demand, prefetch };

/// Capacity of an expert_cache. Build with in_slots or in_bytes.
/// slots: entries per pool (0 when the capacity is in bytes).
/// bytes: bytes per pool (0 when the capacity is in slots).
/// expert_bytes: bytes of one expert of each layer; one value means every layer.
struct cache_config {
  model_shape shape{};
  capacity_scope scope = capacity_scope::per_layer;
  std::uint64_t slots = 0;
  std::uint64_t bytes = 0;
  std::vector<std::uint64_t> expert_bytes{1};

  /// Capacity of `slots` experts per pool; each expert counts expert_bytes for bytes_loaded.
  static cache_config in_slots(model_shape shape, std::uint64_t slots, capacity_scope scope = capacity_scope::per_layer,
                               std::uint64_t expert_bytes = 1) {
    return cache_config{shape, scope, slots, 0, {expert_bytes}};
  }
  /// Capacity of `bytes` per pool; experts of layer l take expert_bytes[l] (or expert_bytes[0]).
  static cache_config in_bytes(model_shape shape, std::uint64_t bytes, std::vector<std::uint64_t> expert_bytes,
                               capacity_scope scope = capacity_scope::per_layer) {
    return cache_config{shape, scope, 0, bytes, std::move(expert_bytes)};
  }
};

/// The answer to a lookup: status and, for hit and in_flight, the pool-local slot.
struct lookup_result {
  lookup_status status = lookup_status::miss;
  std::uint32_t slot = std::numeric_limits<std::uint32_t>::max();
};

/// A load the engine must perform: copy expert `key` (`bytes` bytes) into slot `slot` of pool
/// `pool`, then call complete(order) (or cancel(order)). Any experts evicted to make room are in
/// last_evicted(). The ticket names this one load: a completion of a load that was cancelled (and
/// perhaps restarted since) carries an old ticket and is refused, so a late copy can never mark
/// the expert resident with the wrong bytes.
struct load_order {
  expert_key key{};
  std::uint32_t pool = 0;
  std::uint32_t slot = 0;
  std::uint64_t bytes = 0;
  load_kind kind = load_kind::demand;
  std::uint64_t ticket = 0;  ///< unique per load within its cache, never reused; starts at 1
};

/// Counters since construction (or reset_stats). A plain value.
struct cache_stats {
  std::uint64_t lookups = 0;
  std::uint64_t hits = 0;            ///< lookups that found the expert resident
  std::uint64_t in_flight_hits = 0;  ///< lookups that found its load under way
  std::uint64_t misses = 0;
  std::uint64_t demand_loads = 0;
  std::uint64_t prefetch_loads = 0;
  std::uint64_t prefetch_used = 0;  ///< prefetched experts later looked up before eviction
  std::uint64_t evictions = 0;
  std::uint64_t cancels = 0;
  std::uint64_t bytes_loaded = 0;  ///< bytes of every load started (demand and prefetch)
};

/// A cache of (layer, expert) entries in device memory with an asynchronous load protocol:
///   lookup(k)      -> hit / in_flight / miss, and counts a demand access for the policy;
///   start_load(k)  -> a load_order (slot to fill, victims evicted) or nullopt when every entry of
///                     the pool is pinned or loading (wait for a completion and retry);
///   prefetch(k)    -> the same for a speculative load, nullopt also when k is already present;
///   complete(o)    -> the engine's copy for load_order o finished; its expert becomes resident
///                     (in any order of loads); a stale ticket is an error;
///   cancel(o)      -> a load the engine abandoned; its slot is free again;
///   pin/unpin(k)   -> pinned entries (counted) are never evicted; erase(k) drops a resident one.
/// Slots are pool-local indices in [0, slot_capacity(pool)): under per-layer capacity each layer's
/// experts use slots 0..n-1 of that layer's buffer. Only resident, unpinned entries are eviction
/// candidates, so an in-flight copy is never overwritten.
/// Not thread-safe: one owner (the engine's scheduling thread) calls it; completions from copy
/// streams must be handed to that thread. Complexity: lookup, peek, complete, cancel, pin, unpin,
/// erase O(1) plus the policy's hook; start_load/prefetch O(1) plus the policy's victim() per eviction.
template <expert_eviction_policy Policy = lru_policy>
class expert_cache {
 public:
  /// Throws weft::error if the shape is invalid, the capacity is zero or given twice, an expert
  /// size is zero, or one expert does not fit a pool.
  explicit expert_cache(cache_config config) requires std::default_initializable<Policy>
      : expert_cache(std::move(config), Policy{}) {}

  expert_cache(cache_config config, Policy prototype) : config_(std::move(config)) {
    constexpr const char* where = "weft::moe::expert_cache";
    const model_shape& s = config_.shape;
    s.validate(where);
    expects(config_.slots != 0 || config_.bytes != 0, errc::invalid_argument, where,
            "capacity is zero: give slots >= 1 (in_slots) or bytes >= one expert (in_bytes)");
    expects(config_.slots == 0 || config_.bytes == 0, errc::invalid_argument, where, "capacity given both as ",
            config_.slots, " slots and ", config_.bytes, " bytes; give exactly one");
    expects(config_.expert_bytes.size() == 1 || config_.expert_bytes.size() == s.num_layers, errc::invalid_argument,
            where, "expert_bytes has ", config_.expert_bytes.size(),
            " values; it needs 1 (all layers) or num_layers = ", s.num_layers);
    for (std::size_t l = 0; l < config_.expert_bytes.size(); ++l)
      expects(config_.expert_bytes[l] >= 1, errc::invalid_argument, where, "expert_bytes[", l,
              "] is 0; an expert has at least one byte");
    const std::uint32_t pools = config_.scope == capacity_scope::per_layer ? s.num_layers : 1;
    pools_.resize(pools);
    for (std::uint32_t p = 0; p < pools; ++p) {
      pool_state& pl = pools_[p];
      const std::uint32_t first = pools == 1 ? 0 : p, last = pools == 1 ? s.num_layers : p + 1;
      std::uint64_t smallest = std::numeric_limits<std::uint64_t>::max(), largest = 0;
      for (std::uint32_t l = first; l < last; ++l) {
        smallest = std::min(smallest, layer_bytes(l));
        largest = std::max(largest, layer_bytes(l));
      }
      const std::uint64_t experts_in_pool = std::uint64_t{last - first} * s.num_experts;
      if (config_.slots != 0) {
        pl.max_entries = std::min(config_.slots, experts_in_pool);
        pl.max_bytes = std::numeric_limits<std::uint64_t>::max();
      } else {
        expects(config_.bytes >= largest, errc::invalid_argument, where, "capacity of ", config_.bytes,
                " bytes per pool cannot hold one expert of ", largest, " bytes");
        pl.max_entries = std::min(config_.bytes / smallest, experts_in_pool);
        pl.max_bytes = config_.bytes;
      }
      pl.free_slots.resize(pl.max_entries);
      // Slots are handed out lowest first: the free list is a stack with slot 0 on top.
      for (std::uint64_t i = 0; i < pl.max_entries; ++i)
        pl.free_slots[i] = static_cast<std::uint32_t>(pl.max_entries - 1 - i);
      pl.policy.emplace_back(prototype);
      pl.policy.front().bind(s);
    }
    state_.assign(s.num_keys(), entry_state::absent);
    slot_.assign(s.num_keys(), 0);
    pins_.assign(s.num_keys(), 0);
    prefetched_.assign(s.num_keys(), 0);
    ticket_.assign(s.num_keys(), 0);
  }

  /// Looks k up as a demand access of the executing layer k.layer: the policy sees it and the
  /// stats count it. Throws weft::error for an unknown expert. O(1) + policy's on_access.
  lookup_result lookup(expert_key k) {
    check(k, "weft::moe::expert_cache::lookup");
    const std::size_t i = shape().index(k);
    ++tick_;
    layer_ = k.layer;
    policy_of(k).on_access(k, info(true));
    ++stats_.lookups;
    switch (state_[i]) {
      case entry_state::resident:
        ++stats_.hits;
        note_prefetch_use(i);
        return {lookup_status::hit, slot_[i]};
      case entry_state::loading:
        ++stats_.in_flight_hits;
        note_prefetch_use(i);
        return {lookup_status::in_flight, slot_[i]};
      case entry_state::absent:
        break;
    }
    ++stats_.misses;
    return {};
  }

  /// What a lookup would return, without counting an access. O(1).
  lookup_result peek(expert_key k) const {
    check(k, "weft::moe::expert_cache::peek");
    const std::size_t i = shape().index(k);
    switch (state_[i]) {
      case entry_state::resident:
        return {lookup_status::hit, slot_[i]};
      case entry_state::loading:
        return {lookup_status::in_flight, slot_[i]};
      case entry_state::absent:
        break;
    }
    return {};
  }

  /// Starts a demand load of absent expert k: reserves a slot, evicting candidates the policy
  /// names if the pool is full. Returns nullopt (and changes nothing) when even evicting every
  /// candidate would not make room. Throws weft::error for an unknown expert or one that is not absent.
  std::optional<load_order> start_load(expert_key k) {
    check(k, "weft::moe::expert_cache::start_load");
    expects(state_[shape().index(k)] == entry_state::absent, errc::precondition, "weft::moe::expert_cache::start_load",
            "expert ", k, " is already ", state_[shape().index(k)] == entry_state::loading ? "loading" : "resident",
            "; look it up first");
    return begin_load(k, load_kind::demand);
  }

  /// Starts a speculative load of k. Returns nullopt when k is already loading or resident, or when
  /// the pool has no room (as start_load). Throws weft::error for an unknown expert.
  std::optional<load_order> prefetch(expert_key k) {
    check(k, "weft::moe::expert_cache::prefetch");
    if (state_[shape().index(k)] != entry_state::absent) {
      last_evicted_.clear();
      return std::nullopt;
    }
    return begin_load(k, load_kind::prefetch);
  }

  /// The engine's copy for `order` finished: its expert becomes resident (and a candidate unless
  /// pinned). Completions may arrive in any order. Throws weft::error (precondition), changing
  /// nothing, if that load is not under way: never started, already completed, or cancelled — a
  /// stale ticket whose expert may be loading again under a newer one. O(1) plus the policy's hook.
  void complete(const load_order& order) { complete(order.key, order.ticket); }
  /// As complete(order), from the expert and the ticket of its load_order.
  void complete(expert_key k, std::uint64_t ticket) {
    const std::size_t i = current_load(k, ticket, "weft::moe::expert_cache::complete");
    state_[i] = entry_state::resident;
    if (pins_[i] == 0) add_candidate(k);
  }
  /// complete() of whatever load of k is under way. Ambiguous when a load of k was cancelled and
  /// restarted: a late completion of the old copy would be taken for the new one.
  [[deprecated("pass the load_order (or its ticket): complete(order)")]] void complete(expert_key k) {
    check(k, "weft::moe::expert_cache::complete");
    complete(k, ticket_[shape().index(k)]);
  }

  /// The engine abandoned `order` (e.g. a mispredicted prefetch whose copy had not begun): its slot
  /// is free again. Throws weft::error, changing nothing, if that load is not under way (as
  /// complete) or its expert is pinned. O(1).
  void cancel(const load_order& order) { cancel(order.key, order.ticket); }
  /// As cancel(order), from the expert and the ticket of its load_order.
  void cancel(expert_key k, std::uint64_t ticket) {
    const std::size_t i = current_load(k, ticket, "weft::moe::expert_cache::cancel");
    expects(pins_[i] == 0, errc::precondition, "weft::moe::expert_cache::cancel", "expert ", k, " is pinned ", pins_[i],
            " time(s); unpin before cancelling its load");
    release(k);
    ++stats_.cancels;
  }
  /// cancel() of whatever load of k is under way (see the deprecated complete(k)).
  [[deprecated("pass the load_order (or its ticket): cancel(order)")]] void cancel(expert_key k) {
    check(k, "weft::moe::expert_cache::cancel");
    cancel(k, ticket_[shape().index(k)]);
  }

  /// Pins k (loading or resident) so it is never evicted; pins nest. Throws weft::error if absent.
  void pin(expert_key k) {
    check(k, "weft::moe::expert_cache::pin");
    const std::size_t i = shape().index(k);
    expects(state_[i] != entry_state::absent, errc::precondition, "weft::moe::expert_cache::pin", "expert ", k,
            " is absent; only loading or resident experts can be pinned");
    expects(pins_[i] != std::numeric_limits<std::uint32_t>::max(), errc::capacity, "weft::moe::expert_cache::pin",
            "pin count of ", k, " would overflow");
    if (pins_[i]++ == 0 && state_[i] == entry_state::resident) remove_candidate(k);
  }

  /// Undoes one pin. Throws weft::error if k is not pinned.
  void unpin(expert_key k) {
    check(k, "weft::moe::expert_cache::unpin");
    const std::size_t i = shape().index(k);
    expects(pins_[i] > 0, errc::precondition, "weft::moe::expert_cache::unpin", "expert ", k, " is not pinned");
    if (--pins_[i] == 0 && state_[i] == entry_state::resident) add_candidate(k);
  }

  /// Drops resident, unpinned k (the engine freed its memory). Throws weft::error otherwise.
  void erase(expert_key k) {
    check(k, "weft::moe::expert_cache::erase");
    const std::size_t i = shape().index(k);
    expects(state_[i] == entry_state::resident && pins_[i] == 0, errc::precondition, "weft::moe::expert_cache::erase",
            "expert ", k, " must be resident and unpinned to be erased");
    remove_candidate(k);
    release(k);
  }

  /// Sets the request id the policies see (activation-aware scoring restarts its EAM). O(1).
  void begin_request(std::uint64_t request) noexcept { request_ = request; }

  /// Experts evicted by the last start_load/prefetch call. Valid until the next such call.
  std::span<const expert_key> last_evicted() const noexcept { return last_evicted_; }

  entry_state state(expert_key k) const {
    check(k, "weft::moe::expert_cache::state");
    return state_[shape().index(k)];
  }
  std::uint32_t pin_count(expert_key k) const {
    check(k, "weft::moe::expert_cache::pin_count");
    return pins_[shape().index(k)];
  }
  const model_shape& shape() const noexcept { return config_.shape; }
  const cache_config& config() const noexcept { return config_; }
  /// Number of capacity pools (one per layer under capacity_scope::per_layer, else one). O(1).
  std::uint32_t num_pools() const noexcept { return static_cast<std::uint32_t>(pools_.size()); }
  [[deprecated("use num_pools()")]] std::uint32_t pool_count() const noexcept { return num_pools(); }
  std::uint32_t pool_of(expert_key k) const noexcept {
    return config_.scope == capacity_scope::per_layer ? k.layer : 0;
  }
  std::uint64_t slot_capacity(std::uint32_t pool) const { return checked_pool(pool).max_entries; }
  std::uint64_t byte_capacity(std::uint32_t pool) const { return checked_pool(pool).max_bytes; }
  /// Entries (loading + resident) and bytes in use in a pool.
  std::uint64_t used_slots(std::uint32_t pool) const { return checked_pool(pool).entries; }
  std::uint64_t used_bytes(std::uint32_t pool) const { return checked_pool(pool).used_bytes; }
  std::uint64_t expert_bytes(expert_key k) const {
    check(k, "weft::moe::expert_cache::expert_bytes");
    return layer_bytes(k.layer);
  }
  /// The policy of a pool, for inspection or tuning.
  Policy& policy(std::uint32_t pool) { return checked_pool(pool).policy.front(); }
  const cache_stats& stats() const noexcept { return stats_; }
  void reset_stats() noexcept { stats_ = {}; }
  /// Number of lookups so far (the tick policies see).
  std::uint64_t ticks() const noexcept { return tick_; }

 private:
  struct pool_state {
    std::vector<Policy> policy;  // exactly one; a vector so Policy needs no default constructor
    std::uint64_t max_entries = 0, max_bytes = 0;
    std::uint64_t entries = 0, used_bytes = 0;          // loading + resident
    std::uint64_t candidates = 0, candidate_bytes = 0;  // resident and unpinned
    std::vector<std::uint32_t> free_slots;
  };
  // Invariants per pool: entries + free_slots.size() == max_entries; used_bytes <= max_bytes;
  // candidates counts exactly the resident keys with pins_ == 0, and the policy holds exactly them.

  void check(expert_key k, const char* where) const { shape().check(k, where); }

  // The index of k when `ticket` names its load under way; otherwise throws naming what happened.
  std::size_t current_load(expert_key k, std::uint64_t ticket, const char* where) const {
    check(k, where);
    const std::size_t i = shape().index(k);
    if (state_[i] == entry_state::loading && ticket_[i] == ticket) return i;
    if (ticket == 0 || ticket >= next_ticket_)
      weft::detail::raise(errc::precondition, where, "expert ", k, ": ticket ", ticket, " was never issued");
    if (state_[i] == entry_state::loading)
      weft::detail::raise(errc::precondition, where, "expert ", k, ": stale ticket ", ticket,
                          " (that load was cancelled; the load under way is ticket ", ticket_[i], ")");
    weft::detail::raise(errc::precondition, where, "expert ", k, ": ticket ", ticket, " is not a load under way (",
                        state_[i] == entry_state::absent
                            ? "the expert is absent: the load was cancelled or never started"
                            : "the expert is resident: it completed already",
                        ")");
  }
  std::uint64_t layer_bytes(std::uint32_t layer) const noexcept {
    return config_.expert_bytes.size() == 1 ? config_.expert_bytes[0] : config_.expert_bytes[layer];
  }
  pool_state& checked_pool(std::uint32_t p) {
    expects(p < pools_.size(), errc::out_of_range, "weft::moe::expert_cache", "pool ", p, " does not exist (",
            pools_.size(), " pools)");
    return pools_[p];
  }
  const pool_state& checked_pool(std::uint32_t p) const { return const_cast<expert_cache*>(this)->checked_pool(p); }
  Policy& policy_of(expert_key k) noexcept { return pools_[pool_of(k)].policy.front(); }
  access_info info(bool demand) const noexcept { return access_info{tick_, layer_, request_, demand}; }

  void note_prefetch_use(std::size_t i) noexcept {
    if (prefetched_[i]) {
      prefetched_[i] = 0;
      ++stats_.prefetch_used;
    }
  }
  void add_candidate(expert_key k) {
    pool_state& pl = pools_[pool_of(k)];
    ++pl.candidates;
    pl.candidate_bytes += layer_bytes(k.layer);
    pl.policy.front().on_insert(k, info(true));
  }
  void remove_candidate(expert_key k) {
    pool_state& pl = pools_[pool_of(k)];
    --pl.candidates;
    pl.candidate_bytes -= layer_bytes(k.layer);
    pl.policy.front().on_remove(k);
  }
  // Frees k's slot and bytes; k must not be a candidate any more.
  void release(expert_key k) {
    const std::size_t i = shape().index(k);
    pool_state& pl = pools_[pool_of(k)];
    pl.free_slots.push_back(slot_[i]);
    --pl.entries;
    pl.used_bytes -= layer_bytes(k.layer);
    state_[i] = entry_state::absent;
    prefetched_[i] = 0;
  }

  std::optional<load_order> begin_load(expert_key k, load_kind kind) {
    last_evicted_.clear();
    pool_state& pl = pools_[pool_of(k)];
    const std::uint64_t need = layer_bytes(k.layer);
    auto fits = [&] { return pl.entries < pl.max_entries && pl.max_bytes - pl.used_bytes >= need; };
    // Feasible only if evicting every candidate would make room; decide before touching anything,
    // so a refused load leaves the cache unchanged.
    if (!(pl.entries - pl.candidates < pl.max_entries && pl.max_bytes - (pl.used_bytes - pl.candidate_bytes) >= need))
      return std::nullopt;
    const access_info now = info(kind == load_kind::demand);
    while (!fits()) {
      const std::optional<expert_key> v = pl.policy.front().victim(now);
      expects(v.has_value() && shape().contains(*v) && pool_of(*v) == pool_of(k) &&
                  state_[shape().index(*v)] == entry_state::resident && pins_[shape().index(*v)] == 0,
              errc::precondition, "weft::moe::expert_cache::start_load",
              "the eviction policy named a victim that is not an eviction candidate of this pool");
      remove_candidate(*v);
      release(*v);
      ++stats_.evictions;
      last_evicted_.push_back(*v);
    }
    const std::size_t i = shape().index(k);
    const std::uint32_t slot = pl.free_slots.back();
    pl.free_slots.pop_back();
    ++pl.entries;
    pl.used_bytes += need;
    state_[i] = entry_state::loading;
    slot_[i] = slot;
    prefetched_[i] = kind == load_kind::prefetch ? 1 : 0;
    ticket_[i] = next_ticket_++;
    (kind == load_kind::demand ? stats_.demand_loads : stats_.prefetch_loads)++;
    stats_.bytes_loaded += need;
    return load_order{k, pool_of(k), slot, need, kind, ticket_[i]};
  }

  cache_config config_;
  std::vector<pool_state> pools_;
  std::vector<entry_state> state_;
  std::vector<std::uint32_t> slot_;
  std::vector<std::uint32_t> pins_;
  std::vector<std::uint8_t> prefetched_;  // loaded by prefetch and not yet looked up
  std::vector<std::uint64_t> ticket_;     // ticket of the current (or last) load of each entry
  std::uint64_t next_ticket_ = 1;
  std::vector<expert_key> last_evicted_;
  cache_stats stats_{};
  std::uint64_t tick_ = 0;
  std::uint32_t layer_ = 0;
  std::uint64_t request_ = 0;
};

}  // namespace weft::moe

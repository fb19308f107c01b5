// Hit-rate-aware admission: serve first the waiting request with the highest expected KV reuse (the share
// of its prompt whose KV can be reused: exact prefix hits, or similar-prompt reuse), as KVShare's
// cache-aware scheduler does (Yang et al., arXiv 2503.16525, 2025); aging bounds every wait.
#pragma once

#include <weft/core/error.hpp>
#include <weft/sched/concepts.hpp>
#include <weft/sched/request.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <utility>

namespace weft::sched {

/// Each request's hit rate is taken once, at push: reusable tokens / prompt_tokens, where reusable
/// tokens is the larger of the exact-prefix probe (bound by the batch scheduler to its KV manager's
/// cached_prefix_tokens through bind_prefix_probe) and the reuse probe given in the options (e.g. a
/// weft::kv::similar_prompt_index lookup's reused count). Hit rates are bucketed (hit_rate_buckets),
/// so requests of about equal reuse stay in arrival order. peek: the oldest request if it has waited
/// >= max_wait_s (nothing waits longer than that plus the service ahead of it), else the oldest request
/// of the highest bucket. Without probes it is FCFS. The snapshot at push is the design: a probe (an
/// alignment) is too dear to repeat on every peek; a request whose reuse appears later is not promoted.
/// Not thread-safe. push O(log n) plus the probes; peek O(1); pop O(log n).
class hit_rate_aware_queue {
 public:
  using probe = prefix_probe;
  struct options {
    double max_wait_s = 5.0;   ///< aging bound; finite and > 0
    int hit_rate_buckets = 8;  ///< hit rates in [0, 1] fall in this many equal buckets; 1..1024
    probe reuse_probe{};       ///< reusable prompt tokens beyond the exact prefix (optional)
  };

  hit_rate_aware_queue() : hit_rate_aware_queue(options{}) {}
  explicit hit_rate_aware_queue(options o) : opt_(std::move(o)) {
    const char* where = "weft::sched::hit_rate_aware_queue";
    expects(opt_.max_wait_s > 0.0 && std::isfinite(opt_.max_wait_s), errc::invalid_argument, where,
            "max_wait_s must be finite and > 0, got ", opt_.max_wait_s);
    expects(opt_.hit_rate_buckets >= 1 && opt_.hit_rate_buckets <= 1024, errc::invalid_argument, where,
            "hit_rate_buckets must be in [1, 1024], got ", opt_.hit_rate_buckets);
  }

  static constexpr bool provides_prefix_probe = true;  ///< opts in to binds_prefix_probe's check
  /// Called by the scheduler with its KV manager's cached_prefix_tokens.
  void bind_prefix_probe(probe p) { prefix_probe_ = std::move(p); }

  /// Queues r with its hit rate. Throws weft::error (nothing queued) when r is invalid or a probe
  /// returns a count outside [0, prompt_tokens].
  void push(const request& r, double /*now*/) {
    const char* where = "weft::sched::hit_rate_aware_queue::push";
    validate(r, where);
    std::int64_t reusable = 0;
    if (prefix_probe_) reusable = checked_probe(prefix_probe_(r), r, where, "prefix probe");
    if (opt_.reuse_probe) reusable = std::max(reusable, checked_probe(opt_.reuse_probe(r), r, where, "reuse probe"));
    const double rate = static_cast<double>(reusable) / static_cast<double>(r.prompt_tokens);
    const int bucket = std::min(opt_.hit_rate_buckets - 1, static_cast<int>(rate * opt_.hit_rate_buckets));
    const order_key k{r.arrival_s, seq_};
    auto [it, inserted] = by_arrival_.emplace(k, slot{r, bucket});
    try {
      by_rate_.emplace(rate_key{bucket, k});
    } catch (...) {
      by_arrival_.erase(it);
      throw;
    }
    ++seq_;
  }

  const request* peek(double now) const {
    if (by_arrival_.empty()) return nullptr;
    return &by_arrival_.find(choose(now))->second.r;
  }

  request pop(double now) {
    expects(!by_arrival_.empty(), errc::precondition, "weft::sched::hit_rate_aware_queue::pop", "queue is empty");
    const auto it = by_arrival_.find(choose(now));
    request r = it->second.r;
    by_rate_.erase(rate_key{it->second.bucket, it->first});
    by_arrival_.erase(it);
    return r;
  }

  void on_admit(const request&) {}
  void on_tokens(const request& r, std::int64_t n) {
    expects(n >= 0, errc::invalid_argument, "weft::sched::hit_rate_aware_queue::on_tokens", "request ", r.id,
            ": token count must be >= 0, got ", n);
  }
  void on_finish(const request&, std::int64_t) {}
  std::size_t size() const noexcept { return by_arrival_.size(); }
  bool empty() const noexcept { return by_arrival_.empty(); }

 private:
  struct order_key {
    double arrival;
    std::uint64_t seq;
    friend auto operator<=>(const order_key&, const order_key&) = default;
  };
  struct rate_key {
    int bucket;
    order_key order;
    // Highest bucket first, then arrival order.
    friend bool operator<(const rate_key& a, const rate_key& b) {
      return a.bucket != b.bucket ? a.bucket > b.bucket : a.order < b.order;
    }
  };
  struct slot {
    request r;
    int bucket;
  };

  static std::int64_t checked_probe(std::int64_t v, const request& r, const char* where, const char* what) {
    expects(v >= 0 && v <= r.prompt_tokens, errc::invalid_argument, where, "request ", r.id, ": ", what, " returned ",
            v, " reusable tokens; it must be in [0, prompt_tokens = ", r.prompt_tokens, "]");
    return v;
  }

  // Invariant: by_arrival_ and by_rate_ hold the same requests.
  order_key choose(double now) const {
    const order_key& oldest = by_arrival_.begin()->first;
    if (now - oldest.arrival >= opt_.max_wait_s) return oldest;
    return by_rate_.begin()->order;
  }

  options opt_;
  probe prefix_probe_;
  std::map<order_key, slot> by_arrival_;
  std::set<rate_key> by_rate_;
  std::uint64_t seq_ = 0;
};

}  // namespace weft::sched

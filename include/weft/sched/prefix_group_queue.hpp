// Batch-wide prefix grouping: requests that share a prompt prefix are admitted back to back, so the
// shared KV blocks are computed once and live only while the group runs. BatchLLM (Zheng et al.,
// "BatchLLM: Optimizing Large Batched LLM Inference with Global Prefix Sharing and Throughput-oriented
// Token Batching", 2024, §3) groups the whole batch; here groups are drained in order of their oldest request.
#pragma once

#include <weft/sched/detail/service_report.hpp>
#include <weft/sched/request.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <unordered_map>
#include <utility>

namespace weft::sched {

/// Once a group's first request is served, the rest of that group follows before any other group
/// (up to max_group_run in a row, so one huge group cannot hold others back for ever); then the group
/// whose oldest request arrived first. Requests without a prefix (prefix_id 0) are groups of one.
/// Not thread-safe. push/pop O(log G), peek O(1).
class prefix_group_queue {
 public:
  struct options {
    std::size_t max_group_run = 64;  ///< >= 1
  };

  prefix_group_queue() : prefix_group_queue(options{}) {}
  explicit prefix_group_queue(options o) : opt_(o) {
    expects(o.max_group_run >= 1, errc::invalid_argument, "weft::sched::prefix_group_queue",
            "max_group_run must be >= 1, got ", o.max_group_run);
  }

  void push(const request& r, double /*now*/) {
    validate(r, "weft::sched::prefix_group_queue::push");
    const std::uint64_t seq = seq_++;
    const group_key g{r.prefix_id, r.prefix_id == 0 ? seq : 0};
    auto& members = groups_[g];
    if (members.empty()) by_age_.emplace(std::pair{r.arrival_s, seq}, g);
    members.push_back({r, seq});
    ++size_;
  }

  const request* peek(double /*now*/) const {
    if (size_ == 0) return nullptr;
    return &groups_.find(current())->second.front().r;
  }

  request pop(double /*now*/) {
    expects(size_ != 0, errc::precondition, "weft::sched::prefix_group_queue::pop", "queue is empty");
    const group_key g = current();
    if (!(g == running_)) {
      running_ = g;
      run_ = 0;
    }
    auto it = groups_.find(g);
    const member head = it->second.front();
    by_age_.erase({head.r.arrival_s, head.seq});
    it->second.pop_front();
    ++run_;
    if (it->second.empty()) {
      groups_.erase(it);
    } else {
      by_age_.emplace(std::pair{it->second.front().r.arrival_s, it->second.front().seq}, g);
    }
    --size_;
    return head.r;
  }

  void on_admit(const request&) {}
  void on_tokens(const request& r, std::int64_t n) {
    detail::check_token_count(r, n, "weft::sched::prefix_group_queue::on_tokens");
  }
  void on_finish(const request&, std::int64_t) {}
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

 private:
  struct group_key {
    std::uint64_t prefix = 0;
    std::uint64_t solo = 0;
    friend auto operator<=>(const group_key&, const group_key&) = default;
  };
  struct member {
    request r;
    std::uint64_t seq;
  };

  group_key current() const {
    if (run_ < opt_.max_group_run && groups_.count(running_) != 0) return running_;
    return by_age_.begin()->second;
  }

  options opt_;
  std::map<group_key, std::deque<member>> groups_;
  // Invariant: one entry per non-empty group, keyed by its head's (arrival, seq).
  std::map<std::pair<double, std::uint64_t>, group_key> by_age_;
  group_key running_{~std::uint64_t{0}, ~std::uint64_t{0}};
  std::size_t run_ = 0;
  std::size_t size_ = 0;
  std::uint64_t seq_ = 0;
};

}  // namespace weft::sched

// Weighted fair queuing by virtual finish time at user level: each client's requests are tagged in
// sequence (start = max(virtual time, the client's last finish), finish = start + cost / weight), so a
// client that floods the queue lines up behind its own tags. Self-clocked virtual time (Golestani,
// "A Self-Clocked Fair Queueing Scheme", INFOCOM 1994); token costs as in VTC (Sheng et al., OSDI 2024).
#pragma once

#include <weft/sched/detail/client_table.hpp>
#include <weft/sched/detail/service_report.hpp>
#include <weft/sched/request.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <set>
#include <tuple>

namespace weft::sched {

/// WFQ between clients. The cost of a request is w_in * prompt + w_out * (its predicted output, or
/// default_output_estimate when it has none); on_finish corrects the client's last finish tag by the
/// difference between the true and the estimated cost, so mispredictions are paid by later requests.
/// Not thread-safe. push/pop O(log C), peek O(1).
class wfq_queue {
 public:
  struct options {
    service_weights weights{};
    std::int64_t default_output_estimate = 256;
  };

  wfq_queue() : wfq_queue(options{}) {}
  explicit wfq_queue(options o) : opt_(o) {
    validate(o.weights, "weft::sched::wfq_queue");
    expects(o.default_output_estimate >= 0, errc::invalid_argument, "weft::sched::wfq_queue",
            "default_output_estimate must be >= 0, got ", o.default_output_estimate);
  }

  void set_weight(client_id c, double weight) {
    expects(c.valid() && weight > 0.0 && weight < std::numeric_limits<double>::infinity(), errc::invalid_argument,
            "weft::sched::wfq_queue::set_weight", "client ", c, ": weight must be finite and > 0, got ", weight);
    clients_[c].weight = weight;
  }

  void push(const request& r, double /*now*/) {
    validate(r, "weft::sched::wfq_queue::push");
    auto& st = clients_[r.client];
    const double start = std::max(virtual_time_, st.last_finish);
    const double finish = start + cost(r) / st.weight;
    st.last_finish = finish;
    st.waiting.push_back({r, finish, seq_++});
    if (st.waiting.size() == 1) heads_.emplace(finish, st.waiting.front().seq, r.client);
    ++size_;
  }

  /// The queued request with the smallest finish tag (ties: earlier push).
  const request* peek(double /*now*/) const {
    if (heads_.empty()) return nullptr;
    return &clients_.find(std::get<2>(*heads_.begin()))->waiting.front().r;
  }

  request pop(double /*now*/) {
    expects(!heads_.empty(), errc::precondition, "weft::sched::wfq_queue::pop", "queue is empty");
    const auto [finish, seq, c] = *heads_.begin();
    heads_.erase(heads_.begin());
    auto& st = *clients_.find(c);
    request r = st.waiting.front().r;
    st.waiting.pop_front();
    virtual_time_ = finish;  // self-clocked: virtual time is the tag of the request entering service
    if (!st.waiting.empty()) heads_.emplace(st.waiting.front().finish, st.waiting.front().seq, c);
    --size_;
    return r;
  }

  void on_admit(const request& r) { clients_.known(r.client, "weft::sched::wfq_queue::on_admit"); }
  void on_tokens(const request& r, std::int64_t n) {
    detail::check_token_count(r, n, "weft::sched::wfq_queue::on_tokens");
    clients_.known(r.client, "weft::sched::wfq_queue::on_tokens");
  }
  void on_finish(const request& r, std::int64_t generated) {
    detail::check_generated_count(r, generated, "weft::sched::wfq_queue::on_finish");
    auto& st = clients_.known(r.client, "weft::sched::wfq_queue::on_finish");
    const double actual = opt_.weights.charge(r, generated);
    st.last_finish += (actual - cost(r)) / st.weight;
  }

  double virtual_time() const noexcept { return virtual_time_; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

 private:
  struct tagged {
    request r;
    double finish;
    std::uint64_t seq;
  };
  struct client_state {
    std::deque<tagged> waiting;
    double last_finish = 0.0;
    double weight = 1.0;
  };

  double cost(const request& r) const noexcept {
    const std::int64_t out = r.predicted_output_tokens > 0 ? r.predicted_output_tokens : opt_.default_output_estimate;
    return opt_.weights.charge(r, out);
  }

  options opt_;
  detail::client_table<client_state> clients_;
  // Invariant: one entry (head finish tag, head seq, client) per client with waiting requests.
  std::set<std::tuple<double, std::uint64_t, client_id>> heads_;
  double virtual_time_ = 0.0;
  std::uint64_t seq_ = 0;
  std::size_t size_ = 0;
};

}  // namespace weft::sched

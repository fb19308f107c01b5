// Deficit round robin with a token quantum: clients take turns; each turn adds quantum * weight tokens
// to the client's deficit, which pays for its requests' estimated token cost. Shreedhar & Varghese,
// "Efficient Fair Queuing Using Deficit Round Robin", SIGCOMM 1995, §3, with tokens instead of bytes.
#pragma once

#include <weft/sched/detail/client_table.hpp>
#include <weft/sched/detail/service_report.hpp>
#include <weft/sched/request.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>

namespace weft::sched {

/// DRR between clients. Cost of a request: w_in * prompt + w_out * (prediction, or
/// default_output_estimate); on_finish charges the deficit the difference to the true cost.
/// Not thread-safe. push/pop amortised O(1 + cost / quantum) rounds over the active clients.
class drr_queue {
 public:
  struct options {
    service_weights weights{};
    double quantum_tokens = 1024.0;
    std::int64_t default_output_estimate = 256;
  };

  drr_queue() : drr_queue(options{}) {}
  explicit drr_queue(options o) : opt_(o) {
    validate(o.weights, "weft::sched::drr_queue");
    expects(o.quantum_tokens > 0.0 && o.quantum_tokens < std::numeric_limits<double>::infinity(),
            errc::invalid_argument, "weft::sched::drr_queue", "quantum_tokens must be finite and > 0, got ",
            o.quantum_tokens);
    expects(o.default_output_estimate >= 0, errc::invalid_argument, "weft::sched::drr_queue",
            "default_output_estimate must be >= 0, got ", o.default_output_estimate);
  }

  void set_weight(client_id c, double weight) {
    expects(c.valid() && weight > 0.0 && weight < std::numeric_limits<double>::infinity(), errc::invalid_argument,
            "weft::sched::drr_queue::set_weight", "client ", c, ": weight must be finite and > 0, got ", weight);
    clients_[c].weight = weight;
  }

  void push(const request& r, double /*now*/) {
    validate(r, "weft::sched::drr_queue::push");
    auto& st = clients_[r.client];
    if (st.waiting.empty()) active_.push_back(r.client);
    st.waiting.push_back(r);
    ++size_;
  }

  /// Runs the round robin until the client at the front can pay for its head request.
  const request* peek(double /*now*/) {
    if (active_.empty()) return nullptr;
    return &clients_.find(select())->waiting.front();
  }

  request pop(double /*now*/) {
    expects(!active_.empty(), errc::precondition, "weft::sched::drr_queue::pop", "queue is empty");
    const client_id c = select();
    auto& st = *clients_.find(c);
    request r = st.waiting.front();
    st.waiting.pop_front();
    st.deficit -= cost(r);
    if (st.waiting.empty()) {
      // A client without a backlog keeps no credit (DRR resets the deficit of an empty queue);
      // a debt from mispredicted costs is kept so it cannot be escaped by going idle.
      st.deficit = std::min(st.deficit, 0.0);
      st.turn_open = false;
      active_.pop_front();
    }
    --size_;
    return r;
  }

  void on_admit(const request& r) { clients_.known(r.client, "weft::sched::drr_queue::on_admit"); }
  void on_tokens(const request& r, std::int64_t n) {
    detail::check_token_count(r, n, "weft::sched::drr_queue::on_tokens");
    clients_.known(r.client, "weft::sched::drr_queue::on_tokens");
  }
  void on_finish(const request& r, std::int64_t generated) {
    detail::check_generated_count(r, generated, "weft::sched::drr_queue::on_finish");
    auto& st = clients_.known(r.client, "weft::sched::drr_queue::on_finish");
    const double actual = opt_.weights.charge(r, generated);
    st.deficit -= actual - cost(r);
  }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

 private:
  struct client_state {
    std::deque<request> waiting;
    double deficit = 0.0;
    double weight = 1.0;
    bool turn_open = false;  // the front client already received this turn's quantum
  };

  double cost(const request& r) const noexcept {
    const std::int64_t out = r.predicted_output_tokens > 0 ? r.predicted_output_tokens : opt_.default_output_estimate;
    return opt_.weights.charge(r, out);
  }

  // Invariant: active_ lists each client with waiting requests exactly once.
  client_id select() {
    for (;;) {
      const client_id c = active_.front();
      auto& st = *clients_.find(c);
      if (!st.turn_open) {
        st.deficit += opt_.quantum_tokens * st.weight;
        st.turn_open = true;
      }
      if (cost(st.waiting.front()) <= st.deficit) return c;
      st.turn_open = false;
      active_.pop_front();
      active_.push_back(c);
    }
  }

  options opt_;
  detail::client_table<client_state> clients_;
  std::deque<client_id> active_;
  std::size_t size_ = 0;
};

}  // namespace weft::sched

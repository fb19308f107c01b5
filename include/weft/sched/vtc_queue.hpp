// Virtual Token Counter: fair sharing of an LLM server between clients. Sheng et al., "Fairness in
// Serving Large Language Models", OSDI 2024, §4 (Algorithm 2) and §4.3 (predicted output length).
// Each client has a counter of weighted service; the backlogged client with the least counter goes next.
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
#include <unordered_map>
#include <utility>
#include <vector>

namespace weft::sched {

/// VTC fair queue. Counters are charged w_in per input token at admission and w_out per output
/// token as it is produced, divided by the client's weight. A client that becomes backlogged is lifted
/// to the least counter among backlogged clients (or, when none is, to the counter of the last client
/// whose backlog ended), so idle time earns no credit. With use_prediction, admission also charges
/// w_out * predicted_output_tokens; tokens beyond the prediction are charged as they come and an
/// over-prediction is refunded at on_finish.
///
/// Guarantee (paper, Theorem 4.2-4.3): two clients continuously backlogged over an interval receive
/// weighted service differing by at most 2 * max(w_in * L_in, w_out * M), L_in the longest prompt and
/// M the most tokens one batch holds. Not thread-safe. on_* O(1) expected (increases reach the order
/// lazily); push/pop/peek amortised O(log C) per charged client (C backlogged clients).
class vtc_queue {
 public:
  struct options {
    service_weights weights{};
    bool use_prediction = false;
  };

  vtc_queue() : vtc_queue(options{}) {}
  explicit vtc_queue(options o) : opt_(o) { validate(o.weights, "weft::sched::vtc_queue"); }

  /// Client c's share weight (> 0, default 1); may be set before its first request.
  void set_weight(client_id c, double weight) {
    expects(c.valid(), errc::invalid_argument, "weft::sched::vtc_queue::set_weight", "client id must be valid");
    expects(weight > 0.0 && weight < std::numeric_limits<double>::infinity(), errc::invalid_argument,
            "weft::sched::vtc_queue::set_weight", "client ", c, ": weight must be finite and > 0, got ", weight);
    clients_[c].weight = weight;
  }

  void push(const request& r, double /*now*/) {
    validate(r, "weft::sched::vtc_queue::push");
    auto& st = clients_[r.client];
    if (st.waiting.empty()) {
      // Lift (Algorithm 2, lines 6-10): a newly backlogged client starts at the least counter.
      settle();
      const double floor = backlogged_.empty() ? last_left_counter_ : backlogged_.begin()->first;
      if (st.counter < floor) st.counter = floor;
      backlogged_.emplace(st.counter, r.client);
      st.key = st.counter;
    }
    st.waiting.push_back(r);
    ++size_;
  }

  /// The head request of the backlogged client with the least counter (ties: smaller client id).
  const request* peek(double /*now*/) {
    settle();
    if (backlogged_.empty()) return nullptr;
    return &clients_.find(backlogged_.begin()->second)->waiting.front();
  }

  request pop(double /*now*/) {
    expects(!backlogged_.empty(), errc::precondition, "weft::sched::vtc_queue::pop", "queue is empty");
    settle();
    const auto [counter, c] = *backlogged_.begin();
    auto& st = *clients_.find(c);
    request r = st.waiting.front();
    st.waiting.pop_front();
    --size_;
    if (st.waiting.empty()) {
      backlogged_.erase(backlogged_.begin());
      last_left_counter_ = counter;
    }
    return r;
  }

  void on_admit(const request& r) {
    auto& st = clients_.known(r.client, "weft::sched::vtc_queue::on_admit");
    double charge = opt_.weights.input * static_cast<double>(r.prompt_tokens - r.kv_ready_tokens);
    if (opt_.use_prediction) {
      charge += opt_.weights.output * static_cast<double>(r.predicted_output_tokens);
      emitted_[r.id] = 0;
    }
    add(r.client, st, charge);
  }

  void on_tokens(const request& r, std::int64_t n) {
    detail::check_token_count(r, n, "weft::sched::vtc_queue::on_tokens");
    auto& st = clients_.known(r.client, "weft::sched::vtc_queue::on_tokens");
    std::int64_t charged = n;
    if (opt_.use_prediction) {
      // Only tokens beyond the prediction are new service; the rest was charged at admission.
      auto it = emitted_.find(r.id);
      expects(it != emitted_.end(), errc::not_found, "weft::sched::vtc_queue::on_tokens", "request ", r.id,
              " was never admitted");
      const std::int64_t before = it->second;
      it->second += n;
      charged = std::max<std::int64_t>(0, it->second - std::max(before, r.predicted_output_tokens));
    }
    add(r.client, st, opt_.weights.output * static_cast<double>(charged));
  }

  void on_finish(const request& r, std::int64_t generated) {
    detail::check_generated_count(r, generated, "weft::sched::vtc_queue::on_finish");
    auto& st = clients_.known(r.client, "weft::sched::vtc_queue::on_finish");
    if (!opt_.use_prediction) return;
    emitted_.erase(r.id);
    // Refund an over-prediction (paper §4.3: the counter is corrected once the true length is known).
    if (generated < r.predicted_output_tokens)
      add(r.client, st, -opt_.weights.output * static_cast<double>(r.predicted_output_tokens - generated));
  }

  /// Client c's counter (weighted service, scaled by 1/weight). Throws for a client never seen.
  double counter(client_id c) const {
    const client_state* st = clients_.find(c);
    expects(st != nullptr, errc::not_found, "weft::sched::vtc_queue::counter", "unknown client ", c);
    return st->counter;
  }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

 private:
  struct client_state {
    std::deque<request> waiting;
    double counter = 0.0;
    double key = 0.0;  // the counter under which the client sits in backlogged_ (<= counter)
    double weight = 1.0;
  };

  // Charges are frequent (one per output token) and reads rare (one per admission), so an increase
  // leaves the client's key in backlogged_ stale. Invariant: key <= counter for every backlogged client.
  // Then, if the first entry is fresh (key == counter), it is the true minimum: every other counter
  // is >= its key >= this one. settle() re-keys stale entries at the front until that holds; each
  // charge causes at most one re-key. A decrease (refund) breaks key <= counter, so it re-keys at once.
  void add(client_id c, client_state& st, double charge) {
    st.counter += charge / st.weight;
    if (!st.waiting.empty() && st.counter < st.key) {
      backlogged_.erase({st.key, c});
      backlogged_.emplace(st.counter, c);
      st.key = st.counter;
    }
  }

  void settle() {
    while (!backlogged_.empty()) {
      const client_id c = backlogged_.begin()->second;
      auto& st = *clients_.find(c);
      if (st.key == st.counter) return;
      backlogged_.erase(backlogged_.begin());
      backlogged_.emplace(st.counter, c);
      st.key = st.counter;
    }
  }

  options opt_;
  detail::client_table<client_state> clients_;
  // Invariant: backlogged_ holds (key, client) for exactly the clients with waiting requests.
  std::set<std::pair<double, client_id>> backlogged_;
  std::unordered_map<request_id, std::int64_t> emitted_;
  double last_left_counter_ = 0.0;
  std::size_t size_ = 0;
};

}  // namespace weft::sched

// Multi-instance serving in the simulator: prefill/decode disaggregation (Zhong et al., "DistServe",
// OSDI 2024, §3-4: separate prefill and decode instance pools, a router, the KV cache sent from one to
// the other) and colocated instances balanced by live migration (Sun et al., "Llumnix", OSDI 2024, §4).
#pragma once

#include <weft/sched/sim/simulator.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <queue>
#include <tuple>
#include <vector>

namespace weft::sched::sim {

struct cluster_options {
  std::size_t prefill_instances = 1;  ///< disaggregated: instances that only prefill
  std::size_t decode_instances = 1;   ///< disaggregated: instances that only decode
  std::size_t instances = 2;          ///< colocated: instances that do both
  /// Colocated: every interval, if the most and least loaded instances' free KV blocks differ by more
  /// than imbalance_blocks, one decoding request migrates from the former to the latter (0: never).
  double migration_interval_s = 0.0;
  std::int64_t imbalance_blocks = 512;
};

struct cluster_result {
  sim_result result;
  std::uint64_t kv_transfers = 0;  ///< prefill -> decode hand-overs
  double kv_transfer_s = 0.0;      ///< their total time on the interconnect
  std::uint64_t migrations = 0;
  double migration_s = 0.0;  ///< total migration downtime charged
};

namespace detail {

struct transfer_event {
  double time;
  std::uint64_t seq;
  std::size_t request;  // workload index
  std::size_t node;
  friend bool operator>(const transfer_event& a, const transfer_event& b) {
    return std::tie(a.time, a.seq) > std::tie(b.time, b.seq);
  }
};

// Free KV blocks of a node's scheduler (iteration_scheduler exposes kv()).
template <class S>
std::int64_t free_kv(const S& s) {
  return s.kv().free_blocks();
}

template <class S>
cluster_result run_cluster(const std::function<std::unique_ptr<S>()>& make, const workload& w, const cost_model& m,
                           const cluster_options& c, const sim_options& o, bool disaggregated) {
  const char* where =
      disaggregated ? "weft::sched::sim::simulate_disaggregated" : "weft::sched::sim::simulate_colocated";
  validate(o.weights, where);
  expects(o.window_s > 0.0, errc::invalid_argument, where, "window_s must be > 0, got ", o.window_s);
  const std::size_t n_prefill = disaggregated ? c.prefill_instances : 0;
  const std::size_t n_nodes = disaggregated ? c.prefill_instances + c.decode_instances : c.instances;
  expects(!disaggregated || (c.prefill_instances >= 1 && c.decode_instances >= 1), errc::invalid_argument, where,
          "need >= 1 prefill and >= 1 decode instance, got ", c.prefill_instances, " and ", c.decode_instances);
  expects(disaggregated || c.instances >= 1, errc::invalid_argument, where, "need >= 1 instance");
  expects(c.migration_interval_s >= 0.0 && c.imbalance_blocks >= 0, errc::invalid_argument, where,
          "migration_interval_s and imbalance_blocks must be >= 0");

  struct node {
    std::unique_ptr<S> s;
    bool busy = false;
    double until = 0.0;
    std::int64_t queued_prompt = 0;  // router load signal for prefill nodes
  };
  std::vector<node> nodes(n_nodes);
  for (auto& nd : nodes) {
    nd.s = make();
    expects(nd.s != nullptr && nd.s->idle(), errc::invalid_argument, where, "the factory must return fresh schedulers");
  }

  cluster_result out;
  sim_result& res = out.result;
  std::unordered_map<request_id, std::size_t> index;
  std::map<client_id, std::size_t> dense;
  for (std::size_t i = 0; i < w.size(); ++i) {
    validate(w[i].req, where);
    expects(w[i].output_tokens >= 1, errc::invalid_argument, where, "request ", w[i].req.id,
            ": output_tokens must be >= 1");
    expects(i == 0 || w[i - 1].req.arrival_s <= w[i].req.arrival_s, errc::invalid_argument, where,
            "workload must be sorted by arrival");
    expects(index.emplace(w[i].req.id, i).second, errc::invalid_argument, where, "duplicate request id ", w[i].req.id);
    dense.emplace(w[i].req.client, 0);
  }
  for (auto& [cl, k] : dense) {
    k = res.clients.size();
    res.clients.push_back(cl);
  }
  std::vector<std::size_t> client_of(w.size());
  res.records.resize(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    client_of[i] = dense[w[i].req.client];
    res.records[i] = {w[i].req.id, w[i].req.client, w[i].req.prompt_tokens, 0, w[i].req.arrival_s};
  }
  std::vector<std::int64_t> prompt_credit(w.size(), 0);
  std::vector<char> admitted(w.size(), 0);
  fairness_tracker fair(res.clients.size(), o.window_s);
  quantile_histogram tbt;
  std::priority_queue<transfer_event, std::vector<transfer_event>, std::greater<>> transfers;
  std::uint64_t seq = 0, iterations = 0, preemptions = 0, swaps = 0;
  double batch_tokens = 0.0, now = 0.0;
  double next_migration =
      c.migration_interval_s > 0.0 ? c.migration_interval_s : std::numeric_limits<double>::infinity();
  std::size_t next = 0;
  std::vector<request_id> finished;

  // Hands request i (its first `emitted` tokens produced) to node j with its KV ready.
  auto resubmit = [&](std::size_t i, std::size_t j, double t) {
    request r = w[i].req;
    r.prompt_tokens = w[i].req.prompt_tokens + res.records[i].output_tokens - 1;
    r.kv_ready_tokens = r.prompt_tokens;
    r.prefix_id = 0;
    r.prefix_tokens = 0;
    const bool ok = nodes[j].s->submit(r, t);
    expects(ok, errc::capacity, where, "request ", r.id, " does not fit instance ", j, "'s KV cache");
  };
  auto pick_decode = [&]() {
    std::size_t best = n_prefill;
    for (std::size_t j = n_prefill; j < n_nodes; ++j)
      if (free_kv(*nodes[j].s) > free_kv(*nodes[best].s)) best = j;
    return best;
  };

  for (;;) {
    double t = next < w.size() ? w[next].req.arrival_s : std::numeric_limits<double>::infinity();
    if (!transfers.empty()) t = std::min(t, transfers.top().time);
    for (const auto& nd : nodes)
      if (nd.busy) t = std::min(t, nd.until);
    if (t == std::numeric_limits<double>::infinity()) {
      bool idle = true;
      for (const auto& nd : nodes) idle = idle && nd.s->idle();
      expects(idle, errc::precondition, where, "an instance holds work but scheduled nothing");
      break;
    }
    now = std::max(now, t);
    if (now >= o.max_time_s) break;
    // (1) Batches that end now, in instance order.
    for (std::size_t j = 0; j < n_nodes; ++j) {
      node& nd = nodes[j];
      if (!nd.busy || nd.until > now) continue;
      nd.busy = false;
      finished.clear();
      const batch& b = nd.s->last_batch();
      for (request_id id : b.aborted) {
        const std::size_t i = index.at(id);
        res.records[i].aborted = true;
        res.records[i].finish_s = now;
      }
      const bool prefill_node = j < n_prefill;
      for (const auto& e : b.entries) {
        const std::size_t i = index.at(e.id);
        request_record& rec = res.records[i];
        const std::size_t cl = client_of[i];
        if (!admitted[i]) {
          admitted[i] = 1;
          fair.admitted(cl);
        }
        const std::int64_t credit = std::min(e.prefill_tokens, w[i].req.prompt_tokens - prompt_credit[i]);
        if (credit > 0) {
          prompt_credit[i] += credit;
          fair.service[cl] += o.weights.input * static_cast<double>(credit);
          nd.queued_prompt -= credit;
        }
        if (!e.emits_token) continue;
        fair.service[cl] += o.weights.output;
        if (rec.output_tokens == 0) {
          rec.first_token_s = now;
        } else {
          const double gap = now - rec.finish_s;
          tbt.record(gap);
          rec.max_tbt_s = std::max(rec.max_tbt_s, gap);
        }
        rec.finish_s = now;
        ++rec.output_tokens;
        if (prefill_node) {
          finished.push_back(e.id);  // the prefill instance is done with it either way
          if (rec.output_tokens < w[i].output_tokens) {
            const double dt = m.kv_network_s(w[i].req.prompt_tokens);
            out.kv_transfer_s += dt;
            ++out.kv_transfers;
            transfers.push({now + dt, seq++, i, pick_decode()});
          }
        } else if (rec.output_tokens == w[i].output_tokens) {
          finished.push_back(e.id);
        }
      }
      nd.s->complete(finished);
    }
    // (2) KV that arrives now.
    while (!transfers.empty() && transfers.top().time <= now) {
      const transfer_event ev = transfers.top();
      transfers.pop();
      resubmit(ev.request, ev.node, now);
    }
    // (3) Arrivals: to the prefill instance (or colocated instance) with the least queued prompt
    // tokens (ties: lower index).
    while (next < w.size() && w[next].req.arrival_s <= now) {
      const std::size_t pool = disaggregated ? n_prefill : n_nodes;
      std::size_t best = 0;
      for (std::size_t j = 1; j < pool; ++j)
        if (nodes[j].queued_prompt < nodes[best].queued_prompt) best = j;
      if (nodes[best].s->submit(w[next].req, now)) {
        nodes[best].queued_prompt += w[next].req.prompt_tokens;
        fair.arrive(client_of[next]);
      } else {
        res.records[next].rejected = true;
      }
      ++next;
    }
    // (4) Llumnix: migrate one decoding request from the fullest to the emptiest instance. The copy
    // is charged as downtime (Llumnix overlaps it with decoding, so this is an upper bound).
    if (!disaggregated && now >= next_migration) {
      next_migration = now + c.migration_interval_s;
      std::size_t lo = 0, hi = 0;
      for (std::size_t j = 1; j < n_nodes; ++j) {
        if (free_kv(*nodes[j].s) < free_kv(*nodes[lo].s)) lo = j;
        if (free_kv(*nodes[j].s) > free_kv(*nodes[hi].s)) hi = j;
      }
      if (lo != hi && !nodes[lo].busy && free_kv(*nodes[hi].s) - free_kv(*nodes[lo].s) > c.imbalance_blocks) {
        if (auto mv = nodes[lo].s->migrate_out()) {
          const std::size_t i = index.at(mv->req.id);
          const double dt = m.kv_network_s(mv->context_tokens);
          out.migration_s += dt;
          ++out.migrations;
          transfers.push({now + dt, seq++, i, hi});
        }
      }
    }
    // (5) Idle instances start their next batch.
    for (auto& nd : nodes) {
      if (nd.busy || nd.s->idle()) continue;
      const batch& b = nd.s->schedule(now);
      if (b.empty() && b.aborted.empty()) continue;  // waits for KV or arrivals
      double dt = m.iteration_s(b);
      for (const auto& tr : b.swapped_out) dt += m.transfer_s(tr);
      for (const auto& tr : b.swapped_in) dt += m.transfer_s(tr);
      nd.busy = true;
      nd.until = now + dt;
      ++iterations;
      batch_tokens += static_cast<double>(b.tokens());
      preemptions += b.preempted_recompute.size() + b.swapped_out.size();
      swaps += b.swapped_out.size();
    }
    fair.close_until(now);
  }
  finalize(res, w, o, tbt, fair, now, iterations, preemptions, swaps, batch_tokens);
  return out;
}

}  // namespace detail

/// DistServe-style disaggregation: arrivals go to the prefill instance with the least queued prompt
/// tokens; after its first token a request's KV (prompt_tokens * kv_bytes_per_token) crosses the
/// interconnect (cost_model::kv_network_s) to the decode instance with the most free KV blocks, which
/// decodes it to the end. make() returns a fresh scheduler per instance (any batch_scheduler with
/// kv() and last_batch(), e.g. iteration_scheduler). Deterministic. Thread-safe if make() is.
template <class S>
cluster_result simulate_disaggregated(const std::function<std::unique_ptr<S>()>& make, const workload& w,
                                      const cost_model& m, const cluster_options& c = {}, const sim_options& o = {}) {
  return detail::run_cluster<S>(make, w, m, c, o, true);
}

/// Colocated instances (each prefills and decodes), arrivals routed to the least queued prompt
/// tokens, with Llumnix-style migration when c.migration_interval_s > 0 (needs S::migrate_out()).
template <class S>
cluster_result simulate_colocated(const std::function<std::unique_ptr<S>()>& make, const workload& w,
                                  const cost_model& m, const cluster_options& c = {}, const sim_options& o = {}) {
  return detail::run_cluster<S>(make, w, m, c, o, false);
}

}  // namespace weft::sched::sim

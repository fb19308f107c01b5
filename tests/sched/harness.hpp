// A tiny engine for scheduler tests: submits requests, runs schedule/complete with the true output
// lengths (and a made-up sampled token per emitting entry, for requests with token ids), and lets the
// test inspect every batch. Also the KV manager configuration the tests share and the archetypes (the
// weakest queue and KV manager the concepts allow) that several scheduler tests run on.
#pragma once

#include <weft/kv/kv_manager.hpp>
#include <weft/sched/concepts.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace weft_test {
// The sched tests' helpers see weft::sched's names as the tests do.
using namespace weft::sched;

/// weft::kv's manager with `blocks` usable device blocks of 16 tokens and `host` host blocks.
inline weft::kv::kv_manager<> kv_of(std::int64_t blocks, std::int64_t host = 0,
                                    std::size_t copy_unit_blocks = 1u << 20) {
  weft::kv::kv_config c;
  c.num_blocks = static_cast<std::size_t>(blocks) + 1;  // + the null block
  c.host_blocks = host == 0 ? 0 : static_cast<std::size_t>(host) + 1;
  c.block_size = 16;
  c.bytes_per_token = 100;
  c.max_copy_unit_blocks = copy_unit_blocks;
  return weft::kv::kv_manager<>(c);
}

/// The token a test engine "samples" for request id at its n-th output: any deterministic value.
inline token_id sampled_token(request_id id, std::int64_t n) {
  return static_cast<token_id>((id.value() * 7919 + static_cast<std::uint64_t>(n) * 104729) % 50000);
}

/// The weakest fair_queue: FCFS, charging nothing.
struct min_queue {
  std::deque<request> q;
  void push(const request& r, double) { q.push_back(r); }
  const request* peek(double) { return q.empty() ? nullptr : &q.front(); }
  request pop(double) {
    request r = q.front();
    q.pop_front();
    return r;
  }
  void on_admit(const request&) {}
  void on_tokens(const request&, std::int64_t) {}
  void on_finish(const request&, std::int64_t) {}
  std::size_t size() const { return q.size(); }
  bool empty() const { return q.empty(); }
};

/// The weakest sched::kv_manager: one block per token, no host tier, no prefix cache, no sharing (a
/// fork copies); transactions by saving its whole state. A scheduler that used anything beyond the
/// concept would not compile with it.
struct min_kv {
  struct state {
    std::size_t used = 0;
    std::map<request_id, std::vector<weft::kv::block_id>> held;  // one (dummy) block per token slot
    std::map<request_id, std::vector<token_id>> ids;
  };
  std::size_t capacity = 4096;
  state st;
  std::optional<state> saved;

  std::size_t block_size() const { return 1; }
  std::size_t usable_blocks() const { return capacity; }
  std::size_t free_blocks() const { return capacity - st.used; }
  std::size_t bytes_per_block() const { return 0; }
  std::size_t cached_prefix_tokens(std::span<const token_id>, const weft::kv::request_options&) const { return 0; }
  std::optional<weft::kv::prompt_allocation> allocate_prompt(request_id id, std::span<const token_id> t,
                                                             const weft::kv::request_options& o, std::size_t slots) {
    auto r = allocate_prompt(id, t.size(), o, slots);
    if (r) st.ids[id].assign(t.begin(), t.end());
    return r;
  }
  std::optional<weft::kv::prompt_allocation> allocate_prompt(request_id id, std::size_t n,
                                                             const weft::kv::request_options&, std::size_t slots) {
    if (n > free_blocks()) return std::nullopt;
    st.held[id];
    grow(id, std::min(slots, n));
    return weft::kv::prompt_allocation{0, 0, 0, std::min(slots, n), std::min(slots, n), {}};
  }
  weft::kv::append_result grow(request_id id, std::size_t n) {
    auto& h = st.held.at(id);
    if (n <= h.size()) return {true, std::nullopt};
    if (n - h.size() > free_blocks()) return {};
    st.used += n - h.size();
    h.resize(n, weft::kv::block_id(1));
    return {true, std::nullopt};
  }
  weft::kv::append_result append(request_id id, std::span<const token_id> t) {
    const auto r = grow(id, st.held.at(id).size() + t.size());
    if (r.fits) st.ids[id].insert(st.ids[id].end(), t.begin(), t.end());
    return r;
  }
  void computed(request_id, std::size_t) {}
  bool fork(request_id parent, request_id child) {
    const auto& p = st.held.at(parent);
    if (p.size() > free_blocks()) return false;
    st.used += p.size();
    st.held[child] = p;
    st.ids[child] = st.ids[parent];
    return true;
  }
  void free(request_id id) {
    st.used -= st.held.at(id).size();
    st.held.erase(id);
    st.ids.erase(id);
  }
  std::optional<weft::kv::swap_plan> swap_out(request_id) { return std::nullopt; }
  std::optional<weft::kv::swap_plan> swap_in(request_id) { return std::nullopt; }
  std::span<const weft::kv::block_id> blocks(request_id id) const { return st.held.at(id); }
  std::span<const token_id> tokens(request_id id) const {
    auto it = st.ids.find(id);
    return it == st.ids.end() ? std::span<const token_id>() : std::span<const token_id>(it->second);
  }
  void begin_transaction() { saved = st; }
  void commit_transaction() { saved.reset(); }
  void rollback_transaction() {
    st = std::move(*saved);
    saved.reset();
  }
};

struct job {
  request req;
  std::int64_t output = 1;  // true output length
};

struct outcome {
  std::int64_t iterations = 0;
  std::int64_t completed = 0;
  std::int64_t aborted = 0;
  std::int64_t empty_iterations_with_work = 0;
};

/// Runs every job (all submitted before the first iteration) to completion or max_iterations; a job
/// without prompt ids is submitted counted by length. on_batch(batch, scheduler) is called after each
/// schedule().
template <class S, class F>
outcome run_jobs(S& s, const std::vector<job>& jobs, F&& on_batch, std::int64_t max_iterations = 1000000) {
  std::unordered_map<request_id, std::int64_t> remaining;
  for (const auto& j : jobs) {
    remaining[j.req.id] = j.output;
    request r = j.req;
    r.counted_by_length = r.prompt.empty();
    REQUIRE(s.submit(r, 0.0));
  }
  outcome out;
  std::vector<request_id> finished;
  std::vector<decoded_token> decoded;
  while (!s.idle() && out.iterations < max_iterations) {
    const batch& b = s.schedule(static_cast<double>(out.iterations));
    on_batch(b, s);
    ++out.iterations;
    if (b.empty()) {
      ++out.empty_iterations_with_work;
      continue;
    }
    out.aborted += static_cast<std::int64_t>(b.aborted.size());
    finished.clear();
    decoded.clear();
    for (const auto& e : b.entries) {
      if (!e.emits_token) continue;
      decoded.push_back({e.id, sampled_token(e.id, remaining[e.id])});
      if (--remaining[e.id] == 0) finished.push_back(e.id);
    }
    out.completed += static_cast<std::int64_t>(finished.size());
    s.complete(finished, decoded);
  }
  return out;
}

}  // namespace weft_test

// The policy concepts of weft::sched: fair_queue (which waiting request next, and how service is
// charged), kv_manager (the KV cache a scheduler drives: weft::kv::kv_manager models it directly),
// victim_policy (whom to preempt), scheduler_phase (what an iteration runs, in the one batch scheduler)
// and batch_scheduler (what runs each iteration, as the simulator sees any scheduler).
#pragma once

#include <weft/kv/kv_manager.hpp>
#include <weft/sched/batch.hpp>
#include <weft/sched/request.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <utility>

namespace weft::sched {

/// Q orders waiting requests between clients. push() queues a request; peek(now) names the request
/// pop(now) would remove (nullptr when empty); the scheduler then reports service: on_admit when the
/// request starts (input charged), on_tokens for output tokens produced, on_finish at its end.
/// Fairness lives in the charging: a queue may use it (VTC, WFQ, DRR) or ignore it (FCFS).
template <class Q>
concept fair_queue = requires(Q& q, const Q& cq, const request& r, double now, std::int64_t n) {
  q.push(r, now);
  { q.peek(now) } -> std::same_as<const request*>;
  { q.pop(now) } -> std::same_as<request>;
  q.on_admit(r);
  q.on_tokens(r, n);
  q.on_finish(r, n);
  { cq.size() } -> std::convertible_to<std::size_t>;
  { cq.empty() } -> std::convertible_to<bool>;
};

/// The callable a batch scheduler binds into a prefix-aware queue: how many prompt tokens of a
/// request its KV manager already holds.
using prefix_probe = std::function<std::int64_t(const request&)>;

namespace detail {
template <class Q>
concept has_bind_prefix_probe = requires(Q& q, prefix_probe p) {
  q.bind_prefix_probe(std::move(p));
};

// The opt-in of an optional hook (as unordered_dense's is_avalanching): a type that says it provides
// the hook gets a compile error naming the fix when the hook's signature does not match, instead of
// the hook being silently ignored. Types without the opt-in are detected by signature alone.
template <class Q>
struct prefix_probe_hook_check {
  static constexpr bool declared = [] {
    if constexpr (requires { Q::provides_prefix_probe; })
      return static_cast<bool>(Q::provides_prefix_probe);
    else
      return false;
  }();
  static_assert(!declared || has_bind_prefix_probe<Q>,
                "weft::sched: this queue declares provides_prefix_probe = true but has no member "
                "bind_prefix_probe callable with a weft::sched::prefix_probe; check the name's spelling "
                "and declare it as `void bind_prefix_probe(weft::sched::prefix_probe p)`, or remove "
                "provides_prefix_probe");
  static constexpr bool value = true;
};
}  // namespace detail

/// Optional hook of a fair_queue: Q::bind_prefix_probe(prefix_probe) receives, once at construction
/// of the batch scheduler, a probe of its KV manager's cached prefix (prefix_aware_queue uses it).
/// A queue that provides the hook should say so with `static constexpr bool provides_prefix_probe =
/// true;`: then a misspelled or mistyped hook is a compile error with the fix in its message, not a
/// hook silently never called. Every scheduler detects the hook through this concept.
template <class Q>
concept binds_prefix_probe = detail::prefix_probe_hook_check<Q>::value && detail::has_bind_prefix_probe<Q>;

/// K holds every running request's KV blocks, keyed by request id, in weft::kv's vocabulary;
/// weft::kv::kv_manager models it directly. The scheduler:
///  - probes cached_prefix_tokens(prompt, options) (prefix-aware queues);
///  - admits with allocate_prompt(id, prompt ids or length, options, slots): the cached prefix and
///    `slots` tokens get slots, the whole prompt must fit (nullopt: not now, nothing changed);
///  - grows each step: grow(id, tokens) for the next prefill chunk, append(id, {token}) for a decode
///    step's input token; fits == false means preempt someone; a copy order goes to batch::copies;
///  - reports computed(id, tokens) after the step ran, which is what publishes full blocks;
///  - preempts with swap_out (nullopt: no host room) or free, resumes with swap_in, forks with fork;
///  - reads blocks(id) (victim sizes) and tokens(id) (a recompute's ids);
///  - wraps every public call in begin/commit_transaction, and rolls back when anything throws, so a
///    failed call leaves the KV manager as it was (rollback_transaction must be noexcept in effect).
/// Expected failures are return values that change nothing; misuse throws weft::error.
/// Optionally, `static constexpr bool frees_without_failing = true` promises that free() of a request
/// the KV manager holds never throws: the scheduler then frees finished requests after committing,
/// outside the transaction (nothing to journal).
template <class K>
concept kv_manager = requires(K& kv, const K& ckv, request_id id, std::span<const token_id> tokens,
                              const weft::kv::request_options& options, std::size_t n) {
  { ckv.block_size() } -> std::convertible_to<std::size_t>;
  { ckv.usable_blocks() } -> std::convertible_to<std::size_t>;
  { ckv.free_blocks() } -> std::convertible_to<std::size_t>;
  { ckv.bytes_per_block() } -> std::convertible_to<std::size_t>;
  { ckv.cached_prefix_tokens(tokens, options) } -> std::convertible_to<std::size_t>;
  { kv.allocate_prompt(id, tokens, options, n) } -> std::same_as<std::optional<weft::kv::prompt_allocation>>;
  { kv.allocate_prompt(id, n, options, n) } -> std::same_as<std::optional<weft::kv::prompt_allocation>>;
  { kv.grow(id, n) } -> std::same_as<weft::kv::append_result>;
  { kv.append(id, tokens) } -> std::same_as<weft::kv::append_result>;
  kv.computed(id, n);
  { kv.fork(id, id) } -> std::same_as<bool>;
  kv.free(id);
  { kv.swap_out(id) } -> std::same_as<std::optional<weft::kv::swap_plan>>;
  { kv.swap_in(id) } -> std::same_as<std::optional<weft::kv::swap_plan>>;
  { ckv.blocks(id) } -> std::convertible_to<std::span<const weft::kv::block_id>>;
  { ckv.tokens(id) } -> std::convertible_to<std::span<const token_id>>;
  kv.begin_transaction();
  kv.commit_transaction();
  kv.rollback_transaction();
};

/// A KV manager that can hash a prompt's block keys ahead of admission (weft::kv::kv_manager does):
/// the scheduler then computes them in submit() and admission hashes nothing of the prompt. Optional.
template <class K>
concept precomputes_prompt_keys = requires(K& kv, const K& ckv, request_id id, std::span<const token_id> tokens,
                                           const weft::kv::request_options& options, std::size_t n,
                                           const weft::kv::prompt_keys& keys) {
  { ckv.compute_prompt_keys(tokens, options) } -> std::same_as<weft::kv::prompt_keys>;
  { kv.allocate_prompt(id, tokens, options, n, keys) } -> std::same_as<std::optional<weft::kv::prompt_allocation>>;
  { ckv.cached_prefix_tokens(tokens, options, keys) } -> std::convertible_to<std::size_t>;
};

/// What a scheduler tells the KV manager about request r besides its tokens: salt, adapter, media and
/// its client as the tenant its blocks are charged to. O(1). Thread-safe.
inline weft::kv::request_options kv_request_options(const request& r) noexcept {
  return weft::kv::request_options{r.cache_salt, r.adapter_id, r.media, r.client};
}

/// V picks which running request to preempt: choose() returns an index into candidates, which is
/// never empty. The scheduler removes protected requests from the candidates first (see docs).
template <class V>
concept victim_policy = requires(const V& v, std::span<const victim_candidate> candidates) {
  { v.choose(candidates) } -> std::convertible_to<std::size_t>;
};

/// P is a phase of weft's one batch scheduler (iteration_scheduler): what an iteration runs and in
/// which order — the phase order, the chunking rule, each entry's layer range. It is built from its
/// options (validating them) and gives the running cap, the preemption mode and a filter at submit
/// (false: the request can never run under this phase). Two traits: ranks_by_preemptions (the waiting
/// lines and the head rank by preemptions, then arrival — the stall-free no-livelock rule — or by
/// arrival only) and batches_decoded_ids (decoded ids reach the KV manager a block at a time and
/// decoded blocks are published when the request leaves the batch, or one at a time and published as
/// blocks fill, as vLLM v0 does). Its `template <class Steps> void plan(Steps& steps, double now)`
/// composes the scheduler's steps (iteration_scheduler::steps); the scheduler does the rest — swap,
/// recompute, forks, cancellation, migration — the same way under every phase. stall_free_phase,
/// prefill_first_phase and layered_phase model it.
template <class P>
concept scheduler_phase = requires(const P& p, const request& r) {
  typename P::options_type;
  requires std::constructible_from<P, const typename P::options_type&>;
  { p.options() } -> std::convertible_to<const typename P::options_type&>;
  { p.max_running() } -> std::convertible_to<std::size_t>;
  { p.preemption() } -> std::same_as<preemption_mode>;
  { p.accepts(r) } -> std::convertible_to<bool>;
  { P::ranks_by_preemptions } -> std::convertible_to<bool>;
  { P::batches_decoded_ids } -> std::convertible_to<bool>;
};

/// S decides each iteration's batch. submit() hands it a request (false: it can never run, e.g.
/// its prompt exceeds the whole KV cache); schedule(now) returns the next batch; complete(finished,
/// decoded) tells it the batch ran, which requests ended (EOS or length cap) and, for requests with
/// token ids, the token each emitting entry sampled, as {request id, token}.
template <class S>
concept batch_scheduler = requires(S& s, const S& cs, const request& r, double now,
                                   std::span<const request_id> finished, std::span<const decoded_token> decoded) {
  { s.submit(r, now) } -> std::same_as<bool>;
  { s.schedule(now) } -> std::same_as<const batch&>;
  s.complete(finished, decoded);
  s.complete(finished);
  { cs.waiting() } -> std::convertible_to<std::size_t>;
  { cs.running() } -> std::convertible_to<std::size_t>;
  { cs.idle() } -> std::convertible_to<bool>;
};

namespace detail {
template <class S>
concept has_cached_prompt_tokens = requires(S& s) {
  s.stats().cached_prompt_tokens;
};
template <class S>
concept has_migrate_out = requires(S& s) {
  s.migrate_out();
};

// The opt-ins of the simulator's optional scheduler hooks, as provides_prefix_probe above.
template <class S>
struct cached_prompt_tokens_hook_check {
  static constexpr bool declared = [] {
    if constexpr (requires { S::provides_cached_prompt_tokens; })
      return static_cast<bool>(S::provides_cached_prompt_tokens);
    else
      return false;
  }();
  static_assert(!declared || has_cached_prompt_tokens<S>,
                "weft::sched: this scheduler declares provides_cached_prompt_tokens = true but stats() "
                "has no member cached_prompt_tokens; check the name's spelling (stats() may return a "
                "weft::sched::scheduler_stats), or remove provides_cached_prompt_tokens");
  static constexpr bool value = true;
};
template <class S>
struct migrate_out_hook_check {
  static constexpr bool declared = [] {
    if constexpr (requires { S::provides_migrate_out; })
      return static_cast<bool>(S::provides_migrate_out);
    else
      return false;
  }();
  static_assert(!declared || has_migrate_out<S>,
                "weft::sched: this scheduler declares provides_migrate_out = true but has no member "
                "migrate_out(); check the name's spelling and declare it as iteration_scheduler's "
                "`std::optional<migrated> migrate_out()`, or remove provides_migrate_out");
  static constexpr bool value = true;
};
}  // namespace detail

/// Optional hook of a batch_scheduler for the simulator: stats().cached_prompt_tokens, the prompt
/// tokens its admissions found in the prefix cache; sim::simulate_* add it up over the instances into
/// the result's stats (a scheduler without it counts 0). A scheduler that provides it should say so
/// with `static constexpr bool provides_cached_prompt_tokens = true;`: then a misspelled member is a
/// compile error with the fix in its message, not a count silently left at 0.
template <class S>
concept reports_cached_prompt_tokens =
    detail::cached_prompt_tokens_hook_check<S>::value && detail::has_cached_prompt_tokens<S>;

/// Optional hook of a batch_scheduler for the cluster simulator: migrate_out() removes one decoding
/// request for live migration (Llumnix; iteration_scheduler::migrate_out says what it returns).
/// sim::simulate_colocated with a migration interval needs it (errc::invalid_argument without).
/// Opt-in: `static constexpr bool provides_migrate_out = true;`, as for reports_cached_prompt_tokens.
template <class S>
concept migrates_out = detail::migrate_out_hook_check<S>::value && detail::has_migrate_out<S>;

}  // namespace weft::sched

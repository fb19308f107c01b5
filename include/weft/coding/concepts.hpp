// The policy concepts of weft::coding: what a gradient code, a backup-count policy and a channel
// of coded messages must provide. Algorithms state their requirements with these names.
#pragma once

#include <weft/coding/decoder.hpp>
#include <weft/coding/sequential_round.hpp>

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace weft::coding {

/// C is a gradient code: n workers, k data partitions, an assignment of partitions to workers,
/// encoding coefficients (coefficient(i, j) = B_ij; worker i sends sum_j B_ij g_j over the
/// partitions it holds), and a decoder for any survivor set, or nullptr when the set cannot decode.
/// (Counts are spelled num_<things>(): docs/design-notes.md, "Counts". During the deprecation of
/// n_workers() a model may provide either name; weft reads it through detail::num_workers_of.)
template <class C>
concept counts_workers = requires(const C& c) {
  { c.num_workers() } -> std::convertible_to<std::size_t>;
}
|| requires(const C& c) {
  { c.n_workers() } -> std::convertible_to<std::size_t>;  // deprecated spelling, until the next breaking release
};

namespace detail {
/// c's number of workers, through num_workers() or, for models written before it, n_workers(). O(1)
/// beyond c's own call.
template <counts_workers C>
std::size_t num_workers_of(const C& c) {
  if constexpr (requires { c.num_workers(); })
    return static_cast<std::size_t>(c.num_workers());
  else
    return static_cast<std::size_t>(c.n_workers());
}
}  // namespace detail

/// Whether a code promises the exact gradient from any n - s workers, or the best approximation
/// from whoever arrived.
enum class code_kind { exact, approximate };

template <class C>
concept gradient_code = counts_workers<C> &&
    requires(const C& c, std::size_t worker, std::size_t partition, std::span<const std::size_t> survivors) {
  { c.n_partitions() } -> std::convertible_to<std::size_t>;
  { c.stragglers() } -> std::convertible_to<std::size_t>;
  { c.assignment(worker) } -> std::convertible_to<std::span<const std::size_t>>;
  { c.coefficient(worker, partition) } -> std::convertible_to<double>;
  { c.try_decoder(survivors) } -> std::convertible_to<std::shared_ptr<const decoder>>;
};

namespace detail {
template <class C>
concept has_kind = requires(const C& c) {
  { c.kind() } -> std::convertible_to<code_kind>;
};
template <class C>
concept has_name = requires(const C& c) {
  std::string(c.name());
};

// The opt-ins of the optional hooks (as sched's provides_prefix_probe): a code that says it provides
// a hook gets a compile error naming the fix when the hook is missing or mistyped, instead of the
// hook being silently ignored. Codes without the opt-in are detected by signature alone.
template <class C>
struct kind_hook_check {
  static constexpr bool declared = [] {
    if constexpr (requires { C::provides_kind; })
      return static_cast<bool>(C::provides_kind);
    else
      return false;
  }();
  static_assert(!declared || has_kind<C>,
                "weft::coding: this code declares provides_kind = true but has no const member kind() "
                "returning a weft::coding::code_kind; check the name's spelling and declare it as "
                "`weft::coding::code_kind kind() const`, or remove provides_kind");
  static constexpr bool value = true;
};
template <class C>
struct name_hook_check {
  static constexpr bool declared = [] {
    if constexpr (requires { C::provides_name; })
      return static_cast<bool>(C::provides_name);
    else
      return false;
  }();
  static_assert(!declared || has_name<C>,
                "weft::coding: this code declares provides_name = true but has no const member name() "
                "whose result makes a std::string; check the name's spelling and declare it as "
                "`std::string name() const` (or std::string_view, const char*), or remove provides_name");
  static constexpr bool value = true;
};
}  // namespace detail

/// Optional hook of a gradient_code: C::kind() const says whether the code is exact or approximate;
/// aggregate() waits for a decodable set of an exact code and for wait_for messages of an approximate
/// one (a code without the hook counts as exact). A code that provides it should say so with
/// `static constexpr bool provides_kind = true;`: then a misspelled or mistyped hook is a compile
/// error with the fix in its message, not a hook silently never called.
template <class C>
concept reports_code_kind = detail::kind_hook_check<C>::value && detail::has_kind<C>;

/// Optional hook of a gradient_code: C::name() const, its name for logs and any_gradient_code::name()
/// (a code without the hook is "custom"). Opt-in: `static constexpr bool provides_name = true;`, as
/// for reports_code_kind.
template <class C>
concept reports_code_name = detail::name_hook_check<C>::value && detail::has_name<C>;

/// P chooses how many of n workers to leave behind (backups) each step, from observed latencies:
/// observe() takes one step's per-worker completion times (seconds), backups(n) says how many of
/// the slowest to skip next step (< n).
template <class P>
concept backup_policy = requires(P& p, const P& cp, std::span<const double> latencies, std::size_t n) {
  p.observe(latencies);
  { cp.backups(n) } -> std::convertible_to<std::size_t>;
};

/// One coded message: the sender, the step it belongs to, and its payload.
struct coded_message {
  std::size_t worker = 0;
  std::uint64_t step = 0;
  std::vector<float> payload;
};

/// T delivers coded messages to the aggregating rank: receive() blocks until a message arrives or
/// the deadline passes (then std::nullopt); cancel() tells a worker its message for step is no
/// longer needed (best effort: a transport that cannot cancel may ignore it).
template <class T>
concept coded_channel = requires(T& t, std::chrono::steady_clock::time_point deadline, std::size_t worker,
                                 std::uint64_t step) {
  { t.receive(deadline) } -> std::same_as<std::optional<coded_message>>;
  t.cancel(worker, step);
};

/// S is a sequential gradient-coding scheme (Krishnan, Ebrahimi, Khisti, ICLR 2023): a job may
/// start every round and must decode within delay() more rounds. Each round the master calls
/// begin_round(start_job) for the workers' mini-tasks, asks tolerates(stragglers) whether it may
/// leave the late workers behind (or must wait for them), and end_round(stragglers) for the jobs
/// that decoded (with their decoding terms) or were missed. normalized_load() is the fraction of a
/// job's data one worker processes per round.
template <class S>
concept sequential_scheme = counts_workers<S> &&
    requires(S& s, const S& cs, bool start_job, std::span<const std::size_t> stragglers) {
  { cs.delay() } -> std::convertible_to<std::size_t>;
  { cs.normalized_load() } -> std::convertible_to<double>;
  { cs.tolerates(stragglers) } -> std::convertible_to<bool>;
  { s.begin_round(start_job) } -> std::convertible_to<const std::vector<std::vector<mini_task>>&>;
  { s.end_round(stragglers) } -> std::same_as<sequential_round_report>;
};

}  // namespace weft::coding

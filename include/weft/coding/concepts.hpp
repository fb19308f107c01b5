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

template <class C>
concept gradient_code = counts_workers<C> &&
    requires(const C& c, std::size_t worker, std::size_t partition, std::span<const std::size_t> survivors) {
  { c.n_partitions() } -> std::convertible_to<std::size_t>;
  { c.stragglers() } -> std::convertible_to<std::size_t>;
  { c.assignment(worker) } -> std::convertible_to<std::span<const std::size_t>>;
  { c.coefficient(worker, partition) } -> std::convertible_to<double>;
  { c.try_decoder(survivors) } -> std::convertible_to<std::shared_ptr<const decoder>>;
};

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

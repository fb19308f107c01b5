// Coded aggregation at the master: receive coded partial sums until the arrived set decodes (an
// exact code: as soon as any decodable set is in, often before n - s; an approximate code or
// backup workers: once wait_for messages are in), decode by the cached weighted sum, and cancel the
// workers still running (Tandon et al., ICML 2017, Sec. 2, the "master" of gradient coding).
#pragma once

#include <weft/coding/codec.hpp>
#include <weft/coding/concepts.hpp>
#include <weft/coding/linear_code.hpp>
#include <weft/core/error.hpp>
#include <weft/core/result.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace weft::coding {

/// What one aggregation step did.
struct aggregate_report {
  std::vector<std::size_t> survivors;  ///< whose messages were decoded
  std::vector<std::size_t> cancelled;  ///< workers told to stop
  std::size_t stale_dropped = 0;       ///< messages of earlier steps that arrived late and were dropped
  double residual = 0.0;               ///< decoder::residual (0 for an exact decode)
  std::chrono::nanoseconds wait{0};    ///< from the call to the decodable set
  std::chrono::nanoseconds decode{0};  ///< decoder lookup + weighted sum
};

/// Aggregates one step. wait_for: how many messages an approximate code waits for (ignored by
/// exact codes, which stop at the first decodable set; 0 means n - s). Writes the decoded gradient
/// to out. Returns a failure (errc::timeout naming the step, the arrived workers' count and what
/// was needed) when the deadline passes first; then nothing is cancelled and out is untouched.
/// Throws weft::error(invalid_argument) when a payload's length differs from out's.
/// Not thread-safe per channel (one aggregator per channel). O(arrivals * decoder lookup + |F| d).
template <gradient_code Code, coded_channel Channel>
result<aggregate_report> aggregate(const Code& code, Channel& channel, std::uint64_t step, std::span<float> out,
                                   std::chrono::steady_clock::time_point deadline, std::size_t wait_for = 0) {
  constexpr const char* where = "weft::coding::aggregate";
  const auto start = std::chrono::steady_clock::now();
  const std::size_t n = detail::num_workers_of(code);
  if (wait_for == 0) wait_for = n - code.stragglers();
  expects(wait_for <= n, errc::invalid_argument, where, "wait_for = ", wait_for, " exceeds n = ", n);
  aggregate_report report;
  std::vector<std::vector<float>> payload(n);
  std::vector<char> arrived(n, 0);
  std::vector<std::size_t> have;
  std::vector<std::size_t> coverage(code.n_partitions(), 0);
  std::size_t covered = 0;
  std::shared_ptr<const decoder> dec;
  bool exact = true;
  if constexpr (reports_code_kind<Code>) exact = code.kind() == code_kind::exact;
  while (!dec) {
    auto m = channel.receive(deadline);
    if (!m)
      return fail(errc::timeout, where, ": step ", step, " timed out with ", have.size(), " of ", n,
                  " workers arrived; needed a decodable set (", wait_for, " for this code)");
    if (m->step != step || m->worker >= n || arrived[m->worker]) {
      ++report.stale_dropped;
      continue;
    }
    expects(m->payload.size() == out.size(), errc::invalid_argument, where, "worker ", m->worker, " sent ",
            m->payload.size(), " elements for step ", step, ", expected ", out.size());
    arrived[m->worker] = 1;
    payload[m->worker] = std::move(m->payload);
    have.push_back(m->worker);
    for (std::size_t j : code.assignment(m->worker)) covered += coverage[j]++ == 0 ? 1 : 0;
    // An exact code is tried as soon as every partition is held by an arrived worker (necessary
    // for decoding; fractional repetition often decodes before n - s arrive), and always at n - s.
    const bool try_now =
        exact ? (covered == coverage.size() || have.size() + code.stragglers() >= n) : have.size() >= wait_for;
    if (try_now) dec = code.try_decoder(have);
  }
  const auto decodable_at = std::chrono::steady_clock::now();
  for (std::size_t w = 0; w < n; ++w)
    if (!arrived[w]) {
      channel.cancel(w, step);
      report.cancelled.push_back(w);
    }
  std::vector<std::span<const float>> messages;
  messages.reserve(dec->survivors.size());
  for (std::size_t w : dec->survivors) messages.emplace_back(payload[w]);
  decode(*dec, messages, out);
  report.survivors = dec->survivors;
  report.residual = dec->residual;
  report.wait = decodable_at - start;
  report.decode = std::chrono::steady_clock::now() - decodable_at;
  return report;
}

}  // namespace weft::coding

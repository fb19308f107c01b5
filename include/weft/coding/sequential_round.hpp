// The round-by-round vocabulary of sequential gradient coding (Krishnan, Ebrahimi, Khisti, ICLR
// 2023): a new job (one step's gradient) may start every round and must be decoded within T more
// rounds; each round a worker runs a list of mini-tasks, each a coded combination of one job's
// partial gradients; a decoded job is a weighted sum of the mini-task results that arrived.
#pragma once

#include <weft/core/error.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace weft::coding {

/// One mini-task in a worker's round: compute piece `piece` of job `job`. What a piece is (which
/// partitions of the job, with which coefficients) is fixed per worker and piece by the scheme
/// (piece_partitions / piece_coefficients) and is the same for every job.
struct mini_task {
  std::uint64_t job = 0;
  std::size_t piece = 0;
  friend bool operator==(const mini_task&, const mini_task&) = default;
};

/// One term of a job's decoding: weight times the result of (worker, piece) for that job.
struct job_term {
  std::size_t worker = 0;
  std::size_t piece = 0;
  double weight = 0.0;
};

/// A job that became decodable: its gradient is sum over terms of weight * result(worker, piece).
/// `terms` is empty when the scheme was built with decoders off (planning and simulation only).
struct decoded_job {
  std::uint64_t job = 0;
  std::uint64_t round = 0;  ///< the round at whose end it became decodable
  std::vector<job_term> terms;
};

/// What a round settled.
struct sequential_round_report {
  std::uint64_t round = 0;
  std::vector<decoded_job> decoded;   ///< jobs that became decodable this round
  std::vector<std::uint64_t> missed;  ///< jobs whose last chance was this round and that cannot decode
};

/// Options every sequential scheme takes.
struct sequential_options {
  /// Build each decoded job's terms (the decoders of its coded parts). Off: the scheme only plans
  /// and tracks decodability by counts, which is what runtime simulation and parameter search need.
  bool build_decoders = true;
  /// The delay T the caller can accept: a scheme that needs more (M-SGC W - 2 + B, SR-SGC B)
  /// throws weft::error(invalid_argument) naming both. Unset: whatever the scheme needs.
  std::optional<std::size_t> max_delay;
};

namespace detail {
/// Throws weft::error(invalid_argument) when a scheme needing delay `needed` is given less.
inline void check_delay(const sequential_options& o, std::size_t needed, const char* where, const char* rule) {
  expects(!o.max_delay || *o.max_delay >= needed, errc::invalid_argument, where, "T = ", o.max_delay.value_or(0),
          " is too small: this scheme needs T >= ", rule, " = ", needed);
}
}  // namespace detail

}  // namespace weft::coding

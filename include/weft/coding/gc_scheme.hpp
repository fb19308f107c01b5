// Classical gradient coding (Tandon, Lei, Dimakis, Karampatziakis, ICML 2017) run as a sequential
// scheme with delay T = 0: job r is coded across the workers with an (n, s) gradient code in round
// r and decoded at its end from any n - s results, or missed. The baseline of the sequential
// schemes' comparison (Krishnan, Ebrahimi, Khisti, ICLR 2023, Sec. 5).
#pragma once

#include <weft/coding/concepts.hpp>
#include <weft/coding/sequential_round.hpp>
#include <weft/coding/straggler_model.hpp>
#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace weft::coding {

/// Not thread-safe (one owner, the master). begin_round O(n); end_round O(n) plus one decoder
/// lookup per decoded job (gradient_code::try_decoder); tolerates O(|stragglers| + n / 64).
template <gradient_code Code>
class gc_scheme {
 public:
  /// code: any (n, s) gradient code. Throws weft::error(invalid_argument) when it has no workers.
  explicit gc_scheme(Code code, sequential_options options = {}) : code_(std::move(code)), opt_(options) {
    expects(detail::num_workers_of(code_) >= 1, errc::invalid_argument, "weft::coding::gc_scheme",
            "the code has no workers");
    pieces_.resize(num_workers());
    coefficients_.resize(num_workers());
    for (std::size_t w = 0; w < num_workers(); ++w) {
      const auto held = code_.assignment(w);
      pieces_[w].assign(held.begin(), held.end());
      for (std::size_t p : held) coefficients_[w].push_back(static_cast<double>(code_.coefficient(w, p)));
    }
  }

  std::size_t num_workers() const { return detail::num_workers_of(code_); }
  [[deprecated("use num_workers()")]] std::size_t n_workers() const { return num_workers(); }
  /// T: rounds a job may take after the one it starts in.
  static constexpr std::size_t delay() noexcept { return 0; }
  const Code& code() const noexcept { return code_; }
  /// Fraction of one job's data a worker processes per round: load / k = (s+1)/n for cyclic codes.
  double normalized_load() const {
    std::size_t load = 0;
    for (const auto& p : pieces_) load = std::max(load, p.size());
    return static_cast<double>(load) / static_cast<double>(code_.n_partitions());
  }
  std::size_t n_partitions() const { return code_.n_partitions(); }
  /// Relative size of partition p (all equal here).
  double partition_size(std::size_t) const noexcept { return 1.0; }
  std::size_t n_pieces() const noexcept { return 1; }
  /// The partitions piece 0 of worker combines and their coefficients (the code's row).
  std::span<const std::size_t> piece_partitions(std::size_t worker, std::size_t /*piece*/) const {
    check_index(worker, pieces_.size(), "weft::coding::gc_scheme::piece_partitions", "worker");
    return pieces_[worker];
  }
  std::span<const double> piece_coefficients(std::size_t worker, std::size_t /*piece*/) const {
    check_index(worker, coefficients_.size(), "weft::coding::gc_scheme::piece_coefficients", "worker");
    return coefficients_[worker];
  }

  std::uint64_t round() const noexcept { return round_; }
  std::size_t pending() const noexcept { return 0; }

  /// Whether the master may leave `stragglers` behind this round and still decode: at most s.
  bool tolerates(std::span<const std::size_t> stragglers) const {
    detail::check_worker_set(stragglers, num_workers(), "weft::coding::gc_scheme::tolerates", scratch_);
    return stragglers.size() <= code_.stragglers();
  }

  /// Starts round r = round(); with start_job, job r is coded across every worker. Returns each
  /// worker's mini-tasks. Throws weft::error(precondition) when the previous round is still open.
  const std::vector<std::vector<mini_task>>& begin_round(bool start_job = true) {
    expects(!open_, errc::precondition, "weft::coding::gc_scheme::begin_round", "round ", round_,
            " was begun and not ended");
    plan_.assign(num_workers(), {});
    started_ = start_job;
    if (start_job)
      for (auto& tasks : plan_) tasks.push_back({round_, 0});
    open_ = true;
    return plan_;
  }

  /// Ends the round; `stragglers` delivered nothing. Throws weft::error(invalid_argument) naming a
  /// straggler out of range or repeated (the round stays open), weft::error(precondition) outside a
  /// round.
  sequential_round_report end_round(std::span<const std::size_t> stragglers) {
    constexpr const char* where = "weft::coding::gc_scheme::end_round";
    expects(open_, errc::precondition, where, "no round is open; call begin_round first");
    detail::check_worker_set(stragglers, num_workers(), where, scratch_);
    sequential_round_report out;
    out.round = round_;
    if (started_) {
      std::vector<std::size_t> have;
      for (std::size_t w = 0; w < num_workers(); ++w)
        if ((scratch_[w / 64] >> (w % 64) & 1) == 0) have.push_back(w);
      if (have.size() + code_.stragglers() >= num_workers()) {
        decoded_job d{round_, round_, {}};
        if (opt_.build_decoders) {
          const auto dec = code_.try_decoder(have);
          expects(dec != nullptr, errc::precondition, where, "the code cannot decode ", have.size(), " of ",
                  num_workers(), " workers although it claims to tolerate s = ", code_.stragglers(), " stragglers");
          for (std::size_t i = 0; i < dec->survivors.size(); ++i)
            d.terms.push_back({dec->survivors[i], 0, dec->weights[i]});
        }
        out.decoded.push_back(std::move(d));
      } else {
        out.missed.push_back(round_);
      }
    }
    ++round_;
    open_ = false;
    return out;
  }

 private:
  Code code_;
  sequential_options opt_;
  std::vector<std::vector<std::size_t>> pieces_;  // per worker: the partitions of its one piece
  std::vector<std::vector<double>> coefficients_;
  std::vector<std::vector<mini_task>> plan_;
  std::uint64_t round_ = 0;
  bool open_ = false;
  bool started_ = false;
  mutable std::vector<std::uint64_t> scratch_;  // bitmask of the last straggler set checked
};

}  // namespace weft::coding

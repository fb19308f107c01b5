// M-SGC, multiplexed sequential gradient coding (Krishnan, Ebrahimi, Khisti, "Sequential Gradient
// Coding for Straggler Mitigation", ICLR 2023): each job is split into W - 1 + B mini-tasks per
// worker, run one per round over rounds t .. t + W - 2 + B (delay T = W - 2 + B). Group D1 is
// uncoded: worker i owns W - 1 chunks of the job's data, run in its first W - 1 slots. Group D2 is B
// gradient codes for lambda stragglers over the rest of the data, code g run in slot W - 1 + g. A
// worker that straggled on a D1 chunk redoes it in its next slot, ahead of its D2 task, so under
// the (B, W, lambda)-bursty model every D1 chunk arrives and each D2 code loses at most lambda
// workers. Normalized load (lambda + 1)(W - 1 + B) / (n (B + (W - 1)(lambda + 1))), or
// (W - 1 + B) / (n (W - 1)) when lambda = n (no D2).
#pragma once

#include <weft/coding/concepts.hpp>
#include <weft/coding/cyclic_repetition.hpp>
#include <weft/coding/linear_code.hpp>
#include <weft/coding/sequential_round.hpp>
#include <weft/coding/straggler_model.hpp>
#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

namespace weft::coding {

/// The normalized load of M-SGC with the paper's (n, lambda) codes for D2 (load lambda + 1 over n
/// partitions): the fraction of one job's data each worker processes per round. Throws like
/// validate(model). O(1).
inline double m_sgc_load(const bursty_straggler_model& m) {
  validate(m, "weft::coding::m_sgc_load");
  const auto n = static_cast<double>(m.n_workers), b = static_cast<double>(m.burst);
  const auto w1 = static_cast<double>(m.window - 1), l1 = static_cast<double>(m.lambda + 1);
  if (m.lambda == m.n_workers) return (w1 + b) / (n * w1);
  return l1 * (w1 + b) / (n * (b + w1 * l1));
}

/// Not thread-safe (one owner, the master). begin_round O(n (W + B)); end_round O(n (W + B)) plus
/// B decoder lookups per decoded job; tolerates O(|stragglers| + n / 64).
template <gradient_code Code = linear_code>
class m_sgc {
 public:
  /// model: the (B, W, lambda) model; d2_code: the gradient code of each D2 group, n workers and
  /// s >= lambda (required when lambda < n, ignored when lambda = n). Throws
  /// weft::error(invalid_argument) naming the values when the model breaks the paper's
  /// constraints (validate()), options.max_delay < W - 2 + B, or the code is missing, has another n
  /// or tolerates fewer than lambda.
  m_sgc(const bursty_straggler_model& model, std::optional<Code> d2_code, sequential_options options = {})
      : m_(checked(model)), opt_(options), history_(model) {
    constexpr const char* where = "weft::coding::m_sgc";
    detail::check_delay(opt_, delay(), where, "W - 2 + B");
    const std::size_t n = m_.n_workers;
    d1_ = m_.window - 1;
    if (m_.lambda < n) {
      expects(d2_code.has_value(), errc::invalid_argument, where, "lambda = ", m_.lambda, " < n = ", n,
              " needs a D2 gradient code for lambda stragglers");
      code_ = std::move(d2_code);
      expects(detail::num_workers_of(*code_) == n, errc::invalid_argument, where,
              "the D2 code has n = ", detail::num_workers_of(*code_), " workers, the model n = ", n);
      expects(code_->stragglers() >= m_.lambda, errc::invalid_argument, where,
              "the D2 code tolerates s = ", code_->stragglers(), " stragglers, fewer than lambda = ", m_.lambda);
      groups_ = m_.burst;
      group_partitions_ = code_->n_partitions();
      for (std::size_t w = 0; w < n; ++w) d2_load_ = std::max(d2_load_, code_->assignment(w).size());
    }
    // Partition layout of one job: D1 chunk (i, j) is partition i (W - 1) + j, as large as one D2
    // task (d2_load_ D2 partitions; 1 unit when there is no D2); then group g's partitions.
    chunk_size_ = groups_ > 0 ? static_cast<double>(d2_load_) : 1.0;
    const std::size_t d1_parts = checked_product<std::size_t>(where, n, d1_);
    n_partitions_ = d1_parts + groups_ * group_partitions_;
    pieces_.assign(n, std::vector<std::vector<std::size_t>>(d1_ + groups_));
    coefficients_.assign(n, std::vector<std::vector<double>>(d1_ + groups_));
    for (std::size_t w = 0; w < n; ++w) {
      for (std::size_t j = 0; j < d1_; ++j) {
        pieces_[w][j] = {w * d1_ + j};
        coefficients_[w][j] = {1.0};
      }
      for (std::size_t g = 0; g < groups_; ++g) {
        for (std::size_t p : code_->assignment(w)) {
          pieces_[w][d1_ + g].push_back(d1_parts + g * group_partitions_ + p);
          coefficients_[w][d1_ + g].push_back(static_cast<double>(code_->coefficient(w, p)));
        }
      }
    }
  }

  const bursty_straggler_model& model() const noexcept { return m_; }
  std::size_t num_workers() const noexcept { return m_.n_workers; }
  [[deprecated("use num_workers()")]] std::size_t n_workers() const noexcept { return num_workers(); }
  /// T = W - 2 + B.
  std::size_t delay() const noexcept { return m_.window - 2 + m_.burst; }
  /// W - 1 + B mini-tasks per worker per job (W - 1 without D2), one per round.
  std::size_t n_pieces() const noexcept { return d1_ + groups_; }
  /// Partitions of one job: n (W - 1) D1 chunks, then B groups of the D2 code's partitions.
  std::size_t n_partitions() const noexcept { return n_partitions_; }
  /// Relative size of a partition: a D1 chunk is as much work as a D2 task (the D2 code's load in
  /// D2 partitions), so the batch is split in these proportions.
  double partition_size(std::size_t p) const noexcept { return p < m_.n_workers * d1_ ? chunk_size_ : 1.0; }
  /// Fraction of one job's data a worker may process in one round: W - 1 + B mini-tasks (one per
  /// job in flight; with lambda = n the last B are D1 retries), each a chunk. The paper's normalized
  /// load when the D2 code is an (n, lambda) cyclic or hybrid code.
  double normalized_load() const noexcept {
    double total = 0;
    for (std::size_t p = 0; p < n_partitions_; ++p) total += partition_size(p);
    return static_cast<double>(m_.window - 1 + m_.burst) * chunk_size_ / total;
  }
  /// Piece j < W - 1 of worker i is its D1 chunk j (coefficient 1); piece W - 1 + g is its message of
  /// D2 code g. Throws errc::out_of_range past the end.
  std::span<const std::size_t> piece_partitions(std::size_t worker, std::size_t piece) const {
    check_piece(worker, piece, "weft::coding::m_sgc::piece_partitions");
    return pieces_[worker][piece];
  }
  std::span<const double> piece_coefficients(std::size_t worker, std::size_t piece) const {
    check_piece(worker, piece, "weft::coding::m_sgc::piece_coefficients");
    return coefficients_[worker][piece];
  }

  std::uint64_t round() const noexcept { return round_; }
  std::size_t pending() const noexcept { return jobs_.size(); }

  /// Whether the master may leave `stragglers` behind this round with every job still decoding in
  /// time provided later rounds conform too: the pattern stays in the (B, W, lambda) model.
  bool tolerates(std::span<const std::size_t> stragglers) const { return history_.admits(stragglers); }

  /// Starts round r = round(): with start_job, job r begins. For every pending job t (slot
  /// m = r - t) each worker that still owes D1 chunks runs its lowest missing one; a worker with
  /// all of them runs its D2 task of code m - (W - 1) once m >= W - 1. Returns each worker's
  /// mini-tasks, oldest job first. Throws weft::error(precondition) when the previous round is open.
  const std::vector<std::vector<mini_task>>& begin_round(bool start_job = true) {
    expects(!open_, errc::precondition, "weft::coding::m_sgc::begin_round", "round ", round_,
            " was begun and not ended");
    const std::size_t n = num_workers();
    if (start_job) jobs_.emplace(round_, job_state(n, d1_, groups_));
    plan_.assign(n, {});
    for (auto& [id, job] : jobs_) {
      const std::size_t slot = static_cast<std::size_t>(round_ - id);
      for (std::size_t w = 0; w < n; ++w) {
        if (job.d1_count[w] < d1_) {
          std::size_t j = 0;
          while (job.d1_done[w * d1_ + j]) ++j;
          plan_[w].push_back({id, j});
        } else if (slot >= d1_ && slot - d1_ < groups_) {
          plan_[w].push_back({id, slot});  // piece d1_ + g with g = slot - d1_
        }
      }
    }
    open_ = true;
    return plan_;
  }

  /// Ends the round; `stragglers` delivered nothing. A job decodes once every D1 chunk is in and
  /// each D2 code has n - s results; a job whose last slot (start + T) has passed is missed.
  /// Throws weft::error(invalid_argument) naming a straggler out of range or repeated (the round
  /// stays open), weft::error(precondition) outside a round.
  sequential_round_report end_round(std::span<const std::size_t> stragglers) {
    constexpr const char* where = "weft::coding::m_sgc::end_round";
    expects(open_, errc::precondition, where, "no round is open; call begin_round first");
    detail::check_worker_set(stragglers, num_workers(), where, scratch_);
    for (std::size_t w = 0; w < num_workers(); ++w) {
      if (scratch_[w / 64] >> (w % 64) & 1) continue;
      for (const mini_task& t : plan_[w]) {
        auto& job = jobs_.at(t.job);
        if (t.piece < d1_) {
          job.d1_done[w * d1_ + t.piece] = 1;
          ++job.d1_count[w];
          if (job.d1_count[w] == d1_) ++job.d1_complete;
        } else {
          const std::size_t g = t.piece - d1_;
          job.d2_done[g * num_workers() + w] = 1;
          ++job.d2_count[g];
        }
      }
    }
    sequential_round_report out;
    out.round = round_;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (decodable(it->second)) {
        out.decoded.push_back(decode(it->first, it->second, where));
        it = jobs_.erase(it);
      } else if (it->first + delay() <= round_) {
        out.missed.push_back(it->first);
        it = jobs_.erase(it);
      } else {
        ++it;
      }
    }
    history_.push(stragglers);
    ++round_;
    open_ = false;
    return out;
  }

 private:
  void check_piece(std::size_t worker, std::size_t piece, const char* where) const {
    check_index(worker, pieces_.size(), where, "worker");
    check_index(piece, pieces_[worker].size(), where, "piece");
  }

  struct job_state {
    std::vector<char> d1_done;          // [w * (W-1) + j]: D1 chunk j of worker w arrived
    std::vector<std::size_t> d1_count;  // per worker
    std::size_t d1_complete = 0;        // workers with every D1 chunk in
    std::vector<char> d2_done;          // [g * n + w]
    std::vector<std::size_t> d2_count;  // per group
    job_state(std::size_t n, std::size_t d1, std::size_t groups)
        : d1_done(n * d1, 0), d1_count(n, 0), d2_done(n * groups, 0), d2_count(groups, 0) {}
  };

  static const bursty_straggler_model& checked(const bursty_straggler_model& m) {
    validate(m, "weft::coding::m_sgc");
    return m;
  }

  bool decodable(const job_state& job) const {
    if (job.d1_complete < num_workers()) return false;
    for (std::size_t g = 0; g < groups_; ++g)
      if (job.d2_count[g] + code_->stragglers() < num_workers()) return false;
    return true;
  }

  decoded_job decode(std::uint64_t id, const job_state& job, const char* where) const {
    decoded_job d{id, round_, {}};
    if (!opt_.build_decoders) return d;
    for (std::size_t w = 0; w < num_workers(); ++w)
      for (std::size_t j = 0; j < d1_; ++j) d.terms.push_back({w, j, 1.0});
    for (std::size_t g = 0; g < groups_; ++g) {
      std::vector<std::size_t> have;
      for (std::size_t w = 0; w < num_workers(); ++w)
        if (job.d2_done[g * num_workers() + w]) have.push_back(w);
      const auto dec = code_->try_decoder(have);
      expects(dec != nullptr, errc::precondition, where, "the D2 code cannot decode ", have.size(), " of ",
              num_workers(), " workers although it claims to tolerate s = ", code_->stragglers(), " stragglers");
      for (std::size_t i = 0; i < dec->survivors.size(); ++i)
        d.terms.push_back({dec->survivors[i], d1_ + g, dec->weights[i]});
    }
    return d;
  }

  bursty_straggler_model m_;
  sequential_options opt_;
  straggler_history history_;
  std::optional<Code> code_;  // present iff lambda < n
  std::size_t d1_ = 0;        // W - 1
  std::size_t groups_ = 0;    // B, or 0 when lambda = n
  std::size_t group_partitions_ = 0;
  std::size_t d2_load_ = 0;
  double chunk_size_ = 1.0;
  std::size_t n_partitions_ = 0;
  std::vector<std::vector<std::vector<std::size_t>>> pieces_;   // [worker][piece]: partitions
  std::vector<std::vector<std::vector<double>>> coefficients_;  // [worker][piece]
  std::map<std::uint64_t, job_state> jobs_;                     // pending jobs by start round
  std::vector<std::vector<mini_task>> plan_;
  std::uint64_t round_ = 0;
  bool open_ = false;
  mutable std::vector<std::uint64_t> scratch_;
};

/// M-SGC for a model with weft's hybrid repetition code for lambda stragglers in D2 (the paper
/// uses an (n, lambda) gradient code; hybrid repetition is one, well conditioned at any n). Throws
/// like m_sgc.
inline m_sgc<linear_code> make_m_sgc(const bursty_straggler_model& model, sequential_options options = {}) {
  validate(model, "weft::coding::make_m_sgc");
  std::optional<linear_code> code;
  if (model.lambda < model.n_workers) code = hybrid_repetition(model.n_workers, model.lambda);
  return m_sgc<linear_code>(model, std::move(code), options);
}

}  // namespace weft::coding

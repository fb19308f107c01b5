// SR-SGC, selective-reattempt sequential gradient coding (Krishnan, Ebrahimi, Khisti, "Sequential
// Gradient Coding for Straggler Mitigation", ICLR 2023): job t is coded across the workers in round
// t with an (n, s) gradient code, s = ceil(B lambda / (W - 1 + B)); if fewer than n - s results
// arrive, v - s of the v workers that did not deliver job t redo their job-t task in round t + B
// (instead of their job-(t+B) task), so job t decodes by round t + B (delay T = B) under the
// (B, W, lambda)-bursty straggler model. Needs B | (W - 1), as the paper's construction does.
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
#include <span>
#include <vector>

namespace weft::coding {

/// The s SR-SGC needs for a model: ceil(B lambda / (W - 1 + B)). Throws like validate(model) and
/// weft::error(invalid_argument) when B does not divide W - 1. O(1).
inline std::size_t sr_sgc_stragglers(const bursty_straggler_model& m) {
  constexpr const char* where = "weft::coding::sr_sgc";
  validate(m, where);
  expects((m.window - 1) % m.burst == 0, errc::invalid_argument, where, "SR-SGC needs B | (W - 1), but B = ", m.burst,
          " does not divide W - 1 = ", m.window - 1);
  const std::size_t den = m.window - 1 + m.burst;
  return (m.burst * m.lambda + den - 1) / den;
}

/// Not thread-safe (one owner, the master). begin_round O(n * pending jobs); end_round O(n * pending
/// jobs) plus one decoder lookup per decoded job; tolerates O(|stragglers| + n / 64).
template <gradient_code Code = linear_code>
class sr_sgc {
 public:
  /// model: the (B, W, lambda) straggler model the scheme is built for; code: an (n, s') gradient
  /// code with s' >= sr_sgc_stragglers(model) (it decodes from any n - s' results). Throws
  /// weft::error(invalid_argument) naming the values when the model breaks the paper's constraints
  /// (validate(), B | (W - 1)), options.max_delay < B, the code has another n, or tolerates too few
  /// stragglers.
  sr_sgc(const bursty_straggler_model& model, Code code, sequential_options options = {})
      : m_(model), s_(sr_sgc_stragglers(model)), code_(std::move(code)), opt_(options), history_(model) {
    constexpr const char* where = "weft::coding::sr_sgc";
    detail::check_delay(opt_, delay(), where, "B");
    expects(detail::num_workers_of(code_) == m_.n_workers, errc::invalid_argument, where,
            "the code has n = ", detail::num_workers_of(code_), " workers, the model n = ", m_.n_workers);
    expects(code_.stragglers() >= s_, errc::invalid_argument, where, "the code tolerates s = ", code_.stragglers(),
            " stragglers; SR-SGC with B = ", m_.burst, ", W = ", m_.window, ", lambda = ", m_.lambda,
            " needs s >= ceil(B lambda / (W - 1 + B)) = ", s_);
    s_ = code_.stragglers();
    for (std::size_t w = 0; w < num_workers(); ++w) {
      const auto held = code_.assignment(w);
      pieces_.emplace_back(held.begin(), held.end());
      coefficients_.emplace_back();
      for (std::size_t p : held) coefficients_.back().push_back(static_cast<double>(code_.coefficient(w, p)));
    }
  }

  const bursty_straggler_model& model() const noexcept { return m_; }
  std::size_t num_workers() const noexcept { return m_.n_workers; }
  [[deprecated("use num_workers()")]] std::size_t n_workers() const noexcept { return num_workers(); }
  /// T = B.
  std::size_t delay() const noexcept { return m_.burst; }
  const Code& code() const noexcept { return code_; }
  /// (s+1)/n for a cyclic or hybrid code: each worker runs one task of the code per round.
  double normalized_load() const {
    std::size_t load = 0;
    for (const auto& p : pieces_) load = std::max(load, p.size());
    return static_cast<double>(load) / static_cast<double>(code_.n_partitions());
  }
  std::size_t n_partitions() const { return code_.n_partitions(); }
  double partition_size(std::size_t) const noexcept { return 1.0; }
  std::size_t n_pieces() const noexcept { return 1; }
  std::span<const std::size_t> piece_partitions(std::size_t worker, std::size_t) const {
    check_index(worker, pieces_.size(), "weft::coding::sr_sgc::piece_partitions", "worker");
    return pieces_[worker];
  }
  std::span<const double> piece_coefficients(std::size_t worker, std::size_t) const {
    check_index(worker, coefficients_.size(), "weft::coding::sr_sgc::piece_coefficients", "worker");
    return coefficients_[worker];
  }

  std::uint64_t round() const noexcept { return round_; }
  /// Jobs started and neither decoded nor missed.
  std::size_t pending() const noexcept { return jobs_.size(); }

  /// Whether the master may leave `stragglers` behind this round with every job still decoding in
  /// time provided later rounds conform too: the pattern stays in the (B, W, lambda) model. A round
  /// with no reattempts and at most s stragglers is exempt (its job decodes at once and owes
  /// nothing), as in the authors' experiments. Call between begin_round and end_round.
  bool tolerates(std::span<const std::size_t> stragglers) const {
    detail::check_worker_set(stragglers, num_workers(), "weft::coding::sr_sgc::tolerates", scratch_);
    if (exempt(stragglers)) return true;
    return history_.admits(stragglers);
  }

  /// Starts round r = round(): the v - s lowest-numbered workers that owe job r - B (if it still
  /// cannot decode) redo it; with start_job every other worker runs its task of job r. Returns each
  /// worker's mini-tasks. Throws weft::error(precondition) when the previous round is still open.
  const std::vector<std::vector<mini_task>>& begin_round(bool start_job = true) {
    expects(!open_, errc::precondition, "weft::coding::sr_sgc::begin_round", "round ", round_,
            " was begun and not ended");
    const std::size_t n = num_workers();
    plan_.assign(n, {});
    reattempts_ = 0;
    std::vector<char> busy(n, 0);
    if (round_ >= m_.burst) {
      if (auto it = jobs_.find(round_ - m_.burst); it != jobs_.end()) {
        const std::size_t owing = n - it->second.count;
        std::size_t need = owing > s_ ? owing - s_ : 0;
        for (std::size_t w = 0; w < n && need > 0; ++w)
          if (!it->second.delivered[w]) {
            plan_[w].push_back({it->first, 0});
            busy[w] = 1;
            ++reattempts_;
            --need;
          }
      }
    }
    if (start_job) {
      jobs_.emplace(round_, job_state{std::vector<char>(n, 0), 0});
      for (std::size_t w = 0; w < n; ++w)
        if (!busy[w]) plan_[w].push_back({round_, 0});
    }
    open_ = true;
    return plan_;
  }

  /// Ends the round; `stragglers` delivered nothing. Jobs with n - s results decode; a job whose
  /// reattempt round (start + B) has passed without them is missed. Throws
  /// weft::error(invalid_argument) naming a straggler out of range or repeated (the round stays
  /// open), weft::error(precondition) outside a round.
  sequential_round_report end_round(std::span<const std::size_t> stragglers) {
    constexpr const char* where = "weft::coding::sr_sgc::end_round";
    expects(open_, errc::precondition, where, "no round is open; call begin_round first");
    detail::check_worker_set(stragglers, num_workers(), where, scratch_);
    const bool is_exempt = exempt(stragglers);
    for (std::size_t w = 0; w < num_workers(); ++w) {
      if (scratch_[w / 64] >> (w % 64) & 1) continue;
      for (const mini_task& t : plan_[w]) {
        auto& job = jobs_.at(t.job);
        if (!job.delivered[w]) {
          job.delivered[w] = 1;
          ++job.count;
        }
      }
    }
    sequential_round_report out;
    out.round = round_;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->second.count + s_ >= num_workers()) {
        out.decoded.push_back(decode(it->first, it->second, where));
        it = jobs_.erase(it);
      } else if (it->first + m_.burst <= round_) {
        out.missed.push_back(it->first);
        it = jobs_.erase(it);
      } else {
        ++it;
      }
    }
    history_.push(is_exempt ? std::span<const std::size_t>{} : stragglers);
    ++round_;
    open_ = false;
    return out;
  }

 private:
  struct job_state {
    std::vector<char> delivered;  // per worker: its job result has arrived
    std::size_t count = 0;
  };

  bool exempt(std::span<const std::size_t> stragglers) const noexcept {
    return reattempts_ == 0 && stragglers.size() <= s_;
  }

  decoded_job decode(std::uint64_t id, const job_state& job, const char* where) const {
    decoded_job d{id, round_, {}};
    if (!opt_.build_decoders) return d;
    std::vector<std::size_t> have;
    for (std::size_t w = 0; w < num_workers(); ++w)
      if (job.delivered[w]) have.push_back(w);
    const auto dec = code_.try_decoder(have);
    expects(dec != nullptr, errc::precondition, where, "the code cannot decode ", have.size(), " of ", num_workers(),
            " workers although it claims to tolerate s = ", s_, " stragglers");
    for (std::size_t i = 0; i < dec->survivors.size(); ++i) d.terms.push_back({dec->survivors[i], 0, dec->weights[i]});
    return d;
  }

  bursty_straggler_model m_;
  std::size_t s_;  // the code's tolerance (>= ceil(B lambda / (W - 1 + B)))
  Code code_;
  sequential_options opt_;
  straggler_history history_;  // the rounds that count against the model (exempt rounds as empty)
  std::vector<std::vector<std::size_t>> pieces_;
  std::vector<std::vector<double>> coefficients_;
  std::map<std::uint64_t, job_state> jobs_;  // pending jobs by start round
  std::vector<std::vector<mini_task>> plan_;
  std::size_t reattempts_ = 0;  // workers redoing an old job this round
  std::uint64_t round_ = 0;
  bool open_ = false;
  mutable std::vector<std::uint64_t> scratch_;
};

/// SR-SGC for a model with weft's hybrid repetition code for s = ceil(B lambda / (W - 1 + B))
/// (well conditioned at any n; cyclic_repetition is the paper's). Throws like sr_sgc.
inline sr_sgc<linear_code> make_sr_sgc(const bursty_straggler_model& model, sequential_options options = {}) {
  const std::size_t s = sr_sgc_stragglers(model);
  expects(s < model.n_workers, errc::invalid_argument, "weft::coding::make_sr_sgc", "SR-SGC with B = ", model.burst,
          ", W = ", model.window, ", lambda = ", model.lambda, " needs s = ", s, " >= n = ", model.n_workers);
  return sr_sgc<linear_code>(model, hybrid_repetition(model.n_workers, s), options);
}

}  // namespace weft::coding

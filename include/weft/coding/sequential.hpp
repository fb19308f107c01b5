// Sequential gradient coding (after Krishnan, Ebrahimi, Khisti, "Sequential Gradient Coding for
// Straggler Mitigation", ICLR 2023): a new gradient job starts every round and must be decoded
// within T further rounds. Each job is encoded with a gradient code; the coded tasks a straggler
// left unfinished are carried over and repeated by that worker in later rounds (the selective
// reattempt idea of the paper's SR-SGC), so a code for fewer stragglers suffices when straggling is
// bursty. The code for each new job is chosen adaptively by replaying the recent straggler pattern
// through this scheduler. T = 0 is classic gradient coding. This is weft's adaptive scheduler; the
// paper's own schemes are sr_sgc.hpp (SR-SGC) and m_sgc.hpp (M-SGC).
#pragma once

#include <weft/coding/concepts.hpp>
#include <weft/core/checked.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <vector>

namespace weft::coding {

/// One unit of work in a round: compute your coded message for job `job` with code `code_index`.
struct sequential_task {
  std::uint64_t job = 0;
  std::size_t code_index = 0;
  bool reattempt = false;  ///< carried over from an earlier round
};

/// What a round settled.
struct round_outcome {
  std::vector<std::uint64_t> decoded;  ///< jobs that became decodable this round
  std::vector<std::uint64_t> missed;   ///< jobs whose deadline (start + T) passed undecoded
};

/// Round-by-round planner for sequential gradient coding over a family of codes for the same n,
/// ordered from least to most redundant (e.g. cyclic or hybrid repetition for s = 0, 1, 2, ...).
/// Not thread-safe (one owner, the master). begin_round O(n * pending jobs + window^2 * codes *
/// decoder lookup); end_round O(n * pending jobs + decoder lookup per pending job).
template <gradient_code Code>
class sequential_coder {
 public:
  /// family: codes for the same n workers, least redundant first; deadline T >= 0 rounds; window:
  /// how many past rounds the adaptive choice replays; max_reattempts: carried-over tasks a worker
  /// may take per round on top of its new task. Throws weft::error(invalid_argument) naming the
  /// values when the family is empty or its codes disagree on n.
  explicit sequential_coder(std::vector<Code> family, std::size_t deadline, std::size_t window = 16,
                            std::size_t max_reattempts = 1)
      : family_(std::move(family)), t_(deadline), window_(window), max_reattempts_(max_reattempts) {
    constexpr const char* where = "weft::coding::sequential_coder::sequential_coder";
    expects(!family_.empty(), errc::invalid_argument, where, "the family of codes is empty");
    for (std::size_t c = 0; c < family_.size(); ++c)
      expects(detail::num_workers_of(family_[c]) == detail::num_workers_of(family_[0]), errc::invalid_argument, where,
              "code ", c, " has n = ", detail::num_workers_of(family_[c]),
              " workers, code 0 has n = ", detail::num_workers_of(family_[0]));
    expects(window_ >= 1, errc::invalid_argument, where, "window must be >= 1 round, got ", window_);
  }

  std::size_t num_workers() const { return detail::num_workers_of(family_[0]); }
  [[deprecated("use num_workers()")]] std::size_t n_workers() const { return num_workers(); }
  std::size_t deadline() const noexcept { return t_; }
  std::uint64_t round() const noexcept { return round_; }
  const Code& code(std::size_t index) const {
    check_index(index, family_.size(), "weft::coding::sequential_coder::code", "code index");
    return family_[index];
  }

  /// Starts round r = round(): job r begins with an adaptively chosen code, and pending jobs get
  /// their missing tasks reassigned to the workers that owe them. Returns the tasks per worker.
  /// Throws weft::error(precondition) when the previous round was not ended.
  const std::vector<std::vector<sequential_task>>& begin_round() {
    expects(!in_round_, errc::precondition, "weft::coding::sequential_coder::begin_round", "round ", round_,
            " was begun and not ended");
    const std::size_t n = num_workers();
    plan_.assign(n, {});
    job_state job;
    job.code_index = choose_code();
    job.delivered.assign(n, 0);
    jobs_.emplace(round_, job);
    for (std::size_t w = 0; w < n; ++w) plan_[w].push_back({round_, job.code_index, false});
    for (auto& [id, state] : jobs_) {
      if (id == round_) continue;
      for (std::size_t w = 0; w < n; ++w)
        if (!state.delivered[w] && count_reattempts(w) < max_reattempts_)
          plan_[w].push_back({id, state.code_index, true});
    }
    in_round_ = true;
    return plan_;
  }

  /// Ends the round: workers in `finished` delivered every task planned for them; the rest
  /// straggled and delivered nothing. Throws weft::error(invalid_argument) naming a worker that is
  /// out of range (the round stays open then), and weft::error(precondition) outside a round.
  round_outcome end_round(std::span<const std::size_t> finished) {
    constexpr const char* where = "weft::coding::sequential_coder::end_round";
    expects(in_round_, errc::precondition, where, "no round is open; call begin_round first");
    const std::size_t n = num_workers();
    for (std::size_t w : finished)
      expects(w < n, errc::invalid_argument, where, "worker ", w, " is out of range for n = ", n);
    std::vector<char> ok(n, 0);
    for (std::size_t w : finished) ok[w] = 1;
    for (std::size_t w = 0; w < n; ++w)
      if (ok[w])
        for (const auto& task : plan_[w]) jobs_.at(task.job).delivered[w] = 1;
    round_outcome out;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (decodable(it->second)) {
        out.decoded.push_back(it->first);
        it = jobs_.erase(it);
      } else if (it->first + t_ <= round_) {
        out.missed.push_back(it->first);
        it = jobs_.erase(it);
      } else {
        ++it;
      }
    }
    history_.push_back(std::move(ok));
    if (history_.size() > window_) history_.pop_front();
    ++round_;
    in_round_ = false;
    return out;
  }

  /// The code index the next job would get: the least redundant code under which every job of the
  /// remembered rounds whose deadline is also remembered would have decoded in time, replaying the
  /// scheduler itself (a new job every round, each worker reattempting at most max_reattempts of the
  /// jobs it owes per round, oldest first). With fewer remembered rounds than T + 1, the job of the
  /// first remembered round must decode within them. O(window^2 * n * codes * decoder lookup).
  std::size_t choose_code() const {
    if (history_.empty()) return family_.size() - 1;
    for (std::size_t c = 0; c < family_.size(); ++c)
      if (replay(c)) return c;
    return family_.size() - 1;
  }

  /// Pending jobs (started, not yet decoded or missed). O(1).
  std::size_t pending() const noexcept { return jobs_.size(); }

 private:
  struct job_state {
    std::size_t code_index = 0;
    std::vector<char> delivered;  // per worker: its coded message for this job has arrived
  };

  std::size_t count_reattempts(std::size_t w) const {
    return static_cast<std::size_t>(
        std::count_if(plan_[w].begin(), plan_[w].end(), [](const sequential_task& t) { return t.reattempt; }));
  }

  bool decodable(const job_state& job) const {
    std::vector<std::size_t> have;
    for (std::size_t w = 0; w < job.delivered.size(); ++w)
      if (job.delivered[w]) have.push_back(w);
    if (have.empty()) return false;
    return family_[job.code_index].try_decoder(have) != nullptr;
  }

  // Replays the remembered rounds with code c for every job, planning reattempts as begin_round
  // does (at most max_reattempts per worker and round, oldest job first). False when a job whose
  // deadline lies inside the remembered rounds misses it.
  bool replay(std::size_t c) const {
    const std::size_t n = num_workers(), rounds = history_.size();
    std::deque<job_state> pending;  // in start order; code_index holds the start round here
    for (std::size_t r = 0; r < rounds; ++r) {
      pending.push_back({r, std::vector<char>(n, 0)});
      for (std::size_t w = 0; w < n; ++w) {
        if (!history_[r][w]) continue;  // straggled: delivered nothing this round
        pending.back().delivered[w] = 1;
        std::size_t reattempts = 0;
        for (std::size_t j = 0; j + 1 < pending.size() && reattempts < max_reattempts_; ++j)
          if (!pending[j].delivered[w]) {
            pending[j].delivered[w] = 1;
            ++reattempts;
          }
      }
      for (auto it = pending.begin(); it != pending.end();) {
        const std::size_t start = it->code_index;
        if (decodable_with(c, *it)) {
          it = pending.erase(it);
        } else if (start + t_ <= r) {
          return false;  // its deadline (start + T <= r < rounds) is inside the window
        } else {
          ++it;
        }
      }
    }
    // No job's deadline fits in the window: the first job must at least decode within it.
    if (rounds <= t_) return pending.empty() || pending.front().code_index != 0;
    return true;
  }

  bool decodable_with(std::size_t c, const job_state& job) const {
    std::vector<std::size_t> have;
    for (std::size_t w = 0; w < job.delivered.size(); ++w)
      if (job.delivered[w]) have.push_back(w);
    return !have.empty() && family_[c].try_decoder(have) != nullptr;
  }

  std::vector<Code> family_;  // invariant: non-empty, all the same n
  std::size_t t_;
  std::size_t window_;
  std::size_t max_reattempts_;
  std::uint64_t round_ = 0;
  bool in_round_ = false;
  std::map<std::uint64_t, job_state> jobs_;         // pending jobs by start round
  std::deque<std::vector<char>> history_;           // finished-worker flags of recent rounds
  std::vector<std::vector<sequential_task>> plan_;  // this round's tasks per worker
};

}  // namespace weft::coding

// Coded allreduce: gradient coding (Tandon et al., ICML 2017) without a master. Every rank is a
// worker holding one coded message. The ranks agree on the survivor set F through one small
// collective (ready notices to a coordinating rank's service threads, the decision back to every
// rank), each survivor scales its message by its decoder weight for F, and the survivors allreduce
// over weft::comm: every survivor ends with the decoded gradient, bit-identical, and a late rank is
// excluded on every rank alike and receives the same bits from the first survivor. Opt-in: this
// header pulls in weft::comm's collectives; <weft/coding.hpp> does not include it.
#pragma once

#include <weft/coding/concepts.hpp>
#include <weft/coding/decoder.hpp>
#include <weft/comm/allreduce.hpp>
#include <weft/comm/concepts.hpp>
#include <weft/comm/group_view.hpp>
#include <weft/core/error.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace weft::coding {

/// Options of a coded allreduce group; every rank must pass the same values.
struct coded_allreduce_options {
  /// First of the channels used: channel (the allreduce), + 1 (decisions), + 2 (results sent to
  /// excluded ranks), and from + 8 three zero-byte notice channels per step (ready, request, result
  /// coming), wrapping after 2^20 steps. Keep [channel, channel + 8 + 3 * 2^20) free.
  std::uint32_t channel = 0x47430100u;
  int coordinator = 0;  ///< the rank whose service threads decide F
  /// After the first ready notice of a step, how long the coordinator waits for the others before
  /// deciding with a decodable set of whoever is ready (everyone ready decides at once).
  std::chrono::microseconds patience{20'000};
  /// A decodable set must form within this of a step's first ready notice, and the allreduce and a
  /// forwarded result within this of the decision, or the step fails with weft::error(timeout); a
  /// rank waits up to twice this for the decision itself (the coordinator's verdict comes first).
  std::chrono::milliseconds timeout{60'000};
  /// Give the decoded gradient to the ranks left out: the first survivor keeps it, and a service
  /// thread sends it when the late rank asks (so survivors never wait for it). Off: an excluded
  /// rank's output is left untouched.
  bool forward_to_excluded = true;
  /// The survivors' allreduce (algorithm, segment size); its channel and timeout are set from the above.
  weft::comm::options reduce{};
};

/// What one step did on this rank.
struct coded_allreduce_report {
  std::uint64_t step = 0;
  bool included = true;                ///< this rank's message was part of the decode
  std::vector<std::size_t> survivors;  ///< F, the same on every rank
  double residual = 0;                 ///< the decoder's residual (0 for an exact decode)
  std::chrono::nanoseconds agree{0};   ///< from the call to knowing F
  std::chrono::nanoseconds reduce{0};  ///< scaling and allreduce, or receiving the forwarded result
};

/// One rank's end of a coded allreduce group over a concurrent weft::comm transport: worker w of the
/// code is rank w (the code has transport.size() workers). Every rank calls reduce() once per step,
/// from one thread at a time; steps are numbered by the calls. Each rank has one service thread: on
/// the coordinator it collects ready notices, decides and sends the decisions; on the first
/// survivor of a step that left ranks out it answers their requests for the result. A lock (the
/// gate) keeps this object's transport calls on one thread at a time and the caller holds it
/// through the allreduce, so no service work competes with the data (weft::comm's byte-stream
/// transports can delay a blocked receiver by up to 50 ms when another thread completes its
/// receive). Notices are zero-byte messages on per-step channels, so polling for them with
/// receives that return at once can never cut a message in half. The service thread polls every
/// 0.5 ms while it coordinates or holds results and sleeps otherwise. The destructor first waits
/// until the ranks it holds results for have asked for them (a result is dropped 2 x timeout after
/// its step), then joins. The object needs the transport to itself while it lives: on weft::comm's
/// byte-stream transports (shm, tcp) a receive that gives up at its deadline can lose a message
/// that another thread's receive completed for it in the same instant, so run your other
/// collectives on a second transport over the same ranks. The transport must outlive the object.
/// reduce: O(dim) plus the allreduce over |F| ranks, one decoder lookup and two small messages.
template <weft::comm::concurrent_transport T, gradient_code Code>
class coded_allreduce {
 public:
  /// Throws weft::error(invalid_argument) naming the values when the code's n differs from the
  /// group size, dim is 0, the coordinator is not a rank, patience is negative or timeout not positive.
  coded_allreduce(T& transport, Code code, std::size_t dim, coded_allreduce_options options = {})
      : t_(transport), code_(std::move(code)), dim_(dim), opt_(options) {
    constexpr const char* where = "weft::coding::coded_allreduce";
    n_ = static_cast<std::size_t>(t_.size());
    rank_ = static_cast<std::size_t>(t_.rank());
    expects(detail::num_workers_of(code_) == n_, errc::invalid_argument, where,
            "the code has n = ", detail::num_workers_of(code_), " workers but the group has ", n_,
            " ranks (worker w is rank w)");
    expects(dim_ > 0, errc::invalid_argument, where, "dim must be positive");
    expects(opt_.coordinator >= 0 && static_cast<std::size_t>(opt_.coordinator) < n_, errc::invalid_argument, where,
            "coordinator ", opt_.coordinator, " is not a rank of the group of ", n_);
    expects(opt_.patience.count() >= 0 && opt_.timeout.count() > 0, errc::invalid_argument, where,
            "patience must be >= 0 and timeout positive, got ", opt_.patience.count(), " us and ", opt_.timeout.count(),
            " ms");
    words_ = (n_ + 63) / 64;
    dead_.assign(n_, 0);
    service_ = std::thread([this] { serve(); });
  }
  coded_allreduce(const coded_allreduce&) = delete;
  coded_allreduce& operator=(const coded_allreduce&) = delete;
  ~coded_allreduce() {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return kept_.empty(); });  // the service thread drops expired results
      stop_ = true;
    }
    cv_.notify_all();
    service_.join();
  }

  std::size_t num_workers() const noexcept { return n_; }
  [[deprecated("use num_workers()")]] std::size_t n_workers() const noexcept { return num_workers(); }
  const Code& code() const noexcept { return code_; }
  /// Steps done so far (the next reduce() is this step).
  std::uint64_t steps() const noexcept { return next_step_; }

  /// One step: `message` is this rank's coded message (encode(code, rank, partials, message)); out
  /// receives the decoded gradient. Throws weft::error(invalid_argument) for a size other than
  /// dim; weft::error(timeout) naming the step when no decodable set forms, or the decision,
  /// allreduce or result does not arrive, in time; the transport's errors (peer_failure, aborted)
  /// as they come. A peer that fails before the decision is never a survivor.
  coded_allreduce_report reduce(std::span<const float> message, std::span<float> out) {
    constexpr const char* where = "weft::coding::coded_allreduce::reduce";
    expects(message.size() == dim_ && out.size() == dim_, errc::invalid_argument, where, "message has ", message.size(),
            " and out ", out.size(), " floats; the group carries dim = ", dim_);
    const std::uint64_t step = next_step_++;
    const auto start = weft::comm::clock_type::now();
    coded_allreduce_report rep;
    rep.step = step;
    // 1. Ready, then the decision. The coordinator fails a step `timeout` after its first ready
    // notice; waiting twice as long for the decision leaves room for that verdict to arrive.
    const auto decision_until = start + 2 * opt_.timeout;
    decision d;
    if (is_coordinator()) {
      mark_ready(step, rank_);
      d = local_decision(step, decision_until, where);
    } else {
      {
        std::lock_guard gate(gate_);
        t_.send(opt_.coordinator, notice(step, ready_kind), {}, decision_until);
      }
      // Not under the gate: this rank's service thread may have to answer a late rank meanwhile,
      // and that late rank may be the one the next decision waits for.
      d = remote_decision(step, decision_until, where);
    }
    rep.agree = weft::comm::clock_type::now() - start;
    expects(d.ok, errc::timeout, where, "rank ", rank_, ": step ", step, " found no decodable set within ",
            opt_.timeout.count(), " ms (", d.survivors.size(), " of ", n_, " ranks were ready)");
    rep.survivors = d.survivors;
    const auto dec = code_.try_decoder(d.survivors);
    expects(dec != nullptr, errc::precondition, where, "the code cannot decode the agreed survivor set");
    rep.residual = dec->residual;
    const auto reduce_start = weft::comm::clock_type::now();
    const auto until = reduce_start + opt_.timeout;
    const auto pos = std::find(d.survivors.begin(), d.survivors.end(), rank_);
    rep.included = pos != d.survivors.end();
    if (rep.included) {
      // 2. Scale by this rank's decoder weight, 3. allreduce over the survivors.
      const double a = dec->weights[static_cast<std::size_t>(pos - d.survivors.begin())];
      for (std::size_t e = 0; e < dim_; ++e) out[e] = static_cast<float>(a * static_cast<double>(message[e]));
      std::vector<int> members(d.survivors.begin(), d.survivors.end());
      weft::comm::group_view<T> group(t_, std::move(members));
      weft::comm::options ro = opt_.reduce;
      ro.channel = opt_.channel;
      ro.timeout = opt_.timeout;
      {
        std::lock_guard gate(gate_);
        weft::comm::allreduce(group, out, weft::op::sum{}, ro);
      }
      if (opt_.forward_to_excluded && d.survivors.front() == rank_ && d.survivors.size() < n_) keep(step, out, d);
    } else if (opt_.forward_to_excluded) {
      fetch(step, static_cast<int>(d.survivors.front()), out, until, where);
    }
    rep.reduce = weft::comm::clock_type::now() - reduce_start;
    return rep;
  }

 private:
  static constexpr std::uint32_t check_notice = 0x4e4f5449u, check_decision = 0x44454349u, check_forward = 0x46575244u;
  static constexpr std::uint32_t ready_kind = 0, pull_kind = 1, coming_kind = 2;
  static constexpr std::uint64_t notice_period = std::uint64_t{1} << 20;  // step channels wrap after this
  static constexpr auto sweep = std::chrono::microseconds(500);           // the service thread's polling period
  static constexpr auto spin = std::chrono::microseconds(200);            // the caller's, waiting for a notice

  struct decision {
    bool ok = false;
    std::vector<std::size_t> survivors;  // ok: F; failed: the ranks that were ready
  };
  struct step_state {
    std::vector<char> ready;
    std::size_t count = 0;
    weft::comm::clock_type::time_point first{};
  };
  struct kept_result {
    std::shared_ptr<const std::vector<std::byte>> bytes;  // the decoded gradient
    weft::comm::deadline expires;
  };

  bool is_coordinator() const noexcept { return rank_ == static_cast<std::size_t>(opt_.coordinator); }
  weft::comm::msg_tag notice(std::uint64_t step, std::uint32_t kind) const noexcept {
    return {opt_.channel + 8 + 3 * static_cast<std::uint32_t>(step % notice_period) + kind, check_notice};
  }
  weft::comm::msg_tag decision_tag() const noexcept { return {opt_.channel + 1, check_decision}; }
  weft::comm::msg_tag forward_tag() const noexcept { return {opt_.channel + 2, check_forward}; }
  std::size_t decision_bytes() const noexcept { return 2 * sizeof(std::uint64_t) + words_ * sizeof(std::uint64_t); }

  // A zero-byte notice received at once, or false. A zero-byte message is whole once its header
  // is, so giving up right away never loses part of one.
  bool try_notice(int peer, weft::comm::msg_tag tg) {
    try {
      t_.recv(peer, tg, {}, weft::comm::clock_type::now());
      return true;
    } catch (const weft::error& e) {
      if (e.code() == errc::timeout) return false;
      throw;
    }
  }

  // --- coordinator ---------------------------------------------------------------------------

  void mark_ready(std::uint64_t step, std::size_t who) {
    {
      std::lock_guard lock(mu_);
      if (decided_through_ && step <= *decided_through_) return;  // late: F is already decided
      auto& s = steps_[step];
      if (s.ready.empty()) {
        s.ready.assign(n_, 0);
        s.first = weft::comm::clock_type::now();
      }
      if (!s.ready[who]) {
        s.ready[who] = 1;
        ++s.count;
      }
    }
    cv_.notify_all();
  }

  decision local_decision(std::uint64_t step, weft::comm::deadline until, const char* where) {
    std::unique_lock lock(mu_);
    const bool got = cv_.wait_until(lock, until, [&] { return local_.count(step) > 0; });
    expects(got, errc::timeout, where, "rank ", rank_, ": no decision for step ", step, " within ",
            2 * opt_.timeout.count(), " ms");
    decision d = std::move(local_.at(step));
    local_.erase(step);
    return d;
  }

  // Decides the next step: at once when every rank is ready, `patience` after the first ready
  // notice when the ready set decodes, as a failure `timeout` after it. mu_ held.
  std::optional<std::pair<std::uint64_t, decision>> decide() {
    const std::uint64_t step = decided_through_ ? *decided_through_ + 1 : 0;
    auto it = steps_.find(step);
    if (it == steps_.end()) return std::nullopt;
    step_state& s = it->second;
    const auto now = weft::comm::clock_type::now();
    std::vector<std::size_t> ready;
    for (std::size_t w = 0; w < n_; ++w)
      if (s.ready[w]) ready.push_back(w);
    decision d;
    bool decided = false;
    if ((s.count == n_ || now >= s.first + opt_.patience) && code_.try_decoder(ready) != nullptr) d.ok = decided = true;
    if (!decided && now >= s.first + opt_.timeout) decided = true;  // a failure: d.ok stays false
    if (!decided) return std::nullopt;
    for (std::size_t w = 0; w < n_; ++w)
      if (!s.ready[w]) stale_.emplace_back(w, step);  // its ready notice is still to come: drain it
    d.survivors = std::move(ready);
    decided_through_ = step;
    local_.emplace(step, d);
    steps_.erase(it);
    return std::make_pair(step, std::move(d));
  }

  void broadcast(std::uint64_t step, const decision& d) {
    std::vector<std::byte> buf(decision_bytes(), std::byte{0});
    const std::uint64_t ok = d.ok ? 1 : 0;
    std::vector<std::uint64_t> bits(words_, 0);
    for (std::size_t w : d.survivors) bits[w / 64] |= std::uint64_t{1} << (w % 64);
    std::memcpy(buf.data(), &step, sizeof step);
    std::memcpy(buf.data() + sizeof step, &ok, sizeof ok);
    std::memcpy(buf.data() + 2 * sizeof step, bits.data(), words_ * sizeof(std::uint64_t));
    for (std::size_t q = 0; q < n_; ++q) {
      if (q == rank_) continue;
      try {
        t_.send(static_cast<int>(q), decision_tag(), buf, weft::comm::clock_type::now() + opt_.timeout);
      } catch (const weft::error&) {
        // A rank that is gone cannot be told; the others still are.
      }
    }
  }

  // Ready notices of the step being decided, and late ones of decided steps (drained so they never
  // pile up). Under the gate.
  void poll_ready() {
    std::uint64_t step;
    {
      std::lock_guard lock(mu_);
      step = decided_through_ ? *decided_through_ + 1 : 0;
    }
    for (std::size_t q = 0; q < n_; ++q) {
      if (q == rank_ || dead_[q]) continue;
      try {
        if (try_notice(static_cast<int>(q), notice(step, ready_kind))) mark_ready(step, q);
      } catch (const weft::error&) {
        dead_[q] = 1;  // a failed link: q is never ready again
      }
    }
    for (auto it = stale_.begin(); it != stale_.end();) {
      bool drop = it->first == rank_ || dead_[it->first] != 0;
      try {
        drop = drop || try_notice(static_cast<int>(it->first), notice(it->second, ready_kind));
      } catch (const weft::error&) {
        drop = true;
      }
      it = drop ? stale_.erase(it) : std::next(it);
    }
  }

  // --- every rank ----------------------------------------------------------------------------

  decision remote_decision(std::uint64_t step, weft::comm::deadline until, const char* where) {
    std::vector<std::byte> buf(decision_bytes());
    t_.recv(opt_.coordinator, decision_tag(), buf, until);
    std::uint64_t got = 0, ok = 0;
    std::memcpy(&got, buf.data(), sizeof got);
    std::memcpy(&ok, buf.data() + sizeof got, sizeof ok);
    // Decisions go out in step order and this rank asks in step order, so the next one is ours.
    expects(got == step, errc::mismatch, where, "rank ", rank_, " expected the decision of step ", step,
            " but the coordinator sent step ", got);
    std::vector<std::uint64_t> bits(words_);
    std::memcpy(bits.data(), buf.data() + 2 * sizeof got, words_ * sizeof(std::uint64_t));
    decision d;
    d.ok = ok != 0;
    for (std::size_t w = 0; w < n_; ++w)
      if (bits[w / 64] >> (w % 64) & 1) d.survivors.push_back(w);
    return d;
  }

  // An excluded rank asks the first survivor for the result and polls for the notice that it is
  // coming (releasing the gate in between, so this rank's service thread keeps working: when this
  // rank coordinates, the survivor's caller may be waiting for its next decision), then receives it.
  void fetch(std::uint64_t step, int first, std::span<float> out, weft::comm::deadline until, const char* where) {
    {
      std::lock_guard gate(gate_);
      t_.send(first, notice(step, pull_kind), {}, until);
    }
    for (;;) {
      {
        std::lock_guard gate(gate_);
        if (try_notice(first, notice(step, coming_kind))) {
          t_.recv(first, forward_tag(), std::as_writable_bytes(out), weft::comm::clock_type::now() + opt_.timeout);
          return;
        }
      }
      expects(weft::comm::clock_type::now() < until + opt_.timeout, errc::timeout, where, "rank ", rank_,
              ": the result of step ", step, " did not come from rank ", first, " in time");
      std::this_thread::sleep_for(spin);
    }
  }

  // The first survivor keeps the result for each excluded rank until it asks (or the timeout).
  void keep(std::uint64_t step, std::span<const float> out, const decision& d) {
    auto bytes = std::make_shared<std::vector<std::byte>>(dim_ * sizeof(float));
    std::memcpy(bytes->data(), out.data(), dim_ * sizeof(float));
    {
      std::lock_guard lock(mu_);
      for (std::size_t q = 0; q < n_; ++q)
        if (!std::binary_search(d.survivors.begin(), d.survivors.end(), q))
          kept_[q].emplace(step, kept_result{bytes, weft::comm::clock_type::now() + 2 * opt_.timeout});
    }
    cv_.notify_all();
  }

  // Answers rank q's requests for kept results: the notice, then the result (q is reading now).
  // Under the gate.
  void answer(std::size_t q, const std::vector<std::uint64_t>& steps) {
    for (std::uint64_t step : steps) {
      try {
        if (!try_notice(static_cast<int>(q), notice(step, pull_kind))) continue;
        std::shared_ptr<const std::vector<std::byte>> bytes;
        {
          std::lock_guard lock(mu_);
          if (auto it = kept_.find(q); it != kept_.end()) {
            if (auto k = it->second.find(step); k != it->second.end()) {
              bytes = k->second.bytes;
              it->second.erase(k);
            }
            if (it->second.empty()) kept_.erase(it);
          }
        }
        if (!bytes) continue;
        const auto until = weft::comm::clock_type::now() + opt_.timeout;
        t_.send(static_cast<int>(q), notice(step, coming_kind), {}, until);
        t_.send(static_cast<int>(q), forward_tag(), *bytes, until);
      } catch (const weft::error&) {
        std::lock_guard lock(mu_);
        kept_.erase(q);  // gone or stuck: it reports its own timeout
        break;
      }
    }
    cv_.notify_all();  // the destructor may wait for kept_ to empty
  }

  // The service thread. Every transport call under the gate.
  void serve() {
    std::unique_lock lock(mu_);
    for (;;) {
      const auto now = weft::comm::clock_type::now();
      bool dropped = false;
      for (auto it = kept_.begin(); it != kept_.end();) {  // drop results nobody asked for in time
        for (auto k = it->second.begin(); k != it->second.end();)
          if (k->second.expires < now) {
            k = it->second.erase(k);
            dropped = true;
          } else {
            ++k;
          }
        it = it->second.empty() ? kept_.erase(it) : std::next(it);
      }
      if (dropped) cv_.notify_all();
      if (stop_) return;
      const bool coordinating = is_coordinator();
      if (!coordinating && kept_.empty()) {
        cv_.wait(lock, [&] { return stop_ || !kept_.empty(); });
        continue;
      }
      std::vector<std::pair<std::size_t, std::vector<std::uint64_t>>> owed;
      for (const auto& [q, results] : kept_) {
        owed.emplace_back(q, std::vector<std::uint64_t>{});
        for (const auto& r : results) owed.back().second.push_back(r.first);
      }
      lock.unlock();
      {
        std::lock_guard gate(gate_);
        if (coordinating) poll_ready();
        for (const auto& [q, steps] : owed) answer(q, steps);
        if (coordinating) {
          for (;;) {
            std::optional<std::pair<std::uint64_t, decision>> decided;
            {
              std::lock_guard l(mu_);
              decided = decide();
            }
            if (!decided) break;
            cv_.notify_all();
            broadcast(decided->first, decided->second);
          }
        }
      }
      lock.lock();
      cv_.wait_for(lock, sweep);  // a local ready notice or stop wakes it sooner
    }
  }

  T& t_;
  Code code_;
  std::size_t dim_;
  coded_allreduce_options opt_;
  std::size_t n_ = 0, rank_ = 0, words_ = 0;
  std::uint64_t next_step_ = 0;  // the caller's
  std::mutex gate_;              // held around every transport call of this object
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                                                 // guarded by mu_
  std::map<std::uint64_t, step_state> steps_;                         // coordinator: undecided steps
  std::optional<std::uint64_t> decided_through_;                      // coordinator: decided up to here
  std::map<std::uint64_t, decision> local_;                           // coordinator: decisions for its caller
  std::map<std::size_t, std::map<std::uint64_t, kept_result>> kept_;  // results kept for excluded ranks
  std::vector<char> dead_;                                            // service thread only: failed links
  std::vector<std::pair<std::size_t, std::uint64_t>> stale_;          // service thread only: notices to drain
  std::thread service_;
};

}  // namespace weft::coding

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
#include <deque>
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
  /// First of the channels used: channel (the allreduce), + 1 (decisions), + 2 (results forwarded
  /// to excluded ranks), + 3 + r (ready notices of rank r). Keep [channel, channel + 3 + n) free.
  std::uint32_t channel = 0x47430100u;
  int coordinator = 0;  ///< the rank whose service threads decide F
  /// After the first ready notice of a step, how long the coordinator waits for the others before
  /// deciding with a decodable set of whoever is ready (everyone ready decides at once).
  std::chrono::microseconds patience{20'000};
  /// A decodable set must form within this of a step's first ready notice, and the allreduce and a
  /// forwarded result within this of the decision, or the step fails with weft::error(timeout); a
  /// rank waits up to twice this for the decision itself (the coordinator's verdict comes first).
  std::chrono::milliseconds timeout{60'000};
  /// Send the decoded gradient to the ranks left out (from the first survivor, on a background
  /// thread, so survivors do not wait for them). Off: an excluded rank's output is left untouched.
  bool forward_to_excluded = true;
  /// The survivors' allreduce (algorithm, segment size); its channel and timeout are set from the above.
  weft::comm::options reduce{};
  /// How often the service threads look up from a blocking receive (only shutdown waits for it).
  std::chrono::milliseconds poll{20};
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
/// code is rank w (the code has transport.size() workers). reduce() is called by one thread at a
/// time with increasing steps; the object runs service threads (on the coordinator one per peer
/// plus a decider, on every rank a forwarder started when first needed) and joins them on
/// destruction, which first finishes pending forwards (each bounded by the timeout). The transport
/// must outlive it. reduce: O(dim) plus the allreduce over |F| ranks, one decoder lookup, and two
/// small messages (ready, decision).
template <weft::comm::concurrent_transport T, gradient_code Code>
class coded_allreduce {
 public:
  /// Throws weft::error(invalid_argument) naming the values when the code's n differs from the
  /// group size, dim is 0, the coordinator is not a rank, or patience/timeout/poll are not positive.
  coded_allreduce(T& transport, Code code, std::size_t dim, coded_allreduce_options options = {})
      : t_(transport), code_(std::move(code)), dim_(dim), opt_(options) {
    constexpr const char* ctx = "weft::coding::coded_allreduce";
    n_ = static_cast<std::size_t>(t_.size());
    rank_ = static_cast<std::size_t>(t_.rank());
    expects(code_.n_workers() == n_, errc::invalid_argument, ctx, "the code has n = ", code_.n_workers(),
            " workers but the group has ", n_, " ranks (worker w is rank w)");
    expects(dim_ > 0, errc::invalid_argument, ctx, "dim must be positive");
    expects(opt_.coordinator >= 0 && static_cast<std::size_t>(opt_.coordinator) < n_, errc::invalid_argument, ctx,
            "coordinator ", opt_.coordinator, " is not a rank of the group of ", n_);
    expects(opt_.patience.count() >= 0 && opt_.timeout.count() > 0 && opt_.poll.count() > 0, errc::invalid_argument,
            ctx, "patience must be >= 0 and timeout and poll positive, got ", opt_.patience.count(), " us, ",
            opt_.timeout.count(), " ms, ", opt_.poll.count(), " ms");
    words_ = (n_ + 63) / 64;
    if (is_coordinator()) {
      decider_ = std::thread([this] { decide_loop(); });
      for (std::size_t q = 0; q < n_; ++q)
        if (q != rank_) pumps_.emplace_back([this, q] { pump(q); });
    }
  }
  coded_allreduce(const coded_allreduce&) = delete;
  coded_allreduce& operator=(const coded_allreduce&) = delete;
  ~coded_allreduce() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& th : pumps_) th.join();
    if (decider_.joinable()) decider_.join();
    if (forwarder_.joinable()) forwarder_.join();
  }

  std::size_t n_workers() const noexcept { return n_; }
  const Code& code() const noexcept { return code_; }

  /// One step: `message` is this rank's coded message (encode(code, rank, partials, message)); out
  /// receives the decoded gradient. Throws weft::error(invalid_argument) for a size other than dim
  /// or a step not above the previous one; weft::error(timeout) naming the step when no decodable
  /// set forms, or the decision, allreduce or forwarded result does not arrive, within the timeout;
  /// the transport's errors (peer_failure, aborted) as they come. A peer that fails before the
  /// decision is simply never a survivor.
  coded_allreduce_report reduce(std::uint64_t step, std::span<const float> message, std::span<float> out) {
    constexpr const char* ctx = "weft::coding::coded_allreduce::reduce";
    expects(message.size() == dim_ && out.size() == dim_, errc::invalid_argument, ctx, "message has ", message.size(),
            " and out ", out.size(), " floats; the group carries dim = ", dim_);
    expects(!last_step_ || step > *last_step_, errc::invalid_argument, ctx, "step ", step,
            " is not above the previous step ", last_step_.value_or(0));
    last_step_ = step;
    const auto start = weft::comm::clock_type::now();
    auto until = start + opt_.timeout;
    coded_allreduce_report rep;
    rep.step = step;
    // 1. Ready, then the decision.
    if (is_coordinator()) {
      mark_ready(step, rank_);
    } else {
      std::array<std::byte, sizeof step> b;
      std::memcpy(b.data(), &step, sizeof step);
      t_.send(opt_.coordinator, tag(ready_channel(rank_), check_ready), b, until);
    }
    // The coordinator fails a step `timeout` after its first ready notice; waiting twice as long
    // for the decision leaves room for that verdict to arrive (only a lost coordinator runs out).
    const decision d = wait_decision(step, until + opt_.timeout, ctx);
    rep.agree = weft::comm::clock_type::now() - start;
    until = weft::comm::clock_type::now() + opt_.timeout;
    expects(d.ok, errc::timeout, ctx, "rank ", rank_, ": step ", step, " found no decodable set within ",
            opt_.timeout.count(), " ms (", d.survivors.size(), " of ", n_, " ranks were ready)");
    rep.survivors = d.survivors;
    const auto dec = code_.try_decoder(d.survivors);
    expects(dec != nullptr, errc::precondition, ctx, "the code cannot decode the agreed survivor set");
    rep.residual = dec->residual;
    const auto reduce_start = weft::comm::clock_type::now();
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
      ro.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(until - weft::comm::clock_type::now());
      if (ro.timeout.count() <= 0) ro.timeout = std::chrono::milliseconds(1);
      weft::comm::allreduce(group, out, weft::op::sum{}, ro);
      if (opt_.forward_to_excluded && d.survivors.front() == rank_ && d.survivors.size() < n_) forward(step, out, d);
    } else if (opt_.forward_to_excluded) {
      std::vector<std::byte> buf(sizeof step + dim_ * sizeof(float));
      t_.recv(static_cast<int>(d.survivors.front()), tag(forward_channel(), check_forward), buf, until);
      std::uint64_t got = 0;
      std::memcpy(&got, buf.data(), sizeof got);
      expects(got == step, errc::mismatch, ctx, "rank ", rank_, " expected the result of step ", step, " from rank ",
              d.survivors.front(), " but received step ", got);
      std::memcpy(out.data(), buf.data() + sizeof step, dim_ * sizeof(float));
    }
    rep.reduce = weft::comm::clock_type::now() - reduce_start;
    return rep;
  }

 private:
  static constexpr std::uint32_t check_ready = 0x52454459u, check_decision = 0x44454349u, check_forward = 0x46575244u;
  struct decision {
    bool ok = false;
    std::vector<std::size_t> survivors;  // ok: F; failed: the ranks that were ready
  };
  struct step_state {
    std::vector<char> ready;
    std::size_t count = 0;
    weft::comm::clock_type::time_point first{};
  };
  struct forward_job {
    int peer;
    std::shared_ptr<const std::vector<std::byte>> bytes;
    weft::comm::deadline until;
  };

  bool is_coordinator() const noexcept { return rank_ == static_cast<std::size_t>(opt_.coordinator); }
  static weft::comm::msg_tag tag(std::uint32_t channel, std::uint32_t check) { return {channel, check}; }
  std::uint32_t decision_channel() const noexcept { return opt_.channel + 1; }
  std::uint32_t forward_channel() const noexcept { return opt_.channel + 2; }
  std::uint32_t ready_channel(std::size_t r) const noexcept { return opt_.channel + 3 + static_cast<std::uint32_t>(r); }
  std::size_t decision_bytes() const noexcept { return 2 * sizeof(std::uint64_t) + words_ * sizeof(std::uint64_t); }

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

  // Receives ready notices of rank q. A failed link ends the thread: q is never ready again.
  void pump(std::size_t q) {
    std::array<std::byte, sizeof(std::uint64_t)> b;
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (stop_) return;
      }
      try {
        t_.recv(static_cast<int>(q), tag(ready_channel(q), check_ready), b, weft::comm::clock_type::now() + opt_.poll);
      } catch (const weft::error& e) {
        if (e.code() == errc::timeout) continue;
        return;
      }
      std::uint64_t step = 0;
      std::memcpy(&step, b.data(), sizeof step);
      mark_ready(step, q);
    }
  }

  // Decides steps in increasing order: at once when every rank is ready, after `patience` from the
  // first ready notice when the ready set decodes, as a failure after `timeout`.
  void decide_loop() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      auto next_wake = weft::comm::clock_type::now() + opt_.poll;
      while (!steps_.empty()) {
        auto it = steps_.begin();
        const std::uint64_t step = it->first;
        step_state& s = it->second;
        const auto now = weft::comm::clock_type::now();
        std::vector<std::size_t> ready;
        for (std::size_t w = 0; w < n_; ++w)
          if (s.ready[w]) ready.push_back(w);
        decision d;
        bool decide = false;
        if (s.count == n_ || now >= s.first + opt_.patience) {
          if (code_.try_decoder(ready) != nullptr) {
            d.ok = true;
            decide = true;
          }
        }
        if (!decide && now >= s.first + opt_.timeout) decide = true;  // d.ok stays false
        if (!decide) {
          next_wake = std::min(next_wake, s.count == n_ || now >= s.first + opt_.patience ? s.first + opt_.timeout
                                                                                          : s.first + opt_.patience);
          break;
        }
        d.survivors = std::move(ready);
        steps_.erase(it);
        decided_through_ = step;
        local_.emplace(step, d);
        lock.unlock();
        cv_.notify_all();
        broadcast_decision(step, d);
        lock.lock();
      }
      cv_.wait_until(lock, next_wake);
    }
  }

  void broadcast_decision(std::uint64_t step, const decision& d) {
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
        t_.send(static_cast<int>(q), tag(decision_channel(), check_decision), buf,
                weft::comm::clock_type::now() + opt_.timeout);
      } catch (const weft::error&) {
        // A rank that is gone cannot be told; the others still are.
      }
    }
  }

  // --- every rank ----------------------------------------------------------------------------

  decision wait_decision(std::uint64_t step, weft::comm::deadline until, const char* ctx) {
    if (is_coordinator()) {
      std::unique_lock lock(mu_);
      const bool got = cv_.wait_until(lock, until, [&] { return local_.count(step) > 0; });
      expects(got, errc::timeout, ctx, "rank ", rank_, ": no decision for step ", step, " within ",
              2 * opt_.timeout.count(), " ms");
      decision d = std::move(local_.at(step));
      local_.erase(step);
      return d;
    }
    std::vector<std::byte> buf(decision_bytes());
    t_.recv(opt_.coordinator, tag(decision_channel(), check_decision), buf, until);
    std::uint64_t got = 0, ok = 0;
    std::memcpy(&got, buf.data(), sizeof got);
    std::memcpy(&ok, buf.data() + sizeof got, sizeof ok);
    // Decisions go out in step order and this rank asks in step order, so the next one is ours.
    expects(got == step, errc::mismatch, ctx, "rank ", rank_, " expected the decision of step ", step,
            " but the coordinator sent step ", got);
    std::vector<std::uint64_t> bits(words_);
    std::memcpy(bits.data(), buf.data() + 2 * sizeof got, words_ * sizeof(std::uint64_t));
    decision d;
    d.ok = ok != 0;
    for (std::size_t w = 0; w < n_; ++w)
      if (bits[w / 64] >> (w % 64) & 1) d.survivors.push_back(w);
    return d;
  }

  // Queues the result for every excluded rank on the forwarder thread.
  void forward(std::uint64_t step, std::span<const float> out, const decision& d) {
    auto bytes = std::make_shared<std::vector<std::byte>>(sizeof step + dim_ * sizeof(float));
    std::memcpy(bytes->data(), &step, sizeof step);
    std::memcpy(bytes->data() + sizeof step, out.data(), dim_ * sizeof(float));
    {
      std::lock_guard lock(mu_);
      for (std::size_t q = 0; q < n_; ++q)
        if (!std::binary_search(d.survivors.begin(), d.survivors.end(), q))
          forwards_.push_back({static_cast<int>(q), bytes, weft::comm::clock_type::now() + opt_.timeout});
      if (!forwarder_.joinable()) forwarder_ = std::thread([this] { forward_loop(); });
    }
    cv_.notify_all();
  }

  void forward_loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !forwards_.empty(); });
      if (forwards_.empty()) return;  // stopping, and nothing left to send
      forward_job job = std::move(forwards_.front());
      forwards_.pop_front();
      lock.unlock();
      try {
        t_.send(job.peer, tag(forward_channel(), check_forward), *job.bytes, job.until);
      } catch (const weft::error&) {
        // The excluded rank is gone or did not read in time; it reports its own timeout.
      }
      lock.lock();
    }
  }

  T& t_;
  Code code_;
  std::size_t dim_;
  coded_allreduce_options opt_;
  std::size_t n_ = 0, rank_ = 0, words_ = 0;
  std::optional<std::uint64_t> last_step_;  // the caller's last step
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                             // guarded by mu_
  std::map<std::uint64_t, step_state> steps_;     // coordinator: undecided steps, guarded by mu_
  std::optional<std::uint64_t> decided_through_;  // coordinator: every step up to this is decided
  std::map<std::uint64_t, decision> local_;       // coordinator: decisions its own caller has not taken
  std::deque<forward_job> forwards_;              // guarded by mu_
  std::vector<std::thread> pumps_;
  std::thread decider_;
  std::thread forwarder_;
};

}  // namespace weft::coding

// Measures the alpha-beta-gamma cost model of a transport (Hockney 1994): ping-pong between
// ranks 0 and 1 at a small and a large size gives alpha and beta, a timed local reduction gives
// gamma; rank 0 broadcasts the result so every rank's tuner makes the same choice.
#pragma once

#include <weft/comm/collectives.hpp>
#include <weft/comm/tuner.hpp>
#include <weft/core/reduce_ops.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <span>
#include <vector>

namespace weft::comm {

/// Runs on every rank (collective). `large_bytes` is the big ping-pong size, `reps` the number of
/// round trips per size (the median is used). Returns the same model on every rank; a single
/// rank returns the default model. Throws what the collectives throw; errc::invalid_argument for
/// large_bytes < 1024 or reps < 1. Cost: about 2·reps round trips plus one broadcast.
template <transport Tr>
cost_model calibrate(Tr& t, std::size_t large_bytes = std::size_t{4} << 20, int reps = 7, const options& opt = {}) {
  constexpr const char* where = "weft::comm::calibrate";
  expects(large_bytes >= 1024, errc::invalid_argument, where, "large_bytes ", large_bytes, " must be >= 1024");
  expects(reps >= 1, errc::invalid_argument, where, "reps ", reps, " must be >= 1");
  const int p = static_cast<int>(t.size()), r = static_cast<int>(t.rank());
  std::array<double, 3> model{cost_model{}.alpha, cost_model{}.beta, cost_model{}.gamma};
  if (p == 1) return {};
  const deadline until = detail::start_call(where, opt);
  const msg_tag tag{opt.channel, make_check(collective::calibrate, dtype::u8, algorithm::ring, large_bytes, "", 0)};
  detail::call_context c(t, where, tag, until);
  c.begin(
      detail::describe_call(collective::calibrate, dtype::u8, large_bytes, "", p, static_cast<std::uint64_t>(reps)));
  std::vector<std::byte> buf(large_bytes);
  auto round_trip = [&](std::size_t bytes) {
    std::vector<double> times;
    std::span<std::byte> b(buf.data(), bytes);
    for (int i = 0; i < reps + 1; ++i) {
      const auto t0 = clock_type::now();
      if (r == 0) {
        c.send(1, detail::as_const(b));
        c.recv(1, b);
      } else if (r == 1) {
        c.recv(0, b);
        c.send(0, detail::as_const(b));
      }
      if (i > 0) times.push_back(std::chrono::duration<double>(clock_type::now() - t0).count() / 2);
    }
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
    return times[times.size() / 2];
  };
  if (r <= 1) {
    c.phase("ping-pong small");
    const double small = round_trip(8);
    c.phase("ping-pong large");
    const double large = round_trip(large_bytes);
    model[0] = std::max(small, 1e-7);
    model[1] = std::max((large - small) / static_cast<double>(large_bytes), 1e-12);
    std::vector<float> a(large_bytes / sizeof(float), 1.0f), b(a.size(), 2.0f);
    const auto t0 = clock_type::now();
    weft::reduce_into(a.data(), b.data(), a.size(), op::sum{});
    model[2] = std::max(
        std::chrono::duration<double>(clock_type::now() - t0).count() / static_cast<double>(large_bytes), 1e-12);
    if (a[a.size() / 2] != 3.0f) model[2] *= 2;  // keeps the reduction from being optimised away
  }
  options bopt = opt;
  broadcast(t, std::span<double>(model), 0, bopt);
  return {model[0], model[1], model[2]};
}

}  // namespace weft::comm

// Coded allreduce in forked processes over weft::comm's shm and tcp transports, with a late rank:
// every process checks, with plain collectives on a second transport, that all ranks agreed on the
// same survivors and ended with the same bits, equal to the true gradient.
#include "coded_allreduce_common.hpp"

#include <weft/coding/coded_allreduce.hpp>
#include <weft/coding/cyclic_repetition.hpp>
#include <weft/comm/collectives.hpp>
#include <weft/comm/launcher.hpp>
#include <weft/comm/shm_transport.hpp>
#include <weft/comm/tcp_transport.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

using namespace weft::coding;
using namespace std::chrono_literals;
using namespace weft_test;
namespace wc = weft::comm;

namespace {
// In a forked process: run the steps on `t` (the coded group's own transport), then check the
// guarantees across ranks with plain collectives on `check` (a second transport over the same
// ranks): allgather of survivors and of the outputs' bits. Throws (the process exits 1) when one
// fails.
template <class T>
void process_body(T& t, T& check, const linear_code& code, int late) {
  const std::size_t steps = 3;
  coded_allreduce_options opt;
  opt.patience = 5ms;
  opt.timeout = 10s;  // errors surface well before fork_ranks' limit
  coded_allreduce<T, linear_code> group(t, code, dim, opt);
  const auto r = static_cast<std::size_t>(t.rank());
  const int p = t.size();
  for (std::uint64_t step = 0; step < steps; ++step) {
    const auto msg = message(code, r, step);
    // The late rank waits for every other rank to be done with the step (a barrier it joins late:
    // the others enter it after their reduce).
    std::vector<float> out(dim, -1.0f);
    coded_allreduce_report rep;
    if (t.rank() == late) {
      wc::barrier(check);
      rep = group.reduce(msg, out);
    } else {
      rep = group.reduce(msg, out);
      wc::barrier(check);
    }
    std::vector<std::int64_t> mine(1, 0), everyone(static_cast<std::size_t>(p));
    for (std::size_t w : rep.survivors) mine[0] |= std::int64_t{1} << w;
    wc::allgather(check, std::span<const std::int64_t>(mine), std::span<std::int64_t>(everyone));
    std::vector<float> outs(dim * static_cast<std::size_t>(p));
    wc::allgather(check, std::span<const float>(out), std::span<float>(outs));
    for (int q = 0; q < p; ++q) {
      weft::expects(everyone[static_cast<std::size_t>(q)] == mine[0], weft::errc::mismatch, "test", "rank ", q,
                    " has another survivor set");
      weft::expects(std::memcmp(outs.data() + static_cast<std::size_t>(q) * dim, out.data(), dim * sizeof(float)) == 0,
                    weft::errc::mismatch, "test", "rank ", q, " has other bits");
    }
    weft::expects(late < 0 || !(mine[0] >> late & 1), weft::errc::mismatch, "test", "the late rank survived");
    weft::expects(rel_error(out, truth(step, code.n_partitions())) < 1e-5, weft::errc::mismatch, "test", "wrong value");
  }
}
}  // namespace

TEST_CASE("coded allreduce over shm and tcp in forked processes, with a late rank",
          "[coding][coded_allreduce][process]") {
  const auto code = hybrid_repetition(4, 1);
  const std::string shm_name = "/weft-coded-allreduce-" + std::to_string(::getpid());
  auto shm = wc::fork_ranks(4, [&](int r) {
    wc::shm_transport t(shm_name, r, 4), check(shm_name + "-check", r, 4);
    process_body(t, check, code, 3);
  });
  CHECK(shm.ok());
  const auto dir = std::filesystem::temp_directory_path() / ("weft-coded-allreduce-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "coded");
  std::filesystem::create_directories(dir / "check");
  auto tcp = wc::fork_ranks(4, [&](int r) {
    wc::tcp_options o;
    o.bind = "127.0.0.1";
    wc::tcp_transport t(r, 4, wc::tcp_rendezvous::file_store((dir / "coded").string()), o);
    wc::tcp_transport check(r, 4, wc::tcp_rendezvous::file_store((dir / "check").string()), o);
    process_body(t, check, code, 1);
  });
  std::filesystem::remove_all(dir);
  CHECK(tcp.ok());
}

// weft allreduce sweep over the tcp and shm transports (forked ranks on this host), nccl-tests
// style, plus the transport's ring ceiling: every rank sends `bytes` to its successor while
// receiving `bytes` from its predecessor, no reduction, same sockets and tuning; that per-rank
// send rate bounds busbw. Usage: bench_comm_allreduce --transport tcp|shm --ranks N [--min B]
// [--max B] [--iters I] [--reps R] [--out file.csv] [--algos ring,tree,...]
#include "common.hpp"

#include <weft/comm.hpp>

#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace wc = weft::comm;

namespace {

wc::algorithm parse_algo(const std::string& s) {
  for (auto a : {wc::algorithm::ring, wc::algorithm::tree, wc::algorithm::star, wc::algorithm::halving_doubling,
                 wc::algorithm::recursive_doubling, wc::algorithm::automatic})
    if (wc::to_string(a) == s) return a;
  std::fprintf(stderr, "unknown algorithm %s\n", s.c_str());
  std::exit(2);
}

template <class Tr>
void sweep(Tr& t, const bench::flags& f) {
  const int r = t.rank();
  std::vector<std::string> algos;
  std::stringstream ss(f.algos);
  for (std::string a; std::getline(ss, a, ',');) algos.push_back(a);
  std::vector<float> buf(f.max_bytes / sizeof(float));
  std::vector<std::byte> in(f.max_bytes);  // the ceiling sends from buf's bytes: 2 buffers per rank, not 3
  for (std::size_t bytes : bench::sizes(f)) {
    const std::size_t n = bytes / sizeof(float);
    std::span<float> data(buf.data(), n);
    for (const auto& name : algos) {
      wc::options opt;
      opt.algo = parse_algo(name);
      std::vector<double> batches;
      wc::allreduce(t, data, weft::op::sum{}, opt);  // warm-up
      for (int rep = 0; rep < f.reps; ++rep) {
        wc::barrier(t);
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < f.iters; ++i) wc::allreduce(t, data, weft::op::sum{}, opt);
        batches.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / f.iters);
      }
      if (r == 0) bench::row(f, "weft", f.transport, name, bytes, bench::median(batches));
    }
    // Ceiling: a ring of plain sendrecv, no reduction.
    if (t.size() > 1) {
      const int next = (r + 1) % t.size(), prev = (r + t.size() - 1) % t.size();
      std::vector<double> batches;
      const auto until = wc::clock_type::now() + std::chrono::minutes(5);
      for (int rep = 0; rep < f.reps; ++rep) {
        wc::barrier(t);
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < f.iters; ++i)
          t.sendrecv(next, std::as_bytes(std::span<const float>(buf.data(), bytes / sizeof(float))), prev,
                     std::span<std::byte>(in.data(), bytes), wc::msg_tag{77, 0}, until);
        batches.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / f.iters);
      }
      if (r == 0) bench::row(f, "ceiling", f.transport, "ring_sendrecv", bytes, bench::median(batches), false);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const auto f = bench::parse(argc, argv);
  const std::string tag = std::to_string(::getpid());
  std::uint16_t port = 0;
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor a(io, boost::asio::ip::tcp::endpoint(boost::asio::ip::address_v4::loopback(), 0));
    port = a.local_endpoint().port();
  }
  const auto res = wc::fork_ranks(
      f.ranks,
      [&](int r) {
        if (f.transport == "shm") {
          wc::shm_transport t("/weft-bench-" + tag, r, f.ranks);
          sweep(t, f);
        } else {
          wc::tcp_options o;
          o.bind = "127.0.0.1";
          wc::tcp_transport t(r, f.ranks, wc::tcp_rendezvous::rank0("127.0.0.1", port), o);
          sweep(t, f);
        }
      },
      std::chrono::minutes(20));
  return res.ok() ? 0 : 1;
}

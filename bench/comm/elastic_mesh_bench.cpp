// The elastic group's data plane (elastic::mesh_transport, rebuilt every membership epoch) beside
// comm's tcp_transport, both in the same forked processes on loopback, the same ring allreduce,
// the same sizes, batches alternating between the two so both see the same machine. Prints per
// size the busbw of each (median and min-max over the batches) and the ratio mesh / tcp.
// Usage: bench_comm_elastic_mesh [--ranks N] [--min B] [--max B] [--iters I] [--reps R] [--out f.csv]
#include "common.hpp"

#include <weft/comm.hpp>
#include <weft/comm/elastic.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace wc = weft::comm;
namespace we = weft::comm::elastic;

namespace {

std::uint16_t free_port() {
  auto fd = wc::detail::listen_tcp(*wc::detail::parse_ipv4("127.0.0.1"), 0, "bench");
  return wc::detail::local_port(fd.get());
}

template <class Tr>
double batch_seconds(Tr& t, std::span<float> data, int iters) {
  wc::options opt;
  opt.algo = wc::algorithm::ring;
  opt.timeout = std::chrono::minutes(2);
  wc::barrier(t);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) wc::allreduce(t, data, weft::op::sum{}, opt);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

double busbw(std::size_t bytes, double seconds, int n) {
  return static_cast<double>(bytes) / seconds / 1e9 * 2.0 * (n - 1) / n;
}

}  // namespace

int main(int argc, char** argv) {
  auto f = bench::parse(argc, argv);
  if (argc < 2) f.min_bytes = 1024;
  const auto tcp_port = free_port(), coord_port = free_port();
  const int n = f.ranks;
  const auto res = wc::fork_ranks(
      n + 1,
      [&](int r) {
        if (r == n) {  // the coordinator's process
          we::coordinator_options co;
          co.port = coord_port;
          co.min_members = n;
          co.spec = "w:f32[1]";
          we::coordinator c(co);
          c.start();
          while (!(c.epoch() > 0 && c.members().empty())) std::this_thread::sleep_for(std::chrono::milliseconds(50));
          return;
        }
        wc::tcp_options to;
        to.bind = "127.0.0.1";
        wc::tcp_transport tcp(r, n, wc::tcp_rendezvous::rank0("127.0.0.1", tcp_port), to);
        std::vector<float> w(1);
        we::shared_state state;
        state.add("w", std::span<float>(w));
        we::group_options go;
        go.coordinator_port = coord_port;
        go.name = "m" + std::to_string(r);
        go.connect_timeout = std::chrono::seconds(30);
        go.collective_timeout = std::chrono::minutes(2);
        we::elastic_group group(state, go);
        group.sync();
        auto& mesh = group.transport();
        std::vector<float> buf(f.max_bytes / sizeof(float), 1.0f);
        if (r == 0)
          std::printf(
              "# %d ranks, ring allreduce, %d allreduces per batch, %d batches per transport, alternating\n"
              "%10s  %-28s  %-28s  %s\n",
              n, f.iters, f.reps, "bytes", "tcp_transport busbw GB/s", "elastic mesh busbw GB/s", "mesh/tcp (medians)");
        for (std::size_t bytes : bench::sizes(f)) {
          std::span<float> data(buf.data(), bytes / sizeof(float));
          std::vector<double> tcp_bw, mesh_bw;
          batch_seconds(tcp, data, 1);  // warm-up
          batch_seconds(mesh, data, 1);
          for (int rep = 0; rep < f.reps; ++rep) {
            tcp_bw.push_back(busbw(bytes, batch_seconds(tcp, data, f.iters), n));
            mesh_bw.push_back(busbw(bytes, batch_seconds(mesh, data, f.iters), n));
          }
          if (r != 0) continue;
          const auto [tmin, tmax] = std::minmax_element(tcp_bw.begin(), tcp_bw.end());
          const auto [mmin, mmax] = std::minmax_element(mesh_bw.begin(), mesh_bw.end());
          const double tmed = bench::median(tcp_bw), mmed = bench::median(mesh_bw);
          std::printf("%10zu  %7.3f [%7.3f-%7.3f]     %7.3f [%7.3f-%7.3f]     %.3f\n", bytes, tmed, *tmin, *tmax, mmed,
                      *mmin, *mmax, mmed / tmed);
          std::fflush(stdout);
          if (!f.out.empty()) {
            const double tsec = static_cast<double>(bytes) * 2.0 * (n - 1) / n / (tmed * 1e9);
            const double msec = static_cast<double>(bytes) * 2.0 * (n - 1) / n / (mmed * 1e9);
            bench::row(f, "weft", "tcp", "ring", bytes, tsec);
            bench::row(f, "elastic", "mesh", "ring", bytes, msec);
          }
        }
      },
      std::chrono::minutes(20));
  return res.ok() ? 0 : 1;
}

// The elastic group's data plane (elastic::mesh_transport: comm's stream engine rebuilt every
// membership epoch) beside comm's tcp_transport, both in the same forked processes on loopback, the
// same sizes, batches alternating between the two so both see the same machine. Two workloads: the
// ring allreduce (busbw) and a point-to-point shift (every rank sends the message to the next rank
// and receives one from the previous, one sendrecv: GB/s per rank, every link busy). Prints per
// size and workload the median and min-max over the batches and the ratio mesh / tcp (of medians).
// Usage: bench_comm_elastic_mesh [--ranks N] [--min B] [--max B] [--iters I] [--reps R] [--out f.csv]
#include "ab_compare.hpp"
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
        std::vector<std::byte> shift_in(f.max_bytes);
        if (r == 0)
          std::printf(
              "# %d ranks on loopback, %d calls per batch, %d batches per transport and workload, alternating\n"
              "# allreduce: ring, busbw GB/s; shift: sendrecv to the next rank / from the previous, GB/s per rank\n"
              "%10s  %-9s  %-28s  %-28s  %s\n",
              n, f.iters, f.reps, "bytes", "workload", "tcp_transport median [min-max]",
              "elastic mesh median [min-max]", "mesh/tcp");
        for (std::size_t bytes : bench::sizes(f)) {
          std::span<float> data(buf.data(), bytes / sizeof(float));
          const auto out = std::as_bytes(data);
          const std::span<std::byte> in(shift_in.data(), bytes);
          std::vector<double> tcp_bw, mesh_bw, tcp_shift, mesh_shift;
          bench::ring_allreduce_seconds(tcp, data, 1);  // warm-up
          bench::ring_allreduce_seconds(mesh, data, 1);
          for (int rep = 0; rep < f.reps; ++rep) {
            tcp_bw.push_back(busbw(bytes, bench::ring_allreduce_seconds(tcp, data, f.iters), n));
            mesh_bw.push_back(busbw(bytes, bench::ring_allreduce_seconds(mesh, data, f.iters), n));
            if (n < 2) continue;
            tcp_shift.push_back(static_cast<double>(bytes) / bench::shift_seconds(tcp, out, in, f.iters) / 1e9);
            mesh_shift.push_back(static_cast<double>(bytes) / bench::shift_seconds(mesh, out, in, f.iters) / 1e9);
          }
          if (r != 0) continue;
          bench::print_ab_line(bytes, "allreduce", tcp_bw, mesh_bw);
          if (n >= 2) bench::print_ab_line(bytes, "shift", tcp_shift, mesh_shift);
          if (!f.out.empty()) {
            const double tsec = static_cast<double>(bytes) * 2.0 * (n - 1) / n / (bench::median(tcp_bw) * 1e9);
            const double msec = static_cast<double>(bytes) * 2.0 * (n - 1) / n / (bench::median(mesh_bw) * 1e9);
            bench::row(f, "weft", "tcp", "ring", bytes, tsec);
            bench::row(f, "elastic", "mesh", "ring", bytes, msec);
            if (n >= 2) {
              bench::row(f, "weft", "tcp", "shift", bytes,
                         static_cast<double>(bytes) / (bench::median(tcp_shift) * 1e9), false);
              bench::row(f, "elastic", "mesh", "shift", bytes,
                         static_cast<double>(bytes) / (bench::median(mesh_shift) * 1e9), false);
            }
          }
        }
      },
      std::chrono::minutes(20));
  return res.ok() ? 0 : 1;
}

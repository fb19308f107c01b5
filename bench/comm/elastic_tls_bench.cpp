// What TLS 1.3 costs the elastic group's data plane: the same members form two meshes on their
// listening sockets (elastic::mesh_transport, as elastic_group does each epoch), one in the clear
// and one with tls_security (the job secret as PSK, TLS_AES_128_GCM_SHA256), in forked processes on
// loopback; batches alternate between the two so both see the same machine. Workloads: the ring
// allreduce (busbw) and a shift (sendrecv to the next rank, from the previous: GB/s per rank).
// Prints per size and workload the median and min-max over the batches and the ratio TLS / plain.
// Usage: bench_comm_elastic_tls [--ranks N] [--min B] [--max B] [--iters I] [--reps R] [--out f.csv]
#include "ab_compare.hpp"
#include "common.hpp"

#include <weft/comm.hpp>
#include <weft/comm/elastic.hpp>
#include <weft/comm/tls.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace wc = weft::comm;
namespace we = weft::comm::elastic;

namespace {

const std::string secret = "bench_comm_elastic_tls job secret 0123456789";

}  // namespace

int main(int argc, char** argv) {
  auto f = bench::parse(argc, argv);
  if (argc < 2) f.min_bytes = f.max_bytes = std::size_t{16} << 20;
  const int n = f.ranks;
  // Every member's listening socket, made before the fork so each knows the others' ports.
  std::vector<int> listen_fds;
  std::vector<we::peer_address> members;
  for (int r = 0; r < n; ++r) {
    int port = 0;
    listen_fds.push_back(we::detail::listen_on("127.0.0.1", port, "bench"));
    members.push_back({"m" + std::to_string(r), "127.0.0.1", port, 0});
  }
  const auto res = wc::fork_ranks(
      n,
      [&](int r) {
        const wc::detail::job_secret js(secret);
        const auto until = [] { return wc::clock_type::now() + std::chrono::seconds(30); };
        we::mesh_options plain_opt, tls_opt;
        tls_opt.security = wc::tls_security::with_psk(secret);
        we::mesh_transport plain(members, r, listen_fds[static_cast<std::size_t>(r)], 1, until(), js, {}, plain_opt);
        we::mesh_transport tls(members, r, listen_fds[static_cast<std::size_t>(r)], 2, until(), js, {}, tls_opt);
        std::vector<float> buf(f.max_bytes / sizeof(float), 1.0f);
        std::vector<std::byte> shift_in(f.max_bytes);
        if (r == 0)
          std::printf(
              "# %d members on loopback, %d calls per batch, %d batches per mesh and workload, alternating;\n"
              "# TLS: %s\n"
              "# allreduce: ring, busbw GB/s; shift: sendrecv to the next member / from the previous, GB/s per member\n"
              "%10s  %-9s  %-28s  %-28s  %s\n",
              n, f.iters, f.reps, tls_opt.security->describe().c_str(), "bytes", "workload",
              "plaintext median [min-max]", "TLS median [min-max]", "TLS/plain");
        for (std::size_t bytes : bench::sizes(f)) {
          std::span<float> data(buf.data(), bytes / sizeof(float));
          const auto out = std::as_bytes(data);
          const std::span<std::byte> in(shift_in.data(), bytes);
          std::vector<double> plain_bw, tls_bw, plain_shift, tls_shift;
          bench::ring_allreduce_seconds(plain, data, 1);  // warm-up
          bench::ring_allreduce_seconds(tls, data, 1);
          const double algbw_to_bus = 2.0 * (n - 1) / n;
          for (int rep = 0; rep < f.reps; ++rep) {
            plain_bw.push_back(static_cast<double>(bytes) / bench::ring_allreduce_seconds(plain, data, f.iters) / 1e9 *
                               algbw_to_bus);
            tls_bw.push_back(static_cast<double>(bytes) / bench::ring_allreduce_seconds(tls, data, f.iters) / 1e9 *
                             algbw_to_bus);
            plain_shift.push_back(static_cast<double>(bytes) / bench::shift_seconds(plain, out, in, f.iters) / 1e9);
            tls_shift.push_back(static_cast<double>(bytes) / bench::shift_seconds(tls, out, in, f.iters) / 1e9);
          }
          if (r != 0) continue;
          bench::print_ab_line(bytes, "allreduce", plain_bw, tls_bw);
          bench::print_ab_line(bytes, "shift", plain_shift, tls_shift);
          if (!f.out.empty()) {
            bench::row(f, "elastic", "mesh", "ring", bytes,
                       static_cast<double>(bytes) * algbw_to_bus / (bench::median(plain_bw) * 1e9));
            bench::row(f, "elastic", "mesh_tls", "ring", bytes,
                       static_cast<double>(bytes) * algbw_to_bus / (bench::median(tls_bw) * 1e9));
            bench::row(f, "elastic", "mesh", "shift", bytes,
                       static_cast<double>(bytes) / (bench::median(plain_shift) * 1e9), false);
            bench::row(f, "elastic", "mesh_tls", "shift", bytes,
                       static_cast<double>(bytes) / (bench::median(tls_shift) * 1e9), false);
          }
        }
      },
      std::chrono::minutes(20));
  return res.ok() ? 0 : 1;
}

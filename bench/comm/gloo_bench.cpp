// Gloo's allreduce algorithms over its tcp transport on loopback, forked ranks, the same sweep
// and timing as bench_comm_allreduce (the peer a weft user would otherwise pick): one round.
// Usage: bench_comm_gloo --ranks N [--min B] [--max B] [--iters I] [--reps R] [--out file.csv]
#include "common.hpp"

#include <weft/comm/launcher.hpp>

#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

int main(int argc, char** argv) {
  const auto f = bench::parse(argc, argv);
  const auto dir = std::filesystem::temp_directory_path() / ("weft-bench-gloo-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto res = weft::comm::fork_ranks(
      f.ranks,
      [&](int r) {
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        gloo::rendezvous::FileStore store(dir.string());
        gloo::rendezvous::PrefixStore prefix("bench", store);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(r, f.ranks);
        ctx->connectFullMesh(prefix, dev);
        std::vector<float> buf(f.max_bytes / sizeof(float));
        for (std::size_t bytes : bench::sizes(f)) {
          const int n = static_cast<int>(bytes / sizeof(float));
          std::vector<float*> ptrs{buf.data()};
          std::vector<std::pair<std::string, std::unique_ptr<gloo::Algorithm>>> algos;
          algos.emplace_back("ring", std::make_unique<gloo::AllreduceRing<float>>(ctx, ptrs, n));
          algos.emplace_back("ring_chunked", std::make_unique<gloo::AllreduceRingChunked<float>>(ctx, ptrs, n));
          algos.emplace_back("halving_doubling", std::make_unique<gloo::AllreduceHalvingDoubling<float>>(ctx, ptrs, n));
          algos.emplace_back("bcube", std::make_unique<gloo::AllreduceBcube<float>>(ctx, ptrs, n));
          gloo::BarrierAllToAll barrier(ctx);
          const int calls = bench::calls_for(f, bytes);
          for (auto& [name, algo] : algos) {
            algo->run();  // warm-up
            std::vector<double> batches;
            for (int rep = 0; rep < f.reps; ++rep) {
              barrier.run();
              const auto t0 = std::chrono::steady_clock::now();
              for (int i = 0; i < calls; ++i) algo->run();
              batches.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls);
            }
            // The slowest rank's median, as for weft.
            std::vector<double> m{bench::median(batches)};
            gloo::AllreduceRing<double> mx(ctx, {m.data()}, 1, gloo::ReductionFunction<double>::max);
            mx.run();
            if (r == 0) bench::row(f, "gloo", "tcp", name, bytes, m[0]);
          }
        }
      },
      std::chrono::minutes(20));
  std::filesystem::remove_all(dir);
  return res.ok() ? 0 : 1;
}

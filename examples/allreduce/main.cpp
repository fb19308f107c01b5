// Four processes on this machine allreduce a gradient-sized buffer over TCP on loopback, with
// every algorithm weft has, and check that all ranks end with the same bits. Rank 0 prints.
//
// It also shows a user-written transport policy: `counting_transport` wraps any weft transport
// and counts the bytes each rank sends, which is all it takes to plug into the collectives.
#include <weft/comm.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

namespace wc = weft::comm;

// A user policy: satisfies wc::transport by forwarding to an inner transport and counting.
template <wc::transport Inner>
class counting_transport {
 public:
  explicit counting_transport(Inner& inner) : inner_(inner) {}
  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  void send(int peer, wc::msg_tag tag, std::span<const std::byte> b, wc::deadline until) {
    sent_ += b.size();
    inner_.send(peer, tag, b, until);
  }
  void recv(int peer, wc::msg_tag tag, std::span<std::byte> b, wc::deadline until) { inner_.recv(peer, tag, b, until); }
  void sendrecv(int dst, std::span<const std::byte> out, int src, std::span<std::byte> in, wc::msg_tag tag,
                wc::deadline until) {
    sent_ += out.size();
    inner_.sendrecv(dst, out, src, in, tag, until);
  }
  void abort(std::string_view why) { inner_.abort(why); }
  std::size_t bytes_sent() const { return sent_; }
  void reset() { sent_ = 0; }

 private:
  Inner& inner_;
  std::size_t sent_ = 0;
};

// Printed beside every speed: a debug build's numbers are not weft's speed.
#if defined(NDEBUG) && defined(__OPTIMIZE__)
constexpr const char* build_kind = "optimised build";
#else
constexpr const char* build_kind = "UNOPTIMISED build: not weft's speed";
#endif

int main() {
  constexpr int ranks = 4;
  constexpr std::size_t elements = std::size_t{4} << 20;  // 16 MiB of float gradients
  const auto store = std::filesystem::temp_directory_path() / ("weft-allreduce-example-" + std::to_string(::getpid()));
  std::filesystem::remove_all(store);
  std::printf("weft allreduce example: %d processes, TCP on loopback (2 sockets per peer), %zu floats (%.0f MiB), %s\n",
              ranks, elements, static_cast<double>(elements * sizeof(float)) / (1 << 20), build_kind);

  const auto result = wc::fork_ranks(ranks, [&](int rank) {
    wc::tcp_options opt;
    opt.connections = 2;
    opt.bind = "127.0.0.1";
    wc::tcp_transport tcp(rank, ranks, wc::tcp_rendezvous::file_store(store.string()), opt);
    counting_transport t(tcp);

    const std::vector<int> hosts{0, 0, 1, 1};  // pretend two hosts of two ranks, for hierarchical
    if (rank == 0)
      std::printf("\n%-18s %10s %12s %14s  %s\n", "algorithm", "time ms", "busbw GB/s", "rank0 sent MiB", "check");
    for (auto algo : {wc::algorithm::ring, wc::algorithm::tree, wc::algorithm::halving_doubling, wc::algorithm::star,
                      wc::algorithm::hierarchical, wc::algorithm::automatic}) {
      std::vector<float> grad(elements);
      for (std::size_t i = 0; i < elements; ++i) grad[i] = static_cast<float>((i + static_cast<std::size_t>(rank)) % 5);
      wc::options o;
      o.algo = algo;
      o.hosts = hosts;
      wc::barrier(t);
      t.reset();
      const auto t0 = std::chrono::steady_clock::now();
      wc::allreduce(t, std::span<float>(grad), weft::op::avg{}, o);
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // Every rank checks its own result against the formula; rank 0 reports.
      bool ok = true;
      for (std::size_t i = 0; i < elements && ok; i += 4099) {
        float sum = 0;
        for (int r = 0; r < ranks; ++r) sum += static_cast<float>((i + static_cast<std::size_t>(r)) % 5);
        ok = grad[i] == sum / ranks;
      }
      // And all ranks hold the same bits: allgather a checksum of the buffer.
      std::uint64_t h = 1469598103934665603ull;
      for (float x : grad) {
        std::uint32_t bits;
        std::memcpy(&bits, &x, 4);
        h = (h ^ bits) * 1099511628211ull;
      }
      const auto mine = static_cast<std::int64_t>(h);
      std::vector<std::int64_t> all(ranks);
      wc::allgather(t, std::span<const std::int64_t>(&mine, 1), std::span<std::int64_t>(all));
      for (auto v : all) ok = ok && v == all[0];
      if (!ok) throw std::runtime_error("allreduce gave a wrong or non-identical result");
      if (rank == 0) {
        const double bytes = static_cast<double>(elements * sizeof(float));
        const double busbw = bytes / sec * 2.0 * (ranks - 1) / ranks / 1e9;
        std::printf("%-18s %10.1f %12.2f %14.1f  identical on all ranks\n", std::string(wc::to_string(algo)).c_str(),
                    sec * 1e3, busbw, static_cast<double>(t.bytes_sent()) / (1 << 20));
      }
    }
    if (rank == 0) {
      const auto model = wc::calibrate(tcp, std::size_t{1} << 20, 5);
      std::printf("\ncalibrated model: alpha %.1f us, beta %.3f ns/B (%.2f GB/s), gamma %.3f ns/B\n", model.alpha * 1e6,
                  model.beta * 1e9, 1e-9 / model.beta, model.gamma * 1e9);
      std::printf("tuner picks for 1 KiB: %s, for 64 MiB: %s\n",
                  std::string(wc::to_string(wc::choose_allreduce(1024, ranks, 1 << 19, model))).c_str(),
                  std::string(wc::to_string(wc::choose_allreduce(64 << 20, ranks, 1 << 19, model))).c_str());
    } else {
      wc::calibrate(tcp, std::size_t{1} << 20, 5);
    }
  });
  std::filesystem::remove_all(store);
  std::printf("\n%s\n", result.ok() ? "all 4 ranks finished cleanly" : "a rank failed (see above)");
  return result.ok() ? 0 : 1;
}

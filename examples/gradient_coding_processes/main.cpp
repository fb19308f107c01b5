// Gradient coding across processes, over weft::comm's TCP transport on loopback.
//  - default: rank 0 is the master, ranks 1..n are forked workers. Every step the master broadcasts
//    the model, each worker sends one coded message (some are slowed at random), and the master
//    decodes the exact gradient from the first decodable set, cancelling the stragglers.
//  - --allreduce: no master. n forked workers each hold the model; every step each computes its coded
//    message, the survivors agree on who is in and allreduce their scaled messages
//    (coded_allreduce), and a slowed worker receives the same gradient from a survivor, so every
//    replica applies the same update.
// Both print per-step time and the decoded gradient's error against the uncoded sum, which any
// process can compute because every process builds the same seeded data set.
#include <weft/coding.hpp>
#include <weft/coding/coded_allreduce.hpp>
#include <weft/coding/comm_channel.hpp>
#include <weft/comm.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace wc = weft::comm;
using namespace weft::coding;
using namespace std::chrono;

namespace {

constexpr std::size_t n = 6, s = 2, dim = 32, rows = 128;
constexpr int steps = 10;
constexpr auto slow_delay = milliseconds(150);
constexpr std::uint32_t model_channel = default_coding_channel + 2;
constexpr std::uint64_t stop_step = ~std::uint64_t{0};

struct partition {
  std::vector<float> x, y;
};

std::vector<partition> make_data() {  // identical in every process: same seed
  detail::rng gen(7);
  std::vector<float> w_true(dim);
  for (auto& v : w_true) v = static_cast<float>(gen.normal());
  std::vector<partition> data(n);
  for (auto& p : data) {
    p.x.resize(rows * dim);
    p.y.resize(rows);
    for (auto& v : p.x) v = static_cast<float>(gen.normal() / std::sqrt(double(dim)));
    for (std::size_t r = 0; r < rows; ++r) {
      double t = 0;
      for (std::size_t c = 0; c < dim; ++c) t += p.x[r * dim + c] * w_true[c];
      p.y[r] = static_cast<float>(t);
    }
  }
  return data;
}

std::vector<float> partial_gradient(const partition& p, const std::vector<float>& w) {
  std::vector<float> g(dim, 0.0f);
  for (std::size_t r = 0; r < rows; ++r) {
    double pred = 0;
    for (std::size_t c = 0; c < dim; ++c) pred += p.x[r * dim + c] * w[c];
    const auto err = static_cast<float>(pred - p.y[r]);
    for (std::size_t c = 0; c < dim; ++c) g[c] += p.x[r * dim + c] * err;
  }
  return g;
}

bool is_slow(std::uint64_t step, std::size_t worker) {  // the same answer in every process
  detail::rng gen(1000 * step + worker + 1);
  return gen.uniform() < 0.25;
}

void worker(wc::tcp_transport& t, std::size_t index, const linear_code& code, const std::vector<partition>& data) {
  comm_worker_channel<wc::tcp_transport> ch(t, 0, dim);
  std::vector<std::byte> buf(sizeof(std::uint64_t) + dim * sizeof(float));
  for (;;) {
    t.recv(0, wc::msg_tag{model_channel, 0}, buf, steady_clock::now() + seconds(20));
    std::uint64_t step = 0;
    std::memcpy(&step, buf.data(), sizeof step);
    if (step == stop_step) return;
    std::vector<float> w(dim);
    std::memcpy(w.data(), buf.data() + sizeof step, dim * sizeof(float));
    std::vector<std::vector<float>> partials;
    for (std::size_t j : code.assignment(index)) partials.push_back(partial_gradient(data[j], w));
    bool cancelled = false;
    if (is_slow(step, index))
      for (auto until = steady_clock::now() + slow_delay; steady_clock::now() < until && !cancelled;) {
        cancelled = ch.cancelled(step);
        std::this_thread::sleep_for(milliseconds(2));
      }
    if (cancelled) continue;
    std::vector<std::span<const float>> in(partials.begin(), partials.end());
    std::vector<float> msg(dim);
    encode(code, index, in, msg);
    ch.send(step, msg);
  }
}

void master(wc::tcp_transport& t, const linear_code& code, const std::vector<partition>& data) {
  std::printf("%4s  %-8s %9s  %-14s %-10s %9s\n", "step", "slowed", "time ms", "decoded from", "cancelled", "rel.err");
  std::vector<float> w(dim, 0.0f);
  std::vector<std::byte> buf(sizeof(std::uint64_t) + dim * sizeof(float));
  double total = 0, worst = 0;
  {
    comm_master_channel<wc::tcp_transport> ch(t, dim);
    for (std::uint64_t step = 0; step < steps; ++step) {
      const auto t0 = steady_clock::now();
      std::memcpy(buf.data(), &step, sizeof step);
      std::memcpy(buf.data() + sizeof step, w.data(), dim * sizeof(float));
      for (int r = 1; r <= static_cast<int>(n); ++r) t.send(r, wc::msg_tag{model_channel, 0}, buf, t0 + seconds(5));
      std::vector<float> g(dim);
      const auto rep = aggregate(code, ch, step, g, t0 + seconds(10)).value();
      const double ms = duration<double, std::milli>(steady_clock::now() - t0).count();
      // The uncoded reference: the plain sum of all n partial gradients.
      std::vector<double> ref(dim, 0.0);
      for (const auto& p : data) {
        const auto pg = partial_gradient(p, w);
        for (std::size_t c = 0; c < dim; ++c) ref[c] += pg[c];
      }
      double num = 0, den = 0;
      for (std::size_t c = 0; c < dim; ++c) {
        num += (g[c] - ref[c]) * (g[c] - ref[c]);
        den += ref[c] * ref[c];
      }
      const double err = std::sqrt(num / den);
      std::string slowed, from, cancelled;
      for (std::size_t i = 0; i < n; ++i)
        if (is_slow(step, i)) slowed += std::to_string(i) + " ";
      for (auto v : rep.survivors) from += std::to_string(v) + " ";
      for (auto v : rep.cancelled) cancelled += std::to_string(v) + " ";
      std::printf("%4llu  %-8s %9.1f  %-14s %-10s %9.1e\n", static_cast<unsigned long long>(step),
                  slowed.empty() ? "-" : slowed.c_str(), ms, from.c_str(), cancelled.empty() ? "-" : cancelled.c_str(),
                  err);
      total += ms;
      worst = std::max(worst, err);
      for (std::size_t c = 0; c < dim; ++c) w[c] -= 0.05f * g[c];
    }
  }  // stops the receiving threads before the shutdown message
  std::memcpy(buf.data(), &stop_step, sizeof stop_step);
  for (int r = 1; r <= static_cast<int>(n); ++r)
    t.send(r, wc::msg_tag{model_channel, 0}, buf, steady_clock::now() + seconds(5));
  std::printf("\nmean step %.1f ms (a slowed worker takes %lld ms more); worst decoded error %.1e\n", total / steps,
              static_cast<long long>(slow_delay.count()), worst);
}

// Error of g against the plain sum of every partition's partial gradient at w.
double error_vs_uncoded(const std::vector<partition>& data, const std::vector<float>& w, const std::vector<float>& g) {
  std::vector<double> ref(dim, 0.0);
  for (const auto& p : data) {
    const auto pg = partial_gradient(p, w);
    for (std::size_t c = 0; c < dim; ++c) ref[c] += pg[c];
  }
  double num = 0, den = 0;
  for (std::size_t c = 0; c < dim; ++c) {
    num += (g[c] - ref[c]) * (g[c] - ref[c]);
    den += ref[c] * ref[c];
  }
  return std::sqrt(num / den);
}

// --allreduce: every rank is a worker and a replica of the model. The coded group gets a transport
// of its own (coded_t); t carries this program's other collectives (a barrier, a final check).
void replica(wc::tcp_transport& t, wc::tcp_transport& coded_t, const linear_code& code,
             const std::vector<partition>& data) {
  const auto me = static_cast<std::size_t>(t.rank());
  coded_allreduce_options opt;
  opt.patience = milliseconds(20);  // after the first worker is ready, wait 20 ms for the rest
  coded_allreduce<wc::tcp_transport, linear_code> group(coded_t, code, dim, opt);
  std::vector<float> w(dim, 0.0f);
  if (me == 0) std::printf("%4s  %-8s %9s  %-14s %9s\n", "step", "slowed", "time ms", "decoded from", "rel.err");
  double total = 0, worst = 0;
  for (std::uint64_t step = 0; step < steps; ++step) {
    wc::barrier(t);  // a common start, so rank 0's clock times the whole step
    const auto t0 = steady_clock::now();
    std::vector<std::vector<float>> partials;
    for (std::size_t j : code.assignment(me)) partials.push_back(partial_gradient(data[j], w));
    std::vector<std::span<const float>> in(partials.begin(), partials.end());
    std::vector<float> msg(dim), g(dim);
    encode(code, me, in, msg);
    if (is_slow(step, me)) std::this_thread::sleep_for(slow_delay);
    const auto rep = group.reduce(msg, g);
    const double ms = duration<double, std::milli>(steady_clock::now() - t0).count();
    if (me == 0) {
      const double err = error_vs_uncoded(data, w, g);
      std::string slowed, from;
      for (std::size_t i = 0; i < n; ++i)
        if (is_slow(step, i)) slowed += std::to_string(i) + " ";
      for (auto v : rep.survivors) from += std::to_string(v) + " ";
      std::printf("%4llu  %-8s %9.1f  %-14s %9.1e%s\n", static_cast<unsigned long long>(step),
                  slowed.empty() ? "-" : slowed.c_str(), ms, from.c_str(), err,
                  rep.included ? "" : "  (rank 0 was late)");
      total += ms;
      worst = std::max(worst, err);
    }
    for (std::size_t c = 0; c < dim; ++c) w[c] -= 0.05f * g[c];
  }
  // Every replica applied the same gradients: compare the models' bits across ranks.
  std::vector<float> all(dim * n);
  wc::allgather(t, std::span<const float>(w), std::span<float>(all));
  bool same = true;
  for (std::size_t r = 0; r < n; ++r)
    same = same && std::memcmp(all.data() + r * dim, w.data(), dim * sizeof(float)) == 0;
  if (me == 0)
    std::printf(
        "\nmean step %.1f ms (a slowed worker takes %lld ms more); worst decoded error %.1e; models on all %zu "
        "ranks bit-identical: %s\n",
        total / steps, static_cast<long long>(slow_delay.count()), worst, n, same ? "yes" : "NO");
  weft::expects(same, weft::errc::mismatch, "gradient_coding_processes", "replicas diverged");
}

}  // namespace

int main(int argc, char** argv) {
  const bool allreduce_mode = argc > 1 && std::string(argv[1]) == "--allreduce";
  const auto store =
      std::filesystem::temp_directory_path() / ("weft-gradient-coding-example-" + std::to_string(::getpid()));
  std::filesystem::remove_all(store);
  std::filesystem::create_directories(store / "main");
  std::filesystem::create_directories(store / "coded");
  const auto code = cyclic_repetition(n, s);
  const int ranks = static_cast<int>(allreduce_mode ? n : n + 1);
  if (allreduce_mode)
    std::printf("coded allreduce over processes: %zu forked workers, no master, weft::comm TCP on loopback, %s\n\n", n,
                code.name().c_str());
  else
    std::printf("gradient coding over processes: 1 master + %zu forked workers, weft::comm TCP on loopback, %s\n\n", n,
                code.name().c_str());
  const auto result = wc::fork_ranks(ranks, [&](int rank) {
    wc::tcp_options opt;
    opt.bind = "127.0.0.1";
    wc::tcp_transport t(rank, ranks, wc::tcp_rendezvous::file_store((store / "main").string()), opt);
    const auto data = make_data();
    if (allreduce_mode) {
      wc::tcp_transport coded_t(rank, ranks, wc::tcp_rendezvous::file_store((store / "coded").string()), opt);
      replica(t, coded_t, code, data);
    } else if (rank == 0) {
      master(t, code, data);
    } else {
      worker(t, static_cast<std::size_t>(rank - 1), code, data);
    }
  });
  std::filesystem::remove_all(store);
  if (!result.ok()) {
    std::printf("a rank failed:");
    for (int st : result.status) std::printf(" %d", st);
    std::printf("\n");
    return 1;
  }
  return 0;
}

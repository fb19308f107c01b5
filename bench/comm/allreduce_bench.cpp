// weft allreduce sweep over the tcp and shm transports (forked ranks on this host), nccl-tests
// style: every algorithm, the tuner's pick ("automatic", from a table autotune() measured in an
// earlier invocation), and optionally the transport's streaming reference (every rank sendrecvs the
// size to its successor while receiving from its predecessor: a reference rate, not a bound).
// Usage: bench_comm_allreduce --transport tcp|shm --ranks N [--min B] [--max B] [--iters I]
//        [--reps R] [--round K] [--out file.csv] [--algos ring,tree,...] [--wait MODE]
//        [--tune-out table.csv [--tune-only 1] | --tune-in table.csv] [--reference 1] [--label-wait 1] [--bind 1]
//        [--ring B]
// --bind 1 binds rank r to the r-th core this process may use when the ranks fit the cores (and
// leaves them unbound otherwise), which is what mpirun does by default for up to 2 processes, so
// the comparison with OpenMPI is between equally placed processes. --tune-only 1 writes the
// autotune() table and times nothing else (run.sh's extra tables for the tuner's pick distribution).
#include "common.hpp"

#include <weft/comm.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <sched.h>
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

void write_table(const std::string& path, const wc::tuning_table& t) {
  std::ofstream out(path);
  out << t.ranks << '\n';
  for (const auto& e : t.entries) {
    out << e.bytes << ',' << wc::to_string(e.best);
    for (const auto& [a, s] : e.seconds) out << ',' << wc::to_string(a) << '=' << s;
    out << '\n';
  }
}

wc::tuning_table read_table(const std::string& path) {
  std::ifstream in(path);
  wc::tuning_table t;
  std::string line;
  std::getline(in, line);
  t.ranks = std::stoi(line);
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string field;
    wc::tuning_table::entry e;
    std::getline(ss, field, ',');
    e.bytes = std::stoull(field);
    std::getline(ss, field, ',');
    e.best = parse_algo(field);
    t.entries.push_back(e);
  }
  return t;
}

// Times `count` contenders: f.reps rounds, each one batch of `calls` calls of every contender in
// turn (`run(a)` calls contender a once), so a slow spell of a shared host stretches them all
// alike, as autotune() times its candidates. Returns each contender's median batch, the slowest
// rank's (as for autotune): one number per contender, the same on every rank.
template <class Tr>
std::vector<double> time_batches(Tr& t, const bench::flags& f, int calls, std::size_t count, const auto& run) {
  std::vector<std::vector<double>> batches(count);
  for (int rep = 0; rep < f.reps; ++rep)
    for (std::size_t a = 0; a < count; ++a) {
      wc::barrier(t);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) run(a);
      batches[a].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls);
    }
  std::vector<double> medians;
  for (auto& b : batches) medians.push_back(bench::median(std::move(b)));
  wc::options o;
  o.algo = wc::algorithm::ring;
  wc::allreduce(t, std::span<double>(medians), weft::op::max{}, o);
  return medians;
}

template <class Tr>
void sweep(Tr& t, const bench::flags& f) {
  const int r = t.rank();
  std::vector<std::string> algos;
  std::stringstream ss(f.algos);
  for (std::string a; std::getline(ss, a, ',');) algos.push_back(a);
  const auto sizes = bench::sizes(f);
  wc::tuning_table table;
  if (!f.tune_out.empty()) {
    std::vector<wc::algorithm> cands;
    for (const auto& a : algos) cands.push_back(parse_algo(a));
    table = wc::autotune(t, std::span<const std::size_t>(sizes), f.tune_reps, std::span<const wc::algorithm>(cands));
    if (r == 0) write_table(f.tune_out, table);
    if (f.tune_only) return;
  } else if (!f.tune_in.empty()) {
    table = read_table(f.tune_in);
  }
  const bool with_auto = !table.entries.empty() && table.ranks == t.size();
  // With --label-wait the rows say which wait mode was asked for and which one is in force (what
  // automatic resolved to on this host), so wait_modes.sh can compare them.
  const std::string impl =
      f.label_wait ? "weft-" + f.wait + "=" + std::string(wc::to_string(t.waiting())) : std::string("weft");
  std::vector<float> buf(f.max_bytes / sizeof(float), 0.0f);
  std::vector<std::byte> in(f.max_bytes);
  for (std::size_t bytes : sizes) {
    const std::size_t n = bytes / sizeof(float);
    std::span<float> data(buf.data(), n);
    const int calls = bench::calls_for(f, bytes);
    std::vector<std::string> names = algos;
    if (with_auto) names.push_back("automatic");
    auto options_for = [&](const std::string& name) {
      wc::options opt;
      opt.algo = parse_algo(name);
      opt.table = &table;
      if (f.segment > 0) opt.segment_bytes = f.segment;
      return opt;
    };
    // Every algorithm is warmed up at this size before any is timed, and round k times them from
    // the k-th on. With one fixed order, the algorithm timed first at each size looked slow in
    // every round: in 21 rounds at n = 2 (shm, 256 KiB-4 MiB) ring, timed first, was 12-30 %
    // slower than ring timed last as 'automatic', which made a right pick look like a regret.
    std::vector<wc::options> opts;
    for (const auto& name : names) opts.push_back(options_for(name));
    for (const wc::options& opt : opts) wc::allreduce(t, data, weft::op::sum{}, opt);
    const auto first = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(std::max(f.round, 1) - 1) % names.size());
    std::rotate(names.begin(), names.begin() + first, names.end());
    std::rotate(opts.begin(), opts.begin() + first, opts.end());
    const std::vector<double> medians = time_batches(
        t, f, calls, opts.size(), [&](std::size_t a) { wc::allreduce(t, data, weft::op::sum{}, opts[a]); });
    for (std::size_t a = 0; a < names.size(); ++a) {
      std::string label = names[a];
      if (opts[a].algo == wc::algorithm::automatic)
        label = "automatic=" + std::string(wc::to_string(wc::resolve_automatic(bytes, t.size(), opts[a])));
      if (r == 0) bench::row(f, impl, f.transport, label, bytes, medians[a]);
    }
    if (f.reference && t.size() > 1) {
      const int next = (r + 1) % t.size(), prev = (r + t.size() - 1) % t.size();
      const auto until = wc::clock_type::now() + std::chrono::minutes(5);
      auto once = [&] {
        t.sendrecv(next, std::as_bytes(std::span<const float>(buf.data(), n)), prev,
                   std::span<std::byte>(in.data(), bytes), wc::msg_tag{77, 0}, until);
      };
      once();
      const double s = time_batches(t, f, calls, 1, [&](std::size_t) { once(); })[0];
      if (r == 0) bench::row(f, "reference", f.transport, "ring_sendrecv", bytes, s, false);
    }
  }
}

void bind_to_core(int rank, int ranks) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0 || ranks > CPU_COUNT(&allowed)) return;
  int seen = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed)) continue;
    if (seen++ == rank) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      ::sched_setaffinity(0, sizeof one, &one);
      return;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const auto f = bench::parse(argc, argv);
  const std::string tag = std::to_string(::getpid());
  std::uint16_t port = 0;
  {
    auto fd = wc::detail::listen_tcp(*wc::detail::parse_ipv4("127.0.0.1"), 0, "bench");
    port = wc::detail::local_port(fd.get());
  }
  const auto res = wc::fork_ranks(
      f.ranks,
      [&](int r) {
        if (f.bind) bind_to_core(r, f.ranks);
        wc::wait_options w;
        for (auto m : {wc::wait_mode::automatic, wc::wait_mode::spin, wc::wait_mode::yield, wc::wait_mode::block})
          if (wc::to_string(m) == f.wait) w.mode = m;
        if (f.transport == "shm") {
          wc::shm_options o;
          o.waiting = w;
          if (f.ring > 0) o.ring_bytes = f.ring;
          wc::shm_transport t("/weft-bench-" + tag, r, f.ranks, o);
          sweep(t, f);
        } else {
          wc::tcp_options o;
          o.waiting = w;
          if (f.conns > 0) o.connections = f.conns;
          if (f.sockbuf > 0) o.send_buffer = o.recv_buffer = f.sockbuf;
          o.bind = "127.0.0.1";
          wc::tcp_transport t(r, f.ranks, wc::tcp_rendezvous::rank0("127.0.0.1", port), o);
          sweep(t, f);
        }
      },
      std::chrono::minutes(20));
  return res.ok() ? 0 : 1;
}

// DiLoCo over an elastic weft group: N worker processes train one small MLP on generated data.
// Each round a worker takes H local AdamW steps, then the group averages the pseudo-gradient
// (global params - local params) and applies an outer Nesterov step (Douillard et al., "DiLoCo",
// 2023). Options: one-step-delayed outer sync that overlaps the next inner steps (Kale et al.,
// "Eager updates for overlapped communication", 2025) and Streaming DiLoCo (Douillard et al. 2025):
// one parameter fragment per round, exchanged as int8 through the quantized ring allreduce.
// The launcher kills a worker with SIGKILL mid-run and later starts a new one, which pulls the
// state; the loss curve goes to a CSV and (with python3 + matplotlib) a PNG.
#include <weft/comm/elastic.hpp>
#include <weft/comm/launcher.hpp>

// g++ 12 reports a false -Wmaybe-uninitialized inside its AVX-512 intrinsics when Eigen is compiled
// for AVX-512 (GCC bug 105593); silenced for Eigen's text only.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <Eigen/Dense>
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic pop
#endif

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace we = weft::comm::elastic;
namespace cz = weft::comm::compress;
using namespace std::chrono_literals;

namespace {

// ---- the model: 16 -> 32 (tanh) -> 1, all parameters in one flat vector -------------------------
constexpr int in_dim = 16, hidden = 32;
constexpr int n_params = hidden * in_dim + hidden + hidden + 1;

struct settings {
  std::string mode = "streaming";  // plain | delayed | streaming
  int workers = 4;
  int rounds = 60;    // outer steps
  int inner = 24;     // H: inner steps per outer step (streaming: per fragment cycle)
  int fragments = 3;  // streaming: parameter fragments, one synced per round
  int batch = 32;
  double inner_lr = 3e-3, outer_lr = 0.7, outer_momentum = 0.9;
  bool kill = true;
  std::string out = "diloco_out";
};

// The teacher every worker samples from; each worker sees its own stream of x.
float teacher(const Eigen::VectorXf& x) {
  static const Eigen::VectorXf a = [] {
    std::mt19937 g(99);
    std::normal_distribution<float> d(0, 0.5f);
    Eigen::VectorXf v(in_dim);
    for (int i = 0; i < in_dim; ++i) v[i] = d(g);
    return v;
  }();
  const float s = a.dot(x);
  return std::sin(2.0f * s) + 0.3f * s * s;
}

struct mlp_view {
  Eigen::Map<Eigen::MatrixXf> w1;
  Eigen::Map<Eigen::VectorXf> b1;
  Eigen::Map<Eigen::RowVectorXf> w2;
  float& b2;
  explicit mlp_view(float* p)
      : w1(p, hidden, in_dim),
        b1(p + hidden * in_dim, hidden),
        w2(p + hidden * in_dim + hidden, hidden),
        b2(p[n_params - 1]) {}
};

// Mean squared error over a batch and its gradient (if grad != nullptr).
float loss_and_grad(std::vector<float>& params, const Eigen::MatrixXf& x, const Eigen::VectorXf& y,
                    std::vector<float>* grad) {
  mlp_view m(params.data());
  const Eigen::MatrixXf pre = (m.w1 * x).colwise() + Eigen::VectorXf(m.b1);
  const Eigen::MatrixXf h = pre.array().tanh();
  const Eigen::RowVectorXf out = (m.w2 * h).array() + m.b2;
  const Eigen::RowVectorXf err = out - y.transpose();
  const float n = static_cast<float>(x.cols());
  if (grad) {
    grad->assign(n_params, 0.0f);
    mlp_view g(grad->data());
    const Eigen::RowVectorXf dout = 2.0f * err / n;
    g.w2 = dout * h.transpose();
    g.b2 = dout.sum();
    const Eigen::MatrixXf dh = (m.w2.transpose() * dout).array() * (1.0f - h.array().square());
    g.w1 = dh * x.transpose();
    g.b1 = dh.rowwise().sum();
  }
  return err.squaredNorm() / n;
}

void sample(std::mt19937& g, int n, Eigen::MatrixXf& x, Eigen::VectorXf& y) {
  std::normal_distribution<float> d(0, 1);
  x.resize(in_dim, n);
  y.resize(n);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < in_dim; ++i) x(i, j) = d(g);
    y[j] = teacher(x.col(j));
  }
}

// ---- one worker process ------------------------------------------------------------------------
int run_worker(const settings& s, const std::string& name, int coord_port) {
  std::ofstream log(s.out + "/" + name + ".log");
  // Shared state: global params, outer momentum, and (delayed mode) the averaged pseudo-gradient
  // waiting to be applied. Revision = outer step. Everything here advances deterministically from
  // bit-identical inputs, which is what keeps the members' hashes equal.
  std::vector<float> global(n_params), momentum(n_params, 0.0f);
  {
    std::mt19937 g(1234);  // every member starts from the same init (a newcomer's is replaced anyway)
    std::normal_distribution<float> d(0, 0.3f);
    for (auto& p : global) p = d(g);
  }
  we::shared_state st;
  st.add("params", std::span<float>(global)).add("momentum", std::span<float>(momentum));
  we::group_options o;
  o.coordinator_port = coord_port;
  o.name = name;
  o.heartbeat_interval = 100ms;
  o.collective_timeout = 2s;
  o.connect_timeout = 2s;
  o.round_timeout = 20s;
  we::elastic_group group(st, o);

  Eigen::MatrixXf ex;
  Eigen::VectorXf ey;
  std::mt19937 eval_gen(7);
  sample(eval_gen, 512, ex, ey);
  std::vector<float> local = global, grad, adam_m(n_params, 0.0f), adam_v(n_params, 0.0f);
  std::vector<float> prev_delta;  // delayed mode: my pseudo-gradient of the previous round (+ count)
  long adam_t = 0;
  std::uint64_t seen_revision = ~0ull;
  const std::size_t frag_len = (n_params + static_cast<std::size_t>(s.fragments) - 1) / s.fragments;
  const int inner_steps = s.mode == "streaming" ? std::max(1, s.inner / s.fragments) : s.inner;
  cz::int8_quantizer int8(cz::quant_scheme::absmax, 64);
  std::uint64_t wire_bytes = 0;

  auto inner_phase = [&](std::uint64_t round) {
    std::mt19937 g(static_cast<unsigned>(std::hash<std::string>{}(name)*31 + round));  // redo-safe
    Eigen::MatrixXf x;
    Eigen::VectorXf y;
    const float b1 = 0.9f, b2 = 0.999f;
    for (int k = 0; k < inner_steps; ++k) {
      sample(g, s.batch, x, y);
      loss_and_grad(local, x, y, &grad);
      ++adam_t;
      const float c1 = 1 - std::pow(b1, static_cast<float>(adam_t)), c2 = 1 - std::pow(b2, static_cast<float>(adam_t));
      for (int i = 0; i < n_params; ++i) {
        adam_m[i] = b1 * adam_m[i] + (1 - b1) * grad[i];
        adam_v[i] = b2 * adam_v[i] + (1 - b2) * grad[i] * grad[i];
        local[i] -= static_cast<float>(s.inner_lr) *
                    ((adam_m[i] / c1) / (std::sqrt(adam_v[i] / c2) + 1e-8f) + 1e-4f * local[i]);
      }
    }
  };
  // Nesterov outer step on the averaged pseudo-gradient over [lo, hi).
  auto outer_step = [&](const std::vector<float>& avg, std::size_t lo, std::size_t hi) {
    const auto mu = static_cast<float>(s.outer_momentum), lr = static_cast<float>(s.outer_lr);
    for (std::size_t i = lo; i < hi; ++i) {
      const float d = avg[i - lo];
      momentum[i] = mu * momentum[i] + d;
      global[i] -= lr * (mu * momentum[i] + d);
    }
  };

  while (st.revision() < static_cast<std::uint64_t>(s.rounds)) {
    try {
      const auto info = group.sync();
      for (const auto& d : info.departed) log << "# " << name << " saw " << d << " leave the group\n";
      if (info.pulled_state) log << "# " << name << " pulled the state at outer step " << st.revision() << "\n";
      const std::uint64_t round = st.revision();
      if (info.rank == 0)
        log << round << ' ' << loss_and_grad(global, ex, ey, nullptr) << ' ' << info.size << ' ' << st.hash()
            << std::endl;
      if (info.pulled_state || seen_revision == ~0ull) local = global;
      seen_revision = round;

      if (s.mode == "plain") {
        const std::vector<float> start = local = global;
        inner_phase(round);
        std::vector<float> delta(n_params);
        for (int i = 0; i < n_params; ++i) delta[i] = start[i] - local[i];
        const std::uint32_t ch = group.next_channel();
        cz::metered_transport<we::mesh_transport> meter(group.transport());
        group.run_collective(
            std::span<float>(delta),
            [&] {
              weft::comm::options opt;
              opt.channel = ch;
              opt.timeout = 2s;
              opt.algo = weft::comm::algorithm::ring;
              weft::comm::allreduce(meter, std::span<float>(delta), weft::op::avg{}, opt);
            },
            ch);
        wire_bytes += meter.bytes_sent();
        outer_step(delta, 0, n_params);
        local = global;
      } else if (s.mode == "delayed") {
        // Start averaging last round's pseudo-gradient (sum and count: a newcomer contributes 0, 0),
        // take this round's inner steps meanwhile, then apply the average: a one-step delay.
        std::vector<float> pending = prev_delta.empty() ? std::vector<float>(n_params + 1, 0.0f) : prev_delta;
        const std::uint32_t ch = group.next_channel();
        cz::metered_transport<we::mesh_transport> meter(group.transport());
        auto comm = std::async(std::launch::async, [&] {
          weft::comm::options opt;
          opt.channel = ch;
          opt.timeout = 2s;
          opt.algo = weft::comm::algorithm::ring;
          group.run_collective(
              std::span<float>(pending),
              [&] { weft::comm::allreduce(meter, std::span<float>(pending), weft::op::sum{}, opt); }, ch);
        });
        const std::vector<float> start = local = global;
        inner_phase(round);
        comm.get();  // rethrows a failed collective: the round is redone after the next sync
        wire_bytes += meter.bytes_sent();
        prev_delta.assign(n_params + 1, 1.0f);
        for (int i = 0; i < n_params; ++i) prev_delta[i] = start[i] - local[i];
        if (pending[n_params] > 0) {
          std::vector<float> avg(n_params);
          for (int i = 0; i < n_params; ++i) avg[i] = pending[i] / pending[n_params];
          outer_step(avg, 0, n_params);
        }
        local = global;
      } else {  // streaming: fragment round % F, int8 on the wire, owner-quantized ring (bit parity)
        const std::size_t f = round % static_cast<std::uint64_t>(s.fragments);
        const std::size_t lo = f * frag_len, hi = std::min<std::size_t>(n_params, lo + frag_len);
        inner_phase(round);
        std::vector<float> delta(hi - lo);
        for (std::size_t i = lo; i < hi; ++i) delta[i - lo] = global[i] - local[i];
        const std::uint32_t ch = group.next_channel();
        cz::metered_transport<we::mesh_transport> meter(group.transport());
        group.run_collective(
            std::span<float>(delta),
            [&] {
              cz::compress_options opt;
              opt.base.channel = ch;
              opt.base.timeout = 2s;
              opt.how = cz::strategy::ring;
              cz::compressed_allreduce(meter, std::span<float>(delta), int8, weft::op::avg{}, opt);
            },
            ch);
        wire_bytes += meter.bytes_sent();
        outer_step(delta, lo, hi);
        for (std::size_t i = lo; i < hi; ++i) local[i] = global[i];  // only this fragment is re-synced
      }
      st.advance();
    } catch (const weft::error& e) {
      log << "# " << name << " round failed, will retry after re-forming: " << e.what() << "\n";
      if (!group.connected()) return 3;
      prev_delta.clear();  // a lost delayed round is dropped, not replayed
    }
  }
  group.sync();
  log << "DONE " << st.revision() << ' ' << st.hash() << ' ' << loss_and_grad(global, ex, ey, nullptr) << ' '
      << wire_bytes << std::endl;
  return 0;
}

// ---- the launcher --------------------------------------------------------------------------------
pid_t spawn_worker(const settings& s, const std::string& name, int port) {
  std::vector<std::string> args{"/proc/self/exe",
                                "--worker",
                                name,
                                "--port",
                                std::to_string(port),
                                "--mode",
                                s.mode,
                                "--rounds",
                                std::to_string(s.rounds),
                                "--out",
                                s.out,
                                "--outer-lr",
                                std::to_string(s.outer_lr),
                                "--outer-momentum",
                                std::to_string(s.outer_momentum)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  pid_t pid = 0;
  if (::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
    std::fprintf(stderr, "cannot start worker %s\n", name.c_str());
    std::exit(1);
  }
  return pid;
}

struct row {
  double loss;
  int members;
  std::string hash;
};

std::map<int, row> read_curve(const settings& s, int workers_started, std::set<std::string>* bad_hash) {
  std::map<int, row> curve;
  for (int k = 0; k < workers_started; ++k) {
    std::ifstream in(s.out + "/w" + std::to_string(k) + ".log");
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      int step = 0, members = 0;
      double loss = 0;
      std::string hash;
      if (line.empty() || line[0] == '#' || line[0] == 'D' || !(ls >> step >> loss >> members >> hash)) continue;
      auto [it, fresh] = curve.try_emplace(step, row{loss, members, hash});
      if (!fresh && it->second.hash != hash && bad_hash) bad_hash->insert(std::to_string(step));
    }
  }
  return curve;
}

int latest_step(const settings& s, int workers_started) {
  const auto c = read_curve(s, workers_started, nullptr);
  return c.empty() ? -1 : c.rbegin()->first;
}

int run_launcher(const settings& s) {
  std::filesystem::create_directories(s.out);
  for (auto& f : std::filesystem::directory_iterator(s.out))
    if (f.path().extension() == ".log") std::filesystem::remove(f.path());
  // The job's secret, shared with the workers spawned below through the environment, so no other
  // process can join the group (weft refuses to form one without a secret unless told otherwise).
  if (std::getenv("WEFT_JOB_SECRET") == nullptr) ::setenv("WEFT_JOB_SECRET", weft::comm::make_job_secret().c_str(), 1);
  we::coordinator_options co;
  co.min_members = s.workers;
  co.heartbeat_timeout = 1s;
  we::coordinator coord(co);
  coord.start();
  std::printf("DiLoCo: %d workers, %d outer steps, mode %s (%s), MLP with %d parameters\n", s.workers, s.rounds,
              s.mode.c_str(),
              s.mode == "streaming" ? "3 fragments, int8 quantized ring"
              : s.mode == "delayed" ? "one-step-delayed outer sync overlapping the inner steps"
                                    : "fp32 allreduce after every H inner steps",
              n_params);
  std::printf("coordinator on 127.0.0.1:%d; each worker is its own process\n", coord.port());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int k = 0; k < s.workers; ++k) pids.push_back(spawn_worker(s, "w" + std::to_string(k), coord.port()));
  int started = s.workers;
  auto wait_step = [&](int step) {
    while (latest_step(s, started) < step && std::chrono::steady_clock::now() - t0 < 40s)
      std::this_thread::sleep_for(10ms);
  };
  if (s.kill && s.workers >= 2) {
    wait_step(s.rounds / 3);
    ::kill(pids[1], SIGKILL);
    std::printf("outer step ~%d: killed worker w1 (pid %d) with SIGKILL\n", latest_step(s, started), pids[1]);
    wait_step(2 * s.rounds / 3);
    pids.push_back(spawn_worker(s, "w" + std::to_string(started), coord.port()));
    std::printf("outer step ~%d: started a new worker w%d; it joins at the next step boundary and pulls the state\n",
                latest_step(s, started), started);
    ++started;
  }
  int failed = 0;
  for (std::size_t k = 0; k < pids.size(); ++k) {
    int st = 0;
    while (::waitpid(pids[k], &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() - t0 > 50s) ::kill(pids[k], SIGKILL);
      std::this_thread::sleep_for(10ms);
    }
    const bool killed_on_purpose = s.kill && k == 1;
    if (!killed_on_purpose && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) ++failed;
  }
  coord.stop();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::set<std::string> bad;
  const auto curve = read_curve(s, started, &bad);
  std::ofstream csv(s.out + "/loss.csv");
  csv << "outer_step,eval_loss,members\n";
  for (const auto& [step, r] : curve) csv << step << ',' << r.loss << ',' << r.members << '\n';
  csv.close();
  std::set<std::string> finals;
  double final_loss = 0;
  unsigned long long bytes = 0;
  for (int k = 0; k < started; ++k) {
    std::ifstream in(s.out + "/w" + std::to_string(k) + ".log");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("DONE", 0) != 0) continue;
      std::istringstream ls(line.substr(5));
      std::string rev, hash;
      unsigned long long b = 0;
      ls >> rev >> hash >> final_loss >> b;
      if (k == 0) bytes = b;
      finals.insert(rev + " " + hash);
    }
    in.clear();
  }
  std::string events;
  for (const auto& e : coord.events())
    if (e.find("dropped") != std::string::npos || e.find("admitted w") != std::string::npos) events += "  " + e + "\n";
  std::printf("membership events:\n%s", events.c_str());
  if (curve.empty()) {
    std::printf("no progress was logged; see %s/*.log\n", s.out.c_str());
    return 1;
  }
  std::printf("eval loss: %.4f at outer step 0 -> %.4f at the end (%zu outer steps logged)\n",
              curve.begin()->second.loss, final_loss, curve.size());
  std::printf(
      "every member that finished holds the same state: %s (%zu distinct final hashes); steps with "
      "disagreeing hashes: %zu\n",
      finals.size() == 1 ? "yes" : "NO", finals.size(), bad.size());
  std::printf("pseudo-gradient bytes w0 sent, measured on its transport (%s): %llu\n", s.mode.c_str(), bytes);
  std::printf("wall time %.1f s; loss curve: %s/loss.csv\n", secs, s.out.c_str());
  {
    std::ofstream py(s.out + "/plot_loss.py");
    py << "import csv, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
       << "rows = list(csv.DictReader(open('" << s.out << "/loss.csv')))\n"
       << "x = [int(r['outer_step']) for r in rows]; y = [float(r['eval_loss']) for r in rows]\n"
       << "m = [int(r['members']) for r in rows]\n"
       << "fig, ax = plt.subplots(figsize=(7, 4)); ax.plot(x, y, label='eval loss'); ax.set_yscale('log')\n"
       << "ax.set_xlabel('outer step'); ax.set_ylabel('eval MSE (log scale)')\n"
       << "ax2 = ax.twinx(); ax2.step(x, m, color='gray', alpha=0.5, where='post'); ax2.set_ylabel('members')\n"
       << "ax2.set_ylim(0, max(m) + 1)\n"
       << "ax.set_title('DiLoCo (" << s.mode << "): a worker killed, a newcomer joins')\n"
       << "fig.tight_layout(); fig.savefig('" << s.out << "/loss.png', dpi=100)\n";
  }
  // The first python3 on PATH may lack matplotlib (e.g. pyenv); the system one is the fallback.
  const std::string plot = "python3 " + s.out + "/plot_loss.py >/dev/null 2>&1 || /usr/bin/python3 " + s.out +
                           "/plot_loss.py >/dev/null 2>&1";
  if (std::system(plot.c_str()) == 0)
    std::printf("loss curve plot: %s/loss.png\n", s.out.c_str());
  else
    std::printf("(python3 with matplotlib not found: no PNG, the CSV has the curve)\n");
  const bool ok = failed == 0 && finals.size() == 1 && bad.empty() && final_loss < curve.begin()->second.loss;
  std::printf("%s\n", ok ? "DiLoCo example: OK" : "DiLoCo example: FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  std::string worker;
  int port = 0;
  bool rounds_given = false, outer_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--worker")
      worker = next();
    else if (a == "--port")
      port = std::stoi(next());
    else if (a == "--mode")
      s.mode = next();
    else if (a == "--rounds")
      s.rounds = std::stoi(next()), rounds_given = true;
    else if (a == "--workers")
      s.workers = std::stoi(next());
    else if (a == "--out")
      s.out = next();
    else if (a == "--no-kill")
      s.kill = false;
    else if (a == "--outer-lr")
      s.outer_lr = std::stod(next()), outer_given = true;
    else if (a == "--outer-momentum")
      s.outer_momentum = std::stod(next()), outer_given = true;
    else {
      std::fprintf(stderr,
                   "usage: diloco [--mode plain|delayed|streaming] [--rounds N] [--workers N] [--no-kill] [--out DIR]\n"
                   "              [--outer-lr X] [--outer-momentum X]\n");
      return 2;
    }
  }
  if (s.mode == "delayed" && !outer_given) {
    // A one-step-stale pseudo-gradient with heavy Nesterov momentum oscillates (measured: loss
    // 3.50 -> 3.29 after 60 steps at 0.7/0.9); a gentler outer step converges (3.50 -> 0.36).
    s.outer_lr = 0.4;
    s.outer_momentum = 0.5;
  }
  if (s.mode == "streaming" && !rounds_given) s.rounds = 180;  // 8 inner steps per round: same compute as 60 x 24
  if (s.mode != "plain" && s.mode != "delayed" && s.mode != "streaming") {
    std::fprintf(stderr, "unknown mode '%s': plain, delayed or streaming\n", s.mode.c_str());
    return 2;
  }
  try {
    return worker.empty() ? run_launcher(s) : run_worker(s, worker, port);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", worker.empty() ? "launcher" : worker.c_str(), e.what());
    return 1;
  }
}

// Conformance, in the manner of nccl-tests and MPICH's collective tests: transports (inproc, shm,
// tcp) × rank counts (1, 2, 3, 4, 5, 7, 8) × every collective (allreduce with each algorithm,
// reduce_scatter, allgather, broadcast and reduce at every root, alltoall, alltoallv, barrier) ×
// counts (0, 1, n−1, n+1, 1023, 4097, and 2^20+3 in the full run) × the eight dtypes × five ops ×
// bad input (one rank's count, root or algorithm differs, or its root is outside the group). Every
// rank's result bits are hashed and compared with every other rank's and with a serial reference;
// every bad case must fail on every rank, blaming the same rank. Inputs are small integers
// (−2..2, or 0..3 unsigned), so every sum and product is exact in every type and wraps (defined)
// in the integer ones: the reference is exact whatever order an algorithm combines in.
// `make test` runs a fixed sample of the product (well under a minute); the soak run
// (WEFT_CONFORMANCE_FULL=1 in the environment) runs all of it. WEFT_CONFORMANCE_SEED picks another sample;
// WEFT_CONFORMANCE_TRANSPORTS (e.g. "inproc,shm") runs only those transports.
#include "job_secret.hpp"
#include "rank_threads.hpp"
#include "run_length.hpp"

#include <weft/comm/collectives.hpp>
#include <weft/comm/launcher.hpp>
#include <weft/comm/shm_transport.hpp>
#include <weft/comm/tcp_transport.hpp>
#include <weft/core/half.hpp>
#include <weft/core/hash.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace wc = weft::comm;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// The soak run (comm.conformance_full) sets WEFT_CONFORMANCE_FULL=1.
const bool full_run = weft_test::env_flag("WEFT_CONFORMANCE_FULL");

enum class coll : std::uint8_t {
  allreduce,
  reduce_scatter,
  allgather,
  broadcast,
  reduce,
  alltoall,
  alltoallv,
  barrier
};
enum class fault : std::uint8_t { none, count, root, bad_root, bad_algorithm };

struct conf_case {
  coll c = coll::allreduce;
  wc::algorithm algo = wc::algorithm::ring;
  weft::dtype type = weft::dtype::f32;
  weft::reduce_kind op = weft::reduce_kind::sum;
  std::size_t count = 0;
  int root = 0;
  fault bad = fault::none;
  std::uint64_t seed = 0;  // of the input values
};

constexpr wc::algorithm algorithms[] = {wc::algorithm::ring,
                                        wc::algorithm::tree,
                                        wc::algorithm::star,
                                        wc::algorithm::halving_doubling,
                                        wc::algorithm::recursive_doubling,
                                        wc::algorithm::hierarchical};
constexpr weft::dtype dtypes[] = {weft::dtype::f16, weft::dtype::bf16, weft::dtype::f32, weft::dtype::f64,
                                  weft::dtype::i8,  weft::dtype::u8,   weft::dtype::i32, weft::dtype::i64};
constexpr weft::reduce_kind ops[] = {weft::reduce_kind::sum, weft::reduce_kind::prod, weft::reduce_kind::min,
                                     weft::reduce_kind::max, weft::reduce_kind::avg};

bool reduces(coll c) { return c == coll::allreduce || c == coll::reduce_scatter || c == coll::reduce; }
bool rooted(coll c) { return c == coll::broadcast || c == coll::reduce; }
const char* name(coll c) {
  constexpr const char* names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                   "reduce",    "alltoall",       "alltoallv", "barrier"};
  return names[static_cast<int>(c)];
}
std::string describe(const conf_case& k) {
  std::ostringstream s;
  s << name(k.c);
  if (k.c == coll::allreduce) s << "[" << wc::to_string(k.algo) << "]";
  if (rooted(k.c)) s << " root " << k.root;
  s << " " << weft::to_string(k.type) << " count " << k.count;
  if (reduces(k.c)) s << " " << weft::to_string(k.op);
  constexpr const char* faults[] = {"", ", one rank's count differs", ", one rank's root differs",
                                    ", one rank's root is outside the group", ", one rank's algorithm is 42"};
  s << faults[static_cast<int>(k.bad)];
  return s.str();
}

// The whole product for p ranks, in a fixed order.
std::vector<conf_case> product(int p) {
  std::vector<conf_case> all;
  std::vector<std::size_t> counts{
      0, 1, static_cast<std::size_t>(p > 1 ? p - 1 : 2), static_cast<std::size_t>(p + 1), 1023, 4097};
  if (full_run) counts.push_back((std::size_t{1} << 20) + 3);
  auto add = [&](conf_case k) {
    k.seed = weft::hash_combine(static_cast<std::uint64_t>(p), all.size());
    all.push_back(k);
  };
  for (coll c : {coll::allreduce, coll::reduce_scatter, coll::allgather, coll::broadcast, coll::reduce, coll::alltoall,
                 coll::alltoallv, coll::barrier}) {
    const int algos = c == coll::allreduce ? static_cast<int>(std::size(algorithms)) : 1;
    const int roots = rooted(c) ? p : 1;
    for (int a = 0; a < algos; ++a)
      for (int root = 0; root < roots; ++root)
        for (std::size_t n : c == coll::barrier ? std::vector<std::size_t>{0} : counts)
          for (weft::dtype t : dtypes) {
            if (c == coll::barrier && t != weft::dtype::u8) continue;
            for (weft::reduce_kind op : ops) {
              if (!reduces(c) && op != weft::reduce_kind::sum) continue;
              conf_case k;
              k.c = c;
              k.algo = algorithms[a];
              k.type = t;
              k.op = op;
              k.count = n;
              k.root = root;
              add(k);
              if (p == 1 || n > 4097) continue;
              // Bad input on one rank, for each kind the collective has.
              if (c != coll::barrier) {
                k.bad = fault::count;
                add(k);
              }
              if (rooted(c)) {
                k.bad = fault::root;
                add(k);
                k.bad = fault::bad_root;
                add(k);
              }
              if (c == coll::allreduce) {
                k.bad = fault::bad_algorithm;
                add(k);
              }
            }
          }
  }
  return all;
}

std::uint64_t sample_seed() {
  const char* s = std::getenv("WEFT_CONFORMANCE_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 2028;
}

// The cases run for p ranks: all of them in the full run, else about `keep` of them, drawn by a
// seeded hash so the sample is fixed (and another seed gives another one).
std::vector<conf_case> cases_for(int p, std::size_t keep) {
  auto all = product(p);
  if (full_run || all.size() <= keep) return all;
  std::vector<conf_case> out;
  const std::uint64_t seed = sample_seed();
  for (std::size_t i = 0; i < all.size(); ++i)
    if (weft::hash_combine(seed, weft::hash_combine(static_cast<std::uint64_t>(p), i)) % all.size() < keep)
      out.push_back(all[i]);
  return out;
}

bool wanted(const std::string& transport) {
  const char* only = std::getenv("WEFT_CONFORMANCE_TRANSPORTS");
  if (only == nullptr) return true;
  const std::string list = std::string(",") + only + ",";
  return list.find("," + transport + ",") != std::string::npos;
}

int differing_rank(int p) { return p / 2; }  // rank 0 too is a sender in some collectives; p/2 >= 1 for p >= 2

// Input value i of rank r: −2..2 (0..3 for unsigned types), from the case's seed.
template <class T>
T input(const conf_case& k, int r, std::size_t i) {
  const std::uint64_t h = weft::hash_combine(weft::hash_combine(k.seed, static_cast<std::uint64_t>(r)), i);
  if constexpr (std::is_unsigned_v<T>) return static_cast<T>(h % 4);
  const int v = static_cast<int>(h % 5) - 2;
  if constexpr (std::is_same_v<T, weft::half> || std::is_same_v<T, weft::bfloat16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

// alltoallv: how many elements rank s sends to rank d (and d expects from s).
std::size_t vcount(const conf_case& k, int s, int d) { return (k.count + static_cast<std::size_t>(s * 3 + d)) % 5; }

template <class T>
std::uint64_t hash_of(const std::vector<T>& v) {
  return weft::hash_bytes(std::as_bytes(std::span<const T>(v)));
}

// What rank r holds after the case, computed serially (the reference).
template <class T>
std::vector<T> expected(const conf_case& k, int p, int r) {
  using A = weft::accumulator_t<T>;
  const std::size_t n = k.count;
  const auto P = static_cast<std::size_t>(p);
  auto fold = [&](auto op, auto elem) {  // op over the ranks' elem(q), in rank order, finalized
    A acc = static_cast<A>(elem(0));
    for (int q = 1; q < p; ++q) acc = op(acc, static_cast<A>(elem(q)));
    return static_cast<T>(weft::finalize(op, acc, P));
  };
  std::vector<T> out;
  switch (k.c) {
    case coll::allreduce:
      weft::visit<T>(k.op, [&](auto op) {
        for (std::size_t i = 0; i < n; ++i) out.push_back(fold(op, [&](int q) { return input<T>(k, q, i); }));
      });
      break;
    case coll::reduce_scatter:
      weft::visit<T>(k.op, [&](auto op) {
        for (std::size_t i = 0; i < n; ++i)
          out.push_back(fold(op, [&](int q) { return input<T>(k, q, static_cast<std::size_t>(r) * n + i); }));
      });
      break;
    case coll::allgather:
      for (int q = 0; q < p; ++q)
        for (std::size_t i = 0; i < n; ++i) out.push_back(input<T>(k, q, i));
      break;
    case coll::broadcast:
      for (std::size_t i = 0; i < n; ++i) out.push_back(input<T>(k, k.root, i));
      break;
    case coll::reduce:
      weft::visit<T>(k.op, [&](auto op) {
        for (std::size_t i = 0; i < n; ++i)
          out.push_back(r == k.root ? fold(op, [&](int q) { return input<T>(k, q, i); }) : input<T>(k, r, i));
      });
      break;
    case coll::alltoall:
      for (int q = 0; q < p; ++q)
        for (std::size_t i = 0; i < n; ++i) out.push_back(input<T>(k, q, static_cast<std::size_t>(r) * n + i));
      break;
    case coll::alltoallv:
      for (int q = 0; q < p; ++q) {
        std::size_t off = 0;  // where q's block for r starts in q's input
        for (int d = 0; d < r; ++d) off += vcount(k, q, d);
        for (std::size_t i = 0; i < vcount(k, q, r); ++i) out.push_back(input<T>(k, q, off + i));
      }
      break;
    case coll::barrier:
      break;
  }
  return out;
}

// One rank's outcome: 0 and the hash of what it holds, or the error's code and blamed rank.
struct outcome {
  int code = 0;
  int blamed = -1;
  std::uint64_t hash = 0;
};

template <class T, class Tr>
std::uint64_t run_typed(Tr& t, const conf_case& k, bool differs) {
  const int p = static_cast<int>(t.size()), r = static_cast<int>(t.rank());
  const auto P = static_cast<std::size_t>(p);
  const std::size_t n = k.count + (differs && k.bad == fault::count ? 1 : 0);
  wc::options o;
  o.timeout = 30s;
  constexpr std::size_t segments[] = {std::size_t{1} << 19, 4096, 1000};  // several segments for larger counts
  o.segment_bytes = segments[k.seed % 3];
  o.algo = differs && k.bad == fault::bad_algorithm ? static_cast<wc::algorithm>(42) : k.algo;
  std::vector<int> hosts(P);
  for (std::size_t q = 0; q < P; ++q) hosts[q] = static_cast<int>(q % 3);  // interleaved hosts
  o.hosts = hosts;
  int root = k.root;
  if (differs && k.bad == fault::root) root = (k.root + 1) % p;
  if (differs && k.bad == fault::bad_root) root = p + 3;
  auto fill = [&](std::size_t len) {
    std::vector<T> v(len);
    for (std::size_t i = 0; i < len; ++i) v[i] = input<T>(k, r, i);
    return v;
  };
  std::vector<T> held;
  switch (k.c) {
    case coll::allreduce:
      held = fill(n);
      weft::visit<T>(k.op, [&](auto op) { wc::allreduce(t, std::span<T>(held), op, o); });
      break;
    case coll::reduce_scatter: {
      const auto in = fill(P * n);
      held.resize(n);
      weft::visit<T>(k.op, [&](auto op) { wc::reduce_scatter(t, std::span<const T>(in), std::span<T>(held), op, o); });
      break;
    }
    case coll::allgather: {
      const auto in = fill(n);
      held.resize(P * n);
      wc::allgather(t, std::span<const T>(in), std::span<T>(held), o);
      break;
    }
    case coll::broadcast:
      held = fill(n);
      wc::broadcast(t, std::span<T>(held), root, o);
      break;
    case coll::reduce:
      held = fill(n);
      weft::visit<T>(k.op, [&](auto op) { wc::reduce(t, std::span<T>(held), root, op, o); });
      break;
    case coll::alltoall: {
      const auto in = fill(P * n);
      held.resize(P * n);
      wc::alltoall(t, std::span<const T>(in), std::span<T>(held), o);
      break;
    }
    case coll::alltoallv: {
      std::vector<std::size_t> sends(P), recvs(P);
      for (int q = 0; q < p; ++q) {
        sends[static_cast<std::size_t>(q)] = vcount(k, r, q);
        recvs[static_cast<std::size_t>(q)] = vcount(k, q, r);
      }
      if (differs && k.bad == fault::count) sends[static_cast<std::size_t>((r + 1) % p)] += 1;
      const auto in = fill(std::accumulate(sends.begin(), sends.end(), std::size_t{0}));
      held.resize(std::accumulate(recvs.begin(), recvs.end(), std::size_t{0}));
      wc::alltoallv(t, std::span<const T>(in), std::span<const std::size_t>(sends), std::span<T>(held),
                    std::span<const std::size_t>(recvs), o);
      break;
    }
    case coll::barrier:
      wc::barrier(t, o);
      break;
  }
  return hash_of(held);
}

template <class Tr>
outcome run_case(Tr& t, const conf_case& k) {
  outcome out;
  const bool differs = k.bad != fault::none && static_cast<int>(t.rank()) == differing_rank(static_cast<int>(t.size()));
  try {
    out.hash = weft::visit(k.type, [&](auto tag) { return run_typed<typename decltype(tag)::type>(t, k, differs); });
  } catch (const wc::comm_error& e) {
    out.code = e.code().value();
    out.blamed = e.info().blamed;
  } catch (const weft::error& e) {
    out.code = e.code().value();
    out.blamed = -2;  // a plain weft::error: this rank's own arguments
  }
  return out;
}

// Checks every rank's outcome of case k against the reference; returns false on a finding.
bool check(const conf_case& k, int p, const std::vector<outcome>& got, const std::string& where) {
  const int d = differing_rank(p);
  bool ok = true;
  // Every rank ends with the same data in these: the reference is computed once (it is O(p·n)).
  const bool same_everywhere = k.c == coll::allreduce || k.c == coll::allgather || k.c == coll::broadcast;
  std::uint64_t want_all = 0;
  for (int r = 0; r < p; ++r) {
    const outcome& o = got[static_cast<std::size_t>(r)];
    INFO(where << " p=" << p << " " << describe(k) << ": rank " << r << " code " << o.code << " blamed " << o.blamed);
    if (k.bad == fault::none) {
      const std::uint64_t want = same_everywhere && r > 0 ? want_all : weft::visit(k.type, [&](auto tag) {
        return hash_of(expected<typename decltype(tag)::type>(k, p, r));
      });
      want_all = want;
      CHECK(o.code == 0);
      CHECK(o.hash == want);  // the right bits, hence the same on every rank
      ok = ok && o.code == 0 && o.hash == want;
    } else {
      const bool refuses = k.bad == fault::bad_root || k.bad == fault::bad_algorithm;
      if (refuses && r == d) {  // its own argument error
        CHECK(o.blamed == -2);
        CHECK(o.code != 0);
        ok = ok && o.blamed == -2 && o.code != 0;
      } else {
        CHECK(o.code == static_cast<int>(weft::errc::mismatch));
        CHECK(o.blamed == d);  // no rank returns success; all blame the one that differs
        ok = ok && o.code == static_cast<int>(weft::errc::mismatch) && o.blamed == d;
      }
    }
  }
  return ok;
}

// Runs the cases on p in-process ranks; returns how many were checked.
std::size_t run_inproc(int p, const std::vector<conf_case>& cases) {
  std::vector<std::vector<outcome>> got(cases.size(), std::vector<outcome>(static_cast<std::size_t>(p)));
  auto errors = weft_test::run_ranks(p, [&](wc::inproc_transport& t) {
    for (std::size_t i = 0; i < cases.size(); ++i) got[i][static_cast<std::size_t>(t.rank())] = run_case(t, cases[i]);
  });
  REQUIRE(weft_test::all_ok(errors));
  for (std::size_t i = 0; i < cases.size(); ++i)
    if (!check(cases[i], p, got[i], "inproc")) break;  // the first finding of a transport is enough
  return cases.size();
}

std::uint16_t free_port() {
  auto fd = wc::detail::listen_tcp(*wc::detail::parse_ipv4("127.0.0.1"), 0, "test");
  return wc::detail::local_port(fd.get());
}

// Runs the cases on p forked ranks over shm or tcp, each rank writing its outcomes to a file.
std::size_t run_processes(const std::string& kind, int p, const std::vector<conf_case>& cases) {
  const fs::path dir = fs::temp_directory_path() / ("weft-conformance-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string shm_name = "/weft-conformance-" + std::to_string(::getpid());
  const auto port = free_port();
  const auto res = wc::fork_ranks(
      p,
      [&](int r) {
        std::ofstream out(dir / std::to_string(r));
        auto body = [&](auto& t) {
          for (const auto& k : cases) {
            const outcome o = run_case(t, k);
            out << o.code << ' ' << o.blamed << ' ' << o.hash << '\n';
          }
        };
        if (kind == "shm") {
          wc::shm_transport t(shm_name, r, p);
          body(t);
        } else {
          wc::tcp_transport t(r, p, wc::tcp_rendezvous::rank0("127.0.0.1", port));
          body(t);
        }
      },
      full_run ? std::chrono::milliseconds(3'600'000) : std::chrono::milliseconds(120'000));
  INFO(kind << " p=" << p);
  REQUIRE(res.ok());
  std::vector<std::ifstream> in;
  for (int r = 0; r < p; ++r) in.emplace_back(dir / std::to_string(r));
  for (const auto& k : cases) {
    std::vector<outcome> got(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) {
      auto& o = got[static_cast<std::size_t>(r)];
      in[static_cast<std::size_t>(r)] >> o.code >> o.blamed >> o.hash;
    }
    if (!check(k, p, got, kind)) break;
  }
  fs::remove_all(dir);
  return cases.size();
}

}  // namespace

TEST_CASE("conformance: every collective, count, dtype and op over inproc, shm and tcp, bits compared",
          "[comm][conformance]") {
  const auto start = std::chrono::steady_clock::now();
  std::size_t checked = 0, product_size = 0;
  if (wanted("inproc"))
    for (int p : {1, 2, 3, 4, 5, 7, 8}) {
      checked += run_inproc(p, cases_for(p, 600));
      product_size += product(p).size();
    }
  for (const std::string kind : {"shm", "tcp"}) {
    if (!wanted(kind)) continue;
    for (int p : {2, 3, 4, 5, 7, 8}) {
      checked += run_processes(kind, p, cases_for(p, kind == "tcp" ? 150 : 300));
      product_size += product(p).size();
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("conformance: %zu of the product's %zu cases (%s, seed %llu) in %.1f s\n", checked, product_size,
              full_run ? "full product" : "sample", static_cast<unsigned long long>(sample_seed()), secs);
}

TEST_CASE("conformance: 1000 collectives back to back agree and stay right", "[comm][conformance]") {
  for (const std::string kind : {"inproc", "shm", "tcp"}) {
    if (!wanted(kind)) continue;
    const int p = 4, calls = 1000;
    auto body = [&](auto& t) {
      for (int i = 0; i < calls; ++i) {
        std::vector<std::int64_t> v(static_cast<std::size_t>(1 + i % 17), t.rank() + i);
        wc::options o;
        o.algo = algorithms[static_cast<std::size_t>(i) % 5];  // all but hierarchical, in turn
        wc::allreduce(t, std::span<std::int64_t>(v), weft::op::sum{}, o);
        const std::int64_t want = 6 + 4 * static_cast<std::int64_t>(i);
        for (auto x : v)
          if (x != want) throw std::runtime_error("wrong sum at call " + std::to_string(i));
      }
    };
    if (kind == "inproc") {
      REQUIRE(weft_test::all_ok(weft_test::run_ranks(p, [&](wc::inproc_transport& t) { body(t); })));
      continue;
    }
    const std::string shm_name = "/weft-b2b-" + std::to_string(::getpid());
    const auto port = free_port();
    const auto res = wc::fork_ranks(
        p,
        [&](int r) {
          if (kind == "shm") {
            wc::shm_transport t(shm_name, r, p);
            body(t);
          } else {
            wc::tcp_transport t(r, p, wc::tcp_rendezvous::rank0("127.0.0.1", port));
            body(t);
          }
        },
        120s);
    INFO(kind);
    CHECK(res.ok());
  }
}

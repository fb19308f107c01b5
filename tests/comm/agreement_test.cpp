// Every collective agrees before it acts: when one rank disagrees (count, dtype, op, algorithm,
// segment size, host map, root, collective, alltoallv counts) or refuses its own arguments (a bad
// root, an algorithm value outside the enumeration), every rank of n = 2..8 fails within
// milliseconds, none returns success, every rank blames the same rank (the one that differs), and
// the transport stays usable. In-process ranks (threads); disagreement_test.cpp runs the same over
// shm and tcp processes.
#include "rank_threads.hpp"

#include <weft/comm/collectives.hpp>
#include <weft/comm/fault/fault_transport.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace wc = weft::comm;
using namespace std::chrono_literals;

namespace {

wc::options opts(wc::algorithm a = wc::algorithm::ring) {
  wc::options o;
  o.algo = a;
  o.timeout = 20s;  // far beyond what the agreement may take
  return o;
}

struct outcome {
  bool threw = false;
  int code = 0;
  bool is_comm_error = false;
  int blamed = -2, rank = -2;
  std::string field, phase, what;
  bool usable_after = false;
};

// One kind of disagreement: run(t, r, d) makes the call as rank r would when rank d is the one that
// differs. `refuses`: rank d's own arguments are bad (it throws that error; the others mismatch).
struct disagreement {
  const char* name;
  const char* field;
  std::function<void(wc::inproc_transport&, int r, int d)> run;
  weft::errc refuses = weft::errc{};  // the code rank d throws when it refuses; {} when it does not
};

std::vector<disagreement> cases() {
  std::vector<disagreement> c;
  auto f = [](int r, int d, std::size_t normal, std::size_t other) { return r == d ? other : normal; };
  c.push_back({"allreduce count", "count", [f](wc::inproc_transport& t, int r, int d) {
                 std::vector<float> v(f(r, d, 100, 101), 1.0f);
                 wc::allreduce(t, std::span<float>(v), weft::op::sum{}, opts());
               }});
  c.push_back({"allreduce dtype", "dtype", [](wc::inproc_transport& t, int r, int d) {
                 if (r == d) {
                   std::vector<std::int32_t> v(64, 1);
                   wc::allreduce(t, std::span<std::int32_t>(v), weft::op::sum{}, opts());
                 } else {
                   std::vector<float> v(64, 1.0f);
                   wc::allreduce(t, std::span<float>(v), weft::op::sum{}, opts());
                 }
               }});
  c.push_back({"allreduce op", "op", [](wc::inproc_transport& t, int r, int d) {
                 std::vector<float> v(64, 1.0f);
                 if (r == d)
                   wc::allreduce(t, std::span<float>(v), weft::op::max{}, opts());
                 else
                   wc::allreduce(t, std::span<float>(v), weft::op::sum{}, opts());
               }});
  c.push_back({"allreduce algorithm", "algorithm", [](wc::inproc_transport& t, int r, int d) {
                 std::vector<float> v(64, 1.0f);
                 wc::allreduce(t, std::span<float>(v), weft::op::sum{},
                               opts(r == d ? wc::algorithm::tree : wc::algorithm::ring));
               }});
  c.push_back({"allreduce segment size", "segment_bytes", [](wc::inproc_transport& t, int r, int d) {
                 std::vector<float> v(640, 1.0f);
                 auto o = opts();
                 o.segment_bytes = r == d ? 256 : 128;
                 wc::allreduce(t, std::span<float>(v), weft::op::sum{}, o);
               }});
  c.push_back({"hierarchical host map", "host map", [](wc::inproc_transport& t, int r, int d) {
                 std::vector<float> v(64, 1.0f);
                 std::vector<int> hosts(static_cast<std::size_t>(t.size()));
                 for (int q = 0; q < t.size(); ++q) hosts[static_cast<std::size_t>(q)] = r == d ? q % 2 : q / 2;
                 auto o = opts(wc::algorithm::hierarchical);
                 o.hosts = hosts;
                 wc::allreduce(t, std::span<float>(v), weft::op::sum{}, o);
               }});
  c.push_back({"allreduce algorithm value outside the enumeration (one rank)", "arguments",
               [](wc::inproc_transport& t, int r, int d) {
                 std::vector<float> v(64, 1.0f);
                 wc::allreduce(t, std::span<float>(v), weft::op::sum{},
                               opts(r == d ? static_cast<wc::algorithm>(42) : wc::algorithm::ring));
               },
               weft::errc::invalid_argument});
  c.push_back({"reduce_scatter count", "count", [f](wc::inproc_transport& t, int r, int d) {
                 const std::size_t b = f(r, d, 5, 6);
                 std::vector<float> in(b * static_cast<std::size_t>(t.size()), 1.0f), out(b);
                 wc::reduce_scatter(t, std::span<const float>(in), std::span<float>(out), weft::op::sum{}, opts());
               }});
  c.push_back({"allgather count", "count", [f](wc::inproc_transport& t, int r, int d) {
                 const std::size_t b = f(r, d, 5, 4);
                 std::vector<float> in(b, 1.0f), out(b * static_cast<std::size_t>(t.size()));
                 wc::allgather(t, std::span<const float>(in), std::span<float>(out), opts());
               }});
  c.push_back({"broadcast root", "root", [](wc::inproc_transport& t, int r, int d) {
                 std::vector<float> v(64, 1.0f);
                 const int root = d == 0 ? 1 : 0;  // everyone else's root is not the differing rank's
                 wc::broadcast(t, std::span<float>(v), r == d ? d : root, opts());
               }});
  c.push_back({"broadcast count", "count", [f](wc::inproc_transport& t, int r, int d) {
                 std::vector<float> v(f(r, d, 64, 63), 1.0f);
                 wc::broadcast(t, std::span<float>(v), 0, opts());
               }});
  c.push_back({"broadcast root outside the group (one rank)", "arguments",
               [](wc::inproc_transport& t, int r, int d) {
                 std::vector<float> v(64, 1.0f);
                 wc::broadcast(t, std::span<float>(v), r == d ? t.size() + 1 : 0, opts());
               },
               weft::errc::out_of_range});
  c.push_back({"reduce root", "root", [](wc::inproc_transport& t, int r, int d) {
                 std::vector<float> v(64, 1.0f);
                 const int root = d == 0 ? 1 : 0;
                 wc::reduce(t, std::span<float>(v), r == d ? d : root, weft::op::sum{}, opts());
               }});
  c.push_back({"reduce count", "count", [f](wc::inproc_transport& t, int r, int d) {
                 std::vector<float> v(f(r, d, 64, 65), 1.0f);
                 wc::reduce(t, std::span<float>(v), 0, weft::op::sum{}, opts());
               }});
  c.push_back({"reduce op", "op", [](wc::inproc_transport& t, int r, int d) {
                 std::vector<float> v(64, 1.0f);
                 if (r == d)
                   wc::reduce(t, std::span<float>(v), 0, weft::op::min{}, opts());
                 else
                   wc::reduce(t, std::span<float>(v), 0, weft::op::sum{}, opts());
               }});
  c.push_back({"barrier against allreduce", "collective", [](wc::inproc_transport& t, int r, int d) {
                 if (r == d) {
                   wc::barrier(t, opts());
                 } else {
                   std::vector<float> v(8, 1.0f);
                   wc::allreduce(t, std::span<float>(v), weft::op::sum{}, opts());
                 }
               }});
  c.push_back({"alltoall block size", "count", [f](wc::inproc_transport& t, int r, int d) {
                 const std::size_t b = f(r, d, 3, 2);
                 std::vector<float> in(b * static_cast<std::size_t>(t.size()), 1.0f), out(in.size());
                 wc::alltoall(t, std::span<const float>(in), std::span<float>(out), opts());
               }});
  c.push_back({"alltoallv counts of one pair", "alltoallv counts", [](wc::inproc_transport& t, int r, int d) {
                 // Rank d sends one element more to its successor than the successor expects from it.
                 const auto P = static_cast<std::size_t>(t.size());
                 std::vector<std::size_t> sends(P, 2), recvs(P, 2);
                 if (r == d) sends[static_cast<std::size_t>((d + 1) % t.size())] = 3;
                 std::size_t total = 0;
                 for (auto s : sends) total += s;
                 std::vector<float> in(total, 1.0f), out(2 * P);
                 wc::alltoallv(t, std::span<const float>(in), std::span<const std::size_t>(sends),
                               std::span<float>(out), std::span<const std::size_t>(recvs), opts());
               }});
  return c;
}

// Runs one case on p in-process ranks with rank d differing; after the call, every rank checks
// the transport still carries a correct allreduce.
std::vector<outcome> run(const disagreement& dis, int p, int d) {
  std::vector<outcome> out(static_cast<std::size_t>(p));
  auto errors = weft_test::run_ranks(p, [&](wc::inproc_transport& t) {
    auto& o = out[static_cast<std::size_t>(t.rank())];
    try {
      dis.run(t, t.rank(), d);
    } catch (const wc::comm_error& e) {
      o.threw = true;
      o.is_comm_error = true;
      o.code = e.code().value();
      o.blamed = e.info().blamed;
      o.rank = e.info().rank;
      o.field = e.info().field;
      o.phase = e.info().phase;
      o.what = e.what();
    } catch (const weft::error& e) {
      o.threw = true;
      o.code = e.code().value();
      o.what = e.what();
    }
    std::vector<std::int32_t> one{1};
    wc::allreduce(t, std::span<std::int32_t>(one), weft::op::sum{}, opts());
    o.usable_after = one[0] == t.size();
  });
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace

TEST_CASE("every collective agrees before it acts: one disagreeing rank fails every rank of 2..8 at once",
          "[comm][agreement]") {
  const auto all = cases();
  for (int p = 2; p <= 8; ++p)
    for (int d : {0, p - 1}) {
      if (p == 2 && d == 0) continue;  // two ranks that differ: the lower rank's call is the reference
      for (const auto& dis : all) {
        const auto start = std::chrono::steady_clock::now();
        const auto out = run(dis, p, d);
        const auto took = std::chrono::steady_clock::now() - start;
        CHECK(took < 5s);  // the agreement, not the 20 s deadline
        for (int r = 0; r < p; ++r) {
          const auto& o = out[static_cast<std::size_t>(r)];
          INFO(dis.name << ": p=" << p << ", rank " << d << " differs; rank " << r << " says: " << o.what);
          REQUIRE(o.threw);  // no rank returns success from a call its peers disagree with
          CHECK(o.usable_after);
          if (r == d && dis.refuses != weft::errc{}) {
            CHECK(o.code == static_cast<int>(dis.refuses));  // its own argument error, as without peers
            continue;
          }
          REQUIRE(o.is_comm_error);
          CHECK(o.code == static_cast<int>(weft::errc::mismatch));
          CHECK(o.blamed == d);  // the rank that differs, named alike on every rank
          CHECK(o.rank == r);
          CHECK(o.field == dis.field);
          CHECK(o.phase == "agreement");
        }
      }
    }
}

TEST_CASE("an algorithm value outside the enumeration is refused on every rank, never a silent no-op",
          "[comm][agreement]") {
  for (int p : {1, 2, 5}) {
    std::vector<std::vector<float>> after(static_cast<std::size_t>(p));
    std::vector<std::string> whats(static_cast<std::size_t>(p));
    auto errors = weft_test::run_ranks(p, [&](wc::inproc_transport& t) {
      std::vector<float> v(16, static_cast<float>(t.rank() + 1));
      try {
        wc::allreduce(t, std::span<float>(v), weft::op::sum{}, opts(static_cast<wc::algorithm>(7)));
      } catch (const weft::error& e) {
        whats[static_cast<std::size_t>(t.rank())] = e.what();
        after[static_cast<std::size_t>(t.rank())] = v;
        throw;
      }
    });
    for (int r = 0; r < p; ++r) {
      INFO("p=" << p << " rank " << r << ": " << whats[static_cast<std::size_t>(r)]);
      REQUIRE(errors[static_cast<std::size_t>(r)]);
      CHECK(whats[static_cast<std::size_t>(r)].find("algorithm 7 is not one of") != std::string::npos);
      CHECK(after[static_cast<std::size_t>(r)] == std::vector<float>(16, static_cast<float>(r + 1)));  // untouched
    }
  }
}

TEST_CASE("ranks whose host maps differ fail at once at n = 5, 7 and 8 instead of at the deadline",
          "[comm][agreement]") {
  for (int p : {3, 4, 5, 7, 8}) {
    std::vector<std::string> fields(static_cast<std::size_t>(p));
    const auto start = std::chrono::steady_clock::now();
    auto errors = weft_test::run_ranks(p, [&](wc::inproc_transport& t) {
      std::vector<int> hosts(static_cast<std::size_t>(p));
      for (int q = 0; q < p; ++q) hosts[static_cast<std::size_t>(q)] = q % (t.rank() == 1 ? 3 : 2);
      std::vector<double> v(100, 1.0);
      auto o = opts(wc::algorithm::hierarchical);
      o.hosts = hosts;
      try {
        wc::allreduce(t, std::span<double>(v), weft::op::sum{}, o);
      } catch (const wc::comm_error& e) {
        fields[static_cast<std::size_t>(t.rank())] = e.info().field;
        throw;
      }
    });
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    for (int r = 0; r < p; ++r) {
      INFO("p=" << p << " rank " << r);
      CHECK(errors[static_cast<std::size_t>(r)]);
      CHECK(fields[static_cast<std::size_t>(r)] == "host map");
    }
  }
}

TEST_CASE("errors inside the hierarchical algorithm name global ranks", "[comm][agreement]") {
  // Six ranks on three hosts ({0,3}, {1,4}, {2,5}). Rank 4 dies silently once it has sent its
  // agreement messages, so its host leader, rank 1 (the first to reach its deadline), fails in the
  // intra-host reduce: the error must say "rank 1 of 6" and "peer 4", not the host view's "rank 0 of
  // 2" and "peer 1"; the others learn it from rank 1's abort.
  constexpr int p = 6;
  const std::vector<int> hosts{0, 1, 2, 0, 1, 2};
  auto plan = std::make_shared<wc::fault::fault_plan>();
  plan->kill(4, /*after=*/3, wc::fault::kill_mode::silent);  // after its ceil(log2 6) = 3 agreement sends
  wc::inproc_world world(p);
  std::vector<wc::failure_info> infos(static_cast<std::size_t>(p));
  std::vector<std::string> whats(static_cast<std::size_t>(p));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      wc::fault::fault_transport<wc::inproc_transport> t(world.transport(r), plan);
      std::vector<float> v(1000, 1.0f);
      auto o = opts(wc::algorithm::hierarchical);
      o.hosts = hosts;
      o.timeout = r == 1 ? 300ms : 10s;  // rank 1 fails first, so every error is about rank 4
      try {
        wc::allreduce(t, std::span<float>(v), weft::op::sum{}, o);
      } catch (const wc::comm_error& e) {
        infos[static_cast<std::size_t>(r)] = e.info();
        whats[static_cast<std::size_t>(r)] = e.what();
      } catch (const std::exception& e) {
        whats[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (int r = 0; r < p; ++r) {
    if (r == 4) continue;
    const auto& i = infos[static_cast<std::size_t>(r)];
    INFO("rank " << r << ": " << whats[static_cast<std::size_t>(r)]);
    CHECK(i.rank == r);
    CHECK(i.size == p);
    CHECK(i.blamed == 4);
    CHECK(whats[static_cast<std::size_t>(r)].find(" of 2") == std::string::npos);
    CHECK(whats[static_cast<std::size_t>(r)].find(" of 3") == std::string::npos);
  }
  const auto& leader = infos[1];
  INFO("rank 1: " << whats[1]);
  CHECK(leader.peer == 4);
  CHECK(leader.blamed == 4);
  CHECK(leader.phase == "star reduce");
}

namespace {
std::vector<std::byte> votes(const std::vector<std::uint64_t>& digests, const std::vector<int>& refused = {},
                             const std::vector<std::uint64_t>& balances = {}) {
  std::vector<std::byte> v(digests.size() * wc::detail::vote_bytes);
  for (std::size_t q = 0; q < digests.size(); ++q) {
    std::byte* at = v.data() + q * wc::detail::vote_bytes;
    wc::detail::put_le<std::uint64_t>(at, digests[q]);
    wc::detail::put_le<std::uint32_t>(at + 8, q < refused.size() ? static_cast<std::uint32_t>(refused[q]) : 0u);
    wc::detail::put_le<std::uint64_t>(at + 16, q < balances.size() ? balances[q] : 0);
  }
  return v;
}
}  // namespace

TEST_CASE("the verdict: refusals first, then the majority's call, then the counts", "[comm][agreement]") {
  using wc::detail::judge;
  using kind = wc::detail::verdict::kind;
  CHECK(judge(votes({7, 7, 7}), 3).what == kind::agreed);
  auto v = judge(votes({7, 7, 9, 7}), 4);  // one rank off the majority
  CHECK(v.what == kind::differ);
  CHECK(v.blamed == 2);
  CHECK(v.reference == 0);
  CHECK(v.majority == 3);
  v = judge(votes({9, 7, 7, 7}), 4);  // rank 0 is the odd one: it is blamed, not its neighbours
  CHECK(v.blamed == 0);
  CHECK(v.reference == 1);
  v = judge(votes({7, 9}), 2);  // a tie: the lower rank's call is the reference
  CHECK(v.blamed == 1);
  v = judge(votes({5, 9, 9, 5, 3}), 5);  // 2-2-1: the tie goes to the digest the lowest rank holds
  CHECK(v.reference == 0);
  CHECK(v.blamed == 1);
  v = judge(votes({7, 9, 7}, {0, 0, 1}), 3);  // a refusal wins over a difference elsewhere
  CHECK(v.what == kind::refused);
  CHECK(v.blamed == 2);
  CHECK(judge(votes({7, 7}, {}, {5, 0}), 2).what == kind::counts);
  CHECK(judge(votes({7, 7}, {}, {5, ~std::uint64_t{0} - 4}), 2).what == kind::agreed);  // 5 + (2^64 - 5) = 0
}

TEST_CASE("alltoallv count balances cancel out exactly when every pair agrees", "[comm][agreement]") {
  for (int p = 1; p <= 6; ++p) {
    const auto P = static_cast<std::size_t>(p);
    std::vector<std::vector<std::size_t>> sends(P, std::vector<std::size_t>(P));
    for (std::size_t s = 0; s < P; ++s)
      for (std::size_t d = 0; d < P; ++d) sends[s][d] = (s * 7 + d * 3) % 5;
    auto total = [&](const std::vector<std::vector<std::size_t>>& S) {
      std::uint64_t sum = 0;
      for (std::size_t r = 0; r < P; ++r) {
        std::vector<std::size_t> recvs(P);
        for (std::size_t s = 0; s < P; ++s) recvs[s] = sends[s][r];  // what r expects: the true sends
        sum += wc::detail::count_balance(static_cast<int>(r), S[r], recvs);
      }
      return sum;
    };
    CHECK(total(sends) == 0);
    for (std::size_t s = 0; s < P; ++s)
      for (std::size_t d = 0; d < P; ++d) {
        auto off = sends;
        off[s][d] += 1;  // one pair differs
        INFO("p=" << p << " pair " << s << "->" << d);
        CHECK(total(off) != 0);
      }
  }
}

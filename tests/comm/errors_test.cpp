#include "rank_threads.hpp"

#include <weft/comm/collectives.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace wc = weft::comm;
using namespace std::chrono_literals;

namespace {
weft::errc code_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const weft::error& err) {
    return static_cast<weft::errc>(err.code().value());
  } catch (...) {
  }
  return weft::errc::io;
}
// Catch's assertions are not thread-safe: rank threads throw plain exceptions instead.
template <class Fn>
void must_throw(const char* what, Fn&& fn) {
  try {
    fn();
  } catch (const weft::error&) {
    return;
  }
  throw std::runtime_error(std::string("no weft::error for: ") + what);
}
std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& err) {
    return err.what();
  }
}
}  // namespace

TEST_CASE("ranks that disagree on the count fail on every rank, quickly and clearly", "[comm][errors]") {
  for (auto algo : {wc::algorithm::ring, wc::algorithm::tree, wc::algorithm::star, wc::algorithm::halving_doubling}) {
    const auto start = std::chrono::steady_clock::now();
    bool usable_after = false;
    auto errors = weft_test::run_ranks(4, [&](wc::inproc_transport& t) {
      std::vector<float> data(t.rank() == 2 ? 101 : 100, 1.0f);
      wc::options opt;
      opt.algo = algo;
      opt.timeout = 10s;
      try {
        wc::allreduce(t, std::span<float>(data), weft::op::sum{}, opt);
      } catch (const weft::error&) {
        // The agreement failed before any data moved: the transport is still usable.
        std::vector<float> ok(8, 1.0f);
        wc::allreduce(t, std::span<float>(ok), weft::op::sum{}, opt);
        if (t.rank() == 0) usable_after = ok[0] == 4.0f;
        throw;
      }
    });
    const auto took = std::chrono::steady_clock::now() - start;
    CHECK(took < 5s);  // every rank learns it in the agreement, long before the 10 s deadline
    CHECK(usable_after);
    for (std::size_t r = 0; r < errors.size(); ++r) {
      INFO("algorithm " << wc::to_string(algo) << " rank " << r);
      REQUIRE(errors[r]);
      CHECK(code_of(errors[r]) == weft::errc::mismatch);
      const std::string what = what_of(errors[r]);
      CHECK(what.find("weft::comm::allreduce") != std::string::npos);
      CHECK(what.find("phase 'agreement'") != std::string::npos);
      try {
        std::rethrow_exception(errors[r]);
      } catch (const wc::comm_error& e) {
        CHECK(e.info().blamed == 2);  // the rank that differs, on every rank
        CHECK(e.info().field == "count");
        CHECK(e.info().rank == static_cast<int>(r));
      } catch (...) {
        FAIL("not a comm_error");
      }
      if (r != 2) CHECK(what.find("count 100 here, 101 at rank 2") != std::string::npos);
      if (r == 2) CHECK(what.find("count 101 here, 100 at rank 0 (this rank is held responsible") != std::string::npos);
    }
  }
}

TEST_CASE("ranks that disagree on the dtype get a message naming both dtypes", "[comm][errors]") {
  auto errors = weft_test::run_ranks(2, [&](wc::inproc_transport& t) {
    if (t.rank() == 0) {
      std::vector<float> data(8, 1.0f);
      wc::allreduce(t, std::span<float>(data));
    } else {
      std::vector<std::int32_t> data(8, 1);
      wc::allreduce(t, std::span<std::int32_t>(data));
    }
  });
  REQUIRE(errors[0]);
  REQUIRE(errors[1]);
  const std::string all = what_of(errors[0]) + what_of(errors[1]);
  CHECK(all.find("dtype") != std::string::npos);
  CHECK(all.find("i32") != std::string::npos);
  CHECK(all.find("f32") != std::string::npos);
}

TEST_CASE("a rank that never joins makes the others time out at their deadline", "[comm][errors]") {
  auto errors = weft_test::run_ranks(3, [&](wc::inproc_transport& t) {
    if (t.rank() == 1) return;
    std::vector<double> data(10, 1.0);
    wc::options opt;
    opt.timeout = 200ms;
    opt.algo = wc::algorithm::ring;
    wc::allreduce(t, std::span<double>(data), weft::op::sum{}, opt);
  });
  CHECK_FALSE(errors[1]);
  REQUIRE(errors[0]);
  REQUIRE(errors[2]);
  const auto c0 = code_of(errors[0]), c2 = code_of(errors[2]);
  CHECK((c0 == weft::errc::timeout || c0 == weft::errc::aborted));
  CHECK((c2 == weft::errc::timeout || c2 == weft::errc::aborted));
  CHECK((c0 == weft::errc::timeout || c2 == weft::errc::timeout));
}

TEST_CASE("bad arguments are rejected before anything is sent", "[comm][errors]") {
  auto errors = weft_test::run_ranks(2, [&](wc::inproc_transport& t) {
    std::vector<int> buf(8, 0);
    std::span<int> all(buf);
    must_throw("wc::broadcast(t, all, 2)", [&] { wc::broadcast(t, all, 2); });  // unknown root
    must_throw("wc::reduce(t, all, -1)", [&] { wc::reduce(t, all, -1); });      // unknown root
    must_throw("wc::allgather(t, std::span<const int>(all.first(4)), all)",
               [&] { wc::allgather(t, std::span<const int>(all.first(4)), all); });  // aliasing
    must_throw("wc::alltoall(t, std::span<const int>(all.first(3)), all.last",
               [&] { wc::alltoall(t, std::span<const int>(all.first(3)), all.last(3)); });  // not divisible
    must_throw("wc::reduce_scatter(t, std::span<const int>(all.first(5)), al",
               [&] { wc::reduce_scatter(t, std::span<const int>(all.first(5)), all.last(2)); });
    std::vector<std::size_t> counts{1, 2, 3};
    must_throw("alltoallv with three counts for two ranks", [&] {
      wc::alltoallv(t, std::span<const int>(all.first(3)), std::span<const std::size_t>(counts), all.last(3),
                    std::span<const std::size_t>(counts));
    });
    wc::options zero;
    zero.timeout = 0ms;
    must_throw("wc::allreduce(t, all, weft::op::sum{}, zero)", [&] { wc::allreduce(t, all, weft::op::sum{}, zero); });
    wc::options hier;
    hier.algo = wc::algorithm::hierarchical;
    must_throw("wc::allreduce(t, all, weft::op::sum{}, hier)",
               [&] { wc::allreduce(t, all, weft::op::sum{}, hier); });  // no host map
    must_throw("t.send(t.rank(), {}, std::as_bytes(all), wc::clock_type::now",
               [&] { t.send(t.rank(), {}, std::as_bytes(all), wc::clock_type::now()); });  // self
    must_throw("t.send(5, {}, std::as_bytes(all), wc::clock_type::now())",
               [&] { t.send(5, {}, std::as_bytes(all), wc::clock_type::now()); });  // unknown
    // Nothing was sent: a correct collective still works afterwards.
    wc::allreduce(t, all);
  });
  REQUIRE(weft_test::all_ok(errors));
  CHECK_THROWS_AS(wc::inproc_world(0), weft::error);
  wc::inproc_world w(2);
  CHECK_THROWS_AS(w.transport(2), weft::error);
}

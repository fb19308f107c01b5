// The blame rule on its own (detail/blame.hpp): hand-made "waiting on" reports lead to the rank
// that stalled, was named, was late, or to nobody for a cycle; an answer that may still change
// waits for the other reports unless the blame window is over.
#include <weft/comm/detail/blame.hpp>

#include <catch2/catch.hpp>

#include <optional>
#include <vector>

namespace wd = weft::comm::detail;

namespace {
wd::rank_report said(int waiting_on, int blamed = -1) {
  wd::rank_report r;
  r.reported = true;
  r.waiting_on = waiting_on;
  r.blamed = blamed;
  return r;
}
const wd::rank_report silent{};
}  // namespace

TEST_CASE("blame follows the waits to the rank that stalled", "[comm][blame_protocol]") {
  // 0 waits on 1, 1 on 2, 2 on 3; 3 never reported (stopped): every survivor blames 3.
  std::vector<wd::rank_report> r{said(1), said(2), said(3), silent};
  CHECK(wd::follow_waits(r, 0, 1, false) == std::optional<int>(3));
  CHECK(wd::follow_waits(r, 2, 3, false) == std::optional<int>(3));
  // Another rank has not reported yet: the silent one may not be the only one, so wait...
  std::vector<wd::rank_report> early{said(1), said(2), silent, silent};
  CHECK_FALSE(wd::follow_waits(early, 0, 1, false).has_value());
  // ...unless the blame window is over.
  CHECK(wd::follow_waits(early, 0, 1, true) == std::optional<int>(2));
}

TEST_CASE("blame takes a named culprit, a late rank, and gives up on cycles", "[comm][blame_protocol]") {
  std::vector<wd::rank_report> named{said(1), said(-1, 3), said(1), said(0)};
  CHECK(wd::follow_waits(named, 0, 1, false) == std::optional<int>(3));  // rank 1 named rank 3
  std::vector<wd::rank_report> late{said(1), said(-1), said(1), silent};
  CHECK(wd::follow_waits(late, 0, 1, false) == std::optional<int>(1));  // 1 waited on nobody: it was late
  std::vector<wd::rank_report> cycle{said(1), said(2), said(0)};
  CHECK(wd::follow_waits(cycle, 0, 1, false) == std::optional<int>(-1));   // schedules disagree: nobody
  CHECK(wd::follow_waits(cycle, 0, -1, false) == std::optional<int>(-1));  // not blocked: nobody
}

// Must not compile (ctest sched.misspelled_hook): the queue opts in to the prefix-probe hook
// (provides_prefix_probe = true) but misspells it, and binds_prefix_probe's static_assert says how to
// fix it. Without the opt-in the hook would be silently ignored (tests/sched/archetype_test.cpp).
#include <weft/sched/concepts.hpp>

#include <cstddef>
#include <cstdint>

namespace {

struct misspelled_queue {
  static constexpr bool provides_prefix_probe = true;
  void bind_prefx_probe(weft::sched::prefix_probe) {}  // "prefx"
};

}  // namespace

bool detected() { return weft::sched::binds_prefix_probe<misspelled_queue>; }

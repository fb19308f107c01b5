// The simulator's and workload generators' random source is weft's one generator (core/random.hpp);
// this name stays for code written against sched::detail::rng.
#pragma once

#include <weft/core/random.hpp>

namespace weft::sched::detail {
using rng = weft::rng;
}  // namespace weft::sched::detail

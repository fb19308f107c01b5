// coding's generator is weft::rng (weft/core/random.hpp): one seeded SplitMix64 stream for the whole
// library, so constructions and simulations reproduce exactly across standard libraries.
#pragma once

#include <weft/core/random.hpp>

namespace weft::coding::detail {

using rng = weft::rng;

}  // namespace weft::coding::detail

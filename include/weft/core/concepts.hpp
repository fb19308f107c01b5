// The core's policy concepts in one place, for modules that constrain on them: element types,
// reduce operators and clocks. Each is defined beside the vocabulary it describes.
#pragma once

#include <weft/core/clock.hpp>
#include <weft/core/dtype.hpp>
#include <weft/core/reduce_ops.hpp>

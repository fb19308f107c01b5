// Umbrella for weft's core vocabulary: errors and results, dtypes and half/bfloat16, reduce
// operators, clocks, strong ids and metrics. Standard library only.
#pragma once

#include <weft/core/clock.hpp>
#include <weft/core/concepts.hpp>
#include <weft/core/config.hpp>
#include <weft/core/counter.hpp>
#include <weft/core/dtype.hpp>
#include <weft/core/error.hpp>
#include <weft/core/half.hpp>
#include <weft/core/ids.hpp>
#include <weft/core/quantile_histogram.hpp>
#include <weft/core/reduce_ops.hpp>
#include <weft/core/result.hpp>
#include <weft/core/strong_id.hpp>

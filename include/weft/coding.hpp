// weft::coding umbrella: gradient coding for stragglers (Tandon et al. 2017; Raviv et al. 2018;
// Charles et al. 2017; Krishnan et al. 2023) on Eigen. Include single headers to pull in less.
#pragma once

#include <weft/coding/aggregator.hpp>
#include <weft/coding/approximate.hpp>
#include <weft/coding/backup_workers.hpp>
#include <weft/coding/codec.hpp>
#include <weft/coding/concepts.hpp>
#include <weft/coding/cyclic_repetition.hpp>
#include <weft/coding/decoder.hpp>
#include <weft/coding/fractional_repetition.hpp>
#include <weft/coding/inproc_channel.hpp>
#include <weft/coding/linear_code.hpp>
#include <weft/coding/sequential.hpp>

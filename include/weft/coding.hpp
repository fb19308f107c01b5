// weft::coding umbrella: gradient coding for stragglers (Tandon et al. 2017; Raviv et al. 2018;
// Charles et al. 2017) and sequential gradient coding (SR-SGC, M-SGC: Krishnan et al. 2023), standard
// library only. Opt-in, not included here: <weft/coding/coded_allreduce.hpp> and
// <weft/coding/comm_channel.hpp> (aggregation over weft::comm), <weft/coding/eigen.hpp> (Eigen bridge).
#pragma once

#include <weft/coding/aggregator.hpp>
#include <weft/coding/any_gradient_code.hpp>
#include <weft/coding/approximate.hpp>
#include <weft/coding/backup_workers.hpp>
#include <weft/coding/codec.hpp>
#include <weft/coding/coefficient_matrix.hpp>
#include <weft/coding/concepts.hpp>
#include <weft/coding/cyclic_repetition.hpp>
#include <weft/coding/decoder.hpp>
#include <weft/coding/delay_trace.hpp>
#include <weft/coding/fractional_repetition.hpp>
#include <weft/coding/gc_scheme.hpp>
#include <weft/coding/inproc_channel.hpp>
#include <weft/coding/linear_code.hpp>
#include <weft/coding/m_sgc.hpp>
#include <weft/coding/sequential.hpp>
#include <weft/coding/sequential_round.hpp>
#include <weft/coding/sgc_search.hpp>
#include <weft/coding/sr_sgc.hpp>
#include <weft/coding/straggler_model.hpp>

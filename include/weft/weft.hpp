// weft umbrella: every module that needs only the standard library (core, kv, sched, moe).
// Modules with third-party dependencies (comm: Boost.Asio; coding: Eigen; quant: oneTBB/CUDA)
// have their own umbrellas, weft/comm.hpp, weft/coding.hpp and weft/quant.hpp.
#pragma once

#include <weft/core.hpp>

#if __has_include(<weft/kv.hpp>)
#include <weft/kv.hpp>
#endif
#if __has_include(<weft/sched.hpp>)
#include <weft/sched.hpp>
#endif
#if __has_include(<weft/moe.hpp>)
#include <weft/moe.hpp>
#endif

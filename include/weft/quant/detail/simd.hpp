// Internal: what every CPU kernel header of weft::quant opens with: the x86 intrinsics (where the
// target has them) and the pair of macros that silence g++ 12's false -Wmaybe-uninitialized inside
// its own AVX-512 intrinsics (the _mm512_undefined_* operands, GCC bug 105593).
#pragma once

#include <weft/quant/cpu_features.hpp>
#include <weft/quant/tile_math.hpp>

#include <cstdint>

#if WEFT_QUANT_X86
#include <immintrin.h>
#endif

// Open and close a kernel header's body, as `WEFT_QUANT_KERNELS_BEGIN;` after the includes and
// `WEFT_QUANT_KERNELS_END;` at the end: g++ 12 reports the warnings when the kernels are inlined at -O1
// with sanitizers, and a push/pop pair keeps the silence inside the kernels' text. (Each ends in an
// empty static_assert so that it takes a semicolon and formats as a declaration.)
#if defined(__GNUC__) && !defined(__clang__)
#define WEFT_QUANT_KERNELS_BEGIN                                                             \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") static_assert(true)
#define WEFT_QUANT_KERNELS_END _Pragma("GCC diagnostic pop") static_assert(true)
#else
#define WEFT_QUANT_KERNELS_BEGIN static_assert(true)
#define WEFT_QUANT_KERNELS_END static_assert(true)
#endif

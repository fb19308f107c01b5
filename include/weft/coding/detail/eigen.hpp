// The one place weft::coding includes Eigen. g++ 12 (GCC bug 105593) reports a false
// -Wmaybe-uninitialized / -Wuninitialized inside its own AVX-512 intrinsics whenever Eigen's packet
// code (predux, ptranspose, the GEMM kernels) is compiled for AVX-512; the "uninitialized" value is
// the deliberately undefined merge source of an all-lanes mask. The two warnings are silenced for
// Eigen's text only, with g++ 12 only, so weft's own code and every other compiler keep them.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#define WEFT_DETAIL_GCC12_EIGEN_WORKAROUND 1
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <Eigen/Dense>

#if defined(WEFT_DETAIL_GCC12_EIGEN_WORKAROUND)
#pragma GCC diagnostic pop
#undef WEFT_DETAIL_GCC12_EIGEN_WORKAROUND
#endif

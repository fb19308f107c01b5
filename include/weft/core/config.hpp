// Compiler and platform switches shared by every weft header: version, host/device annotations
// for CUDA, and attributes for cold error paths.
#pragma once

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0
#define WEFT_VERSION_STRING "0.1.0"

// Functions that must run both on the host and inside CUDA kernels (value types, kernel math).
#if defined(__CUDACC__)
#define WEFT_HOST_DEVICE __host__ __device__
#else
#define WEFT_HOST_DEVICE
#endif

// Error paths are kept out of hot loops: never inlined, placed with cold code.
#if defined(__GNUC__) || defined(__clang__)
#define WEFT_COLD [[gnu::cold, gnu::noinline]]
#else
#define WEFT_COLD
#endif

// Host-side argument checks shared by weft's CUDA launchers: device pointers, shapes and the
// layout invariants of weft's formats, reported as weft::error before anything is launched.
#pragma once

#include <weft/core/error.hpp>
#include <weft/quant/device_tiles.hpp>

#include <cuda_runtime.h>

#include <cstdint>

namespace weft::quant::cuda {

namespace detail {

/// Throws weft::error unless ptr is non-null and, where CUDA can tell, device-accessible.
inline void check_device_pointer(const void* ptr, const char* name, const char* where) {
  expects(ptr != nullptr, errc::invalid_argument, where, name, " is null");
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) == cudaSuccess) {
    expects(attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged, errc::invalid_argument, where,
            name, " is not device or managed memory (cudaPointerGetAttributes type ", static_cast<int>(attr.type), ")");
  } else {
    (void)cudaGetLastError();  // no device or unknown pointer: leave the launch to report it
  }
}

template <class Tile>
void check_grid(std::int64_t m, std::int64_t n, const char* where) {
  expects(ceil_div(n, Tile::block_n) <= 0x7fffffff && ceil_div(m, Tile::block_m) <= 65535, errc::invalid_argument,
          where, "M x N = ", m, " x ", n, " needs more blocks than a CUDA grid holds with tile ", Tile::block_m, " x ",
          Tile::block_n);
}

}  // namespace detail

}  // namespace weft::quant::cuda

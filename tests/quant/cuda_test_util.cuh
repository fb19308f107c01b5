// What weft's GPU tests share (they need only the CUDA runtime: no Catch2): a failure counter that
// prints each failed check, CUDA status checks, and a device buffer that frees itself.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace weft_cuda_test {

inline int failures = 0, checks = 0;

inline void check(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    std::printf("FAILED: %s\n", what.c_str());
    ++failures;
  }
}

inline void cuda_ok(cudaError_t e, const std::string& what) {
  check(e == cudaSuccess, what + ": " + cudaGetErrorString(e));
}

/// True when a CUDA device is present (the no-device error is cleared, so later calls start clean).
inline bool gpu_present() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) return true;
  (void)cudaGetLastError();
  return false;
}

/// The exit code of a GPU test on a machine without a GPU, after its argument checks: 77 (skipped)
/// when they passed, 1 otherwise.
inline int skipped_without_gpu(const char* test) {
  std::printf("%s: no GPU; %d of %d argument checks failed; skipping the launches\n", test, failures, checks);
  return failures == 0 ? 77 : 1;
}

/// count elements of device memory, every byte set to `fill`, or a copy of a host vector.
template <class T>
struct device_buffer {
  T* p = nullptr;
  std::size_t n = 0;
  explicit device_buffer(std::size_t count, int fill = 0) : n(count) {
    cuda_ok(cudaMalloc(&p, std::max<std::size_t>(count, 1) * sizeof(T)), "cudaMalloc");
    cuda_ok(cudaMemset(p, fill, std::max<std::size_t>(count, 1) * sizeof(T)), "cudaMemset");
  }
  explicit device_buffer(const std::vector<T>& v) : device_buffer(v.size()) {
    cuda_ok(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "copy to device");
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> v(n);
    cuda_ok(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "copy to host");
    return v;
  }
  /// Every byte 0xFF: a later read of a value the kernel did not write shows as NaN or -1.
  void poison() { cuda_ok(cudaMemset(p, 0xFF, n * sizeof(T)), "poison"); }
};

}  // namespace weft_cuda_test

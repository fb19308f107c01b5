// Run-time selection of the CPU kernels' instruction set: what this CPU and OS support (CPUID and
// XGETBV, Intel SDM vol. 2A "CPUID"; AMX tile permission via arch_prctl, Linux
// Documentation/arch/x86/xstate.rst), and the kernel options every CPU kernel takes.
#pragma once

#include <weft/core/error.hpp>

#include <cstdint>
#include <string_view>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define WEFT_QUANT_X86 1
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#else
#define WEFT_QUANT_X86 0
#endif

namespace weft::quant {

/// A CPU code path. `automatic` picks the best one the CPU supports for the kernel at hand.
enum class isa : std::uint8_t {
  automatic,
  portable,     ///< plain C++, any CPU
  avx2,         ///< AVX2 + FMA
  avx512,       ///< AVX-512 F/BW/VL
  avx512_vnni,  ///< AVX-512 VNNI (vpdpbusd)
  avx512_bf16,  ///< AVX-512 BF16 (vdpbf16ps)
  amx_int8,     ///< Intel AMX tiles (tdpbssd); needs the OS to grant tile state
};

constexpr std::string_view to_string(isa path) noexcept {
  switch (path) {
    case isa::automatic:
      return "automatic";
    case isa::portable:
      return "portable";
    case isa::avx2:
      return "avx2";
    case isa::avx512:
      return "avx512";
    case isa::avx512_vnni:
      return "avx512_vnni";
    case isa::avx512_bf16:
      return "avx512_bf16";
    case isa::amx_int8:
      return "amx_int8";
  }
  return "unknown";
}

/// What the CPU and OS support. Detected once (thread-safe static initialisation). O(1) after.
struct cpu_features {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512_vnni = false, avx512_bf16 = false;
  bool amx_int8 = false;  ///< CPUID says AMX-INT8 and the kernel granted tile data permission

  static const cpu_features& get() {
    static const cpu_features f = detect();
    return f;
  }

  /// Whether a path can run here. O(1). Thread-safe.
  bool supports(isa path) const noexcept {
    switch (path) {
      case isa::automatic:
      case isa::portable:
        return true;
      case isa::avx2:
        return avx2 && fma;
      case isa::avx512:
        return avx512f && avx512bw && avx512vl;
      case isa::avx512_vnni:
        return avx512f && avx512bw && avx512vl && avx512_vnni;
      case isa::avx512_bf16:
        return avx512f && avx512bw && avx512vl && avx512_bf16;
      case isa::amx_int8:
        return amx_int8;
    }
    return false;
  }

 private:
  static cpu_features detect() {
    cpu_features f;
#if WEFT_QUANT_X86
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = (c >> 27) & 1u;
    f.fma = (c >> 12) & 1u;
    f.f16c = (c >> 29) & 1u;
    std::uint64_t xcr0 = 0;
    if (osxsave) {
      unsigned lo = 0, hi = 0;
      __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      xcr0 = (static_cast<std::uint64_t>(hi) << 32) | lo;
    }
    const bool os_avx = (xcr0 & 0x6u) == 0x6u;          // XMM and YMM state
    const bool os_avx512 = (xcr0 & 0xe6u) == 0xe6u;     // plus opmask, ZMM_Hi256, Hi16_ZMM
    const bool os_amx = (xcr0 & 0x60000u) == 0x60000u;  // XTILECFG and XTILEDATA
    f.fma = f.fma && os_avx;
    f.f16c = f.f16c && os_avx;
    if (__get_cpuid_max(0, nullptr) < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = os_avx && ((b >> 5) & 1u);
    f.avx512f = os_avx512 && ((b >> 16) & 1u);
    f.avx512bw = os_avx512 && ((b >> 30) & 1u);
    f.avx512vl = os_avx512 && ((b >> 31) & 1u);
    f.avx512_vnni = os_avx512 && ((c >> 11) & 1u);
    const bool cpu_amx = ((d >> 24) & 1u) && ((d >> 25) & 1u);
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    f.avx512_bf16 = os_avx512 && ((a1 >> 5) & 1u);
#if defined(__linux__)
    // Linux hands out AMX tile data only on request (ARCH_REQ_XCOMP_PERM = 0x1023, XTILEDATA = 18).
    if (cpu_amx && os_amx) f.amx_int8 = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    (void)cpu_amx;
    (void)os_amx;
#endif
#endif
    return f;
  }
};

/// Options every CPU kernel takes. Thread-safety: a plain value.
struct kernel_options {
  isa path = isa::automatic;  ///< a specific path, or the best one for the kernel
  bool parallel = true;       ///< split the work over oneTBB's arena (false: the calling thread only)
};

namespace detail {
/// Resolves `requested` for a kernel whose paths are `available` (best last). Throws weft::error
/// (errc::unsupported) when a specific path is requested that this CPU lacks.
template <std::size_t N>
isa resolve_path(isa requested, const isa (&available)[N], const char* where) {
  const auto& f = cpu_features::get();
  expects(f.supports(requested), errc::unsupported, where, "the ", to_string(requested),
          " path was requested but this CPU (or OS) does not support it");
  if (requested != isa::automatic) {
    // The best path the kernel has at or below the requested level.
    isa pick = isa::portable;
    for (isa p : available)
      if (static_cast<int>(p) <= static_cast<int>(requested)) pick = p;
    return pick;
  }
  isa pick = isa::portable;
  for (isa p : available)
    if (f.supports(p)) pick = p;
  return pick;
}
}  // namespace detail

}  // namespace weft::quant

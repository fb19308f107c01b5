# Instruction-set dependent targets. The quant CPU kernels and Eigen's vectorised paths compile to
# different code under -march=x86-64-v2/v3/v4 (SSE4.2, AVX2, AVX-512), so CI builds them once per level
# (`make test-isa`, presets isa-v2/v3/v4) and runs the tests labelled "isa" where the CPU can:
#   weft_isa_tests    the tests of those modules (quant, coding) and any test that links Eigen;
#   weft_isa_targets  those tests plus the benchmarks that use them (built for v4, the level `make
#                     bench` compiles for on AVX-512 machines and the one g++ 12 warns at; no other
#                     stage of `make test` compiles the benchmarks).
# The examples are left out: `make test-package` builds every one of them, with -Werror, against the
# installed package, and at -O3 for v4 they cost more than the tests (diloco alone 51 s of CPU).
# Everything else is the same code at every level: compiled by g++ (gcc-check), built and run once
# (asan-ubsan).
set(WEFT_ISA_MODULES quant coding)

if(NOT TARGET weft_isa_targets)
  add_custom_target(weft_isa_tests)
  add_custom_target(weft_isa_targets)
  add_dependencies(weft_isa_targets weft_isa_tests)
endif()

# _weft_is_isa_dependent(<out-var> <module> [<linked targets>...]): ON for code of WEFT_ISA_MODULES or
# code that links Eigen or one of those modules. Thrust's CPU back ends (quant's *_thrust tests) run
# the same portable C++ at every level and are left to the dev build.
function(_weft_is_isa_dependent out module)
  set(libs ${ARGN})
  set(result OFF)
  if(module IN_LIST WEFT_ISA_MODULES OR "Eigen3::Eigen" IN_LIST libs)
    set(result ON)
  endif()
  foreach(mod IN LISTS WEFT_ISA_MODULES)
    if("weft::${mod}" IN_LIST libs)
      set(result ON)
    endif()
  endforeach()
  foreach(lib IN LISTS libs)
    if(lib MATCHES "thrust")
      set(result OFF)
    endif()
  endforeach()
  set(${out} ${result} PARENT_SCOPE)
endfunction()

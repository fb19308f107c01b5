# Instruction-set dependent targets. The quant CPU kernels and Eigen's vectorised paths compile to
# different code under -march=x86-64-v2/v3/v4, so CI builds the tests, examples and benchmarks of those
# modules once per level (the `isa-*` presets build the target weft_isa_targets and run the tests
# labelled "isa"). Everything else is the same code at every level and is built once.
set(WEFT_ISA_MODULES quant coding)

if(NOT TARGET weft_isa_targets)
  add_custom_target(weft_isa_targets)
endif()

# _weft_is_isa_dependent(<out-var> <module> [<linked targets>...])
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
  set(${out} ${result} PARENT_SCOPE)
endfunction()

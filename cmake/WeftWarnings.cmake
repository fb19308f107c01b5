# Repo-only warning flags: tests, examples and benchmarks link weft_warnings; users who link
# weft::<module> never inherit them. -Werror only with WEFT_WERROR (weft's CI presets), never when
# weft is built inside someone else's project.
if(NOT TARGET weft_warnings)
  add_library(weft_warnings INTERFACE)
  target_compile_options(weft_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>)
  if(WEFT_WERROR)
    target_compile_options(weft_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endif()

# The warnings an engine that includes weft may build with: weft's public headers must be clean under
# them with g++ and clang (weft_add_strict_header_test checks it).
set(WEFT_STRICT_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion)

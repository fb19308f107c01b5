# Repo-only warning flags: tests, examples and benchmarks link weft_warnings; users who link
# weft::<module> never inherit them.
add_library(weft_warnings INTERFACE)
target_compile_options(weft_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Werror>)

# Test helpers shared by tests/<module>/CMakeLists.txt.
#
#   weft_add_test(<module> <name> SOURCES <files...> [LIBS <targets...>] [LABELS <labels...>]
#                 [CONCURRENT] [TIMEOUT <s>, default 120])
#     builds test_<module>_<name> from the sources plus the shared Catch2 main and registers the
#     ctest test "<module>.<name>" labelled <module>. CONCURRENT adds the label "concurrent": the
#     tsan preset builds and runs exactly those tests, and `make soak` runs each of them 50 times.
#     LABELS soak keeps a long run out of `make test` (the test presets exclude that label; `make
#     soak` runs it). LABELS attack (hostile-peer tests) runs under asan-ubsan, not in the dev
#     preset. Tests of modules whose code depends on the instruction set (quant, coding: CPU kernels
#     and Eigen) get the label "isa", unless CONCURRENT: the ISA builds of `make test-isa` compile and
#     run those.
#
#   With WEFT_TESTS_COMPILE_ONLY (the gcc-check preset of `make test`) every test above, fuzz replays
#   included, is compiled with -fsyntax-only and neither linked nor registered: a second compiler's
#   -Werror check of the whole suite, whose tests the asan-ubsan preset builds and runs. Tests that
#   g++ builds in another stage anyway (concurrent ones: tsan; ISA-dependent ones: isa-v2/v3/v4) are
#   left out of it.
#
#   weft_add_header_test(<module> [LIBS...])
#     compiles every header of include/weft/<module>/ (and the umbrella) in a translation unit of its
#     own, so a header that forgets an include breaks the build: the compile-only target
#     test_<module>_headers, checked with -fsyntax-only (cmake/syntax_only.sh), built by ALL.
#
#   weft_add_strict_header_test(<module> [LIBS...])
#     one translation unit that includes every public header of the module, compiled with the
#     warnings an engine may use (WEFT_STRICT_WARNINGS: -Wshadow -Wconversion -Wsign-conversion ...),
#     plus -Werror under WEFT_WERROR. A compile-only target (-fsyntax-only),
#     weft_strict_headers_<module>, built by g++ in the gcc-check and dev presets and by clang in the
#     asan-ubsan preset.
#
#   weft_add_cuda_test(<module> <name> SOURCES <files.cu...> [ARCHS <sm numbers>, default 80 90])
#     builds test_<module>_<name> from CUDA sources for those architectures (only when WEFT_ENABLE_CUDA
#     found nvcc) and registers "<module>.<name>", labelled <module> and cuda; the program exits 77
#     (skipped) where no GPU is present, after checking what it can on the host.
#
#   weft_add_compile_fail_test(<module> <name> SOURCE <file> MESSAGE <regex> [LIBS <targets...>])
#     a "must not compile" test: the ctest "<module>.<name>" builds <file> (an object library left out
#     of ALL) and passes only when the compiler's output matches <regex>, the static_assert message
#     that should fire, so it fails both when the file compiles and when it breaks for another reason.
find_package(Catch2 2.13 REQUIRED)

# A test compiled by a second compiler only has to compile: the suite runs once, under ASan+UBSan (a
# second, unsanitized run of the same code adds little), and g++ -fsyntax-only costs under half of a
# g++ -O0 build.
option(WEFT_TESTS_COMPILE_ONLY "Compile every test with -fsyntax-only; link and register none" OFF)

# _weft_syntax_only(<target>): the target's C++ sources are compiled with -fsyntax-only (an empty object
# file is left for the build tool; cmake/syntax_only.sh), where the compiler takes that flag.
function(_weft_syntax_only target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang" AND NOT CMAKE_HOST_WIN32)
    set_target_properties(${target} PROPERTIES CXX_COMPILER_LAUNCHER "${PROJECT_SOURCE_DIR}/cmake/syntax_only.sh")
  endif()
endfunction()

include(WeftIsa)

# A Catch2 runner object compiled once outside this build: `make test` compiles tests/catch_main.cpp
# unoptimised and unsanitized for all the presets it links tests in (15-21 s of CPU in each build
# otherwise; an uninstrumented runner misses nothing, the tests' own code is instrumented). Empty:
# this build compiles its own.
set(WEFT_CATCH_MAIN_OBJECT "" CACHE FILEPATH "A prebuilt tests/catch_main.cpp object to link every test with")
if(WEFT_CATCH_MAIN_OBJECT AND NOT EXISTS "${WEFT_CATCH_MAIN_OBJECT}")
  message(FATAL_ERROR "WEFT_CATCH_MAIN_OBJECT is ${WEFT_CATCH_MAIN_OBJECT}, which does not exist")
endif()

if(NOT TARGET weft_catch_main)
  if(WEFT_CATCH_MAIN_OBJECT)
    # The prebuilt runner stands in for the compiled one: every test links $<TARGET_OBJECTS:weft_catch_main>.
    add_library(weft_catch_main OBJECT IMPORTED GLOBAL)
    set_target_properties(weft_catch_main PROPERTIES IMPORTED_OBJECTS "${WEFT_CATCH_MAIN_OBJECT}")
  else()
    add_library(weft_catch_main OBJECT "${PROJECT_SOURCE_DIR}/tests/catch_main.cpp")
    target_link_libraries(weft_catch_main PUBLIC Catch2::Catch2)
    target_compile_features(weft_catch_main PUBLIC cxx_std_20)
    # Catch2's runner does not need optimising: at -O3 (the ISA builds) it alone takes 15 s to compile.
    target_compile_options(weft_catch_main PRIVATE $<$<NOT:$<CONFIG:Debug>>:-O0>)
    if(WEFT_TESTS_COMPILE_ONLY)
      _weft_syntax_only(weft_catch_main)
    endif()
  endif()
  add_custom_target(weft_concurrent_tests)
endif()

# A test made of several sources compiles them as one translation unit (CMake's unity build), so
# their common headers (Eigen, Asio, Catch2) are parsed once: weft's CI presets turn it on. A source
# whose file-local names clash with another's in the same test cannot share a unity file; rename them
# (or build with -DWEFT_UNITY_TESTS=OFF to find the clash).
option(WEFT_UNITY_TESTS "Compile each multi-source test as one translation unit" OFF)

# Catch2 (one 17,000-line header) and the module's umbrella header take most of a test's parse time
# (three quarters of a sched test's -fsyntax-only): they are parsed once per module into a precompiled
# header, weft_test_pch_<module>, that each of the module's tests reuses (REUSE_FROM) when its
# code-generation options are the PCH's (g++ rejects a PCH built with other options through
# -Winvalid-pch, an error under -Werror). The tests still include what they use themselves, so a test
# that forgets an include breaks with WEFT_TEST_PCH=OFF; the header tests check the headers alone.
option(WEFT_TEST_PCH "Precompile Catch2 and each module's umbrella header once for the module's tests" ON)

set(_weft_pch_loses_pragmas OFF)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  set(_weft_pch_loses_pragmas ON)
endif()

function(_weft_test_pch module)
  set(pch weft_test_pch_${module})
  if(TARGET ${pch})
    return()
  endif()
  set(source "${PROJECT_BINARY_DIR}/weft_test_pch.cpp")
  if(NOT EXISTS "${source}")
    file(WRITE "${source}" "// Owner of a precompiled header the tests reuse.\n")
  endif()
  add_library(${pch} OBJECT "${source}")
  target_link_libraries(${pch} PRIVATE weft::${module} Catch2::Catch2 weft_warnings)
  target_compile_features(${pch} PRIVATE cxx_std_20)
  set(headers <catch2/catch.hpp>)
  if(EXISTS "${PROJECT_SOURCE_DIR}/include/weft/${module}.hpp")
    set(pragmas "")
    if(_weft_pch_loses_pragmas)
      # g++ before 13 drops a header's `#pragma GCC diagnostic` state from a PCH (GCC PR 64117), so a
      # warning the module silences that way (quant's g++ 12 AVX-512 false positives, Eigen's) would
      # come back in every test: such a module's umbrella stays out of the PCH there.
      file(GLOB_RECURSE module_headers "${PROJECT_SOURCE_DIR}/include/weft/${module}/*.hpp")
      foreach(header IN LISTS module_headers)
        file(STRINGS "${header}" pragmas REGEX "GCC diagnostic" LIMIT_COUNT 1)
        if(pragmas)
          break()
        endif()
      endforeach()
    endif()
    if(NOT pragmas)
      list(APPEND headers <weft/${module}.hpp>)
    endif()
  endif()
  target_precompile_headers(${pch} PRIVATE ${headers})
endfunction()

# Compile options other than warnings that reach <target> from itself or what it links (OpenMP's
# -fopenmp, a test's own -O1, -fno-sanitize=...): a test whose options differ from its module's PCH
# cannot use it and parses its headers itself.
function(_weft_collect_options target out)
  set(seen "")
  set(queue ${target})
  set(options "")
  while(queue)
    list(POP_FRONT queue t)
    if(NOT TARGET ${t} OR t IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${t})
    get_target_property(type ${t} TYPE)
    set(props INTERFACE_COMPILE_OPTIONS INTERFACE_LINK_LIBRARIES)
    if(t STREQUAL target)
      set(props COMPILE_OPTIONS LINK_LIBRARIES)
    endif()
    foreach(prop IN LISTS props)
      get_target_property(values ${t} ${prop})
      if(NOT values)
        continue()
      endif()
      if(prop MATCHES "LINK_LIBRARIES")
        list(APPEND queue ${values})
      else()
        list(APPEND options ${values})
      endif()
    endforeach()
  endwhile()
  set(${out} "${options}" PARENT_SCOPE)
endfunction()

# The options that decide whether a PCH fits: code generation, language and sanitizer flags (warning
# flags and definitions do not change it).
function(_weft_pch_options target out)
  _weft_collect_options(${target} options)
  list(FILTER options INCLUDE REGEX "(^|[:;>])-(f|O|m|g|std|pthread)")
  list(REMOVE_DUPLICATES options)
  list(SORT options)
  set(${out} "${options}" PARENT_SCOPE)
endfunction()

function(_weft_use_test_pch target module)
  _weft_pch_options(${target} mine)
  _weft_pch_options(weft_test_pch_${module} theirs)
  if(mine STREQUAL theirs)
    target_precompile_headers(${target} REUSE_FROM weft_test_pch_${module})
  endif()
endfunction()

function(weft_add_test module name)
  cmake_parse_arguments(ARG "CONCURRENT" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  set(target test_${module}_${name})
  _weft_is_isa_dependent(isa ${module} ${ARG_LIBS})
  if(WEFT_TESTS_COMPILE_ONLY)
    # g++ compiles concurrent tests (tsan) and those of ISA-dependent code (isa-v2/v3/v4) with -Werror
    # in another stage of `make test` already: they stay out of ALL here (the target still exists, as
    # a module's CMakeLists may configure it).
    set(all "")
    if(ARG_CONCURRENT OR isa)
      set(all EXCLUDE_FROM_ALL)
    endif()
    add_library(${target} OBJECT ${all} ${ARG_SOURCES})
    _weft_syntax_only(${target})
  else()
    add_executable(${target} ${ARG_SOURCES} $<TARGET_OBJECTS:weft_catch_main>)
  endif()
  target_link_libraries(${target} PRIVATE weft::${module} Catch2::Catch2 weft_warnings ${ARG_LIBS})
  if(WEFT_UNITY_TESTS)
    # (the shared Catch2 main is an object library, so it stays out of the unity file)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
  endif()
  if(WEFT_TEST_PCH)
    # Decided once the whole tree is configured, when every option added to the target is known.
    # (EVAL bakes the target's name in: a deferred call reads variables when it runs.)
    _weft_test_pch(${module})
    cmake_language(EVAL CODE
      "cmake_language(DEFER DIRECTORY [[${PROJECT_SOURCE_DIR}]] CALL _weft_use_test_pch [[${target}]] [[${module}]])")
  endif()
  if(WEFT_TESTS_COMPILE_ONLY)
    return()
  endif()
  add_test(NAME ${module}.${name} COMMAND ${target})
  set(labels ${module} ${ARG_LABELS})
  if(ARG_CONCURRENT)
    list(APPEND labels concurrent)
    add_dependencies(weft_concurrent_tests ${target})
  endif()
  # Concurrent tests check synchronisation, which -march does not change (TSan covers them).
  if(isa AND NOT ARG_CONCURRENT)
    list(APPEND labels isa)
    add_dependencies(weft_isa_tests ${target})
  endif()
  if(NOT ARG_TIMEOUT)
    # Tests take seconds (sanitizers included); a hung one should not hold CI for long.
    set(ARG_TIMEOUT 120)
  endif()
  set_tests_properties(${module}.${name} PROPERTIES LABELS "${labels}" TIMEOUT ${ARG_TIMEOUT})
endfunction()

# weft_add_test_run(<module> <name> TARGET <test executable> ENVIRONMENT <VAR=value...> [LABELS ...]
#                   [TIMEOUT s]): another ctest, "<module>.<name>", of an executable weft_add_test built
# (a soak or long run of the same test), configured by environment variables instead of a second
# build of the same sources.
function(weft_add_test_run module name)
  cmake_parse_arguments(ARG "" "TARGET;TIMEOUT" "ENVIRONMENT;LABELS" ${ARGN})
  if(WEFT_TESTS_COMPILE_ONLY)
    return()
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  add_test(NAME ${module}.${name} COMMAND ${ARG_TARGET})
  set_tests_properties(${module}.${name} PROPERTIES LABELS "${module};${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
                                                    ENVIRONMENT "${ARG_ENVIRONMENT}")
endfunction()

option(WEFT_HEADER_TESTS "Compile every public header alone (dev preset; sanitizer presets skip it)" ON)

function(weft_add_header_test module)
  if(NOT WEFT_HEADER_TESTS)
    return()
  endif()
  file(GLOB_RECURSE headers RELATIVE "${PROJECT_SOURCE_DIR}/include"
       CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/include/weft/${module}/*.hpp")
  if(EXISTS "${PROJECT_SOURCE_DIR}/include/weft/${module}.hpp")
    list(APPEND headers "weft/${module}.hpp")
  endif()
  set(sources "")
  foreach(header IN LISTS headers)
    string(MAKE_C_IDENTIFIER "${header}" id)
    set(tu "${CMAKE_CURRENT_BINARY_DIR}/header_tests/${id}.cpp")
    set(content "#include <${header}>\n#include <${header}> // include guard check\n")
    if(EXISTS "${tu}")
      file(READ "${tu}" old)
    endif()
    if(NOT old STREQUAL content)
      file(WRITE "${tu}" "${content}")
    endif()
    list(APPEND sources "${tu}")
  endforeach()
  # Compile-only: an object library whose sources are checked with -fsyntax-only (g++ and clang).
  add_library(test_${module}_headers OBJECT ${sources})
  set_target_properties(test_${module}_headers PROPERTIES UNITY_BUILD OFF)  # one header per TU, always
  target_link_libraries(test_${module}_headers PRIVATE weft::${module} weft_warnings ${ARGN})
  _weft_syntax_only(test_${module}_headers)
endfunction()

option(WEFT_STRICT_HEADER_TESTS "Compile every module's public headers under the strict warnings engines use" ON)

function(weft_add_strict_header_test module)
  if(NOT WEFT_STRICT_HEADER_TESTS)
    return()
  endif()
  # Public headers only: detail/ comes in through them; CUDA (.cuh) and Thrust headers need nvcc or
  # CCCL, mpi_transport.hpp needs MPI (added when the caller passes MPI::MPI_CXX).
  file(GLOB_RECURSE headers RELATIVE "${PROJECT_SOURCE_DIR}/include"
       CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/include/weft/${module}/*.hpp")
  list(FILTER headers EXCLUDE REGEX "/detail/|/cuda/|_thrust\\.hpp$")
  if(NOT "MPI::MPI_CXX" IN_LIST ARGN)
    list(FILTER headers EXCLUDE REGEX "/mpi_transport\\.hpp$")
  endif()
  list(SORT headers)
  list(JOIN WEFT_STRICT_WARNINGS " " flags)
  set(content "// Every public header of weft::${module} under ${flags} (generated).\n")
  foreach(header IN LISTS headers ITEMS "weft/${module}.hpp")
    if(EXISTS "${PROJECT_SOURCE_DIR}/include/${header}")
      string(APPEND content "#include <${header}>\n")
    endif()
  endforeach()
  set(tu "${CMAKE_CURRENT_BINARY_DIR}/strict_headers/${module}.cpp")
  if(EXISTS "${tu}")
    file(READ "${tu}" old)
  endif()
  if(NOT old STREQUAL content)
    file(WRITE "${tu}" "${content}")
  endif()
  add_library(weft_strict_headers_${module} OBJECT "${tu}")
  target_link_libraries(weft_strict_headers_${module} PRIVATE weft::${module} ${ARGN})
  target_compile_options(weft_strict_headers_${module} PRIVATE ${WEFT_STRICT_WARNINGS}
                         $<$<BOOL:${WEFT_WERROR}>:-Werror>)
  _weft_syntax_only(weft_strict_headers_${module})
endfunction()

# weft_add_fuzzer(<module> <name> SOURCES <files...> [LIBS <targets...>])
#   A libFuzzer harness (the sources define LLVMFuzzerTestOneInput) with its seed corpus in
#   tests/<module>/fuzz/corpus/<name>/ and crash regressions in tests/<module>/fuzz/regressions/<name>/.
#   Always: ctest "<module>.fuzz_replay_<name>" feeds every corpus and regression file to the harness,
#   so any compiler re-checks every input ever found (test_<module>_fuzz_replay_<name>, the harness
#   with a plain main).
#   With clang and WEFT_FUZZ=ON (the asan-ubsan preset): fuzz_<module>_<name>, built with
#   -fsanitize=fuzzer on top of the preset's sanitizers, runs for WEFT_FUZZ_SECONDS from the seed corpus
#   (ctest "<module>.fuzz_<name>", labels <module> and fuzz); new inputs go to the build tree only. The
#   replay then runs this binary over the files instead of building the plain one.
option(WEFT_FUZZ "Build libFuzzer harnesses (clang only) and run each for WEFT_FUZZ_SECONDS in ctest" OFF)
set(WEFT_FUZZ_SECONDS 20 CACHE STRING "Seconds each libFuzzer harness runs in ctest")
# A fixed seed keeps `make test` reproducible (a fresh build explores the same inputs each run); set 0
# for a new seed each run when hunting (longer runs: WEFT_FUZZ_SECONDS=600 WEFT_FUZZ_SEED=0).
set(WEFT_FUZZ_SEED 1 CACHE STRING "libFuzzer -seed of the ctest fuzz runs (0: a new seed each run)")

if(NOT TARGET weft_fuzz_replay_main)
  add_library(weft_fuzz_replay_main OBJECT "${PROJECT_SOURCE_DIR}/tests/fuzz_replay_main.cpp")
  target_compile_features(weft_fuzz_replay_main PUBLIC cxx_std_20)
  if(WEFT_TESTS_COMPILE_ONLY)
    _weft_syntax_only(weft_fuzz_replay_main)
  endif()
endif()

function(weft_add_fuzzer module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  set(corpus "${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${name}")
  set(regressions "${CMAKE_CURRENT_SOURCE_DIR}/fuzz/regressions/${name}")
  if(NOT EXISTS "${corpus}")
    message(FATAL_ERROR "weft_add_fuzzer(${module} ${name}): seed corpus ${corpus} is missing")
  endif()
  set(replay test_${module}_fuzz_replay_${name})
  if(WEFT_TESTS_COMPILE_ONLY)
    add_library(${replay} OBJECT ${ARG_SOURCES})
    target_link_libraries(${replay} PRIVATE weft::${module} weft_warnings ${ARG_LIBS})
    _weft_syntax_only(${replay})
    return()
  endif()
  if(WEFT_FUZZ AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    set(fuzzer fuzz_${module}_${name})
    add_executable(${fuzzer} ${ARG_SOURCES})
    target_link_libraries(${fuzzer} PRIVATE weft::${module} weft_warnings ${ARG_LIBS})
    # -O1 even in the -O0 asan-ubsan preset: a fuzzer's worth is executions per second.
    target_compile_options(${fuzzer} PRIVATE -O1 -fsanitize=fuzzer)
    target_link_options(${fuzzer} PRIVATE -fsanitize=fuzzer)
    set(work "${CMAKE_CURRENT_BINARY_DIR}/fuzz-corpus/${name}")
    file(MAKE_DIRECTORY "${work}")
    add_test(NAME ${module}.fuzz_${name}
             COMMAND ${fuzzer} -max_total_time=${WEFT_FUZZ_SECONDS} -seed=${WEFT_FUZZ_SEED} -timeout=10 -rss_limit_mb=2048
                     -max_len=65536 -print_final_stats=1 "${work}" "${corpus}")
    math(EXPR fuzz_timeout "${WEFT_FUZZ_SECONDS} + 120")
    # COST: ctest -j starts the longest tests first, so the fuzzers overlap the short tests.
    set_tests_properties(${module}.fuzz_${name} PROPERTIES LABELS "${module};fuzz" TIMEOUT ${fuzz_timeout}
                         COST ${WEFT_FUZZ_SECONDS})
    # The replay is the same binary over every seed and regression file: libFuzzer given files (not
    # folders) runs each once and exits, failing on the first crash, so the harness is compiled once
    # here instead of twice. (Given no file it would fuzz instead: an empty corpus is refused here, as
    # the plain replay fails on one.)
    file(GLOB_RECURSE inputs LIST_DIRECTORIES false CONFIGURE_DEPENDS "${corpus}/*" "${regressions}/*")
    if(NOT inputs)
      message(FATAL_ERROR "weft_add_fuzzer(${module} ${name}): seed corpus ${corpus} is empty")
    endif()
    list(SORT inputs)
    add_test(NAME ${module}.fuzz_replay_${name} COMMAND ${fuzzer} -rss_limit_mb=2048 ${inputs})
  else()
    add_executable(${replay} ${ARG_SOURCES} $<TARGET_OBJECTS:weft_fuzz_replay_main>)
    target_link_libraries(${replay} PRIVATE weft::${module} weft_warnings ${ARG_LIBS})
    add_test(NAME ${module}.fuzz_replay_${name} COMMAND ${replay} "${corpus}" "${regressions}")
  endif()
  set_tests_properties(${module}.fuzz_replay_${name} PROPERTIES LABELS "${module}" TIMEOUT 120)
endfunction()

function(weft_add_compile_fail_test module name)
  cmake_parse_arguments(ARG "" "SOURCE;MESSAGE" "LIBS" ${ARGN})
  set(target compile_fail_${module}_${name})
  add_library(${target} OBJECT EXCLUDE_FROM_ALL ${ARG_SOURCE})
  set_target_properties(${target} PROPERTIES UNITY_BUILD OFF)
  target_link_libraries(${target} PRIVATE weft::${module} weft_warnings ${ARG_LIBS})
  add_test(NAME ${module}.${name}
           COMMAND ${CMAKE_COMMAND} --build "${PROJECT_BINARY_DIR}" --target ${target} --config $<CONFIG>)
  # PASS_REGULAR_EXPRESSION decides alone (the build's exit status is ignored): the message must appear.
  set_tests_properties(${module}.${name} PROPERTIES LABELS ${module} TIMEOUT 120
                       PASS_REGULAR_EXPRESSION "${ARG_MESSAGE}")
endfunction()

function(weft_add_cuda_test module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;ARCHS" ${ARGN})
  if(NOT ARG_ARCHS)
    set(ARG_ARCHS 80 90)
  endif()
  set(target test_${module}_${name})
  add_executable(${target} ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE weft::${module})
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${ARG_ARCHS}")
  # CMake 3.25 does not know nvcc 13's C++20 flag, so it is passed by hand (and the interface's
  # cxx_std_20 feature is satisfied by it).
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20 --expt-relaxed-constexpr -Werror all-warnings>)
  if(WEFT_TESTS_COMPILE_ONLY)
    # Compiled to check, never run: the device code unoptimised (cicc and ptxas at -O0) halves nvcc's
    # time; ptxas still assembles every kernel, so the inline PTX is checked.
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Xcicc -O0>"
                                              "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Xptxas -O0>")
    return()
  endif()
  add_test(NAME ${module}.${name} COMMAND ${target})
  set_tests_properties(${module}.${name} PROPERTIES LABELS "${module};cuda" SKIP_RETURN_CODE 77)
endfunction()

# Test helpers shared by tests/<module>/CMakeLists.txt.
#
#   weft_add_test(<module> <name> SOURCES <files...> [LIBS <targets...>] [LABELS <labels...>]
#                 [CONCURRENT] [TIMEOUT <s>])
#     builds test_<module>_<name> from the sources plus the shared Catch2 main and registers the
#     ctest test "<module>.<name>" labelled <module>. CONCURRENT adds the label "concurrent": the
#     tsan preset builds and runs exactly those tests.
#
#   weft_add_header_test(<module>)
#     compiles every public header of include/weft/<module>/ in a translation unit of its own, so a
#     header that forgets an include breaks the build; registered as "<module>.headers".
find_package(Catch2 2.13 REQUIRED)

if(NOT TARGET weft_catch_main)
  add_library(weft_catch_main OBJECT "${PROJECT_SOURCE_DIR}/tests/catch_main.cpp")
  target_link_libraries(weft_catch_main PUBLIC Catch2::Catch2)
  target_compile_features(weft_catch_main PUBLIC cxx_std_20)
  add_custom_target(weft_concurrent_tests)
endif()

function(weft_add_test module name)
  cmake_parse_arguments(ARG "CONCURRENT" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  set(target test_${module}_${name})
  add_executable(${target} ${ARG_SOURCES} $<TARGET_OBJECTS:weft_catch_main>)
  target_link_libraries(${target} PRIVATE weft::${module} Catch2::Catch2 weft_warnings ${ARG_LIBS})
  add_test(NAME ${module}.${name} COMMAND ${target})
  set(labels ${module} ${ARG_LABELS})
  if(ARG_CONCURRENT)
    list(APPEND labels concurrent)
    add_dependencies(weft_concurrent_tests ${target})
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set_tests_properties(${module}.${name} PROPERTIES LABELS "${labels}" TIMEOUT ${ARG_TIMEOUT})
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
  set(main "${CMAKE_CURRENT_BINARY_DIR}/header_tests/${module}_main.cpp")
  file(WRITE "${main}" "int main() { return 0; }\n")
  add_executable(test_${module}_headers ${sources} "${main}")
  target_link_libraries(test_${module}_headers PRIVATE weft::${module} weft_warnings ${ARGN})
  add_test(NAME ${module}.headers COMMAND test_${module}_headers)
  set_tests_properties(${module}.headers PROPERTIES LABELS ${module})
endfunction()

# weft_add_fuzzer(<module> <name> SOURCES <files...> [LIBS <targets...>])
#   A libFuzzer harness (the sources define LLVMFuzzerTestOneInput) with its seed corpus in
#   tests/<module>/fuzz/corpus/<name>/ and crash regressions in tests/<module>/fuzz/regressions/<name>/.
#   Always: test_<module>_fuzz_replay_<name> feeds every corpus and regression file to the harness
#   (ctest "<module>.fuzz_replay_<name>"), so any compiler re-checks every input ever found.
#   With clang and WEFT_FUZZ=ON (the asan-ubsan preset): fuzz_<module>_<name>, built with
#   -fsanitize=fuzzer on top of the preset's sanitizers, runs for WEFT_FUZZ_SECONDS from the seed corpus
#   (ctest "<module>.fuzz_<name>", labels <module> and fuzz); new inputs go to the build tree only.
option(WEFT_FUZZ "Build libFuzzer harnesses (clang only) and run each for WEFT_FUZZ_SECONDS in ctest" OFF)
set(WEFT_FUZZ_SECONDS 20 CACHE STRING "Seconds each libFuzzer harness runs in ctest")

if(NOT TARGET weft_fuzz_replay_main)
  add_library(weft_fuzz_replay_main OBJECT "${PROJECT_SOURCE_DIR}/tests/fuzz_replay_main.cpp")
  target_compile_features(weft_fuzz_replay_main PUBLIC cxx_std_20)
endif()

function(weft_add_fuzzer module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  set(corpus "${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${name}")
  set(regressions "${CMAKE_CURRENT_SOURCE_DIR}/fuzz/regressions/${name}")
  if(NOT EXISTS "${corpus}")
    message(FATAL_ERROR "weft_add_fuzzer(${module} ${name}): seed corpus ${corpus} is missing")
  endif()
  set(replay test_${module}_fuzz_replay_${name})
  add_executable(${replay} ${ARG_SOURCES} $<TARGET_OBJECTS:weft_fuzz_replay_main>)
  target_link_libraries(${replay} PRIVATE weft::${module} weft_warnings ${ARG_LIBS})
  add_test(NAME ${module}.fuzz_replay_${name} COMMAND ${replay} "${corpus}" "${regressions}")
  set_tests_properties(${module}.fuzz_replay_${name} PROPERTIES LABELS "${module}" TIMEOUT 120)
  if(WEFT_FUZZ AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    set(fuzzer fuzz_${module}_${name})
    add_executable(${fuzzer} ${ARG_SOURCES})
    target_link_libraries(${fuzzer} PRIVATE weft::${module} weft_warnings ${ARG_LIBS})
    target_compile_options(${fuzzer} PRIVATE -fsanitize=fuzzer)
    target_link_options(${fuzzer} PRIVATE -fsanitize=fuzzer)
    set(work "${CMAKE_CURRENT_BINARY_DIR}/fuzz-corpus/${name}")
    file(MAKE_DIRECTORY "${work}")
    add_test(NAME ${module}.fuzz_${name}
             COMMAND ${fuzzer} -max_total_time=${WEFT_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048
                     -max_len=65536 -print_final_stats=1 "${work}" "${corpus}")
    math(EXPR fuzz_timeout "${WEFT_FUZZ_SECONDS} + 120")
    set_tests_properties(${module}.fuzz_${name} PROPERTIES LABELS "${module};fuzz" TIMEOUT ${fuzz_timeout})
  endif()
endfunction()

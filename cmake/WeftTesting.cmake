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

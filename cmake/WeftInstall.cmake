# Install rules: headers, one export set per module (weft-<module>-targets.cmake) and a relocatable
# weftConfig.cmake that loads only the requested components and finds their packages with
# find_dependency.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(WEFT_INSTALL_CMAKEDIR "${CMAKE_INSTALL_DATADIR}/cmake/weft" CACHE STRING
    "Where weftConfig.cmake is installed (relative to the prefix)")

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.cuh")

set(_weft_config_modules "")
foreach(mod IN LISTS WEFT_AVAILABLE_MODULES)
  install(TARGETS weft_${mod} EXPORT weft-${mod}-targets)
  install(EXPORT weft-${mod}-targets NAMESPACE weft:: DESTINATION "${WEFT_INSTALL_CMAKEDIR}")
  string(APPEND _weft_config_modules "set(_weft_module_depends_${mod} \"${WEFT_MODULE_DEPENDS_${mod}}\")\n")
  set(_finds "")
  foreach(dep IN LISTS WEFT_DEPS_${mod})
    list(APPEND _finds "${WEFT_FIND_${dep}}")
  endforeach()
  string(REPLACE ";" "|" _finds "${_finds}")
  string(APPEND _weft_config_modules "set(_weft_module_finds_${mod} \"${_finds}\")\n")
endforeach()
install(TARGETS weft_weft EXPORT weft-weft-targets)
install(EXPORT weft-weft-targets NAMESPACE weft:: DESTINATION "${WEFT_INSTALL_CMAKEDIR}")

set(WEFT_CONFIG_MODULES "${WEFT_AVAILABLE_MODULES}")
set(WEFT_CONFIG_MODULE_TABLE "${_weft_config_modules}")
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/weftConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/weftConfig.cmake" INSTALL_DESTINATION "${WEFT_INSTALL_CMAKEDIR}")
# Header-only: the version file must not check the consumer's pointer size.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/weftConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES "${PROJECT_BINARY_DIR}/weftConfig.cmake" "${PROJECT_BINARY_DIR}/weftConfigVersion.cmake"
        DESTINATION "${WEFT_INSTALL_CMAKEDIR}")
install(FILES "${PROJECT_SOURCE_DIR}/LICENSE" DESTINATION "${CMAKE_INSTALL_DATADIR}/doc/weft")

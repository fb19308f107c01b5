# vcpkg overlay port for weft (header-only). Use from a checkout:
#   vcpkg install weft --overlay-ports=<weft>/ports
# or in manifest mode with the vcpkg.json at weft's root. The source is the checkout this port
# lives in (set WEFT_SOURCE_DIR to override), so the port always matches the tree it ships with.
if(DEFINED ENV{WEFT_SOURCE_DIR})
  set(SOURCE_PATH "$ENV{WEFT_SOURCE_DIR}")
else()
  get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
endif()

set(VCPKG_BUILD_TYPE release)  # header-only: one configuration is enough

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    -DWEFT_BUILD_TESTS=OFF
    -DWEFT_BUILD_EXAMPLES=OFF
    -DWEFT_BUILD_BENCH=OFF
    -DWEFT_ENABLE_CUDA=OFF
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(PACKAGE_NAME weft CONFIG_PATH share/cmake/weft)
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/debug")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")

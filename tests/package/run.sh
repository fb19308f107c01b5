#!/usr/bin/env bash
# The ways users consume weft, each built and run:
#   1. the README's find_package, add_subdirectory and FetchContent blocks, verbatim (readme.sh);
#   2. the installed package moved to another prefix (relocatable), asked for components kv;sched
#      (no Boost/Eigen/oneTBB loaded), its include directory non-SYSTEM unless WEFT_SYSTEM_INCLUDES;
#   3. an unknown component fails with a clear message;
#   4. every examples/ folder copied out of the tree and built against the installed package;
#   5. the vcpkg port linted (it cannot run here).
# The Conan way runs in tests/package/conan.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work="$root/build/package"
components=${WEFT_PACKAGE_COMPONENTS:-"kv;sched"}
jobs=${JOBS:-$(nproc)}
mkdir -p "$work"
rm -rf "$work/moved-prefix" "$work"/consumer-*
quiet() { "$@" > "$work/last.log" 2>&1 || { cat "$work/last.log"; echo "FAILED: $*" >&2; exit 1; }; }

echo "package: the README's ways (tests/package/readme.sh)"
"$root/tests/package/readme.sh" find_package add_subdirectory FetchContent

# Built inside someone else's project, weft builds no tests/examples/benchmarks, adds no -Werror and
# never looks for nvcc.
sub="$work/readme/add_subdirectory/my_engine/build"
for var in WEFT_BUILD_TESTS WEFT_BUILD_EXAMPLES WEFT_BUILD_BENCH; do
  grep -q "^$var:BOOL=OFF" "$sub/CMakeCache.txt" || { echo "FAILED: $var is not OFF under add_subdirectory" >&2; exit 1; }
done
if grep -q '^CMAKE_CUDA_COMPILER' "$sub/CMakeCache.txt" || grep -rq -- '-Werror' "$sub/CMakeFiles/my_engine.dir/flags.make"; then
  echo "FAILED: weft probed for CUDA or added -Werror inside a consumer's build" >&2; exit 1
fi

# The prefix way 1 installed into; moved, so nothing may point at the old location.
mv "$work/readme/find_package/home/.local" "$work/moved-prefix"
test -f "$work/moved-prefix/share/cmake/weft/weftConfig.cmake"
test -f "$work/moved-prefix/include/weft/core.hpp"

echo "package: moved prefix, components $components"
quiet cmake -S "$root/tests/package/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/moved-prefix" \
  -DWEFT_COMPONENTS="$components" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
quiet cmake --build "$work/consumer" -j "$jobs"
"$work/consumer/consumer"
include_dir="$work/moved-prefix/include"
if ! grep -q -- "-I$include_dir" "$work/consumer/compile_commands.json"; then
  grep -o -- "-[a-z]*system $include_dir\|-I[^ ]*" "$work/consumer/compile_commands.json" | sort -u
  echo "FAILED: weft's include directory should be an ordinary -I include by default" >&2; exit 1
fi
if cmake --version | awk 'NR == 1 { split($3, v, "."); exit !(v[1] > 3 || (v[1] == 3 && v[2] >= 23)) }'; then
  quiet cmake -S "$root/tests/package/consumer" -B "$work/consumer-system" -DCMAKE_PREFIX_PATH="$work/moved-prefix" \
    -DWEFT_COMPONENTS=core -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DWEFT_SYSTEM_INCLUDES=ON
  grep -q -- "-isystem $include_dir" "$work/consumer-system/compile_commands.json" ||
    { echo "FAILED: WEFT_SYSTEM_INCLUDES=ON should make weft's include directory SYSTEM" >&2; exit 1; }
fi

echo "package: asking for a component that does not exist must fail"
if cmake -S "$root/tests/package/consumer" -B "$work/consumer-bad" -DCMAKE_PREFIX_PATH="$work/moved-prefix" \
   -DWEFT_COMPONENTS="core;nonexistent" > "$work/bad.log" 2>&1; then
  echo "FAILED: find_package(weft COMPONENTS nonexistent) succeeded" >&2; exit 1
fi
grep -q "weft component 'nonexistent' is not installed" "$work/bad.log" || { cat "$work/bad.log"; exit 1; }

echo "package: examples copied out of the tree (tests/package/examples.sh)"
"$root/tests/package/examples.sh" "$work/moved-prefix"

echo "package: vcpkg port lint"
python3 "$root/tests/package/vcpkg_lint.py" "$root"
python3 "$root/tests/package/vcpkg_lint.py" --self-test "$root"
echo "package: all consumer checks passed"

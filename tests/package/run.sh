#!/usr/bin/env bash
# Builds and runs tests/package/consumer three ways: against an installed (and then moved, to prove
# it is relocatable) weft via find_package, via add_subdirectory, and via FetchContent.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work="$root/build/package"
components=${WEFT_PACKAGE_COMPONENTS:-"core"}
rm -rf "$work"
mkdir -p "$work"
quiet() { "$@" > "$work/last.log" 2>&1 || { cat "$work/last.log"; echo "FAILED: $*" >&2; exit 1; }; }

echo "package: install weft"
quiet cmake -S "$root" -B "$work/weft" -DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_EXAMPLES=OFF -DWEFT_ENABLE_CUDA=OFF \
  -DCMAKE_INSTALL_PREFIX="$work/prefix"
quiet cmake --install "$work/weft"
mv "$work/prefix" "$work/moved-prefix"   # relocatable: nothing may point at the old prefix
test -f "$work/moved-prefix/share/cmake/weft/weftConfig.cmake"
test -f "$work/moved-prefix/include/weft/core.hpp"

for mode in find_package subdirectory fetchcontent; do
  echo "package: consumer via $mode (components: $components)"
  quiet cmake -S "$root/tests/package/consumer" -B "$work/consumer-$mode" -DWEFT_CONSUME=$mode \
    -DWEFT_SOURCE_DIR="$root" -DCMAKE_PREFIX_PATH="$work/moved-prefix" -DWEFT_COMPONENTS="$components" \
    -DFETCHCONTENT_BASE_DIR="$work/fetch"
  quiet cmake --build "$work/consumer-$mode" -j 2
  "$work/consumer-$mode/consumer"
done

echo "package: asking for a component that does not exist must fail"
if cmake -S "$root/tests/package/consumer" -B "$work/consumer-bad" -DWEFT_CONSUME=find_package \
   -DCMAKE_PREFIX_PATH="$work/moved-prefix" -DWEFT_COMPONENTS="core;nonexistent" > "$work/bad.log" 2>&1; then
  echo "FAILED: find_package(weft COMPONENTS nonexistent) succeeded" >&2; exit 1
fi
grep -q "weft component 'nonexistent' is not installed" "$work/bad.log" || { cat "$work/bad.log"; exit 1; }
echo "package: 3 consumer builds passed, 0 failed"

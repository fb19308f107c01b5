#!/usr/bin/env bash
# Compiler launcher of the header-test targets: a header test only asks whether a translation unit
# compiles, so the compiler runs with -fsyntax-only (a quarter less CPU than generating object code
# with debug info) and an empty object file is left for the build tool. Usage (by CMake):
#   syntax_only.sh <compiler> <arguments...> -o <object> ...
set -u
out=""
prev=""
for arg in "$@"; do
  [[ $prev == -o ]] && out=$arg
  prev=$arg
done
"$@" -fsyntax-only || exit $?
if [[ -n $out ]]; then
  : > "$out"
fi

#!/usr/bin/env bash
# Every folder of examples/ is a project a user can copy: copy each one out of the tree and build it
# against an installed weft, with warnings as errors (weft's own CI flags; a copied example has no
# other). A folder that only builds inside the tree (no find_package(weft ...)) fails.
# Usage: tests/package/examples.sh <weft install prefix>      (work directory: build/package/examples)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
prefix=${1:?usage: tests/package/examples.sh <weft install prefix>}
work="$root/build/package/examples"
jobs=${JOBS:-$(nproc)}
rm -rf "$work"
mkdir -p "$work"

build_one() {
  local src=$1 name dir
  name=$(basename "$src")
  dir="$work/$name"
  if ! grep -q 'find_package(weft' "$src/CMakeLists.txt"; then
    echo "examples/$name: FAILED: its CMakeLists.txt does not find_package(weft ...), so a copy cannot build" >&2
    return 1
  fi
  cp -r "$src" "$dir"
  if cmake -S "$dir" -B "$dir/build" -DCMAKE_PREFIX_PATH="$prefix" \
       -DCMAKE_CXX_FLAGS="-Wall -Wextra -Wpedantic -Werror" > "$dir.log" 2>&1 &&
     cmake --build "$dir/build" >> "$dir.log" 2>&1; then
    echo "examples/$name: built alone against the installed package"
  else
    cat "$dir.log"
    echo "examples/$name: FAILED to build alone against the installed package" >&2
    return 1
  fi
}
export -f build_one
export work prefix

mapfile -t folders < <(for d in "$root"/examples/*/; do [[ -f $d/CMakeLists.txt ]] && echo "${d%/}"; done)
# One compiler per folder: the folders build side by side, $jobs at a time.
if ! printf '%s\n' "${folders[@]}" | xargs -P "$jobs" -I{} bash -c 'build_one "$@"' _ {}; then
  echo "FAILED: some examples do not build out of the tree" >&2
  exit 1
fi
echo "examples: ${#folders[@]} folders built out of the tree"

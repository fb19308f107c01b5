#!/usr/bin/env bash
# Runs every module's benchmark script (bench/<module>/run.sh <build-dir>); CSV and PNG land in
# <build-dir>/bench-results.
set -euo pipefail
build_dir=${1:?usage: bench/run_all.sh <build-dir>}
root=$(cd "$(dirname "$0")" && pwd)
for script in "$root"/*/run.sh; do
  [[ -x "$script" ]] || continue
  printf '\n=== bench: %s ===\n' "$(basename "$(dirname "$script")")"
  "$script" "$build_dir"
done
# Include cost of every umbrella header with this build's compiler (budget 2 s of CPU for
# -fsyntax-only; repo.compile_time fails the suite above 6 s).
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build_dir/CMakeCache.txt" 2>/dev/null)
if [[ -n $cxx && -d $build_dir/compile_time ]]; then
  printf '\n=== include cost (%s) ===\n' "$("$cxx" --version | head -1)"
  bash "$root/../tests/repo/compile_time.sh" --cxx "$cxx" --flags-dir "$build_dir/compile_time" --report-only \
    "$root/../include"
fi
echo "weft: benchmark results in $build_dir/bench-results"

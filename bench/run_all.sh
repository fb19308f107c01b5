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
echo "weft: benchmark results in $build_dir/bench-results"

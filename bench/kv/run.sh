#!/usr/bin/env bash
# Runs the kv benchmark and plots it: bench/kv/run.sh <build-dir> [trace.csv]
#   e.g. cmake --preset release && cmake --build build/release --target bench_kv_kv bench_kv_kvshare && bench/kv/run.sh build/release
set -euo pipefail
build=${1:?usage: run.sh <build-dir> [trace.csv]}
here=$(cd "$(dirname "$0")" && pwd)
out="$build/bench-results"
mkdir -p "$out"
"$build/bench/bench_kv_kv" ${2:+"$2"} | tee "$out/kv_bench.txt"
# KVShare: similar-prompt reuse and hit-rate-aware admission (text + kvshare_bench.csv; no plot).
[[ -x "$build/bench/bench_kv_kvshare" ]] && "$build/bench/bench_kv_kvshare" | tee "$out/kvshare_bench.txt"
# The PNG needs matplotlib (python3-matplotlib); use the first python3 that has it.
for py in python3 /usr/bin/python3; do
  if "$py" -c "import matplotlib" 2>/dev/null; then
    exec "$py" "$here/plot.py" "$out/kv_bench.csv" "$out/kv_bench.png"
  fi
done
echo "run.sh: no python3 with matplotlib found; CSV is at $out/kv_bench.csv" >&2

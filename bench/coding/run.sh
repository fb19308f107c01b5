#!/usr/bin/env bash
# Runs the weft::coding benchmark from a release build and draws the PNG.
# usage: bench/coding/run.sh <build-dir>   (e.g. build/release)
set -euo pipefail
build=${1:?usage: bench/coding/run.sh <build-dir>}
here=$(cd "$(dirname "$0")" && pwd)
"$build/bench/bench_coding_conditioning"
"$build/bench/bench_coding_stragglers"
"$build/bench/bench_coding_sequential"
"$build/bench/bench_coding_sgc"
[ -x "$build/bench/bench_coding_coded_allreduce" ] && "$build/bench/bench_coding_coded_allreduce" 9
out=$(grep -E '^WEFT_BENCH_OUT:' "$build/CMakeCache.txt" | cut -d= -f2)
py=python3
command -v /usr/bin/python3 > /dev/null && py=/usr/bin/python3
"$py" "$here/plot.py" "$out/coding_stragglers.csv" "$out/coding_stragglers.png"
"$py" "$here/plot_sgc.py" "$out/coding_sgc.csv" "$out/coding_sgc.png"

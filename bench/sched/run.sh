#!/usr/bin/env bash
# Runs the sched benchmarks from a release build and draws their plots.
#   bench/sched/run.sh build/release
set -euo pipefail
build=${1:?usage: bench/sched/run.sh <build-dir>}
out="$build/bench-results"
mkdir -p "$out"
"$build/bench/bench_sched_decision"
"$build/bench/bench_sched_simulator"
python3 "$(dirname "$0")/plot.py" "$out"

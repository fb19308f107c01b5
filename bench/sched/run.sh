#!/usr/bin/env bash
# Runs the sched benchmarks from a release build and draws their plots.
#   bench/sched/run.sh build/release
set -euo pipefail
build=${1:?usage: bench/sched/run.sh <build-dir>}
out="$build/bench-results"
mkdir -p "$out"
"$build/bench/bench_sched_decision"
"$build/bench/bench_sched_simulator"
"$build/bench/bench_sched_fidelity"
"$build/bench/bench_sched_repro"
"$build/bench/bench_sched_nanoflow"
"$build/bench/bench_sched_splitfuse"
"$build/bench/bench_sched_layered"
"$build/bench/bench_sched_apex"
"$build/bench/bench_sched_semi_pd"
"$build/bench/bench_sched_distkv"
# The system python has python3-matplotlib; a pyenv or venv python3 first on PATH may not.
py=python3
python3 -c 'import matplotlib' 2>/dev/null || py=/usr/bin/python3
"$py" "$(dirname "$0")/plot.py" "$out"

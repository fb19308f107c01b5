#!/usr/bin/env bash
# Runs the moe benchmarks of a release build and draws the plots.
# Usage: bench/moe/run.sh <build-dir>   (e.g. build/release); results go to <build-dir>/bench-results.
set -euo pipefail
build="${1:?usage: bench/moe/run.sh <build-dir>}"
here="$(cd "$(dirname "$0")" && pwd)"
out="$build/bench-results"
mkdir -p "$out"
"$build/bench/bench_moe_hit_rate" "$out"
# Debian's python3-matplotlib lives with the system interpreter; a pyenv python3 may lack it.
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
"$py" "$here/plot.py" "$out"

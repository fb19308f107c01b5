#!/usr/bin/env bash
# Runs weft::quant's benchmark from a release build and draws its plot.
#   bench/quant/run.sh <build-dir> [--quick]      e.g. bench/quant/run.sh build/release
set -euo pipefail
build="${1:?usage: bench/quant/run.sh <build-dir> [--quick]}"
shift
here="$(cd "$(dirname "$0")" && pwd)"
"$build/bench/bench_quant_gemm" "$@"
out="$(cd "$build" && pwd)/bench-results/quant.csv"
# The Debian matplotlib lives with the system python; a pyenv python may lack it.
py=python3
if ! "$py" -c "import matplotlib" 2>/dev/null && [ -x /usr/bin/python3 ]; then py=/usr/bin/python3; fi
"$py" "$here/plot.py" "$out"

#!/usr/bin/env bash
# Runs the DiLoCo example as `make demo` does: Streaming DiLoCo over 4 worker processes with int8
# fragments, a worker killed with SIGKILL mid-run and a new one started later (it pulls the state);
# then the plain and the one-step-delayed variants for comparison. Outputs next to the binary.
set -euo pipefail
bin_dir=${1:?usage: examples/diloco/demo.sh <examples-bin-dir>}
"$bin_dir/diloco" --mode streaming --out "$bin_dir/diloco_out"
echo
echo "--- for comparison, same inner compute, no failures ---"
for mode in plain delayed; do
  "$bin_dir/diloco" --mode "$mode" --no-kill --out "$bin_dir/diloco_out_$mode" | grep -E "^DiLoCo:|eval loss|bytes w0|example"
done

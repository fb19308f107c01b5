#!/usr/bin/env bash
# The GPU check in one command, for a machine with an NVIDIA GPU, the CUDA toolkit and PyTorch
# (no Boost, oneTBB or Catch2 needed): the GPU tests, compute-sanitizer's memcheck and racecheck on
# them, the MoE dispatch / quantizer benchmark against weft's Thrust versions, and the decode GEMV
# benchmark against cuBLAS and PyTorch's int4 kernel. Binaries compiled
# elsewhere (bench/quant/gpu/build.sh) are used when present in the build folder, else built here.
#   bench/quant/gpu/run.sh [output folder, default build/gpu]
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${1:-$root/build/gpu}
bin=${WEFT_GPU_BIN:-$root/build/gpu}
mkdir -p "$out"
[[ -x $bin/cuda_gemv_test && -f $bin/libweft_capi.so ]] || "$root/bench/quant/gpu/build.sh" "$bin"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
nvcc --version 2>/dev/null | tail -1
status=0
log=$out/tests.log
: > "$log"
step() {  # name, command...: runs it, appends its output to tests.log, prints PASS/FAIL with its last line
  local name=$1
  shift
  local t0=$SECONDS tmp
  tmp=$(mktemp)
  if "$@" > "$tmp" 2>&1; then echo "PASS $name ($((SECONDS - t0)) s): $(tail -1 "$tmp")"
  else echo "FAIL $name ($((SECONDS - t0)) s):"; tail -20 "$tmp"; status=1; fi
  { echo "=== $name: $*"; cat "$tmp"; } >> "$log"
  rm -f "$tmp"
}
step gemv_test "$bin/cuda_gemv_test"
[[ -x $bin/cuda_quant_test ]] && step quant_test "$bin/cuda_quant_test"
[[ -x $bin/probe_mma_sp ]] && step probe_mma_sp "$bin/probe_mma_sp"
[[ -x $bin/cuda_dispatch_test ]] && step dispatch_test "$bin/cuda_dispatch_test"
if command -v compute-sanitizer > /dev/null; then
  WEFT_GEMV_TEST_QUICK=1 step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 "$bin/cuda_gemv_test"
  WEFT_GEMV_TEST_QUICK=2 step racecheck compute-sanitizer --tool racecheck --error-exitcode 1 "$bin/cuda_gemv_test"
  WEFT_GEMV_TEST_QUICK=2 step synccheck compute-sanitizer --tool synccheck --error-exitcode 1 "$bin/cuda_gemv_test"
  WEFT_GEMV_TEST_QUICK=2 step initcheck compute-sanitizer --tool initcheck --error-exitcode 1 "$bin/cuda_gemv_test"
  if [[ -x $bin/cuda_dispatch_test ]]; then
    step dispatch_memcheck compute-sanitizer --tool memcheck --error-exitcode 1 "$bin/cuda_dispatch_test"
    step dispatch_racecheck compute-sanitizer --tool racecheck --error-exitcode 1 "$bin/cuda_dispatch_test"
  fi
else
  echo "compute-sanitizer not found: sanitizer steps skipped"
fi
[[ -x $bin/bench_dispatch ]] && { "$bin/bench_dispatch" "$out" 2>&1 | tee "$out/dispatch.log" || status=1; }
export WEFT_CAPI_LIBRARY=$bin/libweft_capi.so
PYTHONUNBUFFERED=1 python3 "$root/bench/quant/gpu/bench_gemv.py" "$out" 2>&1 | tee "$out/bench.log" || status=1
exit $status

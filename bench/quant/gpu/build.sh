#!/usr/bin/env bash
# Compiles what bench/quant/gpu/run.sh runs, with nvcc only (no GPU needed): the GPU tests and the
# C ABI library of the PyTorch binding, the MoE dispatch / quantizer test and benchmark. ARCHS: GPU targets (default "80 90a").
#   bench/quant/gpu/build.sh [output folder, default build/gpu]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${1:-$root/build/gpu}
mkdir -p "$out"
gencode=()
for a in ${ARCHS:-80 90a}; do gencode+=(-gencode "arch=compute_${a},code=sm_${a}"); done
flags=(-std=c++20 --expt-relaxed-constexpr -O3 -Werror all-warnings "${gencode[@]}" -I"$root/include")
nvcc "${flags[@]}" -DWEFT_GEMV_TEST_EVERY_CONFIG "$root/tests/quant/cuda_gemv_test.cu" -o "$out/cuda_gemv_test" &
nvcc "${flags[@]}" "$root/tests/quant/cuda_quant_test.cu" -o "$out/cuda_quant_test" &
nvcc "${flags[@]}" "$root/bench/quant/gpu/probe_mma_sp.cu" -o "$out/probe_mma_sp" &
"$root/bindings/torch/build.sh" "$out" &
wait -n && wait -n && wait -n && wait -n
nvcc "${flags[@]}" "$root/tests/quant/cuda_dispatch_test.cu" -o "$out/cuda_dispatch_test" &
nvcc "${flags[@]}" "$root/bench/quant/gpu/bench_dispatch.cu" -o "$out/bench_dispatch" &
wait -n && wait -n
echo "built into $out"

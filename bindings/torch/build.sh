#!/usr/bin/env bash
# Builds libweft_capi.so (the C ABI the PyTorch binding loads) with nvcc. Usage:
#   bindings/torch/build.sh [output folder, default: this folder]
# ARCHS lists the GPU targets (default "80 90a": A100 and H100/H200 machine code).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$here}
mkdir -p "$out"
gencode=()
for a in ${ARCHS:-80 90a}; do gencode+=(-gencode "arch=compute_${a},code=sm_${a}"); done
nvcc -std=c++20 --expt-relaxed-constexpr -O3 -shared -Xcompiler -fPIC "${gencode[@]}" -I"$root/include" \
  "$here/weft_capi.cu" -o "$out/libweft_capi.so"
echo "built $out/libweft_capi.so"

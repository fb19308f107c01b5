#!/usr/bin/env bash
# Whether this machine can run code compiled with -march=<level>: x86-64-v2, x86-64-v3 or x86-64-v4
# (the x86-64 psABI micro-architecture levels). Exit 0 when it can, 1 when it cannot (the ISA builds
# then compile but do not run their tests), 2 on a bad argument.
# Usage: cmake/host_isa.sh x86-64-v3
set -euo pipefail
level=${1:?usage: cmake/host_isa.sh x86-64-v2|x86-64-v3|x86-64-v4}
v2=(cx16 lahf_lm popcnt sse4_1 sse4_2 ssse3)
v3=("${v2[@]}" avx avx2 bmi1 bmi2 f16c fma abm movbe xsave)
v4=("${v3[@]}" avx512f avx512bw avx512cd avx512dq avx512vl)
case "$level" in
  x86-64-v2) need=("${v2[@]}") ;;
  x86-64-v3) need=("${v3[@]}") ;;
  x86-64-v4) need=("${v4[@]}") ;;
  *) echo "host_isa.sh: unknown level '$level' (x86-64-v2, x86-64-v3 or x86-64-v4)" >&2; exit 2 ;;
esac
if [[ $(uname -m) != x86_64 || ! -r /proc/cpuinfo ]]; then
  echo "host_isa.sh: not an x86-64 Linux machine: cannot run $level code" >&2
  exit 1
fi
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
missing=()
for f in "${need[@]}"; do
  [[ $flags == *" $f "* ]] || missing+=("$f")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "host_isa.sh: this CPU cannot run $level code (missing: ${missing[*]})"
  exit 1
fi

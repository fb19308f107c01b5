#!/usr/bin/env bash
# Runs every worked example that was built into <bin-dir>, in the order below, then any others; ends
# with the PNG and CSV files the run wrote. An example folder may hold demo.sh <bin-dir> to run itself
# (multi-process examples do).
set -euo pipefail
bin_dir=${1:?usage: examples/run_demos.sh <examples-bin-dir>}
bin_dir=$(cd "$bin_dir" && pwd)
root=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$root")
preferred=(core_quickstart allreduce kv_prefix_cache serve_sim moe_expert_cache quant_gemv gradient_coding diloco)

# What the speeds printed below were measured with.
cache="$bin_dir/../../CMakeCache.txt"
if [[ -f $cache ]]; then
  build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$cache")
  cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$cache")
  flags=$(sed -n 's/^CMAKE_CXX_FLAGS:[A-Z]*=//p' "$cache")
  printf 'weft demo: %s build (%s%s) on %s, %s cores; times and speeds below are for this build on this machine.\n' \
    "${build_type:-unspecified}" "$("$cxx" --version 2>/dev/null | head -1)" "${flags:+, $flags}" \
    "$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ //')" "$(nproc)"
  case "${build_type,,}" in
    release|relwithdebinfo|minsizerel) ;;
    *) echo "weft demo: NOT an optimised build: the times below are not weft's speed (make demo builds Release)" ;;
  esac
fi

marker=$(mktemp)
trap 'rm -f "$marker"' EXIT
# Where examples that take an output directory write their CSV files.
out_dir="$(dirname "$bin_dir")/demo-output"
mkdir -p "$out_dir"
declare -A args=([serve_sim]="--out $out_dir/serve_sim")
mapfile -t all < <(for d in "$root"/*/; do basename "$d"; done)
ordered=()
for name in "${preferred[@]}" "${all[@]}"; do
  [[ " ${ordered[*]-} " == *" $name "* ]] || ordered+=("$name")
done

ran=0
for name in "${ordered[@]}"; do
  [[ -d "$root/$name" ]] || continue
  printf '\n=== example: %s (examples/%s/) ===\n' "$name" "$name"
  if [[ -x "$root/$name/demo.sh" ]]; then
    "$root/$name/demo.sh" "$bin_dir"
  elif [[ -x "$bin_dir/$name" ]]; then
    # shellcheck disable=SC2086  # the arguments are words
    "$bin_dir/$name" ${args[$name]-}
  else
    echo "(not built: its module's dependencies are missing)"
    continue
  fi
  ran=$((ran + 1))
done
printf '\nweft: ran %d examples. Start reading at examples/core_quickstart/main.cpp, then docs/index.md.\n' "$ran"

# Files the examples wrote during this run (under the checkout and the build tree).
mapfile -t written < <(find "$repo" "$(dirname "$bin_dir")" -xdev \( -name .git -prune \) -o \
  -type f \( -name '*.png' -o -name '*.csv' \) -newer "$marker" -print 2>/dev/null | sort -u)
if [[ ${#written[@]} -gt 0 ]]; then
  echo "weft: the examples wrote ${#written[@]} PNG/CSV files:"
  printf '  %s\n' "${written[@]}"
else
  echo "weft: the examples wrote no PNG/CSV files"
fi

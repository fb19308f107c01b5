#!/usr/bin/env bash
# Runs every worked example that was built into <bin-dir>, in the order below, then any others.
# An example folder may hold demo.sh <bin-dir> to run itself (multi-process examples do).
set -euo pipefail
bin_dir=${1:?usage: examples/run_demos.sh <examples-bin-dir>}
root=$(cd "$(dirname "$0")" && pwd)
preferred=(core_quickstart allreduce kv_prefix_cache mini_engine serve_sim moe_expert_cache quant_gemv gradient_coding diloco)

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
    "$bin_dir/$name"
  else
    echo "(not built: its module's dependencies are missing)"
    continue
  fi
  ran=$((ran + 1))
done
printf '\nweft: ran %d examples. Start reading at examples/core_quickstart/main.cpp, then docs/index.md.\n' "$ran"

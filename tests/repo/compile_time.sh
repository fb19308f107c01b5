#!/usr/bin/env bash
# Include cost of every umbrella header (include/weft/*.hpp): CPU seconds (user + sys, so a busy
# machine does not inflate it much) of `<cxx> -std=c++20 -fsyntax-only` on a file that includes only
# that header. Prints the table; fails when a header takes more than FACTOR x BUDGET seconds (the
# budget is 2 s, the factor 3, so noise cannot flip the verdict; a header over the limit is timed twice
# more and judged by its fastest run), except headers listed as pending. weft/weft.hpp, the union of
# the module umbrellas it includes, is held to the larger of that limit and the sum of its parts.
#
# Usage: compile_time.sh --cxx <compiler> --flags-dir <dir> [--budget S] [--factor F]
#                        [--pending "a b"] [--report-only] <include dir>
#   <dir>/<module>.flags holds the include and define flags of weft::<module> (written by CMake);
#   an umbrella whose module has no flags file (module unavailable) is skipped.
set -euo pipefail
cxx=c++ flags_dir="" budget=2 factor=3 pending="" report_only=0
while [[ $# -gt 1 ]]; do
  case "$1" in
    --cxx) cxx=$2; shift 2 ;;
    --flags-dir) flags_dir=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --factor) factor=$2; shift 2 ;;
    --pending) pending=$2; shift 2 ;;
    --report-only) report_only=1; shift ;;
    *) echo "compile_time.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
include_dir=${1:?usage: compile_time.sh [options] <include dir>}
limit=$(awk -v b="$budget" -v f="$factor" 'BEGIN { print b * f }')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

printf '%-22s %8s  %s\n' "umbrella header" "cpu s" "verdict (budget ${budget} s, fail above ${limit} s)"
failed=0
declare -A measured
for header in "$include_dir"/weft/*.hpp; do
  name=$(basename "$header" .hpp)
  module=$name
  [[ $name == weft ]] && module=weft
  flags_file="$flags_dir/$module.flags"
  if [[ ! -f $flags_file ]]; then
    printf '%-22s %8s  %s\n' "weft/$name.hpp" "-" "skipped (module unavailable)"
    continue
  fi
  printf '#include <weft/%s.hpp>\n' "$name" > "$work/$name.cpp"
  mapfile -t flags < <(tr ';' '\n' < "$flags_file" | sed '/^$/d')
  # weft.hpp is the union of the module umbrellas it includes, each held to the limit on its own: it
  # is held to the larger of the limit and the sum of its parts (it may not cost more than they do).
  header_limit=$limit
  if [[ $name == weft ]]; then
    parts=0
    for part in $(sed -n 's|^#include <weft/\([a-z]*\)\.hpp>.*|\1|p' "$header"); do
      [[ -n ${measured[$part]-} ]] && parts=$(awk -v a="$parts" -v b="${measured[$part]}" 'BEGIN { print a + b }')
    done
    header_limit=$(awk -v l="$limit" -v p="$parts" 'BEGIN { print (p > l ? p : l) }')
  fi
  # Contention on a shared machine (caches, memory bandwidth) only ever adds CPU time, so a header
  # over the limit is measured twice more and judged by its fastest run.
  seconds=""
  for attempt in 1 2 3; do
    TIMEFORMAT='%U %S'
    if ! { time "$cxx" -std=c++20 -fsyntax-only "${flags[@]}" "$work/$name.cpp" 2> "$work/$name.err"; } 2> "$work/$name.time"; then
      cat "$work/$name.err" >&2
      echo "compile_time.sh: weft/$name.hpp does not compile alone" >&2
      exit 1
    fi
    run=$(awk '{ printf "%.2f", $1 + $2 }' "$work/$name.time")
    if [[ -z $seconds ]] || awk -v r="$run" -v s="$seconds" 'BEGIN { exit !(r < s) }'; then seconds=$run; fi
    awk -v s="$seconds" -v l="$header_limit" 'BEGIN { exit !(s > l) }' || break
  done
  measured[$name]=$seconds
  verdict=ok
  if awk -v s="$seconds" -v l="$header_limit" 'BEGIN { exit !(s > l) }'; then
    if [[ " $pending " == *" $module "* ]]; then
      verdict="OVER (pending: being split on another branch)"
    else
      verdict="OVER"
      failed=$((failed + 1))
    fi
  elif awk -v s="$seconds" -v b="$budget" 'BEGIN { exit !(s > b) }'; then
    verdict="over budget, under the ${header_limit} s limit"
  fi
  printf '%-22s %8s  %s\n' "weft/$name.hpp" "$seconds" "$verdict"
done
if [[ $failed -gt 0 && $report_only == 0 ]]; then
  echo "compile_time.sh: $failed umbrella header(s) above ${limit} s of CPU for -fsyntax-only" >&2
  exit 1
fi

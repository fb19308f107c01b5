#!/usr/bin/env bash
# The allreduce comparison of bench/comm: weft (tcp, shm: every algorithm, the tuner's pick, the
# tcp streaming reference), Gloo (tcp), OpenMPI (vader shared memory, tcp BTL) and the copy bounds,
# for each rank count, in interleaved rounds (each round runs every implementation once), so slow
# spells of a shared machine hit all of them alike; plot.py reports the median and min-max over
# rounds, the ratios, the tuner's regret and the bound check, and draws the PNG.
# weft's ranks are bound to one core each when they fit the cores (--bind 1), as mpirun binds
# OpenMPI's by default for up to 2 processes; with more ranks than cores neither is bound.
# Round 1 of weft also runs autotune() and saves the table; later rounds load it (the tuner's pick
# is then measured in batches independent of the ones that chose it). One table is one draw: rounds
# 2 to K+1 (--tables K) also run autotune() alone in a process of its own, and plot.py scores each
# of those K tables' picks against the rounds too (the tuner's pick distribution and its regret).
# Within a round every row is the median of --reps batches (3 by default; weft's algorithms take
# their batches in turn, one of each and then the next, as autotune() does).
# Usage: bench/comm/run.sh <build-dir> [--ranks "2 4"] [--rounds 5] [--min B] [--max B] [--tables K] [--reps R] [--append]
# Results: <build-dir>/bench-results/comm_allreduce.{csv,png} and comm_allreduce_summary.txt.
# On a small shared machine run each rank count under its own quiet slot, e.g.
#   wquiet bench/comm/run.sh build/release --ranks 2 && wquiet bench/comm/run.sh build/release --ranks 4 --append
set -euo pipefail
build=${1:?usage: bench/comm/run.sh <build-dir> [--ranks "2 4"] [--rounds R] [--min B] [--max B] [--tables K] [--reps R] [--append]}
shift
max=$((64 << 20)); min=1024; rounds=5; ranks="2 4"; append=0; tables=4; reps=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --max) max=$2; shift 2 ;;
    --min) min=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --tables) tables=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --append) append=1; shift ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bin="$build/bench"
out="$build/bench-results"
mkdir -p "$out"
csv="$out/comm_allreduce.csv"
if [[ $append != 1 || ! -f "$csv" ]]; then
  echo "impl,transport,ranks,algorithm,bytes,round,time_us,algbw_GBps,busbw_GBps" > "$csv"
  rm -f "$out"/comm_tuning_*_extra*.csv
fi
# Batches: every binary (weft's, the peers', the bounds) takes bench::default_iters (common.hpp): at
# least 32 calls when the ranks outnumber the cores (n = 4 here), 3 otherwise.
sweep=(--min "$min" --max "$max" --out "$csv")
timed=(--reps "$reps" "${sweep[@]}")  # every implementation's rows; the bounds take sweep alone
echo "# machine: $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%F %T') UTC" | tee -a "$out/comm_allreduce_runs.txt"
start=$SECONDS
for n in $ranks; do
  "$bin/bench_comm_bounds" --ranks "$n" "${sweep[@]}" > /dev/null
done
for ((r = 1; r <= rounds; ++r)); do
  for n in $ranks; do
    for tr in tcp shm; do
      table="$out/comm_tuning_${tr}_${n}.csv"
      if [[ $r == 1 ]]; then tune=(--tune-out "$table"); else tune=(--tune-in "$table"); fi
      ref=0; [[ $tr == tcp ]] && ref=1
      "$bin/bench_comm_allreduce" --transport "$tr" --ranks "$n" --round "$r" "${tune[@]}" --reference "$ref" --bind 1 \
        "${timed[@]}" > /dev/null
      if ((r >= 2 && r <= tables + 1)); then
        "$bin/bench_comm_allreduce" --transport "$tr" --ranks "$n" --bind 1 --min "$min" --max "$max" \
          --tune-out "$out/comm_tuning_${tr}_${n}_extra$((r - 1)).csv" --tune-only 1 > /dev/null
      fi
    done
    if [[ -x "$bin/bench_comm_gloo" ]]; then
      "$bin/bench_comm_gloo" --ranks "$n" --round "$r" "${timed[@]}" > /dev/null
    elif [[ $r == 1 ]]; then
      echo "# gloo: $bin/bench_comm_gloo not built (it needs libgloo-dev)"
    fi
    if [[ -x "$bin/bench_comm_mpi" ]] && command -v mpirun > /dev/null; then
      OMPI_MCA_btl=self,vader mpirun --allow-run-as-root --oversubscribe -n "$n" \
        "$bin/bench_comm_mpi" --transport shm --ranks "$n" --round "$r" "${timed[@]}" > /dev/null
      OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo mpirun --allow-run-as-root --oversubscribe -n "$n" \
        "$bin/bench_comm_mpi" --transport tcp --ranks "$n" --round "$r" "${timed[@]}" > /dev/null
    elif [[ $r == 1 ]]; then
      echo "# openmpi: not built or mpirun missing"
    fi
  done
  echo "# round $r done after $((SECONDS - start)) s"
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg); $((SECONDS - start)) s" | tee -a "$out/comm_allreduce_runs.txt"
PY=/usr/bin/python3; [[ -x $PY ]] || PY=python3
"$PY" "$(dirname "$0")/plot.py" "$csv" "$out/comm_allreduce.png" | tee "$out/comm_allreduce_summary.txt"

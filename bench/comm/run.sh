#!/usr/bin/env bash
# Runs the allreduce sweep for weft (tcp, shm), Gloo (tcp) and OpenMPI (shm = vader BTL, tcp BTL),
# for 2 and 4 processes, in one run; writes comm_allreduce.csv, comm_allreduce.png and a ratio
# summary under <build-dir>/bench-results.
# Usage: bench/comm/run.sh <build-dir> [--max BYTES] [--min BYTES] [--iters I] [--reps R] [--ranks "2 4"]
set -euo pipefail
build=${1:?usage: bench/comm/run.sh <build-dir> [--max B] [--min B] [--iters I] [--reps R] [--ranks "2 4"]}
shift
max=$((64 << 20)); min=4096; iters=3; reps=3; ranks="2 4"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --max) max=$2; shift 2 ;;
    --min) min=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bin="$build/bench"
out="$build/bench-results"
mkdir -p "$out"
csv="$out/comm_allreduce.csv"
echo "impl,transport,ranks,algorithm,bytes,time_us,algbw_GBps,busbw_GBps" > "$csv"
common=(--min "$min" --max "$max" --iters "$iters" --reps "$reps" --out "$csv")
echo "# machine: $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for n in $ranks; do
  "$bin/bench_comm_allreduce" --transport tcp --ranks "$n" "${common[@]}"
  "$bin/bench_comm_allreduce" --transport shm --ranks "$n" "${common[@]}"
  if [[ -x "$bin/bench_comm_gloo" ]]; then
    "$bin/bench_comm_gloo" --ranks "$n" "${common[@]}"
  else
    echo "# gloo: not built (libgloo-dev missing)"
  fi
  if [[ -x "$bin/bench_comm_mpi" ]] && command -v mpirun > /dev/null; then
    OMPI_MCA_btl=self,vader mpirun --allow-run-as-root --oversubscribe -n "$n" \
      "$bin/bench_comm_mpi" --transport shm --ranks "$n" "${common[@]}"
    OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo mpirun --allow-run-as-root --oversubscribe -n "$n" \
      "$bin/bench_comm_mpi" --transport tcp --ranks "$n" "${common[@]}"
  else
    echo "# openmpi: not built or mpirun missing"
  fi
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
PY=/usr/bin/python3; [[ -x $PY ]] || PY=python3
"$PY" "$(dirname "$0")/plot.py" "$csv" "$out/comm_allreduce.png" | tee "$out/comm_allreduce_summary.txt"

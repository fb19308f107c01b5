#!/usr/bin/env bash
# Spin against yield (and what automatic picks) for weft's shm transport, beside OpenMPI's vader
# in the same interleaved rounds: n ranks that fit the cores and n ranks that oversubscribe them,
# at a latency size and a bandwidth size. Prints median [min-max] over rounds per mode, the
# fastest mode, the mode automatic resolved to, and each mode / OpenMPI. Ranks are bound to a core
# each when they fit (as mpirun binds OpenMPI's), unbound otherwise.
# Usage: bench/comm/wait_modes.sh <build-dir> [--ranks "2 4"] [--rounds 5] [--sizes "1024 1048576"]
set -euo pipefail
build=${1:?usage: bench/comm/wait_modes.sh <build-dir> [--ranks "2 4"] [--rounds R] [--sizes "B ..."]}
shift
ranks="2 4"; rounds=5; sizes="1024 1048576"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bin="$build/bench"
out="$build/bench-results"
mkdir -p "$out"
csv="$out/comm_wait_modes.csv"
echo "impl,transport,ranks,algorithm,bytes,round,time_us,algbw_GBps,busbw_GBps" > "$csv"
echo "# machine: $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%F %T') UTC"
for ((r = 1; r <= rounds; ++r)); do
  for n in $ranks; do
    for b in $sizes; do
      # The algorithm the tuner picks at these sizes on this host (recursive doubling for small
      # messages, ring for large ones), so the rows differ only in how ranks wait.
      algo=recursive_doubling; [[ $b -ge 262144 ]] && algo=ring
      for mode in spin yield automatic; do
        "$bin/bench_comm_allreduce" --transport shm --ranks "$n" --round "$r" --min "$b" --max "$b" \
          --algos "$algo" --wait "$mode" --label-wait 1 --bind 1 --out "$csv" > /dev/null
      done
      OMPI_MCA_btl=self,vader mpirun --allow-run-as-root --oversubscribe -n "$n" \
        "$bin/bench_comm_mpi" --transport shm --ranks "$n" --round "$r" --min "$b" --max "$b" --out "$csv" > /dev/null
    done
  done
done
python3 - "$csv" <<'PY'
import collections, csv, statistics, sys
rows = collections.defaultdict(list)
for r in csv.DictReader(open(sys.argv[1])):
    rows[(int(r["ranks"]), int(r["bytes"]), r["impl"])].append(float(r["time_us"]))
for n, b in sorted({(k[0], k[1]) for k in rows}):
    impls = {k[2]: v for k, v in rows.items() if k[0] == n and k[1] == b}
    mpi = statistics.median(impls.get("openmpi", [float("nan")]))
    print(f"n={n} {b:>8} B  (openmpi vader {mpi:9.2f} us [{min(impls.get('openmpi', [0])):.2f}-{max(impls.get('openmpi', [0])):.2f}])")
    weft = {k: v for k, v in impls.items() if k.startswith("weft-") and "=" in k}
    for k, v in sorted(weft.items()):
        m = statistics.median(v)
        print(f"    {k:<26} {m:9.2f} us [{min(v):.2f}-{max(v):.2f}]  / openmpi {m / mpi:5.2f}x  ({len(v)} rounds)")
    fixed = {k.split("=")[0][5:]: statistics.median(v) for k, v in weft.items() if not k.startswith("weft-automatic")}
    auto = [k.split("=")[1] for k in weft if k.startswith("weft-automatic")]
    best = min(fixed, key=fixed.get)
    print(f"    fastest: {best}; automatic picks {auto[0] if auto else '?'}"
          f" -> {'right' if auto and auto[0] == best else 'WRONG'} (spin/yield = {fixed['spin'] / fixed['yield']:.2f})")
PY

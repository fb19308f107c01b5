#!/usr/bin/env python3
"""busbw against message size for every implementation (best algorithm per size), one panel per
rank count, and a ratio table: weft's best over the peers at each size."""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = list(csv.DictReader(open(sys.argv[1])))
best = defaultdict(dict)  # (ranks, series) -> bytes -> (busbw, algorithm, time_us)
for r in rows:
    series = f"{r['impl']} {r['transport']}"
    key = (int(r["ranks"]), series)
    b, bw = int(r["bytes"]), float(r["busbw_GBps"])
    if b not in best[key] or bw > best[key][b][0]:
        best[key][b] = (bw, r["algorithm"], float(r["time_us"]))

ranks = sorted({k[0] for k in best})
fig, axes = plt.subplots(1, len(ranks), figsize=(7 * len(ranks), 5), squeeze=False)
for ax, n in zip(axes[0], ranks):
    for (m, series), pts in sorted(best.items()):
        if m != n:
            continue
        xs = sorted(pts)
        style = "--" if series.startswith("ceiling") else "-"
        ax.plot(xs, [pts[x][0] for x in xs], style, marker="o", label=series)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s), best algorithm per size")
    ax.set_title(f"allreduce, {n} processes, this host")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)

def ratio(n, a, b, size):
    pa, pb = best.get((n, a), {}).get(size), best.get((n, b), {}).get(size)
    return f"{pa[0] / pb[0]:5.2f}" if pa and pb and pb[0] > 0 else "  -  "

print("ratios of busbw (>1 means weft is faster); best algorithm per size for each side")
for n in ranks:
    sizes = sorted({b for (m, _), pts in best.items() if m == n for b in pts})
    print(f"\nn={n}: {'bytes':>10} {'tcp/gloo':>9} {'tcp/mpi-tcp':>12} {'tcp/ceiling':>12} {'shm/mpi-shm':>12} "
          f"{'shm/ceiling':>12}  weft-tcp algo / weft-shm algo")
    for s in sizes:
        wt = best.get((n, "weft tcp"), {}).get(s)
        ws = best.get((n, "weft shm"), {}).get(s)
        print(f"      {s:>10} {ratio(n, 'weft tcp', 'gloo tcp', s):>9} {ratio(n, 'weft tcp', 'openmpi tcp', s):>12} "
              f"{ratio(n, 'weft tcp', 'ceiling tcp', s):>12} {ratio(n, 'weft shm', 'openmpi shm', s):>12} "
              f"{ratio(n, 'weft shm', 'ceiling shm', s):>12}  {wt[1] if wt else '-'} / {ws[1] if ws else '-'}")
print(f"\nplot: {sys.argv[2]}")

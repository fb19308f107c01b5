#!/usr/bin/env python3
"""Plots bench_coding_sgc: total runtime against normalized load for every parameter choice of GC,
SR-SGC and M-SGC (seed 1 of each trace and n), the best of each scheme marked."""
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

src, dst = sys.argv[1], sys.argv[2]
rows = [r for r in csv.DictReader(open(src)) if r["seed"] == "1"]
panels = list(dict.fromkeys((r["trace"], r["n"]) for r in rows))
cols = 3
nrows = (len(panels) + cols - 1) // cols
fig, axes = plt.subplots(nrows, cols, figsize=(6 * cols, 4.5 * nrows), squeeze=False)
colors = {"SR-SGC": "tab:orange", "M-SGC": "tab:green", "GC": "tab:blue"}  # GC last: it shares loads with SR-SGC
markers = {"SR-SGC": "o", "M-SGC": "o", "GC": "x"}
for ax, (trace, n) in zip([a for row in axes for a in row], panels):
    rs = [r for r in rows if r["trace"] == trace and r["n"] == n]
    for scheme, color in colors.items():
        pts = [(float(r["load"]), float(r["runtime_s"])) for r in rs if r["scheme"] == scheme]
        if not pts:
            continue
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=10 if scheme == "GC" else 6, alpha=0.6 if scheme == "GC" else 0.35,
                   marker=markers[scheme], color=color, label=scheme)
        best = min(pts, key=lambda p: p[1])
        ax.scatter([best[0]], [best[1]], s=90, marker="*", color=color, edgecolor="black", zorder=5)
    runtimes = sorted(float(r["runtime_s"]) for r in rs)
    ax.set_ylim(runtimes[0] * 0.95, runtimes[len(runtimes) // 2] * 1.3)
    ax.set_xscale("log")
    ax.set_xlabel("normalized load (fraction of a job per worker per round)")
    ax.set_ylabel("total runtime (s)")
    ax.set_title(f"{trace}, n = {n} (stars: best of each scheme)")
    ax.legend(fontsize=8)
for ax in [a for row in axes for a in row][len(panels):]:
    ax.axis("off")
fig.tight_layout()
fig.savefig(dst, dpi=110)
print("wrote", dst)

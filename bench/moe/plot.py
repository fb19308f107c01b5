#!/usr/bin/env python3
"""Draws moe_hit_rate.png from moe_hit_rate.csv: hit rate vs capacity for every policy, per-layer and
global capacity, without and with the EAM prefetcher; Belady's MIN (no prefetch) is the dashed
ceiling. Usage: plot.py <results-dir>"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

out = sys.argv[1] if len(sys.argv) > 1 else "."
rows = list(csv.DictReader(open(f"{out}/moe_hit_rate.csv")))
fig, axes = plt.subplots(2, 2, figsize=(12, 9), sharey=True)
for i, scope in enumerate(["per_layer", "global"]):
    for j, prefetch in enumerate(["none", "eam"]):
        ax = axes[i][j]
        series = {}
        for r in rows:
            if r["scope"] != scope:
                continue
            if r["policy"] == "belady" or r["prefetch"] == prefetch:
                series.setdefault(r["policy"], []).append((int(r["capacity_x_active"]), float(r["hit_rate"])))
        for name, pts in sorted(series.items()):
            pts.sort()
            style = dict(color="black", linestyle="--", linewidth=2) if name == "belady" else {}
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name, **style)
        ax.set_title(f"{scope} capacity, " + ("no prefetch" if prefetch == "none" else "EAM prefetch (depth 1)"))
        ax.set_xlabel("capacity (x active experts per layer)")
        ax.set_xticks([1, 2, 3, 4])
        ax.grid(alpha=0.3)
    axes[i][0].set_ylabel("hit rate (lookups that start no load)")
axes[0][1].legend(loc="lower right", fontsize=8)
fig.suptitle("weft::moe expert cache: hit rate vs capacity (dashed: Belady, offline optimum without prefetch)")
fig.tight_layout()
fig.savefig(f"{out}/moe_hit_rate.png", dpi=100)
print(f"wrote {out}/moe_hit_rate.png")

#!/usr/bin/env python3
"""Plots kv_bench.csv (weft vs its peers) into kv_bench.png: one panel per benchmark, x = blocks."""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src = sys.argv[1] if len(sys.argv) > 1 else "kv_bench.csv"
dst = sys.argv[2] if len(sys.argv) > 2 else src.replace(".csv", ".png")
data = defaultdict(lambda: defaultdict(list))
units = {}
with open(src) as f:
    for row in csv.DictReader(f):
        data[row["benchmark"]][row["impl"]].append((int(row["blocks"]), float(row["value"])))
        units[row["benchmark"]] = row["unit"]
names = list(data)
cols = min(4, len(names))
rows = (len(names) + cols - 1) // cols
fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
axes = [ax for row in axes for ax in row]
for ax in axes[len(names):]:
    ax.set_visible(False)
colors = {"weft": "tab:orange", "reference": "tab:blue", "infinite": "tab:green", "fast64": "tab:purple",
          "old64": "tab:gray", "sha256": "tab:red", "weft+verify": "tab:brown", "weft fast64": "tab:pink"}
for ax, name in zip(axes, names):
    for impl, pts in sorted(data[name].items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=impl, color=colors.get(impl))
    ax.set_xscale("log")
    ax.set_title(name, fontsize=9)
    ax.set_xlabel("pool blocks")
    ax.set_ylabel(units[name])
    ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(dst, dpi=110)
print("wrote", dst)

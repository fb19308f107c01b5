#!/usr/bin/env python3
"""Plots bench/coding results: mean and p99 step time per scheme and configuration."""
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

src, dst = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(open(src)))
configs = list(dict.fromkeys(r["config"] for r in rows))
cols = 3
nrows = (len(configs) + cols - 1) // cols
fig, axes = plt.subplots(nrows, cols, figsize=(6 * cols, 5.5 * nrows), squeeze=False)
for ax, cfg in zip([a for row in axes for a in row], configs):
    rs = [r for r in rows if r["config"] == cfg]
    names = [r["scheme"] for r in rs]
    mean = [float(r["mean_step_ms"]) for r in rs]
    p99 = [float(r["p99_step_ms"]) for r in rs]
    x = range(len(rs))
    ax.bar([i - 0.2 for i in x], mean, 0.4, label="mean step")
    ax.bar([i + 0.2 for i in x], p99, 0.4, label="p99 step")
    for i, r in enumerate(rs):
        res = float(r["mean_rms_residual"])
        if res > 1e-6:
            ax.text(i, mean[i], f"err {res:.2f}", ha="center", va="bottom", fontsize=7, rotation=90)
    ax.set_xticks(list(x))
    ax.set_xticklabels(names, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("simulated step time (ms)")
    ax.set_title(f"gradient coding, {cfg}")
    ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(dst, dpi=110)
print("wrote", dst)

#!/usr/bin/env python3
"""Draws quant.csv and quant_accuracy.csv (written by bench_quant_gemm) as quant.png: GEMV
bandwidth with weights from DRAM against the STREAM triad, the batch sweep, W8A8 against oneDNN,
and the accuracy of each scheme on one layer."""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

path = sys.argv[1]
rows = list(csv.DictReader(open(path)))
acc_path = os.path.join(os.path.dirname(path), "quant_accuracy.csv")
acc = list(csv.DictReader(open(acc_path))) if os.path.exists(acc_path) else []
fig, axes = plt.subplots(1, 4, figsize=(24, 5.5))

# 1. GEMV, weights from DRAM: GB/s of weights read, with the triad and 85% of it.
ax = axes[0]
triad = [float(r["gb_per_s"]) for r in rows if r["impl"] == "stream_triad"]
gemv = [r for r in rows if r["bench"] == "gemv" and r["residency"] == "dram" and r["impl"].startswith("weft")]
shapes = list(dict.fromkeys(r["shape"] for r in gemv))
impls = list(dict.fromkeys(r["impl"] for r in gemv))
width = 0.8 / max(1, len(impls))
for i, impl in enumerate(impls):
    vals = [next((float(r["gb_per_s"]) for r in gemv if r["impl"] == impl and r["shape"] == s), 0) for s in shapes]
    ax.bar([j + i * width for j in range(len(shapes))], vals, width, label=impl)
if triad:
    ax.axhline(triad[0], color="k", linestyle="--", label="STREAM triad")
    ax.axhline(0.85 * triad[0], color="gray", linestyle=":", label="85% of triad")
ax.set_xticks([j + 0.4 - width / 2 for j in range(len(shapes))])
ax.set_xticklabels(shapes, fontsize=7)
ax.set_ylabel("GB/s of weights read (from DRAM)")
ax.set_title("W4 GEMV, batch 1 (N x K)")
ax.legend(fontsize=7)

# 2. Batch sweep: time(M) / time(1).
ax = axes[1]
for impl in ("weft_w4a16_bf16", "weft_w4a8"):
    for shape in dict.fromkeys(r["shape"] for r in rows if r["bench"] == "batch"):
        pts = [(int(r["m"]), float(r["ratio"])) for r in rows
               if r["bench"] == "batch" and r["impl"] == impl and r["shape"] == shape]
        if pts:
            pts = [(1, 1.0)] + pts
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{impl} {shape}")
ax.axhline(1.3, color="gray", linestyle=":", label="1.3x")
ax.set_xlabel("M (tokens)")
ax.set_ylabel("time / time at M = 1 (paired runs)")
ax.set_title("Small batches, weights from DRAM")
ax.legend(fontsize=7)

# 3. W8A8 GEMM 4096^3 against oneDNN, with the vpdpbusd ceiling.
ax = axes[2]
w8 = [r for r in rows if r["bench"] == "gemm_w8a8"]
ax.bar(range(len(w8)), [float(r["gop_per_s"]) for r in w8],
       color=["C0" if r["impl"].startswith("weft") else "C3" for r in w8])
peak = [float(r["gop_per_s"]) for r in rows if r["bench"] == "peak"]
if peak:
    ax.axhline(peak[0], color="k", linestyle="--", label="vpdpbusd ceiling")
    ax.legend(fontsize=7)
ax.set_xticks(range(len(w8)))
ax.set_xticklabels([r["impl"].replace("onednn_", "oneDNN\n").replace("_brg", "\nbrg") for r in w8], fontsize=7)
ax.set_ylabel("GOP/s (int8)")
ax.set_title("W8A8 GEMM 4096^3 -> s32")

# 4. Accuracy on one layer.
ax = axes[3]
if acc:
    ax.barh(range(len(acc)), [float(a["sqnr_db"]) for a in acc])
    ax.set_yticks(range(len(acc)))
    ax.set_yticklabels([f'{a["scheme"]}\n{float(a["bytes_per_weight"]):.3f} B/weight' for a in acc], fontsize=7)
    ax.set_xlabel("SQNR of Y against fp32 (dB, higher is better)")
    ax.set_title("Accuracy, 4096 x 4096 layer, 8 tokens")

fig.tight_layout()
out = path[: -len(".csv")] + ".png"
fig.savefig(out, dpi=110)
print("wrote", out)

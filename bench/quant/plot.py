#!/usr/bin/env python3
"""Draws quant.csv (written by bench_quant_gemm) as quant.png: GEMV bandwidth against the STREAM
triad, and GEMM throughput of weft against Eigen and oneDNN."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

path = sys.argv[1]
rows = list(csv.DictReader(open(path)))
fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(17, 5))

triad = [float(r["gb_per_s"]) for r in rows if r["bench"] == "triad"]
gemv = [r for r in rows if r["bench"] == "gemv"]
shapes = sorted({r["shape"] for r in gemv}, key=lambda s: [int(v) for v in s.split("x")])
impls = sorted({r["impl"] for r in gemv})
width = 0.8 / max(1, len(impls))
for i, impl in enumerate(impls):
    vals = [next((float(r["gb_per_s"]) for r in gemv if r["impl"] == impl and r["shape"] == s), 0) for s in shapes]
    ax1.bar([j + i * width for j in range(len(shapes))], vals, width, label=impl)
if triad:
    ax1.axhline(triad[0], color="k", linestyle="--", label="STREAM triad")
    ax1.axhline(0.7 * triad[0], color="gray", linestyle=":", label="70% of triad")
ax1.set_xticks([j + 0.4 - width / 2 for j in range(len(shapes))])
ax1.set_xticklabels(shapes)
ax1.set_ylabel("GB/s of weights read")
ax1.set_title("GEMV, batch 1 (N x K)")
ax1.legend(fontsize=7)

for impl in ("weft_w4a32", "eigen_fp32"):
    pts = [(int(r["shape"].split("x")[0]), float(r["gop_per_s"])) for r in rows if r["bench"] == "gemm_w4" and r["impl"] == impl]
    if pts:
        ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=impl)
ax2.set_xscale("log", base=2)
ax2.set_xlabel("M (batch) for N = K = 4096")
ax2.set_ylabel("GFLOP/s")
ax2.set_title("W4 GEMM vs Eigen fp32 GEMM")
ax2.legend(fontsize=7)

w8 = [r for r in rows if r["bench"] == "gemm_w8a8"]
ax3.bar(range(len(w8)), [float(r["gop_per_s"]) for r in w8], color=["C0" if r["impl"].startswith("weft") else "C3" for r in w8])
ax3.set_xticks(range(len(w8)))
ax3.set_xticklabels([r["impl"].replace("onednn_", "oneDNN\n") for r in w8], fontsize=7)
ax3.set_ylabel("GOP/s (int8)")
ax3.set_title("W8A8 GEMM 4096^3, s8 x s8 -> s32")

fig.tight_layout()
out = path[: -len(".csv")] + ".png"
fig.savefig(out, dpi=110)
print("wrote", out)

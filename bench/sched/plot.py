#!/usr/bin/env python3
"""Plots bench/sched CSVs: policy comparison bars and per-client service timelines (FCFS vs VTC)."""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

out = sys.argv[1] if len(sys.argv) > 1 else "."


def rows(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


pol = rows("sched_policies.csv")
if pol:
    loads = sorted({r["load"] for r in pol})
    metrics = [("ttft_p99", "TTFT p99 (s)"), ("tbt_p99", "TBT p99 (s)"), ("goodput_req_s", "goodput (req/s)"),
               ("jain_index", "Jain index (backlogged clients)")]
    fig, axes = plt.subplots(1, len(metrics), figsize=(18, 4))
    for ax, (key, label) in zip(axes, metrics):
        for i, load in enumerate(loads):
            sub = [r for r in pol if r["load"] == load]
            xs = [j + i * 0.4 for j in range(len(sub))]
            ax.bar(xs, [float(r[key]) for r in sub], width=0.4, label=f"load {load}")
            ax.set_xticks([j + 0.2 for j in range(len(sub))])
            ax.set_xticklabels([r["policy"] for r in sub], rotation=30, ha="right", fontsize=8)
        ax.set_title(label)
    axes[0].legend()
    fig.suptitle("weft::sched policies on the Azure LLM conversation trace (simulated llama2-7b, A100)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "sched_policies.png"), dpi=110)
    print("wrote", os.path.join(out, "sched_policies.png"))

fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
drawn = False
for ax, name in zip(axes, ["sarathi+fcfs", "sarathi+vtc"]):
    data = rows(f"sched_service_x1.25_{name}.csv")
    if not data:
        continue
    drawn = True
    t = [float(r["time_s"]) for r in data]
    for col in [c for c in data[0].keys() if c != "time_s"]:
        ax.plot(t, [float(r[col]) for r in data], label=col)
    ax.set_title(f"{name}: cumulative service per client")
    ax.set_xlabel("simulated time (s)")
    ax.legend(fontsize=8)
axes[0].set_ylabel("weighted tokens (1 per input, 2 per output)")
if drawn:
    fig.tight_layout()
    fig.savefig(os.path.join(out, "sched_service.png"), dpi=110)
    print("wrote", os.path.join(out, "sched_service.png"))

dec = rows("sched_decision.csv")
if dec:
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [f'{r["policy"]}\nchurn {r["churn_per_iteration"]}' for r in dec]
    ax.bar(range(len(dec)), [float(r["us_per_iteration"]) for r in dec])
    ax.set_xticks(range(len(dec)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_yscale("log")
    ax.axhline(50, color="red", linestyle="--", label="50 us target")
    ax.set_ylabel("us per iteration (log)")
    ax.set_title("decision cost, 1k running + 100k waiting")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "sched_decision.png"), dpi=110)
    print("wrote", os.path.join(out, "sched_decision.png"))

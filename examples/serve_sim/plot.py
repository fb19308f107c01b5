#!/usr/bin/env python3
"""Draws what serve_sim --out DIR wrote: per workload (generated, azure), the latency CDFs of every policy
(TTFT, TPOT, end-to-end) and each tenant's cumulative service over time under every policy.

    python3 examples/serve_sim/plot.py DIR      (serve_sim --out DIR runs it itself)
"""
import csv
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def cdf(ax, values, label):
    values = sorted(v for v in values if v > 0)
    if not values:
        return
    n = len(values)
    ax.plot(values, [(i + 1) / n for i in range(n)], label=label, linewidth=1.2)


def latency_cdfs(out, tag, policies):
    metrics = [("ttft_s", "time to first token (s)"), ("tpot_s", "time per output token (s)"),
               ("e2e_s", "end-to-end latency (s)")]
    fig, axes = plt.subplots(1, len(metrics), figsize=(16, 4.2))
    for policy in policies:
        path = os.path.join(out, f"{tag}_requests_{policy}.csv")
        if not os.path.exists(path):
            continue
        done = [r for r in read(path) if float(r["e2e_s"]) >= 0]
        for ax, (key, _) in zip(axes, metrics):
            cdf(ax, [float(r[key]) for r in done], f"{policy} ({len(done)} done)")
    for ax, (_, label) in zip(axes, metrics):
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of finished requests")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"serve_sim, {tag} workload: latency CDF per policy (simulated)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"{tag}_latency_cdf.png"), dpi=100)
    plt.close(fig)


def service(out, tag, policies):
    found = [(p, os.path.join(out, f"{tag}_service_{p}.csv")) for p in policies]
    found = [(p, path) for p, path in found if os.path.exists(path)]
    if not found:
        return
    cols = min(3, len(found))
    rows = math.ceil(len(found) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 3.4 * rows), squeeze=False, sharey=True)
    for ax, (policy, path) in zip(axes.flat, found):
        data = read(path)
        if not data:
            continue
        t = [float(r["time_s"]) for r in data]
        for client in [k for k in data[0] if k != "time_s"]:
            ax.plot(t, [float(r[client]) for r in data], label=client, linewidth=1.2)
        ax.set_title(policy, fontsize=10)
        ax.set_xlabel("time (s)")
        ax.grid(True, alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("service (weighted tokens)")
    for ax in list(axes.flat)[len(found):]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"serve_sim, {tag} workload: each tenant's cumulative service (simulated)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"{tag}_service.png"), dpi=100)
    plt.close(fig)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    drew = 0
    for tag in ("generated", "azure"):
        summary = os.path.join(out, f"{tag}_summary.csv")
        if not os.path.exists(summary):
            continue
        policies = [r["policy"] for r in read(summary)]
        latency_cdfs(out, tag, policies)
        service(out, tag, policies)
        drew += 1
    if drew == 0:
        sys.exit(f"plot.py: no serve_sim CSVs (generated_summary.csv, azure_summary.csv) in {out}")


if __name__ == "__main__":
    main()

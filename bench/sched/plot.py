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


def grouped_bars(ax, data, group_key, series_key, value):
    """One bar per (group, series) of `data` rows, series side by side within a group; a missing
    combination is left empty. Returns the groups in first-seen order."""
    groups = list(dict.fromkeys(r[group_key] for r in data))
    series = list(dict.fromkeys(r[series_key] for r in data))
    width = 0.8 / len(series)
    for j, name in enumerate(series):
        ys = [next((value(r) for r in data if r[group_key] == g and r[series_key] == name), float("nan"))
              for g in groups]
        ax.bar([i + j * width for i in range(len(groups))], ys, width, label=name)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(groups))])
    return groups


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
    ax.axhline(10, color="red", linestyle="--", label="10 us target (steady)")
    ax.axhline(40, color="orange", linestyle="--", label="40 us target (churn 8)")
    ax.set_ylabel("us per iteration (log)")
    ax.set_title("decision cost, 1k running + 100k waiting")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "sched_decision.png"), dpi=110)
    print("wrote", os.path.join(out, "sched_decision.png"))

fid = rows("fidelity_rows.csv")
if fid:
    groups = [("a100", "Llama-2-7b-hf", "1"), ("a100", "Llama-2-70b-hf", "4"), ("h100", "Llama-2-7b-hf", "1"),
              ("h100", "Llama-2-70b-hf", "8")]
    fig, axes = plt.subplots(2, len(groups), figsize=(20, 8), sharex=True)
    for k, (gpu, model, tp) in enumerate(groups):
        sub = sorted((r for r in fid if r["gpu"] == gpu and r["model"] == model and r["tp"] == tp),
                     key=lambda r: int(r["tokens"]))
        t = [int(r["tokens"]) for r in sub]
        meas = [float(r["measured_s"]) * 1e3 for r in sub]
        ax = axes[0][k]
        ax.plot(t, meas, "k.", markersize=3, label="measured (held out)")
        ax.plot(t, [float(r["profile_heldout_s"]) * 1e3 for r in sub], "-", label="profile model (other half)")
        ax.plot(t, [float(r["roofline_s"]) * 1e3 for r in sub], "-", label="roofline (fitted defaults)")
        ax.plot(t, [float(r["roofline_old_s"]) * 1e3 for r in sub], ":", label="roofline (old defaults)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{gpu} {model} TP {tp}: ms per layer", fontsize=9)
        err = axes[1][k]
        for key, label in [("profile_heldout_s", "profile"), ("roofline_s", "roofline"), ("roofline_old_s", "old roofline")]:
            err.plot(t, [100 * (float(r[key]) / float(r["measured_s"]) - 1) for r in sub], ".", markersize=3, label=label)
        err.axhline(0, color="k", linewidth=0.5)
        err.set_ylim(-60, 60)
        err.set_xlabel("tokens in the batch")
        err.set_ylabel("error (%)")
    axes[0][0].legend(fontsize=7)
    axes[1][0].legend(fontsize=7)
    fig.suptitle("Cost model vs Vidur's measured non-attention layer time (data/vidur)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "fidelity.png"), dpi=100)
    print("wrote", os.path.join(out, "fidelity.png"))

it = rows("fidelity_iterations.csv")
if it:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, kind, xlabel in [(axes[0], "decode batch", "decode batch size"), (axes[1], "prefill tokens", "prompt tokens")]:
        sub = [r for r in it if r["kind"] == kind]
        x = [float(r["size"]) for r in sub]
        ax.plot(x, [float(r["measured_s"]) * 1e3 for r in sub], "ko-", label="measured (Sarathi-Serve artifact)")
        ax.plot(x, [float(r["roofline_s"]) * 1e3 for r in sub], "s--", label="weft roofline")
        ax.plot(x, [float(r["profile_s"]) * 1e3 for r in sub], "^--", label="weft profile (rescaled)")
        ax.plot(x, [float(r["old_s"]) * 1e3 for r in sub], ":", label="old model")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("iteration (ms)")
    axes[0].legend(fontsize=7)
    fig.suptitle("Yi-34B on 2 x A100 PCIe (TP 2): iteration time")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "fidelity_iterations.png"), dpi=100)
    print("wrote", os.path.join(out, "fidelity_iterations.png"))

cap = rows("repro_capacity.csv")
vtcr = rows("repro_vtc.csv")
if cap or vtcr:
    fig, axes = plt.subplots(1, 3, figsize=(18, 4.5))
    for ax, study in zip(axes[:2], ["sarathi", "distserve"]):
        sub = [r for r in cap if r["study"] == study and (study != "distserve" or r["setting"] == "4gpu")]
        labels = [f'{r["policy"]}\n{r["setting"][:28]}' for r in sub]
        ax.bar(range(len(sub)), [float(r["capacity_req_s"]) for r in sub],
               color=["C0" if "vLLM" in r["policy"] else "C1" for r in sub])
        ax.set_xticks(range(len(sub)))
        ax.set_xticklabels(labels, rotation=40, ha="right", fontsize=6)
        ax.set_ylabel("capacity / goodput (req/s)")
        ax.set_title({"sarathi": "(a) Sarathi-Serve vs vLLM, Mistral-7B, P99 TBT <= 0.1 s",
                      "distserve": "(b) DistServe, 4 GPUs, 90% within TTFT/TPOT"}[study], fontsize=9)
    if vtcr:
        t = [float(r["time_s"]) for r in vtcr]
        axes[2].plot(t, [float(r["fcfs_difference"]) for r in vtcr], label="FCFS")
        axes[2].plot(t, [float(r["vtc_difference"]) for r in vtcr], label="VTC")
        axes[2].axhline(65536, color="red", linestyle="--", label="2U")
        axes[2].set_xlabel("simulated time (s)")
        axes[2].set_ylabel("|service difference| (weighted tokens)")
        axes[2].set_title("(c) VTC: two backlogged clients", fontsize=9)
        axes[2].legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "repro.png"), dpi=100)
    print("wrote", os.path.join(out, "repro.png"))

nano = rows("nanoflow.csv")
if nano:
    fig, ax = plt.subplots(figsize=(15, 4))
    loads = grouped_bars(ax, nano, "workload", "engine", lambda r: 100 * float(r["share_of_optimal"]))
    ax.axhspan(59, 72, color="grey", alpha=0.2, label="NanoFlow paper: 59-72% of optimal")
    ax.set_xticklabels(loads, fontsize=7)
    ax.set_ylabel("% of optimal throughput")
    ax.set_title("NanoFlow-style overlap, Llama-2-70B on 4 x A100 (TP 4) and 8 x A100 (TP 8) (simulated)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "nanoflow.png"), dpi=100)
    print("wrote", os.path.join(out, "nanoflow.png"))

fuse = rows("splitfuse.csv")
if fuse:
    slos = list(dict.fromkeys(r["gen_slo_tok_s"] for r in fuse))
    fig, axes = plt.subplots(1, len(slos), figsize=(5 * len(slos), 4))
    for ax, slo in zip(axes, slos):
        for name in dict.fromkeys(r["policy"] for r in fuse):
            pts = [r for r in fuse if r["gen_slo_tok_s"] == slo and r["policy"] == name]
            ax.plot([float(r["rate_req_s"]) for r in pts], [float(r["effective_req_s"]) for r in pts], label=name)
        ax.set_xlabel("offered rate (req/s)")
        ax.set_ylabel("effective throughput (req/s)")
        ax.set_title("Dynamic SplitFuse vs vLLM, 70B/4xA100, gen SLA %s tok/s" % slo, fontsize=8)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "splitfuse.png"), dpi=100)
    print("wrote", os.path.join(out, "splitfuse.png"))

apex = [r for r in rows("apex.csv") if r["feasible"] == "1"]
if apex:
    fig, ax = plt.subplots(figsize=(10, 5))
    ax.barh([r["plan"] for r in apex][::-1], [float(r["goodput_req_s"]) for r in apex][::-1])
    ax.set_xlabel("goodput (req/s, >= 90% within TTFT 3 s and TPOT 0.1 s)")
    ax.set_title("APEX-style plan search, Llama-2-70B on 8 x A100 (simulated)", fontsize=9)
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "apex.png"), dpi=100)
    print("wrote", os.path.join(out, "apex.png"))

semi = [r for r in rows("semi_pd.csv") if not r["system"].startswith("tilted")]
if semi:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, (key, label) in zip(axes, [("mean_e2e_s", "mean end-to-end latency (s)"),
                                       ("slo_attainment", "share within TTFT 1 s and TPOT 0.1 s")]):
        for name in dict.fromkeys(r["system"] for r in semi):
            pts = [r for r in semi if r["system"] == name]
            ax.plot([float(r["rate_req_s"]) for r in pts], [float(r[key]) for r in pts], label=name)
        ax.set_xlabel("rate (req/s)")
        ax.set_ylabel(label)
        ax.set_title("semi-PD vs colocated vs DistServe, Llama-2-7B on 2 x A100 (simulated)", fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "semi_pd.png"), dpi=100)
    print("wrote", os.path.join(out, "semi_pd.png"))

# Layered prefill vs chunked prefill: TTFT p50 against TBT p99, one point per setting, for the dense
# model (layered.csv) and each MoE model (layered_<model>.csv).
layered = sorted(f for f in os.listdir(out) if f.startswith("layered") and f.endswith(".csv"))
if layered:
    fig, axes = plt.subplots(1, len(layered), figsize=(5.5 * len(layered), 4.2), squeeze=False)
    for ax, name in zip(axes[0], layered):
        data = rows(name)
        for policy, marker in [("chunked", "o"), ("layered", "s")]:
            pts = [r for r in data if r["policy"] == policy]
            ax.scatter([float(r["tbt_p99_s"]) for r in pts], [float(r["ttft_p50_s"]) for r in pts], marker=marker,
                       label=policy + " prefill")
        ax.set_xlabel("TBT p99 (s)")
        ax.set_ylabel("TTFT p50 (s)")
        ax.set_yscale("log")
        model = name[len("layered"):-len(".csv")].lstrip("_") or "Llama-2-7B (dense)"
        ax.set_title(f"layered vs chunked prefill, {model} (simulated)", fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "layered.png"), dpi=100)
    print("wrote", os.path.join(out, "layered.png"))

# KV borrowing between instances (Infinite-LLM): throughput and long requests served per mode.
distkv = rows("distkv.csv")
if distkv:
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    values = [lambda r: float(r["processed_tok_s"]), lambda r: int(r["long_finished"]) / max(1, int(r["long_total"]))]
    for ax, value, label in zip(axes, values, ["processed tokens/s", "share of long-context requests finished"]):
        mixes = grouped_bars(ax, distkv, "mix", "mode", value)
        ax.set_xticklabels(mixes, fontsize=7)
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    fig.suptitle("KV borrowing between 4 instances (Infinite-LLM style, simulated)", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "distkv.png"), dpi=100)
    print("wrote", os.path.join(out, "distkv.png"))

#!/usr/bin/env python3
"""Summary of bench/comm/run.sh: medians and min-max over rounds, weft against Gloo and OpenMPI
(ratios), the tuner's regret, the copy-bound check, the issue's targets, and a PNG of busbw
against size (best algorithm per implementation, bounds dashed, the tcp reference dotted)."""
import csv
import glob
import math
import os
import sys
from collections import defaultdict
from statistics import median

rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#"))]
# (impl, transport, ranks, algorithm, bytes) -> [(round, time_us, busbw)]
runs = defaultdict(list)
picks = defaultdict(set)  # (transport, ranks, bytes) -> the tuner's picks
for r in rows:
    algo = r["algorithm"]
    if algo.startswith("automatic="):
        picks[(r["transport"], int(r["ranks"]), int(r["bytes"]))].add(algo.split("=", 1)[1])
        algo = "automatic"
    key = (r["impl"], r["transport"], int(r["ranks"]), algo, int(r["bytes"]))
    runs[key].append((int(r["round"]), float(r["time_us"]), float(r["busbw_GBps"])))


def stats(key):
    v = runs.get(key)
    if not v:
        return None
    t = [x[1] for x in v]
    return {"t": median(t), "tmin": min(t), "tmax": max(t), "bw": median(x[2] for x in v),
            "bwmin": min(x[2] for x in v), "bwmax": max(x[2] for x in v), "n": len(v)}


def best(impl, transport, n, size, exclude=("automatic",)):
    """The algorithm of impl with the best median time at size, and its stats."""
    cands = [(k[3], stats(k)) for k in runs if k[0] == impl and k[1] == transport and k[2] == n and k[4] == size
             and k[3] not in exclude]
    cands = [c for c in cands if c[1]]
    return min(cands, key=lambda c: c[1]["t"]) if cands else (None, None)


ranks = sorted({k[2] for k in runs})
sizes = {n: sorted({k[4] for k in runs if k[2] == n and k[0] == "weft"}) for n in ranks}


def fmt_t(s):
    return f"{s['t']:9.2f} us [{s['tmin']:.2f}-{s['tmax']:.2f}]" if s else "        -"


def fmt_bw(s):
    return f"{s['bw']:6.3f} [{s['bwmin']:.3f}-{s['bwmax']:.3f}]" if s else "     -"


def ratio(a, b, key="bw"):
    return a[key] / b[key] if a and b and b[key] > 0 else None


def rs(x):
    return f"{x:5.2f}x" if x is not None else "   -  "


def round_times(transport, n, algo, size):
    return {x[0]: x[1] for x in runs.get(("weft", transport, n, algo, size), [])}


def paired_ratios(mine, other):
    """mine / other in every round both timed, sorted."""
    return sorted(mine[r] / other[r] for r in mine if r in other)


def paired_excess(mine, other):
    """The median over the rounds both timed of mine / other - 1 (0 when none is shared)."""
    q = paired_ratios(mine, other)
    return median(q) - 1 if q else 0.0


def paired_excess_ci(mine, other):
    """A distribution-free ~95 % confidence interval of paired_excess(mine, other): the order
    statistics m/2 -+ 0.98 sqrt(m) of the m per-round ratios (the binomial interval of a median,
    normal approximation; Conover, "Practical Nonparametric Statistics", 3rd ed., 1999, sec. 3.2).
    (lo, hi) as excesses; None with fewer than 6 shared rounds (too few for a 95 % interval)."""
    q = paired_ratios(mine, other)
    m = len(q)
    if m < 6:
        return None
    half = 0.98 * math.sqrt(m)
    lo = max(math.floor(m / 2 - half), 1)  # ranks, 1-based: the lo-th and the hi-th smallest
    hi = min(math.ceil(1 + m / 2 + half), m)
    return q[lo - 1] - 1, q[hi - 1] - 1


def paired_regret(transport, n, pick, size):
    """(regret, against): the largest over the other algorithms of the median over rounds of
    (pick's time / theirs) - 1, and that algorithm; (0, None) when the pick is never slower."""
    mine = round_times(transport, n, pick, size)
    regret, against = 0.0, None
    for k in runs:
        if k[0] == "weft" and k[1] == transport and k[2] == n and k[4] == size and k[3] not in (pick, "automatic"):
            q = paired_excess(mine, round_times(transport, n, k[3], size))
            if q > regret:
                regret, against = q, k[3]
    return regret, against


def fmt_ci(transport, n, pick, against, size):
    """The ~95 % interval of the pick's paired excess over `against` (see paired_excess_ci)."""
    ci = paired_excess_ci(round_times(transport, n, pick, size), round_times(transport, n, against, size))
    return f"95% CI {100 * ci[0]:+6.1f}..{100 * ci[1]:+6.1f}%" if ci else ""


def round1_picks(n):
    """(transport, size, algorithm) for every size where round 1's table made one pick that the
    rounds timed under its own name too."""
    for tr in ("tcp", "shm"):
        for s in sizes[n]:
            chosen = picks.get((tr, n, s), set())
            if len(chosen) == 1 and round_times(tr, n, next(iter(chosen)), s):
                yield tr, s, next(iter(chosen))


def read_picks(path):
    """An autotune table written by bench_comm_allreduce: {bytes: algorithm}."""
    with open(path) as f:
        lines = f.read().split()
    return {int(l.split(",")[0]): l.split(",")[1] for l in lines[1:]}


def print_pick_distribution(n):
    """Every table run.sh wrote for n (round 1's and the --tables extra ones), scored against the rounds."""
    folder = os.path.dirname(os.path.abspath(sys.argv[1]))
    for tr in ("tcp", "shm"):
        paths = sorted(glob.glob(os.path.join(folder, f"comm_tuning_{tr}_{n}.csv")) +
                       glob.glob(os.path.join(folder, f"comm_tuning_{tr}_{n}_extra*.csv")))
        tables = [read_picks(p) for p in paths]
        if len(tables) < 2:
            continue
        print(f"\n-- {tr}: the picks of {len(tables)} autotune tables (each from its own process), scored "
              "against the rounds (paired regret); target <= 10%")
        within, total, worst_median = 0, 0, 0.0
        for s in sizes[n]:
            picks_here = [t[s] for t in tables if s in t and round_times(tr, n, t[s], s)]
            if not picks_here:
                continue
            regrets = [paired_regret(tr, n, p, s)[0] for p in picks_here]
            within += sum(r <= 0.10 for r in regrets)
            total += len(regrets)
            worst_median = max(worst_median, median(regrets))
            counts = ", ".join(f"{a} x{picks_here.count(a)}" for a in sorted(set(picks_here)))
            print(f"{tr} {s:>10} B: {counts:<52} regret median {100 * median(regrets):5.1f}%, "
                  f"worst {100 * max(regrets):5.1f}%; within 10%: {sum(r <= 0.10 for r in regrets)} of {len(regrets)}")
        print(f"{tr}: {within} of {total} picks within 10%; worst median regret over sizes {100 * worst_median:.1f}%")


print("weft::comm allreduce: median [min-max] over rounds; busbw in GB/s (nccl-tests: algbw * 2(n-1)/n)")
print("'best' = the algorithm with the best median at that size; 'auto' = the tuner's pick (autotune table)")
for n in ranks:
    rounds = max((len(v) for k, v in runs.items() if k[2] == n and k[0] == "weft"), default=0)
    print(f"\n==== n = {n} ({rounds} rounds) ====")
    print("\n-- latency (time per allreduce; ratio = weft / peer, <= 1.00 means weft is faster)")
    for s in [x for x in sizes[n] if x <= 4096]:
        for tr, peer in (("shm", ("openmpi", "shm")), ("tcp", ("openmpi", "tcp"))):
            ab, wb = best("weft", tr, n, s)
            wa = stats(("weft", tr, n, "automatic", s))
            po = stats((peer[0], peer[1], n, "MPI_Allreduce", s))
            line = (f"{s:>9} B {tr}: weft best {ab or '-':<18} {fmt_t(wb)}  auto {fmt_t(wa)}  "
                    f"openmpi {fmt_t(po)}  auto/openmpi {rs(ratio(wa, po, 't'))}  best/openmpi {rs(ratio(wb, po, 't'))}")
            if tr == "tcp":
                gb_a, gb = best("gloo", "tcp", n, s)
                line += f"  gloo best {fmt_t(gb)}  auto/gloo {rs(ratio(wa, gb, 't'))}"
            print(line)
    print("\n-- bandwidth (busbw; ratio = weft / peer, >= 1.00 means weft is faster)")
    print(f"{'bytes':>10}  {'weft tcp auto':>24} {'best':>18} {'gloo best':>24} {'openmpi tcp':>24}  "
          f"{'/gloo':>6} {'/mpi':>6} | {'weft shm auto':>24} {'openmpi shm':>24} {'/mpi':>6}")
    for s in sizes[n]:
        wa = stats(("weft", "tcp", n, "automatic", s))
        ab, wb = best("weft", "tcp", n, s)
        gb_a, gb = best("gloo", "tcp", n, s)
        mt = stats(("openmpi", "tcp", n, "MPI_Allreduce", s))
        sa = stats(("weft", "shm", n, "automatic", s))
        ms = stats(("openmpi", "shm", n, "MPI_Allreduce", s))
        print(f"{s:>10}  {fmt_bw(wa):>24} {ab or '-':>18} {fmt_bw(gb):>24} {fmt_bw(mt):>24}  "
              f"{rs(ratio(wa, gb)):>6} {rs(ratio(wa, mt)):>6} | {fmt_bw(sa):>24} {fmt_bw(ms):>24} {rs(ratio(sa, ms)):>6}")
    print("\n-- tuner regret: the picked algorithm's median time / the best algorithm's - 1, both from the same")
    print("   rounds (0 when the pick is the fastest); target <= 10%. 'auto row': the automatic call measured")
    print("   on its own (the same algorithm, so it differs from the pick's row only by noise); 'noise': how far")
    print("   those two rows of one algorithm differ (|pick row / auto row - 1|): regrets below it are noise")
    worst, noise = {}, {}
    for tr, s, pick in round1_picks(n):
        wa = stats(("weft", tr, n, "automatic", s))
        ab, wb = best("weft", tr, n, s)
        wp = stats(("weft", tr, n, pick, s))
        regret = wp["t"] / wb["t"] - 1
        worst[tr] = max(worst.get(tr, -1), regret)
        same = abs(wp["t"] / wa["t"] - 1) if wa else 0.0
        noise[tr] = max(noise.get(tr, 0.0), same)
        print(f"{tr} {s:>10} B: pick {pick:<18} {wp['t']:10.2f} us   best {ab:<18} {wb['t']:10.2f} us   "
              f"regret {100 * regret:5.1f}%   (auto row {fmt_t(wa)}; noise {100 * same:4.1f}%)")
    for tr, w in worst.items():
        print(f"{tr}: worst regret {100 * w:.1f}% (largest noise between two rows of one algorithm: "
              f"{100 * noise.get(tr, 0.0):.1f}%)")
    print("\n-- tuner regret paired by round: the median over rounds of (the pick's time / another algorithm's in")
    print("   the same round) - 1, the largest over the other algorithms; 'noise': the same for the pick's row")
    print("   against its automatic row. Every algorithm of a round runs within a second or two of the others, so")
    print("   what changes between rounds (on a shared VM, the host's placement of the vCPUs: the same call")
    print("   in consecutive processes runs ~200 or ~450 us for seconds at a time) cancels in each ratio;")
    print("   '95% CI': the median's distribution-free interval over the rounds (6 or more) against that algorithm")
    worst, noise = {}, {}
    for tr, s, pick in round1_picks(n):
        regret, against = paired_regret(tr, n, pick, s)
        same = abs(paired_excess(round_times(tr, n, pick, s), round_times(tr, n, "automatic", s)))
        worst[tr] = max(worst.get(tr, 0.0), regret)
        noise[tr] = max(noise.get(tr, 0.0), same)
        print(f"{tr} {s:>10} B: pick {pick:<18} paired regret {100 * regret:5.1f}%"
              f"{' (against ' + against + ')' if against else '':<32} noise {100 * same:4.1f}%"
              f"  {fmt_ci(tr, n, pick, against, s) if against else ''}")
    for tr, w in worst.items():
        print(f"{tr}: worst paired regret {100 * w:.1f}% (largest paired noise: {100 * noise.get(tr, 0.0):.1f}%)")
    print_pick_distribution(n)
    print("\n-- bounds (every received byte is copied at least once (shm) / twice (loopback tcp); "
          "row / bound must be <= 1)")
    for tr in ("shm", "tcp"):
        bnd = {k[4]: stats(k) for k in runs if k[0] == "bound" and k[1] == tr and k[2] == n}
        if not bnd:
            continue
        bound_bw = max(b["bw"] for b in bnd.values())  # the same at every size; the largest over rounds
        worst_frac, worst_row, viol = 0.0, None, []
        for k, v in runs.items():
            if k[1] != tr or k[2] != n or k[0] in ("bound", "reference"):
                continue
            for rnd, t, bw in v:
                frac = bw / bound_bw
                if frac > worst_frac:
                    worst_frac, worst_row = frac, (k[0], k[3], k[4], rnd)
                if frac > 1:
                    viol.append((k[0], k[3], k[4], rnd, bw))
        print(f"{tr}: bound {bound_bw:.2f} GB/s; highest row {worst_frac:.2f} of it ({worst_row}); "
              f"{'no row exceeds it' if not viol else 'VIOLATIONS: ' + str(viol)}")
    ref = {k[4]: stats(k) for k in runs if k[0] == "reference" and k[2] == n}
    if ref:
        print("tcp reference (streaming sendrecv of the same sockets; a reference, not a bound): " +
              ", ".join(f"{s}: {ref[s]['bw']:.2f}" for s in sorted(ref) if s >= 1 << 20))

print("\n==== targets (issue 14) ====")


def target(label, value, goal, higher_better):
    ok = value is not None and (value >= goal if higher_better else value <= goal)
    print(f"{'PASS' if ok else 'MISS'}  {label}: {value if value is None else round(value, 2)} "
          f"({'>=' if higher_better else '<='} {goal})")


for n in ranks:
    for tr, peer in (("shm", "shm"), ("tcp", "tcp")):
        wa = stats(("weft", tr, n, "automatic", 1024))
        po = stats(("openmpi", peer, n, "MPI_Allreduce", 1024))
        target(f"1 KiB n={n} {tr} latency, weft (tuner's pick) / OpenMPI {peer}", ratio(wa, po, "t"), 1.0, False)
big = 16 << 20
if 4 in ranks:
    wa, gb, mt = stats(("weft", "tcp", 4, "automatic", big)), best("gloo", "tcp", 4, big)[1], stats(
        ("openmpi", "tcp", 4, "MPI_Allreduce", big))
    target("16 MiB n=4 tcp busbw, weft / Gloo's best", ratio(wa, gb), 1.1, True)
    target("16 MiB n=4 tcp busbw, weft / OpenMPI tcp", ratio(wa, mt), 1.2, True)
    target("16 MiB n=4 shm busbw, weft / OpenMPI vader",
           ratio(stats(("weft", "shm", 4, "automatic", big)), stats(("openmpi", "shm", 4, "MPI_Allreduce", big))), 1.2,
           True)
if 2 in ranks:
    target("16 MiB n=2 tcp busbw, weft / OpenMPI tcp",
           ratio(stats(("weft", "tcp", 2, "automatic", big)), stats(("openmpi", "tcp", 2, "MPI_Allreduce", big))), 1.5,
           True)

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: E402

    fig, axes = plt.subplots(1, len(ranks), figsize=(7 * len(ranks), 5), squeeze=False)
    for ax, n in zip(axes[0], ranks):
        series = [("weft", "tcp"), ("weft", "shm"), ("gloo", "tcp"), ("openmpi", "tcp"), ("openmpi", "shm"),
                  ("weft-mpi", "shm"), ("weft-mpi", "tcp")]
        for impl, tr in series:
            xs, ys = [], []
            for s in sizes[n]:
                _, b = best(impl, tr, n, s)
                if b:
                    xs.append(s)
                    ys.append(b["bw"])
            if xs:
                ax.plot(xs, ys, "-", marker="o", label=f"{impl} {tr}")
        for tr, style in (("shm", "--"), ("tcp", "--")):
            b = [stats(k) for k in runs if k[0] == "bound" and k[1] == tr and k[2] == n]
            if b:
                ax.axhline(max(x["bw"] for x in b), linestyle=style, linewidth=1, color="gray" if tr == "shm" else "k",
                           label=f"copy bound {tr}")
        ref = sorted((k[4], stats(k)["bw"]) for k in runs if k[0] == "reference" and k[2] == n)
        if ref:
            ax.plot([x[0] for x in ref], [x[1] for x in ref], ":", label="tcp reference (not a bound)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s), median over rounds, best algorithm")
        ax.set_title(f"allreduce, {n} processes, this host")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"\nplot: {sys.argv[2]}")
except ImportError:
    print("\n(matplotlib missing: no plot)")

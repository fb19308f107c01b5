"""GPU benchmark of weft's decode GEMVs against the kernels a PyTorch user already has.

One process, one GPU: weft's W4A16 (fp16 and bf16 activations, every compiled kernel shape) and
W4A8 GEMVs through the PyTorch binding (bindings/torch), cuBLAS fp16 and bf16 (torch's linear),
PyTorch's int4 tinygemm (torch._weight_int4pack_mm) and a plain read-bandwidth kernel for the
roofline. Every kernel is timed by CUDA events around a CUDA graph of back-to-back calls whose
weights rotate through more than 4x the L2 cache, so nothing is served from L2; the median and
min-max of 7 replays are reported. Shapes: Llama-3-8B (4096x4096, 14336x4096, 4096x14336), a
28672x8192 stack and Llama-3-70B (8192x8192, 10240x8192, 8192x28672); M in 1, 2, 4, 8, 16, 32.
Writes gemv.csv and gemv.png to the output folder (argument 1, default .). Runs in about a minute
on an H200.
"""
import csv
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bindings", "torch"))
import weft_torch as wt  # noqa: E402

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (8192, 8192), (10240, 8192), (8192, 28672)]
MS = [1, 2, 4, 8, 16, 32]
GROUP = 128
CONFIGS = [(4, 1, 8), (2, 2, 8), (1, 4, 8), (2, 1, 8), (4, 2, 4), (2, 2, 4)]
REPS = 7
OUT = sys.argv[1] if len(sys.argv) > 1 else "."
DEV = torch.device("cuda")
PROPS = torch.cuda.get_device_properties(DEV)
L2 = PROPS.L2_cache_size


def copies_for(nbytes):
    return max(2, math.ceil(4 * L2 / nbytes))


def time_calls(calls, per_graph=None):
    """Median, min and max microseconds per call over REPS replays of a graph of calls."""
    for f in calls:
        f()
    torch.cuda.synchronize()
    per_graph = per_graph or max(len(calls), 40)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream, capture_error_mode="relaxed"):
        for i in range(per_graph):
            calls[i % len(calls)]()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / per_graph)
    del graph
    return statistics.median(times), min(times), max(times)


def read_roofline():
    buf = torch.randint(-2**31, 2**31 - 1, (1 << 28,), dtype=torch.int32, device=DEV)  # 1 GiB
    sink = torch.zeros(4096, dtype=torch.int32, device=DEV)
    med, lo, hi = time_calls([lambda: wt.read_bandwidth(buf, sink)], per_graph=10)
    nbytes = buf.numel() * 4
    del buf
    return nbytes / (med * 1e-6), nbytes / (hi * 1e-6), nbytes / (lo * 1e-6)


def random_packed(n, k):
    words_n, cells = (n + 15) // 16 * ((k + 63) // 64) * 128, (n + 15) // 16 * 16 * ((k + GROUP - 1) // GROUP)
    words = torch.randint(-2**31, 2**31 - 1, (words_n,), dtype=torch.int32, device=DEV)
    scales = (torch.rand(cells, device=DEV) * 0.02 + 0.001).half()
    zeros = torch.randint(0, 16, (cells,), dtype=torch.uint8, device=DEV)
    return wt.PackedW4(words, scales, zeros, n, k, GROUP)


VALID_META_NIBBLES = (0x4, 0x8, 0xC, 0x9, 0xD, 0xE)  # (p0, p1) = (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)


def random_sparse24(n, k):
    """Random 2:4 weights in weft's GPU layout (valid metadata: the tensor cores refuse the rest)."""
    tiles, chunks = (n + 15) // 16, (k + 127) // 128
    words = torch.randint(-2**31, 2**31 - 1, (tiles * chunks * 128,), dtype=torch.int32, device=DEV)
    pick = torch.tensor(VALID_META_NIBBLES, dtype=torch.int64, device=DEV)
    nib = pick[torch.randint(0, 6, (tiles * chunks * 64, 8), device=DEV)]
    meta = (nib << (4 * torch.arange(8, device=DEV))).sum(1).to(torch.int64)
    meta = torch.where(meta >= 2**31, meta - 2**32, meta).to(torch.int32)
    cells = tiles * 16 * ((k + GROUP - 1) // GROUP)
    scales = (torch.rand(cells, device=DEV) * 0.02 + 0.001).half()
    zeros = torch.randint(0, 16, (cells,), dtype=torch.uint8, device=DEV)
    return wt.PackedSparse24(words, meta, scales, zeros, n, k, GROUP)


def check_correctness():
    """weft against a float reference on real packed codes (not timed)."""
    n, k, m = 4096, 4096, 4
    g = torch.Generator().manual_seed(1)
    codes = torch.randint(0, 16, (n, k), generator=g, dtype=torch.int32)
    scales = (torch.rand(n, k // GROUP, generator=g) * 0.02 + 0.001).half()
    zeros = torch.randint(0, 17, (n, k // GROUP), generator=g, dtype=torch.int16)
    w = wt.pack_w4(codes, scales, zeros, GROUP)
    deq = (codes.float() - zeros.float().repeat_interleave(GROUP, 1)) * scales.float().repeat_interleave(GROUP, 1)
    x = torch.randn(m, k, generator=g).half()
    ref = (x.double() @ deq.double().T)
    for dtype in (torch.float16, torch.bfloat16):
        xd = x.to(dtype).to(DEV)
        refd = (xd.double().cpu() @ deq.double().T)
        y = wt.linear(xd, w, out_float=True).double().cpu()
        err = ((y - refd).norm() / refd.norm()).item()
        print(f"check: weft W4A16 {dtype} vs float64 reference, relative error {err:.2e} "
              f"{'ok' if err < 1e-5 else 'FAILED (> 1e-5)'}")
    xs = x.float().abs().amax(1, keepdim=True) / 127
    x8 = torch.round(x.float() / xs).clamp(-127, 127).to(torch.int8)
    y8 = wt.linear_w4a8(x8.to(DEV), xs.squeeze(1).to(DEV), w).double().cpu()
    ref8 = (x8.double() @ deq.double().T) * xs.double()
    err8 = ((y8 - ref8).norm() / ref8.norm()).item()
    print(f"check: weft W4A8 vs float64 reference on the int8 activations, relative error {err8:.2e} "
          f"{'ok' if err8 < 1e-5 else 'FAILED (> 1e-5)'}")
    # 2:4: keep the two largest of every 4 codes' positions at random, check against the dense product.
    firsts = torch.randint(0, 3, (n, k // 4), generator=g)
    seconds = firsts + 1 + torch.randint(0, 3, (n, k // 4), generator=g) % (3 - firsts)
    positions = torch.stack([firsts, seconds], 2).reshape(n, k // 2)
    kept = torch.randint(0, 16, (n, k // 2), generator=g, dtype=torch.int32)
    try:
        ws = wt.pack_sparse24(kept, positions, scales, zeros, GROUP)
    except Exception as e:  # noqa: BLE001
        print(f"check: weft 2:4 unavailable: {e}")
        return
    dense = torch.zeros(n, k)
    cols = (torch.arange(k // 4).repeat_interleave(2) * 4).unsqueeze(0) + positions
    zk = zeros.float().repeat_interleave(GROUP // 2, 1)
    sk = scales.float().repeat_interleave(GROUP // 2, 1)
    dense.scatter_(1, cols, (kept.float() - zk) * sk)
    xd = x.to(DEV)
    ys = wt.linear_sparse24(xd, ws, out_float=True).double().cpu()
    refs = x.double() @ dense.double().T
    errs = ((ys - refs).norm() / refs.norm()).item()
    print(f"check: weft 2:4 W4A16 vs float64 reference, relative error {errs:.2e} "
          f"{'ok' if errs < 1e-5 else 'FAILED (> 1e-5)'}")
    del ref


def tinygemm_pack(n, k):
    """PyTorch's int4 tinygemm operands for an N x K matrix (random codes), or None if unsupported."""
    try:
        w_uint8 = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=DEV)
        packed = torch._convert_weight_to_int4pack(w_uint8, 8)
        sz = (torch.rand(k // GROUP, n, 2, device=DEV) * 0.02).to(torch.bfloat16)
        return packed, sz
    except Exception as e:  # noqa: BLE001
        print(f"tinygemm unavailable: {e}")
        return None


def main():
    print(f"device: {PROPS.name}, {PROPS.multi_processor_count} SMs, L2 {L2 >> 20} MiB, torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}, driver via nvidia-smi in the log; GPU layout v{wt.layout_version()}")
    t0 = time.time()
    check_correctness()
    bw, bw_lo, bw_hi = read_roofline()
    print(f"read roofline: {bw / 1e12:.2f} TB/s (min-max {bw_lo / 1e12:.2f}-{bw_hi / 1e12:.2f}) over 1 GiB")
    rows = []
    for n, k in SHAPES:
        w0 = random_packed(n, k)
        wbytes = w0.weight_bytes()
        packs = [w0] + [random_packed(n, k) for _ in range(copies_for(wbytes) - 1)]
        fp16 = [torch.randn(n, k, device=DEV, dtype=torch.float16) for _ in range(copies_for(n * k * 2))]
        tiny = [tinygemm_pack(n, k) for _ in range(copies_for(n * k // 2))]
        tiny = None if tiny[0] is None else tiny
        sparse = [random_sparse24(n, k) for _ in range(copies_for(n * k * 3 // 8))]
        for m in MS:
            x16 = torch.randn(m, k, device=DEV, dtype=torch.float16)
            xb = x16.to(torch.bfloat16)
            x8 = torch.randint(-127, 128, (m, k), dtype=torch.int8, device=DEV)
            xs = torch.rand(m, device=DEV) * 0.01
            series = {}
            series["weft w4a16 fp16"] = time_calls([lambda w=w: wt.linear(x16, w) for w in packs])
            series["weft w4a16 bf16"] = time_calls([lambda w=w: wt.linear(xb, w) for w in packs])
            series["weft w4a8"] = time_calls([lambda w=w: wt.linear_w4a8(x8, xs, w) for w in packs])
            try:
                series["weft 2:4 fp16"] = time_calls([lambda w=w: wt.linear_sparse24(x16, w) for w in sparse])
            except Exception as e:  # noqa: BLE001
                print(f"weft 2:4 failed at {n}x{k} M={m}: {e}")
            for cfg in CONFIGS:
                series[f"weft fp16 T{cfg[0]}U{cfg[1]}W{cfg[2]}"] = time_calls(
                    [lambda w=w: wt.linear(x16, w, policy=(*cfg, 0)) for w in packs])
            series["weft fp16 T4U1W8 splits1"] = time_calls(
                [lambda w=w: wt.linear(x16, w, policy=(4, 1, 8, 1)) for w in packs])
            series["cublas fp16"] = time_calls([lambda w=w: torch.nn.functional.linear(x16, w) for w in fp16])
            fpb = [w.to(torch.bfloat16) for w in fp16]
            series["cublas bf16"] = time_calls([lambda w=w: torch.nn.functional.linear(xb, w) for w in fpb])
            del fpb
            if tiny is not None:
                series["torch tinygemm int4"] = time_calls(
                    [lambda t=t: torch._weight_int4pack_mm(xb, t[0], GROUP, t[1]) for t in tiny])
            for name, (med, lo, hi) in series.items():
                rows.append(dict(n=n, k=k, m=m, kernel=name, us=med, us_min=lo, us_max=hi,
                                 weight_gbps=(sparse[0].weight_bytes() if name == "weft 2:4 fp16" else
                                              wbytes if name.startswith("weft") else
                                              n * k * 2 if name.startswith("cublas") else n * k // 2) / (med * 1e-6) / 1e9))
        del packs, fp16, tiny, sparse
        torch.cuda.empty_cache()
        write_csv(rows)  # after every shape, so a run cut short still leaves its numbers
        line = lambda m: " ".join(f"{r['kernel'].replace('weft ', '')}={r['us']:.1f}" for r in rows
                                  if r["n"] == n and r["k"] == k and r["m"] == m and not r["kernel"].startswith("weft fp16 T"))
        print(f"  {n}x{k} done ({time.time() - t0:.0f} s); M=1: {line(1)}; M=16: {line(16)}")
    report(rows, bw)
    plot(rows, bw)
    print(f"total {time.time() - t0:.0f} s")


def write_csv(rows):
    with open(os.path.join(OUT, "gemv.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        wr.writeheader()
        wr.writerows(rows)


def report(rows, bw):
    get = {(r["n"], r["k"], r["m"], r["kernel"]): r for r in rows}
    kernels = sorted({r["kernel"] for r in rows if r["kernel"].startswith("weft fp16 T")})
    print("\nbest weft fp16 kernel shape per (shape, M), and the launcher's choice:")
    for n, k in SHAPES:
        for m in MS:
            best = min(kernels, key=lambda c: get[(n, k, m, c)]["us"])
            print(f"  {n:>5}x{k:<5} M={m:<2}: best {best} {get[(n, k, m, best)]['us']:.1f} us, "
                  f"default {get[(n, k, m, 'weft w4a16 fp16')]['us']:.1f} us")
    print(f"\nread roofline {bw / 1e12:.2f} TB/s. Times in us (median of {REPS}; min-max in gemv.csv).")
    head = ("shape", "M", "weft fp16", "GB/s", "%roof", "weft bf16", "weft w4a8", "weft 2:4", "cuBLAS fp16",
            "cuBLAS bf16", "tinygemm", "x fp16", "x tiny", "M/M1")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for n, k in SHAPES:
        base = get[(n, k, 1, "weft w4a16 fp16")]["us"]
        for m in MS:
            r = get[(n, k, m, "weft w4a16 fp16")]
            c16 = get[(n, k, m, "cublas fp16")]["us"]
            tg = get.get((n, k, m, "torch tinygemm int4"))
            cells = [f"{n}x{k}", str(m), f"{r['us']:.1f}", f"{r['weight_gbps']:.0f}",
                     f"{100 * r['weight_gbps'] * 1e9 / bw:.0f}", f"{get[(n, k, m, 'weft w4a16 bf16')]['us']:.1f}",
                     f"{get[(n, k, m, 'weft w4a8')]['us']:.1f}",
                     f"{get[(n, k, m, 'weft 2:4 fp16')]['us']:.1f}" if (n, k, m, 'weft 2:4 fp16') in get else "-",
                     f"{c16:.1f}",
                     f"{get[(n, k, m, 'cublas bf16')]['us']:.1f}", f"{tg['us']:.1f}" if tg else "-",
                     f"{c16 / r['us']:.2f}", f"{tg['us'] / r['us']:.2f}" if tg else "-", f"{r['us'] / base:.2f}"]
            print("| " + " | ".join(cells) + " |")


def plot(rows, bw):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    fig, axes = plt.subplots(2, 4, figsize=(20, 9))
    names = ["weft w4a16 fp16", "weft w4a16 bf16", "weft w4a8", "weft 2:4 fp16", "cublas fp16", "cublas bf16",
             "torch tinygemm int4"]
    for ax, (n, k) in zip(axes.flat, SHAPES):
        for name in names:
            pts = sorted((r["m"], r["us"]) for r in rows if r["n"] == n and r["k"] == k and r["kernel"] == name)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        wb = next(r for r in rows if r["n"] == n and r["k"] == k and r["kernel"] == "weft w4a16 fp16")
        int4_bytes = wb["weight_gbps"] * 1e9 * wb["us"] * 1e-6
        ax.axhline(int4_bytes / bw * 1e6, color="k", ls="--", lw=1, label="int4 bytes at read roofline")
        ax.axhline(n * k * 2 / bw * 1e6, color="gray", ls=":", lw=1, label="fp16 bytes at read roofline")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"N x K = {n} x {k}")
        ax.set_xlabel("M (tokens)")
        ax.set_ylabel("us per call")
    axes.flat[-1].axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    axes.flat[-1].legend(handles, labels, loc="center")
    fig.suptitle(f"weft decode GEMV vs PyTorch kernels on {PROPS.name} (read roofline {bw / 1e12:.2f} TB/s)")
    fig.tight_layout()
    fig.savefig(os.path.join(OUT, "gemv.png"), dpi=90)


if __name__ == "__main__":
    main()

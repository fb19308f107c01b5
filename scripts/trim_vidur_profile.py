#!/usr/bin/env python3
"""Keeps only the columns weft's profile reader uses from a Vidur profile CSV, text unchanged.

    scripts/trim_vidur_profile.py IN.csv OUT.csv [STATISTIC]

Vidur (github.com/microsoft/vidur, data/profiling) records min/max/mean/median/std of every
operator; weft reads one statistic (median unless asked) plus the shape and key columns. Rows keep
their order and their text, so the trimmed file is still a Vidur-format file.
"""
import csv
import sys

KEYS = {"n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp", "num_tokens",
        "num_tensor_parallel_workers", "rank", "num_workers", "size", "collective", "devices_per_node",
        "max_devices_per_node"}


def main():
    src, dst = sys.argv[1], sys.argv[2]
    stat = sys.argv[3] if len(sys.argv) > 3 else "median"
    with open(src, newline="") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    keep = [i for i, name in enumerate(header) if name in KEYS or (name.startswith("time_stats.") and name.endswith("." + stat))]
    with open(dst, "w", newline="") as f:
        out = csv.writer(f, lineterminator="\n")
        for row in rows:
            out.writerow([row[i] for i in keep])


if __name__ == "__main__":
    main()

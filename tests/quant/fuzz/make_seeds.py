#!/usr/bin/env python3
"""Writes the seed corpus of convert_fuzz.cpp (the input format is described there): valid GPTQ
v1/v2 (with and without act-order, per-channel) and AWQ layers, a NaN scale, and, as regression
files, the hostile shapes that once crashed the converters. Run from this folder: python3 make_seeds.py"""
import os
import random
import struct

corpus = "corpus/convert"
regressions = "regressions/convert"
os.makedirs(corpus, exist_ok=True)
os.makedirs(regressions, exist_ok=True)
rng = random.Random(2026)


def words(count, mask=0xFFFFFFFF):
    return [rng.getrandbits(32) & mask for _ in range(count)]


def halves(count):
    # fp16 bit patterns of scales in [0.001, 0.1]
    return [struct.unpack("<H", struct.pack("<e", rng.uniform(0.001, 0.1)))[0] for _ in range(count)]


def seed(name, fmt, k, n, group, qweight, qzeros, scales, g_idx=()):
    data = struct.pack("<BqqiHHHH", fmt, k, n, group, len(qweight), len(qzeros), len(scales), len(g_idx))
    data += struct.pack(f"<{len(qweight)}I", *qweight)
    data += struct.pack(f"<{len(qzeros)}I", *qzeros)
    data += struct.pack(f"<{len(scales)}H", *scales)
    data += struct.pack(f"<{len(g_idx)}i", *g_idx)
    with open(os.path.join(regressions if name.startswith("crash_") else corpus, name), "wb") as f:
        f.write(data)


def g_idx_for(k, group):
    perm = list(range(k))
    rng.shuffle(perm)
    g = [0] * k
    for i, p in enumerate(perm):
        g[p] = i // group
    return g


seed("gptq_v1_k64_n8_g32", 0, 64, 8, 32, words(64), words(2), halves(16))
seed("gptq_v2_k128_n16_g64", 1, 128, 16, 64, words(256), words(4, 0x77777777), halves(32))
seed("gptq_v1_act_order", 4, 64, 8, 32, words(64), words(2), halves(16), g_idx_for(64, 32))
seed("gptq_v2_act_order_k96", 5, 96, 8, 32, words(96), words(3, 0x77777777), halves(24), g_idx_for(96, 32))
seed("gptq_per_channel", 0, 64, 16, -1, words(128), words(2), halves(16))
seed("awq_k64_n8_g32", 2, 64, 8, 32, words(64), words(2), halves(16))
seed("awq_k100_n16_g64", 2, 100, 16, 64, words(200), words(4), halves(32))
# Hostile shapes that crashed the converters before their sizes were checked (issue 13): products
# that wrap in int64 arithmetic (k * n/8 = 1024 * (2^59 + 8) wraps to 8192, matching the tensors).
seed("crash_awq_wrap_n_2p62", 2, 1024, (1 << 62) + 64, 32, words(64), words(2), halves(16))
seed("crash_gptq_wrap_n_2p61", 0, 64, 1 << 61, 32, words(64), words(2), halves(16))
seed("gptq_huge_k", 0, 0x7FFFFFFFFFFFFFF8, 8, 32, words(64), words(2), halves(16))
seed("gptq_nan_scale", 0, 64, 8, 32, words(64), words(2), [0x7E00] + halves(15))

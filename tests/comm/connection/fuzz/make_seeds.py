#!/usr/bin/env python3
"""Writes the seed corpora of the connection-layer fuzzers (run from this folder). The byte layouts
are those of docs/comm.md ("Wire format: handshake and authentication") and docs/comm-elastic.md."""
import os
import struct

MAGIC, VERSION = 0x77656674, 5  # detail/wire.hpp wire_magic, wire_version
RENDEZVOUS, TCP_MESH, COORDINATOR, ELASTIC_MESH = 1, 2, 3, 4


def hello(kind, rank=-1, size=0, index=0, count=0, epoch=0, instance=0, port=0, name=b"", host=b"", auth=False):
    fixed = struct.pack("<IHHHHHHiiiiQQ", MAGIC, VERSION, kind, 1 if auth else 0, len(name), len(host), port, rank,
                        size, index, count, epoch, instance)
    return fixed + bytes(range(32)) + name + host


def verdict(ok, reason=b""):
    return struct.pack("<BH", 0 if ok else 1, len(reason)) + reason


def table(entries):
    out = struct.pack("<I", len(entries))
    for host, port, inst in entries:
        out += struct.pack("<HHQ", port, len(host), inst) + host
    return out


def write(corpus, name, data):
    os.makedirs(os.path.join("corpus", corpus), exist_ok=True)
    with open(os.path.join("corpus", corpus, name), "wb") as f:
        f.write(data)


# rendezvous_intro: byte 0 = (chunk - 1) << 1 | secret
write("rendezvous_intro", "rank1_hello", b"\x00" + hello(RENDEZVOUS, 1, 4, 0, 2, 0, 42, 6000))
write("rendezvous_intro", "rank1_hello_bytewise", b"\x00" + hello(RENDEZVOUS, 1, 4, 0, 2, 0, 42, 6000, host=b"10.1.2.3"))
write("rendezvous_intro", "rank0_reply_and_table",
      b"\x0e" + hello(RENDEZVOUS, 0, 4, 0, 2, 0, 7, 5000) + verdict(True) +
      table([(b"127.0.0.1", 5000, 7), (b"127.0.0.1", 5001, 8), (b"10.0.0.2", 5002, 9), (b"10.0.0.3", 5003, 10)]))
write("rendezvous_intro", "refused", b"\x02" + hello(RENDEZVOUS, 0, 4, 0, 2, 0, 7, 5000) + verdict(False, b"rank 1 has already joined"))
write("rendezvous_intro", "authenticated_hello", b"\x01" + hello(RENDEZVOUS, 1, 4, 0, 2, 0, 42, 6000, auth=True) + bytes(32))
write("rendezvous_intro", "huge_host_length", b"\x00" + hello(RENDEZVOUS, 1, 4, 0, 2, 0, 42, 6000)[:12] + b"\xff\xff" +
      hello(RENDEZVOUS, 1, 4, 0, 2, 0, 42, 6000)[14:])
# mesh_hello: a hello of member b (connection 0 of 2) for epoch 3, then a split byte (how many
# bytes, /8, go to connection 0) and frames: u32 channel, u32 check, u64 total, u64 seq, u32 pieces,
# u32 reserved, then the piece's bytes.
b_hello = hello(ELASTIC_MESH, 1, 2, 0, 2, 3, 12, name=b"b")
frame = lambda ch, total, seq, pieces=1, body=None: struct.pack("<IIQQII", ch, 0, total, seq, pieces, 0) + (
    body if body is not None else bytes(total if pieces == 1 else total // pieces))
write("mesh_hello", "member_b", b_hello)
small = frame(1, 16, 0) + frame(2, 3, 1) + frame(3, 16, 2)
write("mesh_hello", "member_b_frames", b_hello + bytes([len(small) // 8]) + small + b"\0" * (len(small) % 8))
striped0 = frame(2, 100, 0, 2)  # piece 0 (50 bytes) on connection 0, piece 1 on connection 1
striped1 = frame(2, 100, 0, 2)
write("mesh_hello", "striped", b_hello + bytes([len(striped0) // 8]) + striped0 + striped1)
write("mesh_hello", "phantom_length", b_hello + b"\x04" + struct.pack("<IIQQII", 1, 0, 1 << 62, 0, 1, 0))
write("mesh_hello", "abort", b_hello + b"\x05" + frame(0xFFFFFFFF, 5, 0, body=b"stop!"))
write("mesh_hello", "stale_epoch", hello(ELASTIC_MESH, 1, 2, 0, 2, 2, 12, name=b"b"))

# coordinator_line
write("coordinator_line", "member_lines",
      b"HELLO w1 127.0.0.1 4000 w:f32[64] 77\nREADY 3 1234 1 0\nHB\nLEAVE\n")
write("coordinator_line", "epoch_line",
      b"EPOCH 4 1 2 3 1234 0 w0 127.0.0.1 4000 1234 5 w1 10.0.0.2 4001 1234 6\n")
write("coordinator_line", "bad_lines",
      b"HELLO w1 localhost 0 s 1\nREADY 18446744073709551615 1 1 1\nREADY 1 2 3 4\nHELLO  w1\n")
write("coordinator_line", "handshake", hello(COORDINATOR, name=b"w1", instance=5))

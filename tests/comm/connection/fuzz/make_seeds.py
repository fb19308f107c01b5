#!/usr/bin/env python3
"""Writes the seed corpora of the connection-layer fuzzers (run from this folder). The byte layouts
are those of docs/comm.md ("Wire format: handshake and authentication") and docs/comm-elastic.md."""
import os
import struct

MAGIC, VERSION = 0x77656674, 6  # detail/wire.hpp wire_magic, wire_version
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
# bytes, /8, go to connection 0) and the stream engine's data frames (docs/comm.md, "Wire format:
# data frames"): u16 marker 0x6677, u8 kind (1 data, 2 abort), u8 flags, u32 channel, u32 sequence,
# u32 check, u64 total, u64 piece, then the piece's bytes.
b_hello = hello(ELASTIC_MESH, 1, 2, 0, 2, 3, 12, name=b"b")
FRAME_MARKER, DATA, ABORT = 0x6677, 1, 2


def frame(ch, total, piece=None, body=None, kind=DATA, flags=0, seq=0, check=0):
    piece = total if piece is None else piece
    return struct.pack("<HBBIIIQQ", FRAME_MARKER, kind, flags, ch, seq, check, total, piece) + (
        body if body is not None else bytes(piece))


def abort_body(origin, reason):
    out = struct.pack("<IiiIII", origin, -1, -1, 10, 0, origin)  # errc 10 = io
    for s in (reason, b"", b"", b""):
        out += struct.pack("<H", len(s)) + s
    return out


write("mesh_hello", "member_b", b_hello)
small = frame(1, 16) + frame(2, 3) + frame(3, 16)
write("mesh_hello", "member_b_frames", b_hello + bytes([len(small) // 8]) + small + b"\0" * (len(small) % 8))
striped0 = frame(2, 100, 50)  # piece 0 (50 bytes) on connection 0, piece 1 on connection 1
striped1 = frame(2, 100, 50)
write("mesh_hello", "striped", b_hello + bytes([len(striped0) // 8]) + striped0 + striped1)
write("mesh_hello", "phantom_length", b_hello + b"\x04" + struct.pack("<HBBIIIQQ", FRAME_MARKER, DATA, 0, 1, 0, 0,
                                                                        1 << 62, 1 << 62))
reason = abort_body(1, b"stop!")
aborted = frame(0, len(reason), body=reason, kind=ABORT)
write("mesh_hello", "abort", b_hello + bytes([(len(aborted) + 7) // 8]) + aborted)  # all on connection 0
write("mesh_hello", "stale_epoch", hello(ELASTIC_MESH, 1, 2, 0, 2, 2, 12, name=b"b"))

# coordinator_line
write("coordinator_line", "member_lines",
      b"HELLO w1 127.0.0.1 4000 w:f32[64] 77\nREADY 3 1234 1 0\nHB\nLEAVE\n")
write("coordinator_line", "epoch_line",
      b"EPOCH 4 1 2 3 1234 0 w0 127.0.0.1 4000 1234 5 w1 10.0.0.2 4001 1234 6\n")
write("coordinator_line", "bad_lines",
      b"HELLO w1 localhost 0 s 1\nREADY 18446744073709551615 1 1 1\nREADY 1 2 3 4\nHELLO  w1\n")
write("coordinator_line", "handshake", hello(COORDINATOR, name=b"w1", instance=5))

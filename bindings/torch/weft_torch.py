"""PyTorch custom operators over weft's decode GEMVs (quant/cuda/w4_gemv.cuh).

Optional and outside weft's header-only core: it loads the C ABI library built from
weft_capi.cu beside this file (``bindings/torch/build.sh``) with ctypes and registers

* ``torch.ops.weft.w4a16_gemv(x, words, scales, zeros, n, k, group_size, out_float, ...)``
* ``torch.ops.weft.w4a8_gemv(x, x_scales, words, scales, zeros, n, k, group_size, ...)``
* ``torch.ops.weft.w4a16_sparse24_gemv(x, words, meta, scales, zeros, n, k, group_size, ...)``

as ``torch.library`` custom operators (fake kernels included, so ``torch.compile`` traces them and
CUDA graphs capture them). ``pack_w4`` turns int4 codes, fp16 scales and optional zero points into
weft's GPU layout (version 1) once, at load time::

    import torch, weft_torch
    w = weft_torch.pack_w4(codes, scales, zeros, group_size=128)   # codes: N x K ints 0..15
    x = torch.randn(4, w.k, dtype=torch.float16, device="cuda")
    y = weft_torch.linear(x, w)                                     # (4, N) fp16, = x @ W.T
"""
import ctypes
import os
from dataclasses import dataclass
from typing import Optional

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
_lib: Optional[ctypes.CDLL] = None


def _load() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        path = os.environ.get("WEFT_CAPI_LIBRARY", os.path.join(_HERE, "libweft_capi.so"))
        lib = ctypes.CDLL(path)
        c_i64, c_int, c_vp = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
        lib.weft_last_error.restype = ctypes.c_char_p
        lib.weft_gpu_w4_layout_version.restype = c_int
        lib.weft_gpu_w4_sizes.argtypes = [c_i64, c_i64, c_i64, ctypes.POINTER(c_i64), ctypes.POINTER(c_i64)]
        lib.weft_gpu_w4_pack.argtypes = [c_vp, c_vp, c_vp, c_i64, c_i64, c_i64, c_vp, c_vp, c_vp]
        lib.weft_w4_gemv_workspace.argtypes = [c_int, c_int, c_i64, c_i64, c_i64, c_i64, c_int, c_int, c_int, c_int,
                                               c_int, ctypes.POINTER(ctypes.c_size_t)]
        lib.weft_w4a16_gemv.argtypes = [c_int, c_int, c_vp, c_vp, c_vp, c_vp, c_vp, c_i64, c_i64, c_i64, c_i64,
                                        c_int, c_int, c_int, c_int, c_vp, c_vp]
        lib.weft_w4a8_gemv.argtypes = [c_vp, c_vp, c_vp, c_vp, c_vp, c_vp, c_i64, c_i64, c_i64, c_i64, c_int, c_int,
                                       c_int, c_int, c_vp, c_vp]
        lib.weft_read_bandwidth.argtypes = [c_vp, c_i64, c_vp, c_vp]
        lib.weft_gpu_sparse24_sizes.argtypes = [c_i64, c_i64, c_i64, ctypes.POINTER(c_i64), ctypes.POINTER(c_i64),
                                                ctypes.POINTER(c_i64)]
        lib.weft_gpu_sparse24_pack.argtypes = [c_vp, c_vp, c_vp, c_vp, c_i64, c_i64, c_i64, c_vp, c_vp, c_vp, c_vp]
        lib.weft_w4a16_sparse24_gemv.argtypes = [c_int, c_int, c_vp, c_vp, c_vp, c_vp, c_vp, c_vp, c_i64, c_i64,
                                                 c_i64, c_i64, c_int, c_int, c_int, c_int, c_vp, c_vp]
        for name in ("weft_gpu_w4_sizes", "weft_gpu_w4_pack", "weft_w4_gemv_workspace", "weft_w4a16_gemv",
                     "weft_w4a8_gemv", "weft_read_bandwidth", "weft_gpu_sparse24_sizes", "weft_gpu_sparse24_pack",
                     "weft_w4a16_sparse24_gemv"):
            getattr(lib, name).restype = c_int
        _lib = lib
    return _lib


def _check(rc: int) -> None:
    if rc != 0:
        raise RuntimeError(_load().weft_last_error().decode())


def layout_version() -> int:
    """Version of weft's GPU int4 layout that the loaded library reads."""
    return _load().weft_gpu_w4_layout_version()


@dataclass
class PackedW4:
    """An N x K int4 matrix in weft's GPU layout, on one CUDA device."""
    words: torch.Tensor   # int32, the layout's 32-bit words
    scales: torch.Tensor  # fp16, [tiles][groups][8][2]
    zeros: Optional[torch.Tensor]  # uint8, same order; None when symmetric
    n: int
    k: int
    group_size: int  # 0: per-channel

    def weight_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.words, self.scales, self.zeros) if t is not None)


def pack_w4(codes: torch.Tensor, scales: torch.Tensor, zeros: Optional[torch.Tensor], group_size: int = 128,
            device: str | torch.device = "cuda") -> PackedW4:
    """Packs N x K codes (0..15), N x groups fp16 scales and zero points (0..16, or None for
    symmetric, zero 8) into weft's GPU layout; w = (code - zero) * scale. Lossless."""
    lib = _load()
    n, k = codes.shape
    words_n, cells = ctypes.c_int64(), ctypes.c_int64()
    _check(lib.weft_gpu_w4_sizes(n, k, group_size, ctypes.byref(words_n), ctypes.byref(cells)))
    c = codes.to(torch.int32).contiguous().cpu()
    s = scales.to(torch.float16).contiguous().cpu()
    z = None if zeros is None else zeros.to(torch.int16).contiguous().cpu()
    words = torch.empty(words_n.value, dtype=torch.int32)
    sc = torch.empty(cells.value, dtype=torch.float16)
    zo = None if z is None else torch.empty(cells.value, dtype=torch.uint8)
    _check(lib.weft_gpu_w4_pack(c.data_ptr(), s.data_ptr(), None if z is None else z.data_ptr(), n, k, group_size,
                                words.data_ptr(), sc.data_ptr(), None if zo is None else zo.data_ptr()))
    return PackedW4(words.to(device), sc.to(device), None if zo is None else zo.to(device), n, k, group_size)


@dataclass
class PackedSparse24:
    """An N x K 2:4 sparse int4 matrix in weft's GPU layout, on one CUDA device."""
    words: torch.Tensor   # int32, kept codes
    meta: torch.Tensor    # int32, positions in the sparse tensor cores' metadata layout
    scales: torch.Tensor  # fp16
    zeros: Optional[torch.Tensor]  # uint8; None when symmetric
    n: int
    k: int
    group_size: int

    def weight_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.words, self.meta, self.scales, self.zeros)
                   if t is not None)


def pack_sparse24(codes: torch.Tensor, positions: torch.Tensor, scales: torch.Tensor, zeros: Optional[torch.Tensor],
                  group_size: int = 128, device: str | torch.device = "cuda") -> PackedSparse24:
    """Packs 2:4 weights: kept codes (N x K/2, 0..15), their positions (N x K/2, 0..3, increasing
    within each group of 4 inputs), N x groups fp16 scales and zero points (or None) into weft's
    GPU layout for the sparse tensor cores. Lossless."""
    lib = _load()
    n, half_k = codes.shape
    k = 2 * half_k
    words_n, meta_n, cells = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
    _check(lib.weft_gpu_sparse24_sizes(n, k, group_size, ctypes.byref(words_n), ctypes.byref(meta_n),
                                       ctypes.byref(cells)))
    c = codes.to(torch.int32).contiguous().cpu()
    p = positions.to(torch.uint8).contiguous().cpu()
    s = scales.to(torch.float16).contiguous().cpu()
    z = None if zeros is None else zeros.to(torch.int16).contiguous().cpu()
    words = torch.empty(words_n.value, dtype=torch.int32)
    meta = torch.empty(meta_n.value, dtype=torch.int32)
    sc = torch.empty(cells.value, dtype=torch.float16)
    zo = None if z is None else torch.empty(cells.value, dtype=torch.uint8)
    _check(lib.weft_gpu_sparse24_pack(c.data_ptr(), p.data_ptr(), s.data_ptr(), None if z is None else z.data_ptr(),
                                      n, k, group_size, words.data_ptr(), meta.data_ptr(), sc.data_ptr(),
                                      None if zo is None else zo.data_ptr()))
    return PackedSparse24(words.to(device), meta.to(device), sc.to(device), None if zo is None else zo.to(device), n,
                          k, group_size)


_workspaces: dict = {}


def _workspace(device: torch.device, nbytes: int) -> Optional[torch.Tensor]:
    """A zero-filled buffer per device that only grows (the kernels leave it zeroed). Grown
    outside CUDA graph capture: warm a captured call up once first."""
    if nbytes == 0:
        return None
    buf = _workspaces.get(device)
    if buf is None or buf.numel() < nbytes:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("weft: the GEMV workspace must grow outside graph capture; run the call once first")
        buf = torch.zeros(nbytes, dtype=torch.uint8, device=device)
        _workspaces[device] = buf
    return buf


def _ptr(t: Optional[torch.Tensor]):
    return None if t is None else t.data_ptr()


def _policy(policy):
    return tuple(policy) if policy is not None else (0, 0, 0, 0)


def _w4a16_call(kind: int, op: str, x: torch.Tensor, launch, n: int, k: int, group_size: int, symmetric: bool,
                out_float: bool, policy) -> torch.Tensor:
    """The common part of the 16-bit-activation GEMVs (kind 0: dense, 2: 2:4): checks x, makes Y,
    grows the workspace, and calls launch(act, out, y, m, workspace, stream) on torch's stream."""
    if x.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"weft.{op}: x must be fp16 or bf16, not {x.dtype}")
    m = x.shape[0]
    act = 0 if x.dtype == torch.float16 else 1
    y = torch.empty((m, n), dtype=torch.float32 if out_float else x.dtype, device=x.device)
    nbytes = ctypes.c_size_t()
    _check(_load().weft_w4_gemv_workspace(kind, act, m, n, k, group_size, int(symmetric), *policy,
                                          ctypes.byref(nbytes)))
    ws = _workspace(x.device, nbytes.value)
    _check(launch(act, 2 if out_float else act, y.data_ptr(), m, _ptr(ws), torch.cuda.current_stream(x.device).cuda_stream))
    return y


@torch.library.custom_op("weft::w4a16_gemv", mutates_args=())
def w4a16_gemv(x: torch.Tensor, words: torch.Tensor, scales: torch.Tensor, zeros: Optional[torch.Tensor], n: int,
               k: int, group_size: int, out_float: bool = False, tiles_per_warp: int = 0, chunks_in_flight: int = 0,
               warps: int = 0, splits: int = 0) -> torch.Tensor:
    x = x.contiguous()
    policy = (tiles_per_warp, chunks_in_flight, warps, splits)
    return _w4a16_call(
        0, "w4a16_gemv", x,
        lambda act, out, y, m, ws, stream: _load().weft_w4a16_gemv(
            act, out, x.data_ptr(), words.data_ptr(), scales.data_ptr(), _ptr(zeros), y, m, n, k, group_size, *policy,
            ws, stream),
        n, k, group_size, zeros is None, out_float, policy)


@w4a16_gemv.register_fake
def _(x, words, scales, zeros, n, k, group_size, out_float=False, tiles_per_warp=0, chunks_in_flight=0, warps=0,
      splits=0):
    return x.new_empty((x.shape[0], n), dtype=torch.float32 if out_float else x.dtype)


@torch.library.custom_op("weft::w4a8_gemv", mutates_args=())
def w4a8_gemv(x: torch.Tensor, x_scales: torch.Tensor, words: torch.Tensor, scales: torch.Tensor,
              zeros: Optional[torch.Tensor], n: int, k: int, group_size: int, tiles_per_warp: int = 0,
              chunks_in_flight: int = 0, warps: int = 0, splits: int = 0) -> torch.Tensor:
    lib = _load()
    if x.dtype != torch.int8 or x_scales.dtype != torch.float32:
        raise TypeError("weft.w4a8_gemv: x must be int8 and x_scales float32")
    x = x.contiguous()
    m = x.shape[0]
    y = torch.empty((m, n), dtype=torch.float32, device=x.device)
    nbytes = ctypes.c_size_t()
    _check(lib.weft_w4_gemv_workspace(1, 0, m, n, k, group_size, int(zeros is None), tiles_per_warp, chunks_in_flight,
                                      warps, splits, ctypes.byref(nbytes)))
    ws = _workspace(x.device, nbytes.value)
    stream = torch.cuda.current_stream(x.device).cuda_stream
    _check(lib.weft_w4a8_gemv(x.data_ptr(), x_scales.data_ptr(), words.data_ptr(), scales.data_ptr(), _ptr(zeros),
                              y.data_ptr(), m, n, k, group_size, tiles_per_warp, chunks_in_flight, warps, splits,
                              _ptr(ws), stream))
    return y


@w4a8_gemv.register_fake
def _(x, x_scales, words, scales, zeros, n, k, group_size, tiles_per_warp=0, chunks_in_flight=0, warps=0, splits=0):
    return x.new_empty((x.shape[0], n), dtype=torch.float32)


@torch.library.custom_op("weft::w4a16_sparse24_gemv", mutates_args=())
def w4a16_sparse24_gemv(x: torch.Tensor, words: torch.Tensor, meta: torch.Tensor, scales: torch.Tensor,
                        zeros: Optional[torch.Tensor], n: int, k: int, group_size: int, out_float: bool = False,
                        tiles_per_warp: int = 0, chunks_in_flight: int = 0, warps: int = 0,
                        splits: int = 0) -> torch.Tensor:
    x = x.contiguous()
    policy = (tiles_per_warp, chunks_in_flight, warps, splits)
    return _w4a16_call(
        2, "w4a16_sparse24_gemv", x,
        lambda act, out, y, m, ws, stream: _load().weft_w4a16_sparse24_gemv(
            act, out, x.data_ptr(), words.data_ptr(), meta.data_ptr(), scales.data_ptr(), _ptr(zeros), y, m, n, k,
            group_size, *policy, ws, stream),
        n, k, group_size, zeros is None, out_float, policy)


@w4a16_sparse24_gemv.register_fake
def _(x, words, meta, scales, zeros, n, k, group_size, out_float=False, tiles_per_warp=0, chunks_in_flight=0,
      warps=0, splits=0):
    return x.new_empty((x.shape[0], n), dtype=torch.float32 if out_float else x.dtype)


def linear(x: torch.Tensor, w: PackedW4, out_float: bool = False, policy=None) -> torch.Tensor:
    """x @ W.T for x of shape (M, K), M <= 32 tokens, fp16 or bf16."""
    return torch.ops.weft.w4a16_gemv(x, w.words, w.scales, w.zeros, w.n, w.k, w.group_size, out_float,
                                     *_policy(policy))


def linear_w4a8(x_int8: torch.Tensor, x_scales: torch.Tensor, w: PackedW4, policy=None) -> torch.Tensor:
    """diag(x_scales) (x_int8 @ W.T) in fp32, for per-token int8 activations."""
    return torch.ops.weft.w4a8_gemv(x_int8, x_scales, w.words, w.scales, w.zeros, w.n, w.k, w.group_size,
                                    *_policy(policy))


def linear_sparse24(x: torch.Tensor, w: PackedSparse24, out_float: bool = False, policy=None) -> torch.Tensor:
    """x @ W.T for 2:4 sparse W, x of shape (M, K), M <= 32 tokens, fp16 or bf16."""
    return torch.ops.weft.w4a16_sparse24_gemv(x, w.words, w.meta, w.scales, w.zeros, w.n, w.k, w.group_size,
                                              out_float, *_policy(policy))


def read_bandwidth(buf: torch.Tensor, sink: torch.Tensor) -> None:
    """Streams every byte of buf once (the roofline kernel of the benchmark)."""
    _check(_load().weft_read_bandwidth(buf.data_ptr(), buf.numel() * buf.element_size(), sink.data_ptr(),
                                       torch.cuda.current_stream(buf.device).cuda_stream))

"""The rotary embedding of a decoder layer's fused q|k|v product, as the C kernel in
`rotary.c`: queries laid out for attention, keys turned and values copied straight
into the layer's cache buffer, bit for bit the model's own rotation.

In torch that took a concatenation, a negation and three elementwise passes, then
two copies into the cache, per layer (a decode step paid their fixed costs 30
times). Where the kernel is not built (no compiler, `EVALPIPE_NATIVE_KERNELS=0`) or
the tensors are not the kernel's layout, `rotate_into` returns None and the layer
keeps torch's ops.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from evalpipe.backends.local import native

SOURCE = native.KERNELS / "rotary.c"


def kernel() -> ctypes.CDLL | None:
    return native.load(SOURCE)


@functools.cache
def dim_multiple(lib: ctypes.CDLL) -> int:
    """The multiple of which a head size must be for the kernel (whole vectors a half)."""
    return int(lib.dim_multiple())


def rotate_into(y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int,
                kv_heads: int, dim: int, layer, lib: ctypes.CDLL | None = None
                ) -> torch.Tensor | None:
    """y [rows, t, (heads + 2 kv_heads) dim] (contiguous): the queries [rows, heads, t,
    dim], with the turned keys and the values appended to `layer`'s cache (a layer with
    `reserve`, batching.BufferLayer). cos/sin [rows or 1, t, dim]. None, and nothing
    written, where the kernel cannot take the call."""
    lib = lib or kernel()  # a caller that checked it once passes it (decode_step.py)
    rows, t = y.shape[0], y.shape[1]
    if (lib is None or not hasattr(layer, "reserve") or dim % dim_multiple(lib)
            or any(x.dtype != torch.float32 or x.device.type != "cpu" for x in (y, cos, sin))
            or not y.is_contiguous() or cos.stride() != sin.stride() or cos.stride(-1) != 1
            or cos.shape[1:] != (t, dim) or cos.shape[0] not in (1, rows)):
        return None
    keys, values = layer.reserve(t)
    if keys.stride() != values.stride() or keys.stride(-1) != 1:
        return None
    query = torch.empty(rows, heads, t, dim, dtype=torch.float32)
    crs = cos.stride(0) if cos.shape[0] == rows and rows > 1 else 0
    lib.rotate_into(y.data_ptr(), rows, t, heads, kv_heads, dim, cos.data_ptr(), sin.data_ptr(),
                    crs, cos.stride(1), query.data_ptr(), keys.data_ptr(), values.data_ptr(),
                    *keys.stride()[:3], torch.get_num_threads())
    layer.commit(t)
    return query

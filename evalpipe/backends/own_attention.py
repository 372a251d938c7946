"""The decode step's products over each row's own cached tokens, as a small C kernel.

At a decode step every row has one query token; its query heads meet their key
head's cache in products of 3 x 64 queries against a few hundred keys. torch
runs those as batched matrix products that read the cache at about half the
speed of a plain read, and multiplies the masked (padding) columns too. The
kernel in `own_attention.c` reads each key and value row once for all the
query heads that share it and skips masked columns.

It is plain C with no torch headers, so the machine's compiler builds it in
well under a second at first use, for this CPU (`-march=native`), into the
user cache. Where no compiler is found or the build fails, `kernel()` returns
None and attention keeps torch's products (prefix_attention.py); nothing else
changes. `EVALPIPE_NATIVE_KERNELS=0` turns it off.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("own_attention.c")
FLAGS = ("-O3", "-march=native", "-shared", "-fPIC", "-fopenmp")
_i64, _ptr = ctypes.c_int64, ctypes.c_void_p


@lru_cache(maxsize=1)
def kernel() -> ctypes.CDLL | None:
    """The built kernel library, or None where it cannot be had (see the module doc)."""
    if os.environ.get("EVALPIPE_NATIVE_KERNELS", "1") == "0" or sys.platform == "win32":
        return None
    compiler = shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc")
    if compiler is None:
        return None
    from evalpipe.backends.cpu import cpu_info
    from evalpipe.paths import cache_dir

    source = SOURCE.read_bytes()
    # -march=native code runs only on CPUs like this one: the CPU is part of the key.
    key = hashlib.sha256(b"\0".join([source, compiler.encode(), " ".join(FLAGS).encode(),
                                     platform.machine().encode(), cpu_info()[0].encode()]))
    target = cache_dir("kernels") / f"own_attention-{key.hexdigest()[:16]}.so"
    if not target.exists():
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            built = Path(tmp) / target.name
            try:
                subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", str(built)], check=True,
                               capture_output=True, timeout=120)
            except (OSError, subprocess.SubprocessError):
                return None
            os.replace(built, target)  # atomic: parallel first uses cannot see half a file
    try:
        lib = ctypes.CDLL(str(target))
    except OSError:
        return None
    # Four pointers, then rows, heads, groups, length, dim and the three cache strides.
    common: list[type] = [_ptr] * 4 + [_i64] * 8
    lib.own_scores.argtypes = [*common, ctypes.c_float, ctypes.c_int]
    lib.own_values.argtypes = [*common, ctypes.c_int]
    lib.own_scores.restype = lib.own_values.restype = None
    return lib


def _built(mask: torch.Tensor) -> ctypes.CDLL:
    lib = kernel()
    if lib is None:
        raise RuntimeError("the own-attention kernel is not built: check usable() first")
    if mask.dtype != torch.bool:  # the kernel reads one byte a column
        raise TypeError(f"own-attention mask must be bool, got {mask.dtype}")
    return lib


def usable(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    """True when the kernel can take this call: float32 CPU tensors, one query token,
    unit stride along the head dimension, and a built kernel."""
    return (query.shape[2] == 1 and query.device.type == "cpu"
            and all(t.dtype == torch.float32 and t.stride(-1) == 1 for t in (key, value))
            and kernel() is not None)


def scores(qg: torch.Tensor, key: torch.Tensor, mask: torch.Tensor, low: float) -> torch.Tensor:
    """qg [B, KVH, G, D] (scaled queries) against key [B, KVH, S, D]: scores
    [B, KVH, G, S], `low` where mask [B, S] (bool) is False."""
    b, kvh, g, d = qg.shape
    s = key.shape[2]
    qg, mask = qg.contiguous(), mask.contiguous()
    out = torch.empty(b, kvh, g, s, dtype=torch.float32)
    _built(mask).own_scores(qg.data_ptr(), key.data_ptr(), mask.data_ptr(), out.data_ptr(),
                        b, kvh, g, s, d, *key.stride()[:3], low, torch.get_num_threads())
    return out


def values(weights: torch.Tensor, value: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """weights [B, KVH, G, S] times value [B, KVH, S, D] over the columns mask [B, S]
    keeps: [B, KVH, G, D]."""
    b, kvh, g, s = weights.shape
    d = value.shape[3]
    weights, mask = weights.contiguous(), mask.contiguous()
    out = torch.empty(b, kvh, g, d, dtype=torch.float32)
    _built(mask).own_values(weights.data_ptr(), value.data_ptr(), mask.data_ptr(), out.data_ptr(),
                        b, kvh, g, s, d, *value.stride()[:3], torch.get_num_threads())
    return out

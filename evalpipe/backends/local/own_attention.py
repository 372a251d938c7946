"""A decode step's attention over [shared prefix | each row's own tokens], as a
small C kernel.

At a decode step every row has one query token; its query heads meet the shared
prefix and their key head's own cache in products of 3 x 64 queries against a
few hundred keys. torch ran those as batched matrix products (the own ones
reading the cache at about half the speed of a plain read and multiplying the
masked padding columns too) with six elementwise passes of softmax between
them. The kernel in `own_attention.c` does the whole attention in one pass per
row and key head: each key and value row is read once for all the query heads
that share it, masked columns are skipped, and the prefix keys, transposed once
per stored prefix, are scored 32 positions at a time.

The same file holds the prefill kernel (prefill_attention.py). It is built at
first use (native.py); where it cannot be, `kernel()` returns None and attention
keeps torch's products (prefix_attention.py); nothing else changes.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import torch
from torch.utils.weak import WeakIdKeyDictionary

from evalpipe.backends.local import native

SOURCE = native.KERNELS / "own_attention.c"


def kernel() -> ctypes.CDLL | None:
    """The built kernel library, or None where it cannot be had (see the module doc)."""
    return native.load(SOURCE)


@functools.cache
def _constants(lib: ctypes.CDLL) -> tuple[int, int]:
    """The build's (head-size multiple, prefix block): see own_attention.c."""
    return int(lib.dim_multiple()), int(lib.prefix_block())


def takes_heads(lib: ctypes.CDLL | None, dim: int) -> bool:
    """A built kernel that takes heads of `dim` (whole vectors of its width)."""
    return lib is not None and dim % _constants(lib)[0] == 0


def usable(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    """True when the kernel can take this call: float32 CPU tensors, one query token,
    a head size of whole vectors with unit stride, keys and values laid out alike (one
    set of strides serves both), and a built kernel."""
    return (query.shape[2] == 1 and query.device.type == "cpu"
            and all(t.dtype == torch.float32 and t.stride(-1) == 1 for t in (query, key, value))
            and key.stride() == value.stride() and takes_heads(kernel(), query.shape[-1]))


# The prefix's keys transposed to [heads, dim, positions] (padded to whole blocks), made
# once per stored prefix and layer: a prefix serves every decode step of its cell.
_transposed: WeakIdKeyDictionary = WeakIdKeyDictionary()


def transposed_keys(pk: torch.Tensor, lib: ctypes.CDLL) -> torch.Tensor:
    """pk [1, KVH, P, D] as [KVH, D, P rounded up to the kernel's block], zero padded
    (cached)."""
    kt = _transposed.get(pk)
    if kt is None:
        _, kvh, p_len, dim = pk.shape
        block = _constants(lib)[1]
        kt = torch.zeros(kvh, dim, -(-p_len // block) * block, dtype=torch.float32)
        kt[:, :, :p_len] = pk[0].transpose(-1, -2)
        _transposed[pk] = kt
    return kt


@dataclass(frozen=True)
class Ranges:
    """Where each row's prefix lies among the prefixes a batch attends to (stored one
    after another): `lengths[i]` positions from `starts[i]` ([rows] int64, contiguous;
    length 0: none), `longest` the largest length. Made once per forward (`of`), read by
    both kernels in every layer."""

    starts: torch.Tensor
    lengths: torch.Tensor
    longest: int

    @classmethod
    def of(cls, starts: torch.Tensor, lengths: torch.Tensor, width: int) -> Ranges:
        """Checked against the prefixes' `width` in positions: each range, rounded up to
        the decode kernel's block, lies within it rounded up alike (the kernel scores whole
        blocks; positions past a row's length are scored and dropped)."""
        starts, lengths = (t.to(torch.int64).contiguous() for t in (starts, lengths))
        longest = int(lengths.max()) if len(lengths) else 0
        lib = kernel()
        block = prefix_block(lib) if lib is not None else 1
        padded = (lengths + block - 1) // block * block
        if len(lengths) and (int(starts.min()) < 0 or int(lengths.min()) < 0
                             or int((starts + padded).max()) > -(-width // block) * block):
            raise ValueError(f"prefix ranges out of bounds: starts {starts.tolist()}, "
                             f"lengths {lengths.tolist()} in {width} positions")
        return cls(starts, lengths, longest)

    @classmethod
    def none(cls, rows: int) -> Ranges:
        zeros = torch.zeros(rows, dtype=torch.int64)
        return cls(zeros, zeros, 0)


def prefix_block(lib: ctypes.CDLL) -> int:
    """Positions the transposed prefix keys are padded to a multiple of (own_attention.c)."""
    return _constants(lib)[1]


def decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     mask: torch.Tensor, prefix: tuple[torch.Tensor, torch.Tensor] | None,
                     ranges: Ranges, scale: float, lib: ctypes.CDLL | None = None
                     ) -> torch.Tensor | None:
    """Attention for one query token per row over [its prefix | the row's own tokens]:
    query [B, H, 1, D]; key/value [B, KVH, S, D] (any strides but the last); mask [B, S]
    bool (True = attend); prefix (keys, values) [1, KVH, P, D], the batch's prefixes one
    after another, or None; `ranges`: each row's part of them. Returns [B, 1, H, D], or
    None where the kernel could not get its scratch memory."""
    b, heads, _, dim = query.shape
    kv_heads, s_len = key.shape[1], key.shape[2]
    lib = lib or kernel()  # a caller that checked it once passes it (decode_step.py)
    if lib is None:
        raise RuntimeError("the own-attention kernel is not built: check usable() first")
    if mask.dtype != torch.bool:  # read as one byte each
        raise TypeError(f"decode-attention masks must be bool, got {mask.dtype}")
    q, mask = query.contiguous(), mask.contiguous()
    if prefix is not None:
        pk, pv = prefix
        kt, pv = transposed_keys(pk, lib), (pv if pv.stride(-1) == 1 else pv.contiguous())
        block = prefix_block(lib)
        p_pad, p_tot = -(-ranges.longest // block) * block, kt.shape[2]
        p_ptr, pv_ptr, phs, pps = kt.data_ptr(), pv.data_ptr(), pv.stride(1), pv.stride(2)
    else:
        ranges = Ranges.none(b)
        p_pad = p_tot = p_ptr = pv_ptr = phs = pps = 0
    out = torch.empty(b, 1, heads, dim, dtype=torch.float32)
    failed = lib.decode_attention(
        q.data_ptr(), p_ptr, pv_ptr, ranges.starts.data_ptr(), ranges.lengths.data_ptr(),
        key.data_ptr(), value.data_ptr(), mask.data_ptr(), out.data_ptr(), b, kv_heads,
        heads // kv_heads, dim, p_pad, p_tot, s_len, phs, pps, *key.stride()[:3], scale,
        torch.get_num_threads())
    return None if failed else out

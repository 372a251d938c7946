"""Attention of a prefill chunk over [shared prefix | the row's own tokens], as the C
kernel `prefill_attention` in own_attention.c.

A RAG prompt prefills a thousand or more of its own tokens. Done as products, a
chunk's attention writes every score of the context out, masks it, runs a
softmax over it and reads it back: in the default job's RAG cells those passes
took more time than the products, and the products multiplied the left padding
of shorter rows and the causal triangle's masked half too (1.56 TFLOP computed
for ~0.9 attended). The kernel works flash-style: a block of key columns at a
time, scored, masked, weighted and summed into the output while in the cache,
skipping blocks that are padding or after a query block's last token. The
prefix is read where it is stored, not copied in front of every row's keys.

It runs inside the engine's shared-prefix attention (prefix_attention.py), so
`model.generate` keeps the model's own attention; without the kernel (no
compiler, `EVALPIPE_NATIVE_KERNELS=0`) chunks go to the model's attention.
"""

from __future__ import annotations

import torch

from evalpipe.backends.local import own_attention

MIN_QUERIES = 2  # query tokens per row from which the kernel takes a chunk (1: decode)


def takes(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    """True for float32 CPU chunks of at least MIN_QUERIES query tokens whose head size
    is whole vectors with unit stride, keys and values laid out alike, and a built
    kernel."""
    return (query.shape[2] >= MIN_QUERIES and query.device.type == "cpu"
            and all(t.dtype == torch.float32 and t.stride(-1) == 1 for t in (query, key, value))
            and key.stride() == value.stride()
            and own_attention.takes_heads(own_attention.kernel(), query.shape[-1]))


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
           prefix: tuple[torch.Tensor, torch.Tensor] | None, ranges: own_attention.Ranges,
           scale: float) -> torch.Tensor | None:
    """query [B, H, q, D] over [its prefix | key/value [B, KVH, S, D]]: [B, q, H, D], as
    the model's attention functions return it. `mask` [B, S] bool marks each row's real
    own columns; the chunk's queries are the last q of them, each attending causally.
    `prefix` (keys, values) [1, KVH, P, D] holds the batch's prefixes one after another
    (or None), `ranges` each row's part of them. None where the kernel could not get its
    scratch memory."""
    b, heads, q_len, dim = query.shape
    kv_heads, s_len = key.shape[1], key.shape[2]
    lib = own_attention.kernel()
    if lib is None:
        raise RuntimeError("the attention kernels are not built: check takes() first")
    if mask.dtype != torch.bool:  # read as one byte each
        raise TypeError(f"prefill-attention masks must be bool, got {mask.dtype}")
    mask = mask.contiguous()
    if prefix is not None:
        pk, pv = prefix
        if pk.stride() != pv.stride() or pk.stride(-1) != 1:
            pk, pv = pk.contiguous(), pv.contiguous()
        pk_ptr, pv_ptr, (phs, pps) = pk.data_ptr(), pv.data_ptr(), pk.stride()[1:3]
    else:
        ranges = own_attention.Ranges.none(b)
        pk_ptr = pv_ptr = phs = pps = 0
    out = torch.empty(b, q_len, heads, dim, dtype=torch.float32)
    failed = lib.prefill_attention(
        query.data_ptr(), pk_ptr, pv_ptr, ranges.starts.data_ptr(), ranges.lengths.data_ptr(),
        key.data_ptr(), value.data_ptr(), mask.data_ptr(), out.data_ptr(), b, kv_heads,
        heads // kv_heads, dim, q_len, s_len, *query.stride()[:3], phs, pps,
        *key.stride()[:3], scale, torch.get_num_threads())
    return None if failed else out

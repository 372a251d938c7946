"""Attention of a long prefill chunk as two oneDNN products per row and key head.

A RAG prompt prefills a thousand or more of its own tokens. torch's CPU flash
kernel ran that attention at 88-134 GFLOP/s here, after `repeat_kv` copied every
key and value once per query head; the same work as one product for the scores
(all the query heads that share a key head at once, against the keys in the
cache's own layout), a softmax, and one product for the weighted values ran at
158-194 GFLOP/s on oneDNN (the library the packed linears use), the results
within 3e-7 of the flash kernel's (one-off script, 1-4 rows, 128-512 queries
against 1,000-2,000 keys, docs/speed.md).

Short chunks (many rows of a few dozen queries) stay with torch's kernel: there
the per-row products are too small to pay for the Python loop around them. It
runs inside the engine's shared-prefix attention (prefix_attention.py), so
`model.generate` keeps the model's own attention.
"""

from __future__ import annotations

import torch

from evalpipe.backends import packed_linear

MIN_QUERIES = 64  # query tokens per row below which torch's fused kernel is kept


def takes(query: torch.Tensor, key: torch.Tensor, mask) -> bool:
    """True for float32 CPU chunks of at least MIN_QUERIES query tokens with a boolean
    mask, where oneDNN is present."""
    return (query.shape[2] >= MIN_QUERIES and query.device.type == "cpu"
            and query.dtype == key.dtype == torch.float32
            and isinstance(mask, torch.Tensor) and mask.dtype == torch.bool
            and packed_linear.available())


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
           scale: float) -> torch.Tensor:
    """query [B, H, q, D] over key/value [B, KVH, S, D] where mask [B or 1, 1, q, S] is
    True: [B, q, H, D], as the model's attention functions return it."""
    b, heads, q_len, dim = query.shape
    kv_heads, s_len = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    # The lowest finite value, not -inf: a padding query that may attend to nothing gets
    # finite (ignored) weights instead of NaN, which would spread through the products.
    low = torch.finfo(torch.float32).min
    out = torch.empty(b, kv_heads, groups * q_len, dim, dtype=torch.float32)
    for row in range(b):
        blocked = ~mask[row if mask.shape[0] > 1 else 0, 0]  # [q, S]
        for head in range(kv_heads):
            # Query heads head * groups + g share key head `head` (as repeat_kv pairs them).
            q = query[row, head * groups:(head + 1) * groups].reshape(groups * q_len, dim)
            scores = packed_linear.matmul(q * scale, key[row, head].contiguous())
            scores = scores.view(groups, q_len, s_len).masked_fill_(blocked, low)
            weights = torch.softmax(scores, -1).view(groups * q_len, s_len)
            out[row, head] = packed_linear.matmul(weights, value[row, head].t().contiguous())
    return out.view(b, heads, q_len, dim).transpose(1, 2).contiguous()

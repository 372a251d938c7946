"""Attention over a shared prompt prefix that is stored once, not once per row.

In an eval cell every prompt starts with the same system prompt and tool
definitions (about 480 tokens in hermes with the calculator tools). Copying
their keys and values under every row of a 64-row batch makes each decode step
read the prefix 64 times; on a CPU that memory traffic costs about as much as
the weights. Here the batch's cache holds only each row's own tokens, and
attention takes the prefix (one row, shared) as a separate block: the scores
against the prefix and against the row's own tokens go through one softmax,
so the result is the same attention, computed without the copies (the
technique vLLM and FlashInfer call cascade or shared-prefix attention).
The cells of a model that share one batch each bring their own prefix: the
prefixes are stored one after another and each row attends to its own.

`install(model)` registers the function under its own attention name and
switches the model to it. Without a `shared_prefix` argument in the forward
call it hands over to the model's previous attention function unchanged, so
`model.generate` and every other caller behave exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from evalpipe.backends.local import own_attention, prefill_attention

NAME = "evalpipe_shared_prefix"


@dataclass
class SharedPrefix:
    """The batch's prefixes, stored once: their keys and values per layer, one after
    another ([1, kv_heads, P, head_dim] each), and where each row's own lies in them
    (`starts`, `lengths` [rows]; length 0: the row has none)."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    starts: torch.Tensor
    lengths: torch.Tensor

    def __post_init__(self):
        # Checked once per forward, not in each layer: usually every row has all of one.
        width = self.kv[0][0].shape[2]
        self.ranges = own_attention.Ranges.of(self.starts, self.lengths, width)
        self.every_row = bool((self.ranges.starts == 0).all()
                              and (self.ranges.lengths == width).all())

    @classmethod
    def one(cls, kv: list[tuple[torch.Tensor, torch.Tensor]], rows: torch.Tensor
            ) -> SharedPrefix:
        """One prefix, taken by the rows where `rows` [B] bool is True."""
        return cls(kv, torch.zeros(len(rows), dtype=torch.int64),
                   rows.to(torch.int64) * kv[0][0].shape[2])

    def columns(self) -> torch.Tensor:
        """[rows, P] bool: the prefix positions each row attends to."""
        cols = torch.arange(self.kv[0][0].shape[2])[None]
        return (cols >= self.ranges.starts[:, None]) & \
            (cols < (self.ranges.starts + self.ranges.lengths)[:, None])


def install(model) -> bool:
    """Switch `model` to shared-prefix attention; False when its attention is not one
    this can wrap (then nothing changes)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    config = model.config.get_text_config(decoder=True)
    previous = getattr(config, "_attn_implementation", None)
    if previous == NAME:
        return True
    if previous not in ("sdpa", "eager"):
        return False
    if previous == "eager":
        from transformers.models.llama.modeling_llama import eager_attention_forward as fallback
    else:
        fallback = ALL_ATTENTION_FUNCTIONS[previous]

    def attention(module, query, key, value, attention_mask, scaling=None, shared_prefix=None,
                  **kwargs):
        if shared_prefix is None:
            return fallback(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
        if query.shape[2] > 1:  # prefill: the C kernel, else the model's own on a copy
            if prefill_attention.takes(query, key, value):
                scale = scaling if scaling is not None else query.shape[-1] ** -0.5
                own = _row_mask(attention_mask, query.shape[2], key.shape[2], key.device)
                # The last query sees every real column: its mask row is the row's columns.
                out = prefill_attention.attend(query, key, value, own[:, 0, -1].expand(
                    key.shape[0], -1), shared_prefix.kv[module.layer_idx], shared_prefix.ranges,
                    scale)
                if out is not None:
                    return out, None
            key, value, attention_mask = _with_prefix(key, value, attention_mask, shared_prefix,
                                                      module.layer_idx, query.shape[2])
            return fallback(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
        return _cascade(module, query, key, value, attention_mask, scaling, shared_prefix)

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS[previous])
    for cfg in {id(model.config): model.config, id(config): config}.values():
        cfg._attn_implementation = NAME
    return True


def _row_mask(mask, q_len: int, s_len: int, device) -> torch.Tensor:
    """The rows' own-token mask as booleans [B or 1, 1, q, S] (None means causal only)."""
    if mask is None:
        causal = torch.ones(q_len, s_len, dtype=torch.bool, device=device).tril(s_len - q_len)
        return causal[None, None]
    mask = mask[:, :, -q_len:, -s_len:]
    return mask if mask.dtype == torch.bool else mask == 0


def _with_prefix(key, value, mask, prefix: SharedPrefix, layer: int, q_len: int):
    """Keys, values and mask with the prefix columns put in front, for one layer."""
    b, s_len = key.shape[0], key.shape[2]
    pk, pv = prefix.kv[layer]
    p_len = pk.shape[2]
    key = torch.cat([pk.expand(b, -1, -1, -1), key], dim=2)
    value = torch.cat([pv.expand(b, -1, -1, -1), value], dim=2)
    own = _row_mask(mask, q_len, s_len, key.device).expand(b, 1, q_len, s_len)
    shared = prefix.columns().view(b, 1, 1, p_len).expand(b, 1, q_len, p_len)
    return key, value, torch.cat([shared, own], dim=-1)


def _cascade(module, query, key, value, mask, scaling, prefix: SharedPrefix):
    """Softmax over [prefix columns | row columns] for every query, as two blocks that
    share one maximum and one sum (no concatenated copy of the scores).

    query [B, H, q, D]; key/value [B, KVH, S, D] (the rows' own tokens); mask: a
    boolean [B, 1, q, S] (True = attend), a float mask, or None (causal only). Float32
    decode steps go to the C kernel (own_attention.py); torch's products do the rest."""
    b, heads, q_len, dim = query.shape
    kv_heads, s_len = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    gq = groups * q_len
    pk, pv = prefix.kv[module.layer_idx]
    scale = scaling if scaling is not None else dim ** -0.5
    own = _row_mask(mask, q_len, s_len, query.device)[:, :, None]  # [B, 1, 1, q, S]
    if own_attention.usable(query, key, value) and pk.dtype == torch.float32:
        out = own_attention.decode_attention(query, key, value, own[:, 0, 0, 0].expand(b, s_len),
                                             (pk, pv), prefix.ranges, scale)
        if out is not None:
            return out, None
    # Scores and sums in float32 whatever the model's dtype, as the fused kernels keep
    # them: bfloat16 scores (8-bit mantissa) drift visibly from float32 answers.
    dtype = query.dtype
    query, key, value, pk, pv = (t.float() for t in (query, key, value, pk, pv))
    p_len = pk.shape[2]
    # Query heads h = kv_head * groups + g share key head kv_head (as repeat_kv pairs them).
    # The queries are scaled once, not both score blocks (exactly the same where the scale
    # is a power of two, as 1/sqrt(64)).
    qg = query.reshape(b, kv_heads, gq, dim) * scale
    # Prefix: every row's queries against the one stored prefix, [KVH, B, g*q, P]: one
    # matrix product per key head for the whole batch.
    scores_p = torch.matmul(qg.transpose(0, 1).reshape(kv_heads, b * gq, dim),
                            pk[0].transpose(-1, -2)).reshape(kv_heads, b, gq, p_len)
    # The lowest finite value, not -inf: a padding query that may attend to nothing gets
    # finite (ignored) output instead of NaN, which would spread through its cache entries.
    low = torch.finfo(torch.float32).min
    scores_s = torch.matmul(qg, key.transpose(-1, -2))  # [B, KVH, g*q, S]
    scores_s = torch.where(own, scores_s.view(b, kv_heads, groups, q_len, s_len), low)
    scores_s = scores_s.view(b, kv_heads, gq, s_len)
    if not prefix.every_row:
        scores_p = scores_p.masked_fill(~prefix.columns().view(1, b, 1, p_len), low)
    top = torch.maximum(scores_s.amax(-1, keepdim=True),
                        scores_p.amax(-1, keepdim=True).transpose(0, 1))  # [B, KVH, g*q, 1]
    exp_s = scores_s.sub_(top).exp_()
    exp_p = scores_p.sub_(top.transpose(0, 1)).exp_()
    total = exp_s.sum(-1, keepdim=True) + exp_p.sum(-1, keepdim=True).transpose(0, 1)
    out_p = torch.matmul(exp_p.view(kv_heads, b * gq, p_len), pv[0])
    out = torch.matmul(exp_s, value)
    out = out + out_p.view(kv_heads, b, gq, dim).transpose(0, 1)
    out = (out / total).reshape(b, heads, q_len, dim)
    return out.transpose(1, 2).contiguous().to(dtype), None

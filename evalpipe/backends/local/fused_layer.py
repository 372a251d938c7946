"""Decoder layers with fused projections, for the batching loop on CPU.

A decoder layer of a Llama-family model runs seven linear layers: q, k, v, o,
gate, up and down. With the few dozen rows of a decode step each is a small
multiply (k and v are 576 x 192 in SmolLM2), and each call has its own fixed
cost. Here q, k and v share one packed weight and gate and up another, so a
layer makes four calls instead of seven; the gate/up product applies SwiGLU's
activation as it stores its outputs (packed_linear.gated: half the outputs
written, no separate SiLU and product passes); the rotary embedding turns the
queries and keys in one pass and writes keys and values straight into the cache
(rotary.py, bit for bit the model's rotation), and the norms run as one fused op
(bitwise the same as the model's own). Everything else (the attention function,
the residuals) is the model's.

Two layouts are fused, both full-attention layers with a SiLU-gated MLP and RMS
norms: Llama's (SmolLM2 among them) and Qwen2's, whose q, k and v projections
carry biases (added to the fused product's outputs). `why_not` says why any
other layer keeps its seven linears.

The fused layer holds its q/k/v and gate/up weights only as packed panels (the
five linears are dropped), so it runs the fused forward on every call. A fused
product may round differently in the last bits from the separate ones (as the
packed kernel does from the stock one); greedy replies are tested identical to
`generate` on a model that was never packed, and were identical on whole
workloads (docs/speed.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch

from evalpipe.backends.local import rotary

# transformers modules whose decoder layers have the fused layout, with the names of
# their layer, attention, MLP and norm classes. Qwen2's attention differs from Llama's
# only by its q/k/v biases and an optional sliding window (declined below).
MODULES = {"llama": ("transformers.models.llama.modeling_llama", "Llama"),
           "qwen2": ("transformers.models.qwen2.modeling_qwen2", "Qwen2")}


@cache
def _layouts() -> dict[type, tuple[Any, Any, Any, Callable]]:
    """Decoder layer class -> (attention, MLP, norm classes, the module's eager attention)."""
    out = {}
    for module_name, prefix in MODULES.values():
        module = importlib.import_module(module_name)
        out[getattr(module, f"{prefix}DecoderLayer")] = (
            getattr(module, f"{prefix}Attention"), getattr(module, f"{prefix}MLP"),
            getattr(module, f"{prefix}RMSNorm"), module.eager_attention_forward)
    return out


def why_not(layer) -> str | None:
    """Why `layer` keeps its own projections, or None where `fuse` takes it."""
    layout = _layouts().get(type(layer))
    if layout is None:
        return f"{type(layer).__name__} is not a Llama or Qwen2 decoder layer"
    attention, mlp_class, norm, _ = layout
    attn, mlp = layer.self_attn, layer.mlp
    if type(attn) is not attention or type(mlp) is not mlp_class or not all(
            type(n) is norm for n in (layer.input_layernorm, layer.post_attention_layernorm)):
        return f"{type(layer).__name__} has other attention, MLP or norm modules"
    if getattr(getattr(mlp, "config", None), "hidden_act", None) != "silu":
        return "its MLP's activation is not SiLU"
    if mlp.gate_proj.bias is not None or mlp.up_proj.bias is not None:
        return "its MLP's gate and up projections have biases"
    if len({m.bias is None for m in (attn.q_proj, attn.k_proj, attn.v_proj)}) > 1:
        return "only some of its q, k and v projections have biases"
    if getattr(attn, "sliding_window", None) is not None:
        return "its attention has a sliding window"
    return None


def fusable(layer) -> bool:
    """A decoder layer of a layout fused here (see `why_not`)."""
    return why_not(layer) is None


@dataclass(frozen=True)
class Fused:
    """What a fused layer multiplies by: q|k|v as one packed weight (and its biases),
    gate/up as one gated weight, the shapes of its heads. o and down stay the layer's own
    modules (packed_linear.PackedLinear once packed)."""

    qkv: Any
    bias: torch.Tensor | None
    gate_up: Any
    heads: int
    kv_heads: int
    dim: int


ATTRIBUTE = "evalpipe_fused"  # where a fused layer keeps its Fused


def fused_of(layer) -> Fused | None:
    return getattr(layer, ATTRIBUTE, None)


def covered(layer) -> tuple[torch.nn.Linear, ...]:
    """The five linears of `layer` that its fused products replace."""
    attn, mlp = layer.self_attn, layer.mlp
    return attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj


def fuse(layer) -> int:
    """Give `layer` a forward on fused packed weights: q/k/v in one product, the MLP's
    silu(gate) * up in one gated product, each residual added as the o and down products
    store their outputs and the norms in the kernel library (packed_linear.py). The five
    linears the fused products cover are dropped from the layer (their weights freed as
    each copy is made); returns the bytes the copies take."""
    from evalpipe.backends.local import packed_linear as pl

    attn, mlp = layer.self_attn, layer.mlp
    *projections, gate, up = covered(layer)
    dim = attn.head_dim
    qkv = pl.pack(torch.cat([m.weight for m in projections]).detach())
    bias = None if attn.q_proj.bias is None else torch.cat([m.bias for m in projections]).detach()
    fused = Fused(qkv, bias, None, attn.q_proj.out_features // dim,
                  attn.k_proj.out_features // dim, dim)
    attn.q_proj = attn.k_proj = attn.v_proj = None
    fused = Fused(fused.qkv, fused.bias, pl.pack_gated(gate.weight.detach(), up.weight.detach()),
                  fused.heads, fused.kv_heads, dim)
    mlp.gate_proj = mlp.up_proj = None
    setattr(layer, ATTRIBUTE, fused)
    heads, kv_heads = fused.heads, fused.kv_heads
    norm_in, norm_post = layer.input_layernorm, layer.post_attention_layernorm
    eager_attention_forward = _layouts()[type(layer)][3]
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    def forward(hidden_states, attention_mask=None, position_ids=None, cache=None,
                use_cache=False, position_embeddings=None, **kwargs):
        b, t, _ = hidden_states.shape
        h = pl.rms_norm(hidden_states, norm_in.weight, norm_in.variance_epsilon)
        y = pl.product(h, fused.qkv, fused.bias)
        layer_cache = cache.layers[attn.layer_idx] \
            if cache is not None and len(cache.layers) > attn.layer_idx else None
        query = rotary.rotate_into(y, *position_embeddings, heads, kv_heads, dim, layer_cache)
        if query is not None:  # keys and values written into the cache in place
            key, value = layer_cache.keys, layer_cache.values
        else:
            y = y.view(b, t, heads + 2 * kv_heads, dim).transpose(1, 2)
            qk, value = y[:, : heads + kv_heads], y[:, heads + kv_heads:]
            cos, sin = (e.unsqueeze(1) for e in position_embeddings)
            # The model's rotary embedding (x cos + rotate_half(x) sin, rounded alike), for
            # queries and keys in one pass.
            half = dim // 2
            turned = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1)
            qk = (qk * cos).add_(turned.mul_(sin))
            query, key = qk[:, :heads], qk[:, heads:]
            key, value = cache.update(key, value, attn.layer_idx, kwargs=kwargs)
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(attn.config._attn_implementation,
                                                          eager_attention_forward)
        out, _ = attention(attn, query, key, value, attention_mask, dropout=0.0,
                           scaling=attn.scaling, position_ids=position_ids,
                           use_cache=use_cache, **kwargs)
        # The residual stream is updated in place: each forward's hidden states are its
        # own (the model passes them from layer to layer and keeps no other reference).
        hidden = hidden_states if hidden_states.is_contiguous() else hidden_states.contiguous()
        h = pl.add_linear(hidden, out.reshape(b, t, -1), attn.o_proj,
                          norm=(norm_post.weight, norm_post.variance_epsilon))
        pl.add_linear(hidden, pl.gated(h, fused.gate_up), mlp.down_proj)
        return hidden

    layer.forward = forward
    return pl.packed_bytes(fused.qkv) + pl.packed_bytes(fused.gate_up) + \
        (0 if bias is None else bias.numel() * bias.element_size())

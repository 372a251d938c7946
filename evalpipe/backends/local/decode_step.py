"""A decode step of a fully fused model in a few kernel calls per layer.

A decode step feeds one token per row through every layer. Through the model's
own forward that took about a hundred torch operators per layer (norms as five
elementwise passes, residual adds, the attention interface's masks, views and
dtype checks) and the Python between them: with SmolLM2's 30 layers, 3,100
operators a step, a third of a 16-row step's time. `DecodeStep` runs the same
arithmetic as the fused layers' forward (fused_layer.py) in six kernel calls a
layer:

    q|k|v product (+ biases)         panel kernel
    rotary embedding into the cache  rotary kernel
    attention over prefix and own    decode-attention kernel
    o product added into the residual stream, post-attention norm   panel kernel
    silu(gate) * up                  panel kernel
    down product added into the residual stream, next layer's norm  panel kernel

the output layer and the greedy choice after the last. It takes models whose
every decoder layer is fused, on panels, computing in float32, with every
kernel built (`why_not` says what else runs the model's own forward).
"""

from __future__ import annotations

import torch

from evalpipe.backends.local import fused_layer, own_attention, packed_linear, rotary
from evalpipe.backends.local.prefix_attention import SharedPrefix

# Causal LM classes whose forward is embed, decoder layers, final norm, output layer (no
# scaled embedding, no soft-capped logits): what `__call__` reproduces.
PLAIN_CAUSAL_LMS = ("LlamaForCausalLM", "Qwen2ForCausalLM")


def why_not(model, dtype: torch.dtype) -> str | None:
    """Why decode steps of `model` (computing in `dtype`) go through its own forward, or
    None where `DecodeStep` takes them."""
    if type(model).__name__ not in PLAIN_CAUSAL_LMS:
        return f"{type(model).__name__} is not a plain Llama or Qwen2 causal LM"
    if dtype != torch.float32:
        return f"it computes in {dtype}"
    layers = model.model.layers
    fused = [f for f in map(fused_layer.fused_of, layers) if f is not None]
    if not fused or len(fused) < len(layers):
        return "not every decoder layer is fused"
    linears = [m for layer in layers for m in (layer.self_attn.o_proj, layer.mlp.down_proj)]
    if not all(isinstance(m, packed_linear.PackedLinear)
               and isinstance(m.packed, packed_linear.Panels)
               for m in [*linears, model.lm_head]):
        return "its linears are not on panels"
    dim = fused[0].dim
    lib, turn = own_attention.kernel(), rotary.kernel()
    if lib is None or turn is None or not own_attention.takes_heads(lib, dim) \
            or dim % rotary.dim_multiple(turn):
        return "the attention or rotary kernel does not take its heads here"
    return None


class DecodeStep:
    """`model`'s decode step in kernel calls (see the module doc); build with `of`."""

    def __init__(self, model):
        self.model = model
        inner = model.model
        self.embed, self.rotary_emb = inner.embed_tokens, inner.rotary_emb
        self.layers = [(fused_layer.fused_of(layer), layer) for layer in inner.layers]
        # The norm each layer's down product is followed by: the next layer's input norm,
        # the model's final norm after the last.
        norms = [layer.input_layernorm for layer in inner.layers[1:]] + [inner.norm]
        self.next_norms = [(n.weight, n.variance_epsilon) for n in norms]
        first = inner.layers[0].input_layernorm
        self.first_norm = (first.weight, first.variance_epsilon)
        self.head = model.lm_head
        # Checked by `why_not` once; looked up per call they cost the steps' Python.
        self.attention, self.rotary = own_attention.kernel(), rotary.kernel()

    @classmethod
    def of(cls, model, dtype: torch.dtype) -> DecodeStep | None:
        return cls(model) if why_not(model, dtype) is None else None

    def __call__(self, ids: torch.Tensor, pos: torch.Tensor, cache_layers: list,
                 mask: torch.Tensor, prefix: SharedPrefix | None) -> torch.Tensor:
        """Logits [rows, vocab] of the next token after `ids` [rows] at positions `pos`
        [rows]: each layer's key and value appended to `cache_layers` (batching's
        BufferLayers), attention over the prefix the rows start with (`prefix`, or None)
        and their own columns where `mask` [rows, columns + 1] (the new one included) is
        nonzero."""
        pl = packed_linear
        hidden = self.embed(ids[:, None])  # [rows, 1, width], float32
        if not hidden.is_contiguous() or hidden.dtype != torch.float32:
            hidden = hidden.float().contiguous()
        cos, sin = self.rotary_emb(hidden, pos[:, None])
        own = mask.bool()
        if prefix is not None:
            kv, ranges = prefix.kv, prefix.ranges
        else:
            kv, ranges = None, own_attention.Ranges.none(len(ids))
        rows = hidden.shape[0]
        x = pl.rms_norm(hidden, *self.first_norm)
        for i, ((fused, layer), norm) in enumerate(zip(self.layers, self.next_norms)):
            attn = layer.self_attn
            y = pl.product(x, fused.qkv, fused.bias)
            cache = cache_layers[i]
            query = rotary.rotate_into(y, cos, sin, fused.heads, fused.kv_heads, fused.dim,
                                       cache, self.rotary)
            if query is None:
                raise RuntimeError("the rotary kernel declined a decode step it was "
                                   "checked to take")
            out = own_attention.decode_attention(
                query, cache.keys, cache.values, own, None if kv is None else kv[i], ranges,
                attn.scaling, self.attention)
            if out is None:
                raise MemoryError("the decode-attention kernel got no scratch memory")
            x = pl.add_linear(hidden, out.view(rows, 1, -1), attn.o_proj,
                              norm=(layer.post_attention_layernorm.weight,
                                    layer.post_attention_layernorm.variance_epsilon))
            x = pl.add_linear(hidden, pl.gated(x, fused.gate_up), layer.mlp.down_proj,
                              norm=norm)
        return pl.product(x[:, -1], self.head.packed, self.head.bias)

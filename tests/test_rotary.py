"""The rotary kernel (rotary.c): queries, keys and values as the model's own rotary
embedding and cache update give them, bit for bit, written into the cache in place."""

from __future__ import annotations

import random

import helpers
import pytest
import torch
from helpers import needs_compiler

from evalpipe.backends.local import packed_linear, rotary
from evalpipe.backends.local.batching import BatchGenerator, PrefixStore, _make_layer_class

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def torch_rotation(y, cos, sin, heads, kv_heads, dim):
    """The model's rotation (transformers' apply_rotary_pos_emb) of a fused q|k|v product."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    rows, t = y.shape[:2]
    y = y.view(rows, t, heads + 2 * kv_heads, dim).transpose(1, 2)
    q, k = apply_rotary_pos_emb(y[:, :heads], y[:, heads: heads + kv_heads], cos, sin)
    return q, k, y[:, heads + kv_heads:]


@pytest.mark.parametrize("rows, t, cos_rows", [(3, 1, 3), (4, 37, 4), (1, 600, 1), (5, 9, 1)])
def test_rotation_into_the_cache_is_the_models_bit_for_bit(rows, t, cos_rows, vector_width):
    heads, kv_heads, dim, used = 9, 3, 64, 11
    torch.manual_seed(t)
    y = torch.randn(rows, t, (heads + 2 * kv_heads) * dim) * 3
    angles = torch.randn(cos_rows, t, dim) * 40  # any positions, per row or shared
    cos, sin = angles.cos(), angles.sin()
    layer = _make_layer_class()(torch.randn(rows, kv_heads, used + t + 5, dim),
                                torch.randn(rows, kv_heads, used + t + 5, dim), used)
    before_k = layer.buf_k[:, :, :used].clone()
    query = rotary.rotate_into(y, cos, sin, heads, kv_heads, dim, layer)
    q, k, v = torch_rotation(y, cos, sin, heads, kv_heads, dim)
    assert torch.equal(query, q)
    assert layer.length == used + t
    assert torch.equal(layer.keys[:, :, used:], k) and torch.equal(layer.values[:, :, used:], v)
    assert torch.equal(layer.keys[:, :, :used], before_k)  # earlier columns untouched


@needs_compiler
def test_rotation_grows_a_full_cache_and_declines_what_it_cannot_take():
    heads, kv_heads, dim = 2, 1, 64
    y = torch.randn(2, 4, (heads + 2 * kv_heads) * dim)
    cos, sin = torch.ones(2, 4, dim), torch.zeros(2, 4, dim)
    empty = torch.zeros(2, kv_heads, 3, dim)
    layer = _make_layer_class()(empty, empty.clone(), 3)
    query = rotary.rotate_into(y, cos, sin, heads, kv_heads, dim, layer)  # no room: regrown
    assert layer.length == 7 and layer.buf_k.shape[2] > 7
    assert torch.equal(query, y.view(2, 4, 4, dim).transpose(1, 2)[:, :heads])  # angle 0
    assert rotary.rotate_into(y[:, :, :-1], cos, sin, heads, kv_heads, 63, layer) is None
    assert rotary.rotate_into(y.double(), cos, sin, heads, kv_heads, dim, layer) is None
    assert rotary.rotate_into(y, cos, sin, heads, kv_heads, dim, object()) is None
    assert layer.length == 7  # declined calls wrote nothing


def test_engine_replies_with_the_kernel_equal_generate(monkeypatch, vector_width):
    """Head size 64 (the kernel takes multiples of 32): the engine's greedy replies equal
    generate's, and its decoder layers went through the kernel."""
    model = helpers.tiny_llama(hidden_size=128, intermediate_size=256, heads=2, kv_heads=1)
    calls = []
    real = rotary.rotate_into

    def counted(*args):
        out = real(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(rotary, "rotate_into", counted)
    rng = random.Random(3)
    shared = [rng.randrange(3, 96) for _ in range(20)]
    prompts = [shared + [rng.randrange(3, 96) for _ in range(rng.randrange(1, 25))]
               for _ in range(6)]
    refs = [helpers.greedy_reference(model, p, 12, eos=2) for p in prompts]
    gen = BatchGenerator(model, [2], 0, PrefixStore())
    assert gen.packed is not None and packed_linear.kernel_for(torch.float32) == "panel"
    rows = gen.generate(prompts, max_new_tokens=12, batch_size=4)
    assert [r.tokens for r in rows] == refs
    assert calls and all(calls)

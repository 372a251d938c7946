"""Prefill chunks attend through the C kernel (`prefill_attention` in own_attention.c):
the same attention as plain products over [prefix | own tokens] with a causal mask,
for every shape the engine gives it (query blocks and key blocks that do not divide
the chunk, rows without the prefix, padding and gaps), zeros for a query that may
attend to nothing, and greedy replies of long prompts identical to `model.generate`,
with the kernel and without it."""

from __future__ import annotations

import random

import helpers
import pytest
import torch
from helpers import greedy_reference as reference

from evalpipe.backends.local import own_attention, prefill_attention
from evalpipe.backends.local.batching import BatchGenerator, PrefixStore

pytestmark = helpers.needs_compiler


def _plain(query, key, value, columns, prefix, starts, lengths, scale):
    """The attention written plainly: query i (the chunk's tokens are the last q of the
    row's S columns) sees its row's part of the prefixes, and own column c when
    columns[c] and c <= S - q + i; one softmax; no column at all gives zeros."""
    b, heads, q_len, _ = query.shape
    s_len, groups = key.shape[2], heads // key.shape[1]
    causal = torch.arange(s_len)[None, :] <= (s_len - q_len + torch.arange(q_len))[:, None]
    allowed = columns[:, None, :] & causal[None]  # [B, q, S]
    k, v = key, value
    if prefix is not None:
        pk, pv = (t.expand(b, -1, -1, -1) for t in prefix)
        k, v = torch.cat([pk, k], 2), torch.cat([pv, v], 2)
        shared = helpers.prefix_columns(starts, lengths, pk.shape[2])[:, None].expand(
            b, q_len, pk.shape[2])
        allowed = torch.cat([shared, allowed], -1)
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = (query * scale) @ k.transpose(-1, -2)
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    return (torch.softmax(scores, -1).nan_to_num(0.0) @ v).transpose(1, 2)


def _cache(b, kv_heads, s_len, dim, spare=7):
    """Keys or values as the engine holds them: a view of a buffer with spare columns."""
    return torch.randn(b, kv_heads, s_len + spare, dim)[:, :, :s_len]


@pytest.mark.parametrize("rows, heads, kv_heads, dim, q_len, s_len, p_len", [
    (1, 9, 3, 64, 64, 64, 0),      # one row, the whole prompt in one chunk, no prefix
    (3, 9, 3, 64, 70, 300, 41),    # a later chunk: 230 columns before it
    (2, 4, 4, 32, 5, 130, 17),     # a short chunk (an agent turn's tool results)
    (4, 6, 2, 16, 33, 97, 64),     # query and key blocks that do not divide the chunk
    (2, 8, 2, 128, 40, 40, 30),    # a head size of two value passes
    (5, 9, 3, 64, 2, 20, 3)])      # two query tokens
def test_kernel_equals_plain_attention(rows, heads, kv_heads, dim, q_len, s_len, p_len,
                                        vector_width):
    torch.manual_seed(rows * 100 + q_len)
    query = torch.randn(rows, q_len, heads, dim).transpose(1, 2)  # strided, as the layer's
    key, value = _cache(rows, kv_heads, s_len, dim), _cache(rows, kv_heads, s_len, dim)
    columns = torch.ones(rows, s_len, dtype=torch.bool)
    for r in range(rows):
        columns[r, : r * 7] = False  # left padding, longer on each row
        if r % 2:
            columns[r, s_len // 3: s_len // 3 + 4] = False  # a gap, as a kept turn leaves
    prefix, starts, lengths = helpers.two_prefixes(rows, kv_heads, dim, p_len)
    ranges = own_attention.Ranges.of(starts, lengths, prefix[0].shape[2] if prefix else 0)
    assert prefill_attention.takes(query, key, value)
    got = prefill_attention.attend(query, key, value, columns, prefix, ranges, dim ** -0.5)
    assert got.shape == (rows, q_len, heads, dim) and got.is_contiguous()
    want = _plain(query, key, value, columns, prefix, starts, lengths, dim ** -0.5)
    assert torch.allclose(got, want, atol=2e-6), (got - want).abs().max()


def test_a_query_that_attends_to_nothing_gets_zeros():
    """Padding queries before a row's first real column (no prefix) see no column."""
    query, key = torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    columns = torch.ones(1, 8, dtype=torch.bool)
    columns[0, :3] = False
    none = own_attention.Ranges.none(1)
    out = prefill_attention.attend(query, key, key, columns, None, none, 0.25)
    assert torch.isfinite(out).all()
    assert torch.equal(out[:, :3], torch.zeros_like(out[:, :3]))
    want = _plain(query, key, key, columns, None, none.starts, none.lengths, 0.25)
    assert torch.allclose(out, want, atol=2e-6)


def test_shapes_the_kernel_does_not_take():
    key = torch.randn(1, 2, 80, 16)
    assert not prefill_attention.takes(torch.randn(1, 2, 1, 16), key, key)  # decode: other kernel
    assert not prefill_attention.takes(torch.randn(1, 2, 8, 16).bfloat16(), key.bfloat16(),
                                       key.bfloat16())
    assert not prefill_attention.takes(torch.randn(1, 2, 8, 18), torch.randn(1, 2, 80, 18),
                                       torch.randn(1, 2, 80, 18))  # not whole vectors
    with pytest.raises(TypeError, match="bool"):
        prefill_attention.attend(torch.randn(1, 2, 8, 16), key, key, torch.ones(1, 80),
                                 None, own_attention.Ranges.none(1), 0.25)


def _long_prompts():
    rng = random.Random(5)
    shared = [rng.randrange(3, 96) for _ in range(40)]
    return [shared + [rng.randrange(3, 96) for _ in range(rng.randrange(150, 260))]
            for _ in range(5)]


@pytest.mark.usefixtures("one_torch_thread")
def test_long_prompts_equal_generate(monkeypatch):
    """Prompts of 150-260 tokens after a shared 40-token prefix, prefilled in chunks of
    several rows: the prefill goes through the kernel and every greedy reply equals
    `model.generate`'s."""
    model = helpers.tiny_llama()
    prompts = _long_prompts()
    refs = [reference(model, p, 12, -1) for p in prompts]
    calls = []
    attend = prefill_attention.attend
    monkeypatch.setattr(prefill_attention, "attend",
                        lambda *a: calls.append(a[0].shape) or attend(*a))
    gen = BatchGenerator(model, [-1], 0, PrefixStore())
    gen.prefill_tokens = 256  # several chunks per prompt: later chunks see earlier columns
    rows = gen.generate(prompts, max_new_tokens=12, batch_size=5, prefix_reuse=True)
    assert calls, "the prefill should have gone through the kernel"
    assert [r.tokens for r in rows] == refs


@pytest.mark.usefixtures("one_torch_thread")
def test_without_the_kernel_the_model_attention_gives_the_same_replies(monkeypatch):
    monkeypatch.setenv("EVALPIPE_NATIVE_KERNELS", "0")
    model = helpers.tiny_llama()
    prompts = _long_prompts()[:3]
    refs = [reference(model, p, 8, -1) for p in prompts]
    gen = BatchGenerator(model, [-1], 0, PrefixStore())
    chunk = torch.randn(1, 2, 8, 16)
    assert not prefill_attention.takes(chunk, chunk, chunk)
    rows = gen.generate(prompts, max_new_tokens=8, batch_size=3, prefix_reuse=True)
    assert [r.tokens for r in rows] == refs

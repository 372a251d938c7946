"""The C kernel for a decode step's attention agrees with plain attention over
[prefix | own tokens], and attention falls back to torch's where the kernel cannot be
built or cannot take the shapes."""

from __future__ import annotations

import pytest
import torch

from evalpipe.backends.local import native, own_attention
from evalpipe.backends.local.prefix_attention import SharedPrefix, _cascade
from tests.helpers import needs_compiler


class _Module:
    layer_idx = 0


def _cache(b, kv_heads, s_len, dim, spare=5):
    """Keys or values as the engine holds them: a view of a buffer with spare columns."""
    return torch.randn(b, kv_heads, s_len + spare, dim)[:, :, :s_len]


def _gappy_mask(b, s_len):
    """Left padding and a gap inside each row, as merged batches leave them."""
    mask = torch.ones(b, s_len, dtype=torch.bool)
    for i in range(b):
        mask[i, : i % s_len] = False
        mask[i, s_len // 2] = i % 2 == 0
    mask[:, -1] = True  # every row attends to its newest token
    return mask


@needs_compiler
def test_kernel_builds_here():
    assert own_attention.kernel() is not None


def _torch_attention(query, key, value, mask, prefix, rows, scale):
    """The same attention written plainly: [prefix | own] columns, one softmax."""
    b, heads, _, _dim = query.shape
    groups = heads // key.shape[1]
    k = key.repeat_interleave(groups, 1)
    v = value.repeat_interleave(groups, 1)
    cols = mask[:, None, None, :]
    if prefix is not None:
        pk, pv = (t.expand(b, -1, -1, -1).repeat_interleave(groups, 1) for t in prefix)
        k, v = torch.cat([pk, k], 2), torch.cat([pv, v], 2)
        cols = torch.cat([rows.view(b, 1, 1, 1).expand(b, 1, 1, pk.shape[2]), cols], -1)
    scores = (query * scale) @ k.transpose(-1, -2)
    weights = torch.softmax(scores.masked_fill(~cols, float("-inf")), -1).nan_to_num(0.0)
    return (weights @ v).transpose(1, 2)


@needs_compiler
@pytest.mark.parametrize("groups, dim, p_len, s_len", [
    (1, 64, 11, 37), (3, 64, 482, 29), (4, 16, 33, 16), (5, 80, 32, 1), (6, 128, 70, 150),
    (3, 64, 0, 45)])
def test_decode_attention_equals_plain_attention(groups, dim, p_len, s_len):
    torch.manual_seed(groups * 100 + dim + p_len)
    b, kv_heads = 7, 3
    query = torch.randn(b, kv_heads * groups, 1, dim)
    key, value = _cache(b, kv_heads, s_len, dim), _cache(b, kv_heads, s_len, dim)
    value = value.as_strided(value.shape, key.stride())  # one buffer layout, as the cache
    mask = _gappy_mask(b, s_len)
    rows = torch.tensor([True, False, True, True, False, True, True])
    prefix = ((torch.randn(1, kv_heads, p_len, dim), torch.randn(1, kv_heads, p_len, dim))
              if p_len else None)
    assert own_attention.usable(query, key, value)
    out = own_attention.decode_attention(query, key, value, mask, prefix, rows, dim ** -0.5)
    expected = _torch_attention(query, key, value, mask, prefix, rows, dim ** -0.5)
    assert out.shape == (b, 1, kv_heads * groups, dim)
    assert torch.allclose(out, expected, atol=2e-6, rtol=1e-5)


@needs_compiler
def test_a_row_that_attends_to_nothing_gets_zeros_not_nan():
    b, heads, kv_heads, dim, s_len = 2, 4, 2, 16, 5
    query = torch.randn(b, heads, 1, dim)
    key = value = torch.randn(b, kv_heads, s_len, dim)
    mask = torch.ones(b, s_len, dtype=torch.bool)
    mask[1] = False
    prefix = (torch.randn(1, kv_heads, 3, dim), torch.randn(1, kv_heads, 3, dim))
    out = own_attention.decode_attention(query, key, value, mask, prefix,
                                         torch.tensor([True, False]), 0.25)
    assert (out[1] == 0).all()
    assert torch.isfinite(out).all() and (out[0] != 0).any()


@needs_compiler
def test_exp_in_the_kernel_matches_torch_over_the_softmax_range():
    """A single column per block isolates exp: its weight is exp(s - max) / sum."""
    torch.manual_seed(3)
    dim = 16
    query = torch.zeros(1, 1, 1, dim)
    query[..., 0] = 1.0
    xs = torch.linspace(-100.0, 0.0, 2001)  # scores, so weights e^(x - 0) against column 0
    key = torch.zeros(1, 1, xs.numel() + 1, dim)
    key[0, 0, 1:, 0] = xs
    value = torch.zeros_like(key)
    value[0, 0, 1:, : dim] = torch.eye(dim).repeat(xs.numel() // dim + 1, 1)[: xs.numel()]
    mask = torch.ones(1, xs.numel() + 1, dtype=torch.bool)
    out = own_attention.decode_attention(query, key, value, mask, None,
                                         torch.tensor([False]), 1.0)
    expected = _torch_attention(query, key, value, mask, None, torch.tensor([False]), 1.0)
    assert torch.allclose(out, expected, rtol=1e-6, atol=1e-12)


def test_no_kernel_where_it_cannot_be_built(monkeypatch, tmp_path):
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "false")  # a "compiler" that always fails
    monkeypatch.setattr(native.shutil, "which",
                        lambda name: "/bin/false" if name == "false" else None)
    own_attention.kernel.cache_clear()
    try:
        assert own_attention.kernel() is None
        query = torch.randn(2, 4, 1, 8)
        key = value = torch.randn(2, 2, 5, 8)
        assert not own_attention.usable(query, key, value)
        prefix = SharedPrefix([(torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8))],
                              rows=torch.tensor([True, True]))
        out, _ = _cascade(_Module(), query, key, value, None, 0.5, prefix)
        assert torch.isfinite(out).all()
    finally:
        own_attention.kernel.cache_clear()


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setenv("EVALPIPE_NATIVE_KERNELS", "0")
    own_attention.kernel.cache_clear()
    try:
        assert own_attention.kernel() is None
    finally:
        own_attention.kernel.cache_clear()


def test_kernel_not_taken_for_prefill_or_bfloat16():
    query = torch.randn(2, 4, 3, 8)  # three query tokens: a prefill chunk
    key = value = torch.randn(2, 2, 5, 8)
    assert not own_attention.usable(query, key, value)
    assert not own_attention.usable(query[:, :, :1], key.bfloat16(), value.bfloat16())


@needs_compiler
def test_a_mask_that_is_not_bool_is_refused():
    query, key = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 4, 16)
    with pytest.raises(TypeError, match="bool"):
        own_attention.decode_attention(query, key, key, torch.ones(1, 4, dtype=torch.long),
                                       None, torch.tensor([False]), 1.0)

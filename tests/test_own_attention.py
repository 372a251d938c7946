"""The C kernel for the decode step's own-token products agrees with torch's products,
and attention falls back to torch's where the kernel cannot be built."""

from __future__ import annotations

import shutil

import pytest
import torch

from evalpipe.backends import own_attention
from evalpipe.backends.prefix_attention import SharedPrefix, _cascade

needs_compiler = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                    reason="no C compiler on this machine: the kernel is not built")


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


@needs_compiler
@pytest.mark.parametrize("groups, dim", [(1, 64), (3, 64), (4, 24), (2, 8)])
def test_products_equal_torch(groups, dim):
    torch.manual_seed(groups * 100 + dim)
    b, kv_heads, s_len = 5, 3, 37
    qg = torch.randn(b, kv_heads, groups, dim)
    key, value = _cache(b, kv_heads, s_len, dim), _cache(b, kv_heads, s_len, dim)
    mask = _gappy_mask(b, s_len)
    low = torch.finfo(torch.float32).min

    scores = own_attention.scores(qg, key, mask, low)
    expected = torch.matmul(qg, key.transpose(-1, -2))
    keep = mask[:, None, None].expand_as(expected)
    assert torch.allclose(scores[keep], expected[keep], atol=1e-5)
    assert (scores[~keep] == low).all()

    weights = torch.rand(b, kv_heads, groups, s_len) * mask[:, None, None]
    out = own_attention.values(weights, value, mask)
    assert torch.allclose(out, torch.matmul(weights, value), atol=1e-5)


@needs_compiler
def test_cascade_with_kernel_equals_torch_products(monkeypatch):
    torch.manual_seed(1)
    b, heads, kv_heads, dim, p_len, s_len = 6, 9, 3, 64, 11, 29
    query = torch.randn(b, heads, 1, dim)
    key, value = _cache(b, kv_heads, s_len, dim), _cache(b, kv_heads, s_len, dim)
    prefix = SharedPrefix([(torch.randn(1, kv_heads, p_len, dim),
                            torch.randn(1, kv_heads, p_len, dim))],
                          rows=torch.tensor([True, False, True, True, False, True]))
    mask = _gappy_mask(b, s_len)[:, None, None]
    assert own_attention.usable(query, key, value)
    native, _ = _cascade(_Module(), query, key, value, mask, dim ** -0.5, prefix)
    monkeypatch.setattr(own_attention, "usable", lambda *a: False)
    reference, _ = _cascade(_Module(), query, key, value, mask, dim ** -0.5, prefix)
    assert torch.allclose(native, reference, atol=1e-6)


def test_no_kernel_where_it_cannot_be_built(monkeypatch, tmp_path):
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "false")  # a "compiler" that always fails
    monkeypatch.setattr(own_attention.shutil, "which",
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
    qg, key = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 4, 8)
    with pytest.raises(TypeError, match="bool"):
        own_attention.scores(qg, key, torch.ones(1, 4, dtype=torch.long), -1.0)
